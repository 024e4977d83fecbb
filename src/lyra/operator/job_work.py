"""Work accounting: ``workDone`` follows the job's pace (workers x slowest GPU speed x scaling efficiency) between
status writes; the remaining work orders the queue (shortest first) and feeds the allocator's completion-time
estimates.

``workAsOf`` is written to the millisecond. The API server's own times are whole seconds, and a fold stamped with the
second it began in would credit the job with up to one second of work it did not do at every fold: under the
demo's speed-up (one wall second is 720 trace seconds) that was a fifth of an hour per worker and per resize, enough
to reverse the allocator's order of two jobs between two passes (a worker moved for nothing).

A job still running when its expected work is done (``expectedDuration`` was an estimate) is not done: its remaining
work is taken to be :data:`OVERRUN_SHARE` of its expected work, never 0. With 0, the allocator's fluid model had it
finish at once and hand its GPUs to the others at time 0, so every allocation of the others scored the same and
none was grown while it ran."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lyra.api.resources import JobPhase
from lyra.core.model import TrainingJob
from lyra.operator.timestamps import format_time_ms, parse_time
from lyra.operator.training_pass import JobState, TrainingPass

#: The share of its expected work a job is taken to have left once that work is done and it still runs.
OVERRUN_SHARE = 0.1


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
        return {"work_done": round(self.work_done(job), 3), "work_as_of": format_time_ms(self.training.changes.now)}

    def pace(self, job: JobState, workers: int, gpu_type: str | None) -> float:
        if workers <= 0 or not gpu_type:
            return 0.0
        model = self.training.models[job.key]
        return model.pace(workers, model.speed_on(self.training.config.gpus[gpu_type]))

    def total_work(self, job: JobState) -> float:
        spec = job.record.spec
        return spec.expected_duration * self.training.models[job.key].pace(spec.min_workers, 1.0)

    def remaining_work(self, job: JobState) -> float:
        """The work left: what its expected work leaves, but at least :data:`OVERRUN_SHARE` of it (see the module's
        docstring)."""
        total = self.total_work(job)
        return max(total - self.work_done(job), OVERRUN_SHARE * total)

    def core_job(self, job: JobState, placement: Mapping[str, int], remaining: float) -> TrainingJob:
        """The job as the snapshot holds it: where its workers are, how much work is left, when it queued."""
        submitted = parse_time(job.status.queued_at) or job.record.created
        return replace(
            self.training.models[job.key], placement=placement, remaining_work=remaining, submit_time=submitted
        )
