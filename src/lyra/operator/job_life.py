"""A job's life in a pass: finished, failed, re-queued (gang and start timeouts, lost base workers), scaled in or
preempted; workers lost with their nodes or disrupted by Kubernetes (docs/reliability.md, "Node and pod health"):
the job is scaled in if it keeps its base, else re-queued and the preemption counted, never failed. Worker pods of an
earlier run of a job of the same name are deleted (with their UID as precondition)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from lyra.api import conditions, names
from lyra.api.resources import JobPhase, WorkerCounts
from lyra.operator.conditions import set_condition
from lyra.operator.job_work import WorkLedger
from lyra.operator.timestamps import format_time, parse_time
from lyra.operator.training_pass import (
    FINISHED_PHASES,
    PREEMPTED_BY_DISRUPTION,
    PREEMPTED_BY_RECLAIM,
    PREEMPTED_LOST_BASE,
    PREEMPTED_NODE_LOST,
    JobState,
    TrainingPass,
)
from lyra.operator.world import PodRecord


class JobLives:
    """Stops, scale-ins, preemptions and timeouts of the pass's jobs."""

    def __init__(self, training: TrainingPass, work: WorkLedger) -> None:
        self.training = training
        self.work = work

    def stop_job(self, job: JobState, phase: JobPhase, reason: str, message: str, *, grace: int | None = None) -> None:
        """Stop every live worker of ``job`` and leave it in ``phase`` (Queued: re-queued; or finished)."""
        wait = job.record.spec.preemption.grace_period_seconds if grace is None else grace
        for pod in job.live:
            self.training.changes.delete(pod, wait, reason)
        fields = self.work.fold_work(job)
        fields.update(phase=phase, workers=WorkerCounts(), placements={}, gpu_type=None)
        if phase is JobPhase.QUEUED:
            fields["queued_at"] = format_time(self.training.changes.now)
        else:
            fields["finished_at"] = format_time(self.training.changes.now)
        job.update(**fields)
        job.status = set_condition(
            job.status,
            conditions.RUNNING,
            False,
            reason,
            message,
            now=self.training.changes.now,
            generation=job.record.generation,
        )
        self.training.changes.emit(
            job.record.ref, reason, message, warning=phase is JobPhase.FAILED or reason == conditions.PREEMPTED
        )

    def running_workers(self, job_key: str) -> tuple[int, int] | None:
        job = self.training.jobs.get(job_key)
        if job is None or job.status.phase is not JobPhase.RUNNING:
            return None
        return job.record.spec.min_workers, len([p for p in job.live if p.ref.key not in self.training.changes.deleted])

    def scale_in(
        self, job_key: str, pods: list[PodRecord], why: str, vanished: Mapping[str, int] | None = None
    ) -> None:
        """Scale a running job in by ``pods`` (deleted, if they are not leaving already) and by the ``vanished``
        workers its plan still counts on each node (gone already, no pod left to delete)."""
        job = self.training.jobs[job_key]
        changes = self.training.changes
        taken: list[str] = []  # the nodes of the workers Kubernetes took: no deletion of Lyra's counts them
        for pod in pods:
            deleted_before = pod.ref.key in changes.deleted
            changes.delete(pod, job.record.spec.preemption.grace_period_seconds, conditions.SCALED_IN)
            if not deleted_before and pod.ref.key not in changes.deleted:
                taken.append(pod.node)
        for node, count in (vanished or {}).items():
            taken += [node] * count
        self.count_disrupted(job, taken)
        placements = dict(job.status.placements)
        for pod in pods:
            placements[pod.node] = placements.get(pod.node, 0) - 1
        for node, count in (vanished or {}).items():
            placements[node] = placements.get(node, 0) - count
        fewer = len(pods) + sum((vanished or {}).values())
        workers = job.status.workers
        target = max(workers.target - fewer, job.record.spec.min_workers)
        fields = self.work.fold_work(job)
        fields.update(
            placements={n: c for n, c in placements.items() if c > 0},
            workers=workers.model_copy(update={"target": target, "flexible": target - job.record.spec.min_workers}),
            scale_ins=job.status.scale_ins + fewer,
        )
        job.update(**fields)
        self.training.changes.emit(
            job.record.ref, conditions.SCALED_IN, f"scaled in {fewer} worker{'s' if fewer != 1 else ''}: {why}"
        )

    def preempt(self, job_key: str, why: str) -> None:
        job = self.training.jobs[job_key]
        self.stop_job(job, JobPhase.QUEUED, conditions.PREEMPTED, f"preempted: {why}; re-queued")
        self.count_preemption(job, PREEMPTED_BY_RECLAIM)

    def count_disrupted(self, job: JobState, nodes: list[str]) -> None:
        """Workers of ``job`` Kubernetes took from ``nodes``, per GPU type (the node's, else the job's), in the pass's
        report (for metrics)."""
        if not nodes:
            return
        types = {n.name: n.gpu_type for n in self.training.world.nodes}
        counts: dict[str, int] = {}
        for node in nodes:
            gpu_type = types.get(node) or job.status.gpu_type
            if gpu_type is not None:
                counts[gpu_type] = counts.get(gpu_type, 0) + 1
        report = self.training.changes.report
        before = report.disrupted.get(job.key, {})
        merged = {t: before.get(t, 0) + counts.get(t, 0) for t in sorted(before.keys() | counts.keys())}
        self.training.changes.report = replace(report, disrupted={**report.disrupted, job.key: merged})

    def count_preemption(self, job: JobState, cause: str) -> None:
        """One more preemption in the job's status, and its cause in the pass's report (for metrics)."""
        job.update(preemptions=job.status.preemptions + 1)
        report = self.training.changes.report
        self.training.changes.report = replace(report, preempted={**report.preempted, job.key: cause})

    def life(self, job: JobState) -> None:
        """One job's life in the pass (see the module docstring)."""
        spec, status = job.record.spec, job.status
        if status.phase is JobPhase.QUEUED and status.queued_at is None:
            job.update(queued_at=format_time(job.record.created or self.training.changes.now))
        disrupted = [p for p in job.pods if p.disruption and not p.terminating]
        for pod in disrupted:
            if pod.is_finished:  # the kubelet left it Failed: its object goes, it is no failure of the job
                self.training.changes.delete(pod, 0, conditions.DISRUPTED)
        if status.phase in FINISHED_PHASES:
            for pod in job.live:  # a finished job keeps no worker running
                self.training.changes.delete(pod, spec.preemption.grace_period_seconds, conditions.JOB_FINISHED)
            return
        failed = [p for p in job.pods if p.phase == names.POD_FAILED and not p.terminating and not p.disruption]
        # A worker completes its job only by finishing by itself: one that exits 0 on the SIGTERM of its deletion or
        # of an eviction (a worker that checkpoints and stops) is lost to the job, as any deleted or disrupted one.
        succeeded = [p for p in job.pods if p.completed]
        if status.phase is JobPhase.RUNNING and failed:
            self.stop_job(job, JobPhase.FAILED, conditions.WORKER_FAILED, f"worker {failed[0].ref.name} failed")
        elif status.phase is JobPhase.RUNNING and succeeded and not job.live:
            self.stop_job(job, JobPhase.SUCCEEDED, conditions.COMPLETED, f"{len(succeeded)} workers completed")
        elif status.phase is JobPhase.QUEUED and job.live:
            for pod in job.live:  # workers of a job that was re-queued (a crash came between status and pods)
                self.training.changes.delete(pod, spec.preemption.grace_period_seconds, conditions.REQUEUED)
        elif status.phase is JobPhase.RUNNING and not succeeded and not self.lose_workers(job, disrupted):
            self.gang_watch(job)

    def clean_stale(self) -> None:
        """Delete the pods of earlier runs of the jobs (each with its UID as precondition: never the new run's)."""
        for pod in self.training.world.stale:
            job = self.training.jobs.get(pod.owner or "")
            grace = job.record.spec.preemption.grace_period_seconds if job is not None else 0
            self.training.changes.delete(pod, 0 if pod.is_finished else grace, conditions.STALE_RUN)

    def lose_workers(self, job: JobState, disrupted: list[PodRecord]) -> bool:
        """Workers on lost nodes, disrupted ones, those Kubernetes is evicting (:func:`evicted`) and those gone from
        a node that takes no new work (:func:`vanished`) are lost: the job is scaled in if it keeps its base, else
        re-queued (counted as a preemption). Returns whether the job was re-queued."""
        on_lost = [p for p, _ in job.on_lost_nodes]
        closed = self.training.closed_nodes
        leaving = evicted(job, closed)
        gone_from = vanished(job, closed, disrupted)
        gone = {p.ref.key: p for p in [*on_lost, *disrupted, *leaving]}
        if not gone and not gone_from:
            return False
        reasons = sorted({why for _, why in job.on_lost_nodes})
        reasons += [f"worker {p.ref.name} disrupted ({p.disruption})" for p in [*disrupted, *leaving]]
        reasons += [
            f"{count} worker{'s' if count != 1 else ''} gone from node {node}, which takes no new work ({closed[node]})"
            for node, count in sorted(gone_from.items())
        ]
        why = "; ".join(reasons)
        remaining = [p for p in job.live if p.ref.key not in gone]
        if len(remaining) >= job.record.spec.min_workers:
            self.scale_in(job.key, list(gone.values()), why, gone_from)
            return False
        self.stop_job(
            job,
            JobPhase.QUEUED,
            conditions.PREEMPTED,
            f"preempted: {why}; {len(remaining)} of {job.record.spec.min_workers} base workers remain; re-queued",
        )
        self.count_preemption(job, PREEMPTED_NODE_LOST if on_lost else PREEMPTED_BY_DISRUPTION)
        return True

    def gang_watch(self, job: JobState) -> None:
        """A started gang must bind within the gang timeout; a running job that lost its base is re-queued."""
        spec = job.record.spec
        started = parse_time(job.status.started_at) or job.record.created
        bound = job.bound_live
        pending = [p for p in job.live if not p.node]
        overdue = self.training.changes.now - started > self.training.config.gang_timeout_s
        if len(bound) >= spec.min_workers:
            now = self.training.changes.now
            running = [p for p in job.live if p.started]
            if len(running) < spec.min_workers and now - started > self.training.config.start_timeout_s:
                stuck = sorted(f"{p.ref.name} {p.stuck or p.phase}" for p in job.live if not p.started)
                self.stop_job(
                    job,
                    JobPhase.QUEUED,
                    conditions.START_TIMEOUT,
                    f"only {len(running)} of {spec.min_workers} base workers running "
                    f"{self.training.config.start_timeout_s:g} s after the start ({', '.join(stuck[:3])}); re-queued",
                )
                return
            unplaced = [
                p for p in pending if p.created is not None and now - p.created > self.training.config.gang_timeout_s
            ]
            unstarted = [
                p
                for p in bound
                if not p.started and p.created is not None and now - p.created > self.training.config.start_timeout_s
            ]
            drop = [*unplaced, *unstarted]  # flexible ones: at least minWorkers others run (checked above)
            for pod in drop:
                self.training.changes.delete(
                    pod, 0, conditions.FLEXIBLE_WORKER_UNPLACED if not pod.node else conditions.START_TIMEOUT
                )
            if drop:
                job.update(workers=job.status.workers.model_copy(update={"target": len(job.live) - len(drop)}))
            return
        if overdue and job.status.workers.current >= spec.min_workers:
            self.stop_job(
                job,
                JobPhase.QUEUED,
                conditions.PREEMPTED,
                f"lost its base: {len(bound)} of {spec.min_workers} base workers remain; re-queued",
            )
            self.count_preemption(job, PREEMPTED_LOST_BASE)
        elif overdue:
            self.stop_job(
                job,
                JobPhase.QUEUED,
                conditions.GANG_TIMEOUT,
                f"only {len(bound)} of {spec.min_workers} base workers were placed within "
                f"{self.training.config.gang_timeout_s:g} s; rolled back and re-queued",
                grace=0,
            )

    def settled(self) -> bool:
        """Allocation waits while workers are in flight (being placed, or deleted by this pass): it decides on a
        settled cluster. A worker still terminating holds up only its own job, never the others'
        allocation: a pod that does not terminate (a finalizer, SIGTERM ignored under a long grace) is its job's
        business (:attr:`JobState.leaving`), and its GPUs are counted as held on its node until it is gone."""
        for job in self.training.jobs.values():
            if job.status.phase is JobPhase.RUNNING and any(not p.node for p in job.live):
                return False
        return not self.training.changes.deletes()


