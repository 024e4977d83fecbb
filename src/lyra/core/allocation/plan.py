"""The plan: every job's workers, GPU types and placement from the search's best allocation, and what it started,
resized, migrated and preempted; why each waiting job waits is :mod:`.explanation`'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.core.allocation.explanation import QueuedReasons
from lyra.core.allocation.problem import Problem
from lyra.core.allocation.search import Search
from lyra.core.allocation.state import SearchState
from lyra.core.packing import Layout


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    """Every job's worker count (0 = queued or stopped), GPU types and placement, and what changed to get there.

    ``placement`` holds every job that runs after the plan (running jobs included) and realises ``workers`` on
    the servers' free GPUs. ``queued`` says why each job that waits cannot start.
    """

    workers: Mapping[str, int]
    gpu_types: Mapping[str, tuple[str, ...]]
    placement: Mapping[str, Mapping[str, int]]
    started: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()
    resized: tuple[str, ...] = ()
    migrated: tuple[str, ...] = ()
    queued: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpus_used: int = 0
    capacity_gpus: int = 0
    fluid_average_jct: float = 0.0
    evaluations: int = 0


def plan_of(problem: Problem, best: SearchState, layout: Layout, search: Search) -> AllocationPlan:
    workers: dict[str, int] = {}
    types: dict[str, tuple[str, ...]] = {}
    placement: dict[str, Mapping[str, int]] = {}
    used = 0
    names, type_of, type_names = layout.names, layout.type_of, problem.types
    kinds: dict[str, set[int]] = {}
    for job in problem.jobs:
        hosts = layout.jobs.get(job.name)
        if not hosts:
            workers[job.name] = 0
            types[job.name] = ()
            continue
        count = sum(hosts.values())
        workers[job.name] = count
        used += count * job.gpus_per_worker
        kinds[job.name] = {type_of[s] for s in hosts}
        types[job.name] = tuple(type_names[t] for t in sorted(kinds[job.name]))
        placement[job.name] = MappingProxyType({names[s]: hosts[s] for s in sorted(hosts)})
    started = sorted(j.name for j in problem.jobs if (not j.placement or j.name in problem.doomed) and workers[j.name])
    # Migrated: left a GPU type it ran on (a mixing job that only grows onto another type is resized).
    migrated = sorted(
        problem.jobs[i].name
        for i in problem.running
        if not problem.initial_types[i] <= kinds.get(problem.jobs[i].name, set())
    )
    # Resized: a running job whose workers this plan changes, in number or in place (workers leaving with a
    # reclaiming server are the reclaim's doing, not this plan's).
    resized = sorted(
        name
        for name, before in problem.surviving.items()
        if name not in migrated and name in placement and dict(placement[name]) != before
    )
    queued = QueuedReasons(problem, layout, [j for j in problem.jobs if not workers[j.name]])
    return AllocationPlan(
        workers=MappingProxyType(workers),
        gpu_types=MappingProxyType(types),
        placement=MappingProxyType(placement),
        started=tuple(started),
        preempted=tuple(sorted(problem.doomed)),
        resized=tuple(resized),
        migrated=tuple(migrated),
        queued=queued,
        gpus_used=used,
        capacity_gpus=sum(layout.capacity),
        fluid_average_jct=search.average_jct(best),
        evaluations=search.evaluations,
    )
