"""The plan and its explanation: every job's workers, GPU types and placement from the search's best allocation, what
it started, resized, migrated and preempted, and why each waiting job waits (worded on first read)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.core.allocation.problem import Problem
from lyra.core.allocation.search import Search, SearchState
from lyra.core.model import TrainingJob
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


class _Reasons(Mapping[str, str]):
    """Why each waiting job waits, worded on first read (most callers, like the simulator, never ask)."""

    def __init__(self, jobs: Mapping[str, TrainingJob], explain: Callable[[TrainingJob], str]) -> None:
        self._jobs = jobs
        self._explain = explain
        self._worded: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        reason = self._worded.get(name)
        if reason is None:
            reason = self._worded[name] = self._explain(self._jobs[name])
        return reason

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)

    def __repr__(self) -> str:
        return repr(dict(self))


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
    queued = _Reasons(
        {j.name: j for j in problem.jobs if not workers[j.name]}, lambda job: why_queued(problem, job, layout)
    )
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


def why_queued(problem: Problem, job: TrainingJob, layout: Layout) -> str:
    """Why ``job`` waits: what its base needs and what the GPU types it may use hold now and at best."""
    i = problem.index[job.name]
    base = f"base of {job.min_workers} worker{'s' if job.min_workers > 1 else ''} x {job.gpus_per_worker} GPU"
    base += "s" if job.gpus_per_worker > 1 else ""
    allowed = problem.type_preference(i)
    excluded = [t for t in problem.types if t not in {problem.types[a] for a in allowed}]
    if not allowed:
        present = ", ".join(problem.types) or "none"
        return f"may use none of the GPU types training can use now (present: {present})"
    parts = []
    for t in allowed:
        now = layout.room(t, job.gpus_per_worker)
        most = problem.most_workers(t, job.gpus_per_worker)
        parts.append(f"{problem.types[t]} holds {now} now, at most {most}")
    reason = f"{base} does not fit: " + "; ".join(parts)
    if excluded:
        reason += f" (may not use {', '.join(excluded)})"
    return reason
