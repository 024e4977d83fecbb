"""The allocation problem of one snapshot: the servers training may use and what runs on them (a core ``Layout``),
the jobs with their speed on each GPU type, their most useful width and their type preference, and each job's kind
as the plan takes shape: ``QUEUED``, ``SPREAD`` over several types, or the index of its one GPU type
(:mod:`lyra.core.fluid`'s encoding, the only one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lyra.core.allocation.journal import TrackedLayout
from lyra.core.errors import InvalidClusterError
from lyra.core.fluid import QUEUED, SPREAD, JobTable, fastest_first
from lyra.core.gpus import GpuType
from lyra.core.model import ClusterSnapshot, LoanState, Pool, TrainingJob
from lyra.core.packing import Slot


def current_layout(snapshot: ClusterSnapshot, held: Mapping[str, int]) -> tuple[TrackedLayout, frozenset[str]]:
    """The servers training may use (training servers and loaned ones; reclaiming servers are not capacity),
    their GPUs free for the decision (all but ``held``), and the running jobs' workers on them; and the running
    jobs that are doomed (an earlier reclaim left fewer than their base: they restart like queued jobs and are
    not placed)."""
    servers = {s.name: s for s in snapshot.servers}
    for name, gpus in held.items():
        if name not in servers:
            raise InvalidClusterError(f"held GPUs on unknown server {name!r}")
        if not isinstance(gpus, int) or gpus < 0:
            raise InvalidClusterError(f"held GPUs on {name} must be an integer >= 0, got {gpus!r}")
    slots = []
    usable: set[str] = set()
    for server in snapshot.servers:
        if server.pool is not Pool.TRAINING and server.state is not LoanState.LOANED:
            continue
        free = server.gpus - held.get(server.name, 0)
        if free < 0:
            raise InvalidClusterError(f"server {server.name}: {held[server.name]} GPUs held, it has {server.gpus}")
        slots.append(Slot(server.name, server.gpu_type, free, server.pool is Pool.TRAINING))
        usable.add(server.name)
    placed: list[tuple[str, str, int, int]] = []
    doomed: set[str] = set()
    for job in snapshot.jobs:
        if not job.placement:
            continue
        surviving = [(s, n) for s, n in job.placement.items() if s in usable]
        if sum(n for _, n in surviving) < job.min_workers:
            doomed.add(job.name)
            continue
        placed.extend((job.name, s, n, job.gpus_per_worker) for s, n in surviving)
    try:
        return TrackedLayout(slots, placed), frozenset(doomed)
    except ValueError as error:
        raise InvalidClusterError(f"the running jobs and held GPUs overbook a server: {error}") from None


def job_table(jobs: Sequence[TrainingJob], gpu_of_type: Sequence[GpuType], capacity: Sequence[int]) -> JobTable:
    """The decision's jobs as columns (:class:`~lyra.core.fluid.JobTable`), read by admission, the search and the
    fluid model alike: each job's speed on each GPU type (0 where it may not use it), the most workers it can hold
    (its ``max_workers``, bounded by the GPUs of the types it may use), the types it may use fastest first."""
    # Jobs with the same GPU constraints share their speeds per type, and jobs with the same speeds their type
    # preference (a simulator's jobs come in a few kinds).
    speeds_of: dict[tuple[object, ...], tuple[float, ...]] = {}
    preferences: dict[tuple[float, ...], tuple[int, ...]] = {}
    speeds_column: list[tuple[float, ...]] = []
    preference_column: list[tuple[int, ...]] = []
    high_column: list[int] = []
    for job in jobs:
        constraints = (job.gpu_types, job.gpu_memory_gib, tuple(job.speeds.items()))
        speeds = speeds_of.get(constraints)
        if speeds is None:
            speeds = speeds_of[constraints] = tuple(job.speed_on(g) if job.may_use(g) else 0.0 for g in gpu_of_type)
        preference = preferences.get(speeds)
        if preference is None:
            preference = preferences[speeds] = tuple(fastest_first(speeds))
        # No job can hold more workers than the GPUs it may use have room for: this bounds every loop below
        # (and GPUs of types it may not use change nothing about it).
        usable = sum(c for c, speed in zip(capacity, speeds, strict=True) if speed > 0)
        high_column.append(max(job.min_workers, min(job.max_workers, usable // job.gpus_per_worker)))
        speeds_column.append(speeds)
        preference_column.append(preference)
    return JobTable(
        work=[job.remaining_work for job in jobs],
        gpw=[job.gpus_per_worker for job in jobs],
        low=[job.min_workers for job in jobs],
        high=high_column,
        speeds=speeds_column,
        overhead=[job.scaling_overhead for job in jobs],
        priority=[job.priority for job in jobs],
        submit_time=[job.submit_time for job in jobs],
        preference=preference_column,
    )


class Problem:
    """The allocation problem of one snapshot (see the module docstring); admission (:mod:`.admission`) and the
    search (:mod:`.search`) change its layout, kinds and started jobs."""

    def __init__(self, snapshot: ClusterSnapshot, held: Mapping[str, int]) -> None:
        self.snapshot = snapshot
        self.layout, doomed = current_layout(snapshot, held)
        layout = self.layout
        self.types = layout.types
        self.jobs = list(snapshot.jobs)
        #: What the decision knows of each job, by index, as columns (``table.gpw[i]`` is ``jobs[i]``'s).
        self.table = job_table(self.jobs, [snapshot.gpus[t] for t in self.types], layout.capacity)
        self.names = [job.name for job in self.jobs]
        self.index = {job.name: i for i, job in enumerate(self.jobs)}
        self.kind = [QUEUED] * len(self.jobs)
        self.doomed = sorted(doomed)
        self.running: list[int] = []
        self.initial_types: dict[int, set[int]] = {}
        for i, job in enumerate(self.jobs):
            if job.placement and job.name not in doomed:
                kinds = layout.job_types(job.name)
                self.kind[i] = next(iter(kinds)) if len(kinds) == 1 else SPREAD
                self.initial_types[i] = kinds
                self.running.append(i)
        #: Running jobs' workers that survive reclaiming servers, before this plan changes anything.
        self.surviving = {self.jobs[i].name: layout.placement(self.jobs[i].name) for i in self.running}
        self.started: list[int] = []
        #: GPUs per worker of each job, by name.
        self.gpw_of = {job.name: job.gpus_per_worker for job in self.jobs}
        #: Workers of a given size each GPU type holds on an empty cluster, (type, GPUs per worker) -> workers:
        #: asked once per queued job's reason, the same few sizes each time.
        self._most: dict[tuple[int, int], int] = {}

    def most_workers(self, gpu_type: int, gpus_per_worker: int) -> int:
        """Workers of ``gpus_per_worker`` GPUs that the servers of ``gpu_type`` hold when nothing else runs."""
        key = (gpu_type, gpus_per_worker)
        most = self._most.get(key)
        if most is None:
            layout = self.layout
            most = self._most[key] = sum(
                layout.size[s] // gpus_per_worker for s in range(len(layout.names)) if layout.type_of[s] == gpu_type
            )
        return most

    def best_speed(self, i: int) -> float:
        return max(self.table.speeds[i], default=0.0)

    def type_preference(self, i: int) -> tuple[int, ...]:
        """The types job ``i`` may use, fastest first (then by name)."""
        return self.table.preference[i]
