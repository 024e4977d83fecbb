"""A job's intent from the allocation: the core's snapshot of the training side (servers in their loan states after
this pass, running jobs where their workers are, GPUs held by everything else), ``allocate_workers`` on it, and each
job's phase, target workers, planned placement and GPU type written into its status before its pods change, so a
crash between the two is completed by the next pass."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from lyra.api import conditions
from lyra.api.resources import JobPhase, WorkerCounts
from lyra.core.allocation import AllocationPlan, allocate_workers
from lyra.core.errors import InvalidClusterError
from lyra.core.model import ClusterSnapshot, LoanState, Pool, Server, TrainingJob
from lyra.core.placement import WORKER_ROLES
from lyra.operator.actions import AllocationReport
from lyra.operator.conditions import set_condition
from lyra.operator.job_life import JobLives
from lyra.operator.job_work import WorkLedger
from lyra.operator.timestamps import format_time
from lyra.operator.training_pass import PREEMPTED_BY_ALLOCATION, JobState, TrainingPass
from lyra.operator.world import PodRecord

#: One job in the core's snapshot: its core model, its state, and the workers it counts as placed.
Entry = tuple[TrainingJob, JobState, list[PodRecord]]


class JobIntents:
    """The allocation of the pass and the intent it gives each job. :class:`lyra.operator.jobs.JobBook` runs its
    steps, each job's alone: the servers and the jobs to model, each job's entry, the snapshot they make, the plan,
    and each job's intent from it."""

    def __init__(self, training: TrainingPass, work: WorkLedger, life: JobLives) -> None:
        self.training = training
        self.work = work
        self.life = life

    def servers(self, states: Mapping[str, LoanState]) -> tuple[Server, ...]:
        """The servers in their loan states after this pass; a lost node is left out. An inference server the loan
        cycle leaves out (it runs GPU pods Lyra does not manage, or it is cordoned) is serving: no training work goes
        there, and the GPUs those pods hold are held here too; but a cordoned one that is lent stays lent, its
        workers where they run and its free GPUs held (:attr:`TrainingPass.closed_nodes`)."""
        return tuple(
            Server(
                n.name,
                n.pool,
                n.gpu_type,
                n.gpus,
                states.get(n.name, LoanState.LOANED if n.state is LoanState.LOANED else LoanState.SERVING)
                if n.pool is Pool.INFERENCE
                else None,
            )
            for n in self.training.world.nodes
            if n.name not in self.training.lost_nodes
        )

    def modelled(self, *, allocating: bool) -> list[JobState]:
        """The jobs the core's snapshot holds. ``allocating``: the view the allocation decides on, where a job whose
        workers are still leaving (:attr:`JobState.leaving`) is left out with all its GPUs held, so that it alone
        waits for them (the reclaims' view keeps it where it runs)."""
        modelled = []
        for job in self.training.jobs.values():
            if job.status.phase not in (JobPhase.RUNNING, JobPhase.QUEUED) or job.finishing:
                continue  # a finishing job's last workers hold their GPUs until they exit; nothing to decide
            if job.status.phase is JobPhase.QUEUED and job.held_back:
                continue  # its pods would be refused again: it is not given GPUs until its retry is due
            if job.on_unknown_node:
                continue  # workers on a node nothing says the size of: the job is kept as it is, its GPUs held
            if allocating and job.leaving:
                continue  # it waits for its own leaving workers; their GPUs (and its others') are held
            modelled.append(job)
        return modelled

    def snapshot(
        self, servers: tuple[Server, ...], entries: list[Entry]
    ) -> tuple[ClusterSnapshot, dict[str, int], dict[str, JobState]]:
        """The core's view: ``servers``, the jobs of ``entries`` where their workers are, and GPUs held by everything
        else (replicas, other GPU pods, leaving workers, and a pending pod's on the node kube-scheduler nominated it to
        after preempting there: it binds there once its victims are gone). An unhealthy or cordoned node is in it with
        all its GPUs its jobs' workers do not use held. Returns the snapshot, the GPUs held on each node and the jobs it
        holds by name.

        A running job whose workers break its own spec (its ``gpuTypes`` were edited after it started, say) is left
        out with its GPUs held, so one inconsistent job never stops the decisions about everything else."""
        snapshot, kept = self._consistent(servers, entries)
        counted = {p.ref.key for _, _, placed in kept for p in placed}
        held: dict[str, int] = defaultdict(int)
        known = {s.name for s in servers}
        for pod in self.training.world.pods:
            if pod.holds_gpus and pod.ref.key not in counted and pod.node in known:
                held[pod.node] += pod.gpus
            elif pod.nominated in known and pod.is_live and pod.role not in WORKER_ROLES:
                held[pod.nominated] += pod.gpus
        workers_on: dict[str, int] = defaultdict(int)
        for _, _, placed in kept:
            for pod in placed:
                workers_on[pod.node] += pod.gpus
        for server in servers:  # an unhealthy or cordoned node keeps its workers, takes no new ones: its free GPUs held
            if server.name in self.training.closed_nodes:
                held[server.name] = max(server.gpus - workers_on[server.name], held[server.name])
        return snapshot, dict(held), {core.name: job for core, job, _ in kept}

    def entry(self, job: JobState, hosts: set[str]) -> Entry:
        """One job as the core's snapshot holds it, with the workers it counts as placed."""
        placed = [
            p
            for p in job.bound_live
            if job.status.phase is JobPhase.RUNNING
            and p.node in hosts
            and p.ref.key not in self.training.changes.deleted
        ]
        if len(placed) < job.record.spec.min_workers:
            placed = []  # below its base the job holds GPUs but does not run
        placement: dict[str, int] = defaultdict(int)
        for pod in placed:
            placement[pod.node] += 1
        return self.work.core_job(job, placement, self.work.remaining_work(job)), job, placed

    def _consistent(self, servers: tuple[Server, ...], entries: list[Entry]) -> tuple[ClusterSnapshot, list[Entry]]:
        """The snapshot of ``servers`` and the jobs of ``entries`` that agree with them, and those entries."""
        try:
            return ClusterSnapshot(servers, tuple(core for core, _, _ in entries), self.training.config.gpus), entries
        except InvalidClusterError:
            pass
        kept: list[Entry] = []
        for entry in entries:
            try:
                ClusterSnapshot(servers, (*(core for core, _, _ in kept), entry[0]), self.training.config.gpus)
            except InvalidClusterError as error:
                report = self.training.changes.report
                self.training.changes.report = replace(report, left_out={**report.left_out, entry[0].name: str(error)})
                continue
            kept.append(entry)
        return ClusterSnapshot(servers, tuple(core for core, _, _ in kept), self.training.config.gpus), kept

    def plan(self, snapshot: ClusterSnapshot, held: Mapping[str, int]) -> AllocationPlan:
        """``allocate_workers`` on ``snapshot`` with the pass's search budget."""
        return allocate_workers(snapshot, held=held, search_budget=self.training.config.search_budget)

    def report(self, plan: AllocationPlan) -> None:
        self.training.changes.report = replace(self.training.changes.report, allocation=_allocation_report(plan))

    def report_error(self, error: str) -> None:
        self.training.changes.report = replace(self.training.changes.report, allocation_error=error)

    def intend(
        self,
        job: JobState,
        name: str,
        plan: AllocationPlan,
        snapshot: ClusterSnapshot,
        rooms: dict[int, dict[str, int]],
    ) -> None:
        """One job's intent from the allocation's plan (``rooms``: the empty room per worker size, filled lazily)."""
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
                now=self.training.changes.now,
                generation=job.record.generation,
            )
            if job.status.phase is JobPhase.RUNNING:
                self.life.stop_job(job, JobPhase.QUEUED, conditions.PREEMPTED, f"preempted by the allocation: {reason}")
                self.life.count_preemption(job, PREEMPTED_BY_ALLOCATION)
            return
        target = WorkerCounts(
            current=job.status.workers.current,
            target=workers,
            base=job.record.spec.min_workers,
            flexible=workers - job.record.spec.min_workers,
        )
        if job.status.phase is JobPhase.QUEUED:
            fields = self.work.fold_work(job)
            fields.update(
                phase=JobPhase.RUNNING,
                started_at=format_time(self.training.changes.now),
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
                now=self.training.changes.now,
                generation=job.record.generation,
            )
            self.training.changes.emit(job.record.ref, conditions.STARTED, message)
        elif workers != job.status.workers.target:  # the same count elsewhere is no reason to move workers
            before = job.status.workers.target
            fields = self.work.fold_work(job)
            fields.update(workers=target, placements=placement)
            job.update(**fields)
            self.training.changes.emit(
                job.record.ref, conditions.RESIZED, f"workers {before} -> {workers} ({_where(placement)})"
            )

    def too_large(self, job: JobState, room: Mapping[str, int]) -> str | None:
        """Why ``job``'s base can never start on this cluster, even empty and with every server lent; or None.
        ``room``: the workers of its size each GPU type holds on the empty cluster (:func:`empty_room`)."""
        spec = job.record.spec
        model = self.training.models[job.key]
        rooms = [workers for gpu_type, workers in room.items() if model.may_use(self.training.config.gpus[gpu_type])]
        best = sum(rooms) if spec.mix_gpu_types else max(rooms, default=0)
        if best >= spec.min_workers:
            return None
        gpus = f"{spec.gpus_per_worker} GPU{'s' if spec.gpus_per_worker != 1 else ''}"
        where = "the GPU types it may use" if spec.mix_gpu_types else "one GPU type it may use"
        return (
            f"larger than the cluster: its base needs {spec.min_workers} workers of {gpus} on {where}, and all the "
            f"servers together hold at most {best}; it waits until servers are added"
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
