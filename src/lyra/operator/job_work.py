"""Work accounting: ``workDone`` follows the job's pace (workers x slowest GPU speed x scaling efficiency) between
status writes; the remaining work orders the queue (shortest first) and feeds the allocator's completion-time
estimates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lyra.api.resources import JobPhase
from lyra.core.model import TrainingJob
from lyra.operator.timestamps import format_time, parse_time
from lyra.operator.training_pass import JobState, TrainingPass


class WorkLedger:
    """Each job's work done, pace and remaining work, as of the pass's clock."""

    def __init__(self, training: TrainingPass) -> None:
        self.training = training

    def work_done(self, job: JobState) -> float:
        """Work done by now: ``workDone`` plus the pace the status records since ``workAsOf``."""
        status = job.status
        as_of = parse_time(status.work_as_of)
        done = status.work_done
        if as_of is not None and status.phase is JobPhase.RUNNING:
            done += self.pace(job, status.workers.current, status.gpu_type) * max(
                self.training.changes.now - as_of, 0.0
            )
        return min(done, self.total_work(job))

    def fold_work(self, job: JobState) -> dict[str, Any]:
        """The status fields that bring ``workDone`` up to now (written whenever the pace may change)."""
        return {"work_done": round(self.work_done(job), 3), "work_as_of": format_time(self.training.changes.now)}

    def pace(self, job: JobState, workers: int, gpu_type: str | None) -> float:
        if workers <= 0 or not gpu_type:
            return 0.0
        model = self.training.models[job.key]
        return model.pace(workers, model.speed_on(self.training.config.gpus[gpu_type]))

    def total_work(self, job: JobState) -> float:
        spec = job.record.spec
        return spec.expected_duration * self.training.models[job.key].pace(spec.min_workers, 1.0)

    def remaining_work(self, job: JobState) -> float:
        return max(self.total_work(job) - self.work_done(job), 0.0)

    def core_job(self, job: JobState, placement: Mapping[str, int], remaining: float) -> TrainingJob:
        """The job as the snapshot holds it: where its workers are, how much work is left, when it queued."""
        submitted = parse_time(job.status.queued_at) or job.record.created
        return replace(
            self.training.models[job.key], placement=placement, remaining_work=remaining, submit_time=submitted
        )