def evicted(job: JobState, closed: Mapping[str, str]) -> list[PodRecord]:
    """Workers Kubernetes is deleting for a disruption (the scheduler's preemptions, evictions: terminating with a
    ``DisruptionTarget`` condition) on nodes that still take work, that the job's plan still counts: on each node,
    as many as its planned workers there outnumber its live ones, by name. They are lost to the job at once, where a
    worker deleted by hand is replaced: a replacement would find its GPUs taken. Those whose container has already
    exited (``Failed``, or ``Succeeded`` for a worker that exits 0 on the SIGTERM) count too: their object stays until
    the kubelet has torn them down. Counted once: the scale-in that takes them lowers the plan. (On a node that takes
    no work, they are counted by :func:`vanished`.)"""
    live_on = _live_on(job)
    leaving: dict[str, list[PodRecord]] = defaultdict(list)
    for pod in job.pods:
        if pod.disruption and pod.terminating and pod.node and pod.node not in closed:
            leaving[pod.node].append(pod)
    taken: list[PodRecord] = []
    for node, pods in sorted(leaving.items()):
        unaccounted = job.status.placements.get(node, 0) - live_on[node]
        taken += sorted(pods, key=lambda p: p.ref.name)[: max(unaccounted, 0)]
    return taken


def vanished(job: JobState, closed: Mapping[str, str], disrupted: list[PodRecord]) -> dict[str, int]:
    """How many workers the job's plan counts on each node that takes no new work (cordoned, drained, unhealthy:
    :attr:`TrainingPass.closed_nodes`) beyond those live there (and those ``disrupted`` there, counted apart): gone
    (evicted by ``kubectl drain``, deleted) or leaving. They are lost to the job, not replaced: a replacement
    would be planned onto that node and wait there. Read only while every live worker of the job is bound, and never
    more than the plan counts beyond its live workers in all (a plan a pass has not yet brought up to date with
    where the scheduler bound new workers names other nodes, not more workers)."""
    if any(not p.node for p in job.live):
        return {}
    live_on = _live_on(job)
    for pod in disrupted:
        if not pod.is_live:
            live_on[pod.node] += 1
    missing = sum(job.status.placements.values()) - sum(live_on.values())
    gone: dict[str, int] = {}
    for node, planned in sorted(job.status.placements.items()):
        if node in closed and planned > live_on[node] and missing > 0:
            gone[node] = min(planned - live_on[node], missing)
            missing -= gone[node]
    return gone


def _live_on(job: JobState) -> dict[str, int]:
    """The job's live workers on each node."""
    live_on: dict[str, int] = defaultdict(int)
    for pod in job.live:
        live_on[pod.node] += 1
    return live_on
