"""The training side of a pass: each TrainingJob's life (finished, failed, gang timeouts), its intent (phase, target
workers, planned placement, GPU type) from ``allocate_workers``, and its pods made to match the intent.

A job's intent lives in its status, written before its pods change, so a crash between the two is completed by the
next pass. Workers are interchangeable: the lowest-indexed live workers carry the base role. ``workDone`` follows
the job's pace (workers x slowest GPU speed x scaling efficiency) between status writes; the remaining work orders
the queue (shortest first) and feeds the allocator's completion-time estimates.

Health (docs/reliability.md, "Node and pod health"): no new worker is planned onto an unhealthy node; a node lost
(unhealthy for ``node_grace_s``) or gone takes its workers with it, and a worker disrupted by Kubernetes (the
``DisruptionTarget`` condition, a kubelet eviction or node shutdown) is lost the same way: the job is scaled in if
it keeps its base, else re-queued and the preemption counted, never failed. A started job whose base workers are not
all running within ``start_timeout_s`` is re-queued. Worker pods of an earlier run of a job of the same name are
nobody's workers: they are deleted (with their UID as precondition) and their names are not reused meanwhile.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lyra.api import conditions, names
from lyra.api.convert import training_job
from lyra.api.resources import JobPhase, TrainingJobStatus, WorkerCounts, wire
from lyra.core.allocation import AllocationPlan, allocate_workers
from lyra.core.errors import InvalidClusterError
from lyra.core.model import ClusterSnapshot, LoanState, Pool, Server, TrainingJob
from lyra.core.placement import PodRole
from lyra.operator import manifests
from lyra.operator.actions import AllocationReport, CreatePod, CreateService, PatchStatus, SetPodRole
from lyra.operator.changes import Changes, changed_fields
from lyra.operator.conditions import set_applied, set_condition
from lyra.operator.config import OperatorConfig
from lyra.operator.isolation import key_of
from lyra.operator.observe import JobRecord, ObjectRef, PodRecord, World, format_time, parse_time
from lyra.operator.templates import template_problem

_DONE = (JobPhase.SUCCEEDED, JobPhase.FAILED)

#: Why a pass preempts a job (re-queues it from Running; the report's ``preempted`` names it): its servers were
#: reclaimed for inference, the allocation gave its GPUs to others, or it lost base workers and was re-queued.
PREEMPTED_BY_RECLAIM, PREEMPTED_BY_ALLOCATION, PREEMPTED_LOST_BASE = "reclaim", "allocation", "lost_base"
#: Preemption causes from health: the job's workers were on a lost node, or Kubernetes disrupted them.
PREEMPTED_NODE_LOST, PREEMPTED_BY_DISRUPTION = "node_lost", "disruption"

log = logging.getLogger("lyra.operator")


@dataclass(slots=True)
class JobState:
    """A job during the pass: its record, its pods, and the status this pass will leave it with."""

    record: JobRecord
    pods: tuple[PodRecord, ...]
    status: TrainingJobStatus

    @property
    def key(self) -> str:
        return self.record.ref.key

    @property
    def live(self) -> list[PodRecord]:
        return [p for p in self.pods if p.is_live]

    @property
    def finishing(self) -> bool:
        """A worker has exited 0: the job is ending (the others follow); it is neither resized nor restarted."""
        return any(p.phase == "Succeeded" for p in self.pods)

    def bound_live(self) -> list[PodRecord]:
        return [p for p in self.pods if p.is_live and p.node]

    def update(self, **changes: Any) -> None:
        self.status = self.status.model_copy(update=changes)


class JobBook:
    def __init__(self, world: World, config: OperatorConfig, changes: Changes) -> None:
        self.world = world
        self.config = config
        self.changes = changes
        self.jobs = {
            j.ref.key: JobState(j, world.pods_of(j.ref.key), j.status)
            for j in world.jobs
            if not (j.status.phase in _DONE and not any(p.is_live for p in world.pods_of(j.ref.key)))
            and not j.deleting  # the garbage collector removes (or orphans) its pods; nothing is decided for it
        }
        self.refused: list[JobState] = []
        now = changes.now
        #: Nodes in no plan: lost (unhealthy past the grace), and gone ones (neither read nor left out as unreadable).
        self.lost_nodes = {n.name: n.health for n in world.nodes if n.lost(now, config.node_grace_s)}
        #: Nodes that take no new work: every unhealthy one.
        self.unhealthy_nodes = {n.name: n.health for n in world.nodes if not n.healthy}
        self.known_nodes = {n.name for n in world.nodes} | {
            u.ref.name for u in world.unreadable if u.ref.kind == "Node"
        }
        #: Worker indices still held by pods of an earlier run of each job (their names are not reused meanwhile).
        self.stale_indices: dict[str, set[int]] = defaultdict(set)
        for pod in world.stale:
            if pod.owner is not None and pod.index is not None:
                self.stale_indices[pod.owner].add(pod.index)
        #: Each job as the core models it, built (and checked) once per pass.
        self.models: dict[str, TrainingJob] = {}
        for key, job in list(self.jobs.items()):
            try:
                self.models[key] = training_job(key, job.record.spec)
            except InvalidClusterError as error:  # the API server accepted it (an older CRD?); the core does not
                del self.jobs[key]
                self.refuse(job, f"the spec cannot be run: {error}")
                continue
            problem = template_problem(job.record.spec.template, "gpusPerWorker")
            if problem is not None:
                del self.jobs[key]
                self.refuse(job, f"the worker pods cannot be built: {problem}")

    def work_done(self, job: JobState) -> float:
        """Work done by now: ``workDone`` plus the pace the status records since ``workAsOf``."""
        status = job.status
        as_of = parse_time(status.work_as_of)
        done = status.work_done
        if as_of is not None and status.phase is JobPhase.RUNNING:
            done += self.pace(job, status.workers.current, status.gpu_type) * max(self.changes.now - as_of, 0.0)
        return min(done, self.total_work(job))

    def fold_work(self, job: JobState) -> dict[str, Any]:
        """The status fields that bring ``workDone`` up to now (written whenever the pace may change)."""
        return {"work_done": round(self.work_done(job), 3), "work_as_of": format_time(self.changes.now)}

    def pace(self, job: JobState, workers: int, gpu_type: str | None) -> float:
        if workers <= 0 or not gpu_type:
            return 0.0
        model = self.models[job.key]
        return model.pace(workers, model.speed_on(self.config.gpus[gpu_type]))

    def total_work(self, job: JobState) -> float:
        spec = job.record.spec
        return spec.expected_duration * self.models[job.key].pace(spec.min_workers, 1.0)

    def remaining_work(self, job: JobState) -> float:
        return max(self.total_work(job) - self.work_done(job), 0.0)

    def core_job(self, job: JobState, placement: Mapping[str, int], remaining: float) -> TrainingJob:
        """The job as the snapshot holds it: where its workers are, how much work is left, when it queued."""
        submitted = parse_time(job.status.queued_at) or job.record.created
        return replace(self.models[job.key], placement=placement, remaining_work=remaining, submit_time=submitted)

    def stop_job(self, job: JobState, phase: JobPhase, reason: str, message: str, *, grace: int | None = None) -> None:
        """Stop every live worker of ``job`` and leave it in ``phase`` (Queued: re-queued; or finished)."""
        wait = job.record.spec.preemption.grace_period_seconds if grace is None else grace
        for pod in job.live:
            self.changes.delete(pod, wait, reason)
        fields = self.fold_work(job)
        fields.update(phase=phase, workers=WorkerCounts(), placements={}, gpu_type=None)
        if phase is JobPhase.QUEUED:
            fields["queued_at"] = format_time(self.changes.now)
        else:
            fields["finished_at"] = format_time(self.changes.now)
        job.update(**fields)
        job.status = set_condition(
            job.status,
            conditions.RUNNING,
            False,
            reason,
            message,
            now=self.changes.now,
            generation=job.record.generation,
        )
        self.changes.emit(
            job.record.ref, reason, message, warning=phase is JobPhase.FAILED or reason == conditions.PREEMPTED
        )

    def training_snapshot(self, states: Mapping[str, LoanState]) -> ClusterSnapshot:
        return self.snapshot(states)[0]

    def running_workers(self, job_key: str) -> tuple[int, int] | None:
        job = self.jobs.get(job_key)
        if job is None or job.status.phase is not JobPhase.RUNNING:
            return None
        return job.record.spec.min_workers, len([p for p in job.live if p.ref.key not in self.changes.deleted])

    def scale_in(self, job_key: str, pods: list[PodRecord], why: str) -> None:
        job = self.jobs[job_key]
        for pod in pods:
            self.changes.delete(pod, job.record.spec.preemption.grace_period_seconds, conditions.SCALED_IN)
        placements = dict(job.status.placements)
        for pod in pods:
            placements[pod.node] = placements.get(pod.node, 0) - 1
        workers = job.status.workers
        target = max(workers.target - len(pods), job.record.spec.min_workers)
        fields = self.fold_work(job)
        fields.update(
            placements={n: c for n, c in placements.items() if c > 0},
            workers=workers.model_copy(update={"target": target, "flexible": target - job.record.spec.min_workers}),
            scale_ins=job.status.scale_ins + len(pods),
        )
        job.update(**fields)
        self.changes.emit(job.record.ref, conditions.SCALED_IN, f"scaled in {len(pods)} workers: {why}")

    def preempt(self, job_key: str, why: str) -> None:
        job = self.jobs[job_key]
        self.stop_job(job, JobPhase.QUEUED, conditions.PREEMPTED, f"preempted: {why}; re-queued")
        self.count_preemption(job, PREEMPTED_BY_RECLAIM)

    def count_preemption(self, job: JobState, cause: str) -> None:
        """One more preemption in the job's status, and its cause in the pass's report (for metrics)."""
        job.update(preemptions=job.status.preemptions + 1)
        report = self.changes.report
        self.changes.report = replace(report, preempted={**report.preempted, job.key: cause})

    def lives(self) -> None:
        self.clean_stale()
        for job in self.jobs.values():
            spec, status = job.record.spec, job.status
            if status.phase is JobPhase.QUEUED and status.queued_at is None:
                job.update(queued_at=format_time(job.record.created or self.changes.now))
            disrupted = [p for p in job.pods if p.disruption and not p.terminating]
            for pod in disrupted:
                if pod.is_finished:  # the kubelet left it Failed: its object goes, it is no failure of the job
                    self.changes.delete(pod, 0, conditions.DISRUPTED)
            if status.phase in _DONE:
                for pod in job.live:  # a finished job keeps no worker running
                    self.changes.delete(pod, spec.preemption.grace_period_seconds, conditions.JOB_FINISHED)
                continue
            failed = [p for p in job.pods if p.phase == "Failed" and not p.terminating and not p.disruption]
            succeeded = [p for p in job.pods if p.phase == "Succeeded"]
            if status.phase is JobPhase.RUNNING and failed:
                self.stop_job(job, JobPhase.FAILED, conditions.WORKER_FAILED, f"worker {failed[0].ref.name} failed")
            elif status.phase is JobPhase.RUNNING and succeeded and not job.live:
                self.stop_job(job, JobPhase.SUCCEEDED, conditions.COMPLETED, f"{len(succeeded)} workers completed")
            elif status.phase is JobPhase.QUEUED and job.live:
                for pod in job.live:  # workers of a job that was re-queued (a crash came between status and pods)
                    self.changes.delete(pod, spec.preemption.grace_period_seconds, conditions.REQUEUED)
            elif status.phase is JobPhase.RUNNING and not succeeded and not self.lose_workers(job, disrupted):
                self.gang_watch(job)

    def clean_stale(self) -> None:
        """Delete the pods of earlier runs of the jobs (each with its UID as precondition: never the new run's)."""
        for pod in self.world.stale:
            job = self.jobs.get(pod.owner or "")
            grace = job.record.spec.preemption.grace_period_seconds if job is not None else 0
            self.changes.delete(pod, 0 if pod.is_finished else grace, conditions.STALE_RUN)

    def node_lost(self, node: str) -> str | None:
        """Why the workers on ``node`` are gone (it is lost, or deleted), or ``None``."""
        if node in self.lost_nodes:
            return f"node {node} lost ({self.lost_nodes[node]}, past the {self.config.node_grace_s:g} s grace)"
        if node and node not in self.known_nodes:
            return f"node {node} is gone"
        return None

    def lose_workers(self, job: JobState, disrupted: list[PodRecord]) -> bool:
        """Workers on lost nodes and disrupted ones are gone: the job is scaled in if it keeps its base, else re-queued
        (counted as a preemption). Returns whether the job was re-queued."""
        on_lost = [p for p in job.live if p.node and self.node_lost(p.node) is not None]
        gone = {p.ref.key: p for p in [*on_lost, *disrupted]}
        if not gone:
            return False
        reasons = sorted({why for p in on_lost if (why := self.node_lost(p.node)) is not None})
        reasons += [f"worker {p.ref.name} disrupted ({p.disruption})" for p in disrupted]
        why = "; ".join(reasons)
        remaining = [p for p in job.live if p.ref.key not in gone]
        if len(remaining) >= job.record.spec.min_workers:
            self.scale_in(job.key, list(gone.values()), why)
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
        bound = job.bound_live()
        pending = [p for p in job.live if not p.node]
        overdue = self.changes.now - started > self.config.gang_timeout_s
        if len(bound) >= spec.min_workers:
            now = self.changes.now
            running = [p for p in job.live if p.started]
            if len(running) < spec.min_workers and now - started > self.config.start_timeout_s:
                stuck = sorted(f"{p.ref.name} {p.stuck or p.phase}" for p in job.live if not p.started)
                self.stop_job(
                    job,
                    JobPhase.QUEUED,
                    conditions.START_TIMEOUT,
                    f"only {len(running)} of {spec.min_workers} base workers running "
                    f"{self.config.start_timeout_s:g} s after the start ({', '.join(stuck[:3])}); re-queued",
                )
                return
            unplaced = [p for p in pending if p.created is not None and now - p.created > self.config.gang_timeout_s]
            unstarted = [
                p
                for p in bound
                if not p.started and p.created is not None and now - p.created > self.config.start_timeout_s
            ]
            drop = [*unplaced, *unstarted]  # flexible ones: at least minWorkers others run (checked above)
            for pod in drop:
                self.changes.delete(
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
                f"{self.config.gang_timeout_s:g} s; rolled back and re-queued",
                grace=0,
            )

    def settled(self) -> bool:
        """Allocation waits while workers are in flight (being placed, or leaving a healthy node): it decides on a
        settled cluster. Pods stuck terminating on an unhealthy node (its kubelet cannot confirm) do not hold it up:
        that node takes no new work anyway, and its GPUs stay counted as held."""
        for job in self.jobs.values():
            if job.status.phase is JobPhase.RUNNING and any(not p.node for p in job.live):
                return False
            if any(p.terminating and p.holds_gpus and self.plannable(p.node) for p in job.pods):
                return False  # a pod leaving a dead node never finishes leaving: it concerns that node only
        return not self.changes.deletes()

    def plannable(self, node: str) -> bool:
        """Whether new work may be planned onto ``node``: it is known and healthy."""
        return node in self.known_nodes and node not in self.unhealthy_nodes

    def snapshot(self, states: Mapping[str, LoanState]) -> tuple[ClusterSnapshot, dict[str, int], dict[str, JobState]]:
        """The core's view: servers in their loan states after this pass, running jobs where their workers are, and
        GPUs held by everything else (replicas, other GPU pods, leaving workers). A lost node is left out; an
        unhealthy one is in it with all its GPUs its jobs' workers do not use held.

        A running job whose workers break its own spec (its ``gpuTypes`` were edited after it started, say) is left
        out with its GPUs held, so one inconsistent job never stops the decisions about everything else."""
        servers = tuple(
            Server(n.name, n.pool, n.gpu_type, n.gpus, states.get(n.name) if n.pool is Pool.INFERENCE else None)
            for n in self.world.nodes
            if n.name not in self.lost_nodes
        )
        hosts = {s.name for s in servers if s.hosts_training}
        entries: list[tuple[TrainingJob, JobState, list[PodRecord]]] = []
        for job in self.jobs.values():
            if job.status.phase not in (JobPhase.RUNNING, JobPhase.QUEUED) or job.finishing:
                continue  # a finishing job's last workers hold their GPUs until they exit; nothing to decide
            if job.status.phase is JobPhase.QUEUED and self.held_back(job):
                continue  # its pods would be refused again: it is not given GPUs until its retry is due
            placed = [
                p
                for p in job.bound_live()
                if job.status.phase is JobPhase.RUNNING and p.node in hosts and p.ref.key not in self.changes.deleted
            ]
            if len(placed) < job.record.spec.min_workers:
                placed = []  # below its base the job holds GPUs but does not run
            placement: dict[str, int] = defaultdict(int)
            for pod in placed:
                placement[pod.node] += 1
            entries.append((self.core_job(job, placement, self.remaining_work(job)), job, placed))
        kept = self._consistent(servers, entries)
        counted = {p.ref.key for _, _, placed in kept for p in placed}
        held: dict[str, int] = defaultdict(int)
        known = {s.name for s in servers}
        for pod in self.world.pods:
            if pod.holds_gpus and pod.ref.key not in counted and pod.node in known:
                held[pod.node] += pod.gpus
        workers_on: dict[str, int] = defaultdict(int)
        for _, _, placed in kept:
            for pod in placed:
                workers_on[pod.node] += pod.gpus
        for server in servers:  # an unhealthy node keeps its workers but takes no new ones: its free GPUs are held
            if server.name in self.unhealthy_nodes:
                held[server.name] = max(server.gpus - workers_on[server.name], held[server.name])
        snapshot = ClusterSnapshot(servers, tuple(core for core, _, _ in kept), self.config.gpus)
        return snapshot, dict(held), {core.name: job for core, job, _ in kept}

    def held_back(self, job: JobState) -> bool:
        """Whether the API refused ``job``'s writes and its retry is not due yet (:mod:`lyra.operator.isolation`)."""
        failure = self.changes.failures.get(key_of(job.record.ref))
        return failure is not None and self.changes.now < failure.retry_at

    def _consistent(
        self, servers: tuple[Server, ...], entries: list[tuple[TrainingJob, JobState, list[PodRecord]]]
    ) -> list[tuple[TrainingJob, JobState, list[PodRecord]]]:
        try:
            ClusterSnapshot(servers, tuple(core for core, _, _ in entries), self.config.gpus)
            return entries
        except InvalidClusterError:
            pass
        kept: list[tuple[TrainingJob, JobState, list[PodRecord]]] = []
        for entry in entries:
            try:
                ClusterSnapshot(servers, (*(core for core, _, _ in kept), entry[0]), self.config.gpus)
            except InvalidClusterError as error:
                report = self.changes.report
                self.changes.report = replace(report, left_out={**report.left_out, entry[0].name: str(error)})
                continue
            kept.append(entry)
        return kept

    def allocate(self, states: Mapping[str, LoanState]) -> None:
        try:
            snapshot, held, by_name = self.snapshot(states)
            plan = allocate_workers(snapshot, held=held, search_budget=self.config.search_budget)
        except InvalidClusterError as error:
            self.changes.report = replace(self.changes.report, allocation_error=str(error))
            return
        self.changes.report = replace(self.changes.report, allocation=_allocation_report(plan))
        rooms: dict[int, dict[str, int]] = {}  # GPUs per worker -> workers each GPU type holds, empty
        for name, job in by_name.items():
            workers = plan.workers.get(name, 0)
            placement = dict(plan.placement.get(name, {}))
            types = plan.gpu_types.get(name, ())
            if workers == 0:
                size = job.record.spec.gpus_per_worker
                if size not in rooms:
                    rooms[size] = empty_room(snapshot, size)
                too_large = self.too_large(job, rooms[size])
                reason = too_large or plan.queued.get(name, "waiting for GPUs")
                kind = conditions.TOO_LARGE if too_large else conditions.QUEUED
                job.status = set_condition(
                    job.status,
                    conditions.RUNNING,
                    False,
                    kind,
                    reason,
                    now=self.changes.now,
                    generation=job.record.generation,
                )
                if job.status.phase is JobPhase.RUNNING:
                    self.stop_job(job, JobPhase.QUEUED, conditions.PREEMPTED, f"preempted by the allocation: {reason}")
                    self.count_preemption(job, PREEMPTED_BY_ALLOCATION)
                continue
            target = WorkerCounts(
                current=job.status.workers.current,
                target=workers,
                base=job.record.spec.min_workers,
                flexible=workers - job.record.spec.min_workers,
            )
            if job.status.phase is JobPhase.QUEUED:
                fields = self.fold_work(job)
                fields.update(
                    phase=JobPhase.RUNNING,
                    started_at=format_time(self.changes.now),
                    workers=target,
                    placements=placement,
                    gpu_type=types[0] if types else None,
                )
                job.update(**fields)
                message = f"started {workers} workers on {', '.join(types)} ({_where(placement)})"
                job.status = set_condition(
                    job.status,
                    conditions.RUNNING,
                    True,
                    conditions.STARTED,
                    message,
                    now=self.changes.now,
                    generation=job.record.generation,
                )
                self.changes.emit(job.record.ref, conditions.STARTED, message)
            elif workers != job.status.workers.target:  # the same count elsewhere is no reason to move workers
                before = job.status.workers.target
                fields = self.fold_work(job)
                fields.update(workers=target, placements=placement)
                job.update(**fields)
                self.changes.emit(
                    job.record.ref, conditions.RESIZED, f"workers {before} -> {workers} ({_where(placement)})"
                )

    def too_large(self, job: JobState, room: Mapping[str, int]) -> str | None:
        """Why ``job``'s base can never start on this cluster, even empty and with every server lent; or None.
        ``room``: the workers of its size each GPU type holds on the empty cluster (:func:`empty_room`)."""
        spec = job.record.spec
        model = self.models[job.key]
        rooms = [workers for gpu_type, workers in room.items() if model.may_use(self.config.gpus[gpu_type])]
        best = sum(rooms) if spec.mix_gpu_types else max(rooms, default=0)
        if best >= spec.min_workers:
            return None
        gpus = f"{spec.gpus_per_worker} GPU{'s' if spec.gpus_per_worker != 1 else ''}"
        where = "the GPU types it may use" if spec.mix_gpu_types else "one GPU type it may use"
        return (
            f"larger than the cluster: its base needs {spec.min_workers} workers of {gpus} on {where}, and all the "
            f"servers together hold at most {best}; it waits until servers are added"
        )

    def converge(self) -> None:
        """Make every running job's pods match its intent (target and planned placement). A job whose pods cannot be
        built fails alone: what was decided for it is undone and the others go on."""
        for job in list(self.jobs.values()):
            if job.status.phase is not JobPhase.RUNNING or job.finishing:
                continue
            mark = self.changes.mark()
            try:
                self.converge_job(job)
            except Exception as error:  # one job's bad template or a bug in building it: that job only
                log.exception("TrainingJob %s: its worker pods cannot be built", job.key)
                self.changes.undo(mark)
                del self.jobs[job.key]
                self.refuse(job, f"the worker pods cannot be built: {type(error).__name__}: {error}")

    def converge_job(self, job: JobState) -> None:
        """One running job's pods made to match its intent."""
        spec = job.record.spec
        live = [p for p in job.live if p.ref.key not in self.changes.deleted]
        target = job.status.workers.target
        if len(live) > target:
            planned = dict(job.status.placements)
            on_node: dict[str, int] = defaultdict(int)
            for pod in live:
                on_node[pod.node] += 1
            # Leave first from nodes above their plan, unbound before bound, highest index first.
            ranked = sorted(
                live, key=lambda p: (on_node[p.node] <= planned.get(p.node, 0), bool(p.node), -(p.index or 0))
            )
            for pod in ranked[: len(live) - target]:
                self.changes.delete(pod, spec.preemption.grace_period_seconds, conditions.SCALED_IN)
                on_node[pod.node] -= 1
            live = [p for p in live if p.ref.key not in self.changes.deleted]
        elif len(live) < target and job.status.gpu_type:
            live += self.create_workers(job, live, target - len(live))
        self.relabel(job, live)
        current = len([p for p in live if p.node])
        if current != job.status.workers.current:
            fields = self.fold_work(job)
            fields["workers"] = job.status.workers.model_copy(update={"current": current})
            job.update(**fields)
        if current == len(live) == job.status.workers.target:
            actual: dict[str, int] = defaultdict(int)
            for pod in live:
                actual[pod.node] += 1
            if dict(actual) != job.status.placements:  # once placed, the status shows where workers really are
                job.update(placements=dict(sorted(actual.items())))

    def create_workers(self, job: JobState, live: list[PodRecord], count: int) -> list[PodRecord]:
        spec = job.record.spec
        gpu_type = job.status.gpu_type or ""
        room: dict[str, int] = dict(job.status.placements)
        for pod in live:
            if pod.node in room:
                room[pod.node] -= 1
        nodes = [n for n, r in sorted(room.items()) for _ in range(max(r, 0))]
        taken = {p.index for p in job.pods if p.index is not None} | self.stale_indices[job.key]
        indices = [i for i in range(len(taken) + count + 1) if i not in taken][:count]
        bases = sum(1 for p in live if p.role is PodRole.TRAINING_BASE)
        template = spec.template.body()
        # The c10d store lives on the lowest-indexed base worker, never scaled in: a live one, or this new gang's.
        hosts = [p.index for p in live if p.role is PodRole.TRAINING_BASE and p.index is not None]
        rendezvous_host = min(hosts) if hosts else min(indices)
        namespace, name = job.record.ref.namespace, job.record.ref.name
        service = manifests.rendezvous_service(namespace=namespace, job=name, job_uid=job.record.ref.uid)
        service_ref = ObjectRef("Service", namespace, manifests.rendezvous_service_name(name))
        self.changes.actions.append(CreateService(service_ref, service, job.record.ref))
        created = []
        for position, index in enumerate(indices):
            role = names.ROLE_BASE if bases + position < spec.min_workers else names.ROLE_FLEXIBLE
            node = nodes[position] if position < len(nodes) else None
            manifest = manifests.worker_pod(
                namespace=job.record.ref.namespace,
                job=job.record.ref.name,
                job_uid=job.record.ref.uid,
                index=index,
                role=role,
                template=template,
                gpus_per_worker=spec.gpus_per_worker,
                gpu_type=gpu_type,
                planned_node=node,
                grace_seconds=spec.preemption.grace_period_seconds,
                min_workers=spec.min_workers,
                max_workers=spec.max_workers,
                rendezvous_host=rendezvous_host,
                scheduler_name=self.config.scheduler_name,
            )
            ref = ObjectRef("Pod", job.record.ref.namespace, manifests.worker_name(job.record.ref.name, index))
            self.changes.actions.append(CreatePod(ref, manifest, job.record.ref, node or ""))
            pod_role = PodRole.TRAINING_BASE if role == names.ROLE_BASE else PodRole.TRAINING_FLEXIBLE
            created.append(PodRecord(ref, pod_role, job.key, index, "", "Pending", spec.gpus_per_worker, False, None))
        return created

    def relabel(self, job: JobState, live: list[PodRecord]) -> None:
        """The lowest-indexed live workers carry the base role; the rest are flexible."""
        ordered = sorted(live, key=lambda p: (p.index if p.index is not None else 1 << 30, p.ref.name))
        for position, pod in enumerate(ordered):
            want = PodRole.TRAINING_BASE if position < job.record.spec.min_workers else PodRole.TRAINING_FLEXIBLE
            if pod.role is not want and pod.created is not None:
                label = names.ROLE_BASE if want is PodRole.TRAINING_BASE else names.ROLE_FLEXIBLE
                self.changes.actions.append(SetPodRole(pod.ref, label, job.record.ref, pod.node))

    def refuse(self, job: JobState, message: str) -> None:
        """Fail a job whose spec the core cannot run (its pace cannot be computed either), and stop its workers."""
        for pod in job.live:
            self.changes.delete(pod, job.record.spec.preemption.grace_period_seconds, conditions.INVALID_SPEC)
        job.update(
            phase=JobPhase.FAILED, workers=WorkerCounts(), placements={}, finished_at=format_time(self.changes.now)
        )
        job.status = set_condition(
            job.status,
            conditions.RUNNING,
            False,
            conditions.INVALID_SPEC,
            message,
            now=self.changes.now,
            generation=job.record.generation,
        )
        self.changes.emit(job.record.ref, conditions.INVALID_SPEC, message, warning=True)
        self.refused.append(job)

    def write_statuses(self) -> None:
        for job in [*self.jobs.values(), *self.refused]:
            self.write_status(job)

    def write_status(self, job: JobState) -> None:
        status = job.status.model_copy(update={"observed_generation": job.record.generation})
        failure = self.changes.failures.get(key_of(job.record.ref))
        status = set_applied(status, failure, now=self.changes.now, generation=job.record.generation)
        if status != job.record.status:
            self.changes.actions.append(
                PatchStatus(job.record.ref, wire(status), changed_fields(job.record.status, status))
            )


def empty_room(snapshot: ClusterSnapshot, gpus_per_worker: int) -> dict[str, int]:
    """Workers of ``gpus_per_worker`` GPUs each GPU type's servers hold with nothing running, by type name."""
    room: dict[str, int] = {}
    for server in snapshot.servers:
        room[server.gpu_type] = room.get(server.gpu_type, 0) + server.gpus // gpus_per_worker
    return dict(sorted(room.items()))


def _where(placement: Mapping[str, int]) -> str:
    return ", ".join(f"{count} on {node}" for node, count in sorted(placement.items())) or "nowhere yet"


def _allocation_report(plan: AllocationPlan) -> AllocationReport:
    return AllocationReport(
        workers=dict(plan.workers),
        started=tuple(plan.started),
        resized=tuple(plan.resized),
        queued=dict(plan.queued),
        gpus_used=plan.gpus_used,
        capacity_gpus=plan.capacity_gpus,
        fluid_average_jct_s=plan.fluid_average_jct,
    )
