"""Independent checks of plans against their snapshot, written without the core's packing, search or reclaim code.

``check_plan`` asserts what every allocation plan must satisfy (it bin-packs onto the servers' free GPUs, each
running job has ``min..max`` workers on types it may use, bookkeeping fields agree); ``bases_that_fit`` finds queued
jobs whose base gang alone would fit in what the plan leaves free (base demand is first-class: there should be
none); ``reclaim_outcome`` recounts who a reclaim preempts, scales in, or finds already preempted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lyra.core import AllocationPlan, ClusterSnapshot, LoanState, Pool, TrainingJob


def usable_free(snapshot: ClusterSnapshot, held: Mapping[str, int] | None = None) -> dict[str, int]:
    """GPUs the decision may use on each server: training servers and loaned ones, minus ``held``."""
    held = held or {}
    return {
        s.name: s.gpus - held.get(s.name, 0)
        for s in snapshot.servers
        if s.pool is Pool.TRAINING or s.state is LoanState.LOANED
    }


def doomed(snapshot: ClusterSnapshot) -> set[str]:
    """Running jobs left below their base by servers training may no longer use (reclaiming ones)."""
    usable = usable_free(snapshot)
    return {
        j.name
        for j in snapshot.jobs
        if j.is_running and sum(n for s, n in j.placement.items() if s in usable) < j.min_workers
    }


def types_of(snapshot: ClusterSnapshot, placement: Mapping[str, int]) -> set[str]:
    return {snapshot.server(s).gpu_type for s in placement}


def check_plan(
    snapshot: ClusterSnapshot, plan: AllocationPlan, held: Mapping[str, int] | None = None, *, migration: bool = False
) -> None:
    """Assert the invariants every plan holds. With ``migration`` (a restart cost was given), running jobs may
    change GPU type; otherwise each keeps its own."""
    free = usable_free(snapshot, held)
    jobs = {j.name: j for j in snapshot.jobs}
    gone = doomed(snapshot)
    assert set(plan.workers) == set(jobs)
    assert set(plan.gpu_types) == set(jobs)
    used: dict[str, int] = {}
    for name, spec in jobs.items():
        workers = plan.workers[name]
        placement = dict(plan.placement.get(name, {}))
        assert sum(placement.values()) == workers, f"{name}: placement {placement} does not realise {workers}"
        assert all(n > 0 for n in placement.values()), name
        if not workers:
            assert name not in plan.placement
            assert plan.gpu_types[name] == ()
            continue
        assert spec.min_workers <= workers <= spec.max_workers, (name, workers)
        kinds = types_of(snapshot, placement)
        assert plan.gpu_types[name] == tuple(sorted(kinds)), name
        assert all(spec.may_use(snapshot.gpus[t]) for t in kinds), f"{name} on {kinds}, which it may not use"
        assert len(kinds) == 1 or spec.mix_gpu_types, f"{name} spans {kinds} without mixing"
        for server, count in placement.items():
            assert server in free, f"{name} placed on {server}, which training may not use now"
            used[server] = used.get(server, 0) + count * spec.gpus_per_worker
        if spec.is_running and name not in gone and not migration:
            original = types_of(snapshot, {s: n for s, n in spec.placement.items() if s in free})
            if spec.mix_gpu_types:
                assert original <= kinds, f"{name} left a GPU type"
            else:
                assert kinds == original, f"running job {name} moved from {original} to {kinds}"
    for server, gpus in used.items():
        assert gpus <= free[server], f"{server}: {gpus} GPUs placed, {free[server]} free"
    assert plan.gpus_used == sum(used.values())
    assert plan.capacity_gpus == sum(free.values())
    # Running jobs are never preempted unless an earlier reclaim already left them below their base.
    assert set(plan.preempted) == gone
    for name, spec in jobs.items():
        if spec.is_running and name not in gone:
            assert plan.workers[name] >= spec.min_workers, f"running job {name} lost its base"
    assert set(plan.started) == {n for n, s in jobs.items() if (not s.is_running or n in gone) and plan.workers[n]}
    assert set(plan.queued) == {n for n in jobs if not plan.workers[n]}
    assert all(isinstance(plan.queued[n], str) and plan.queued[n] for n in plan.queued)
    for field in (plan.started, plan.preempted, plan.resized, plan.migrated):
        assert list(field) == sorted(field)
    assert set(plan.resized).isdisjoint(plan.migrated)
    if not migration:
        assert not plan.migrated, "no job leaves its GPU type without a restart cost"
    for name in plan.resized:
        spec = jobs[name]
        assert spec.is_running, name
        assert name not in gone, name
        surviving = {s: n for s, n in spec.placement.items() if s in free}
        assert plan.workers[name], name
        assert dict(plan.placement[name]) != surviving, name


def bases_that_fit(
    snapshot: ClusterSnapshot, plan: AllocationPlan, held: Mapping[str, int] | None = None
) -> dict[str, str]:
    """Queued jobs whose base gang alone fits in the GPUs the plan leaves free, on a type they may use (or, for a
    job that mixes types, across them), each with the type it would fit on."""
    left = usable_free(snapshot, held)
    jobs = {j.name: j for j in snapshot.jobs}
    for name, placement in plan.placement.items():
        for server, count in placement.items():
            left[server] -= count * jobs[name].gpus_per_worker
    found: dict[str, str] = {}
    for name, spec in jobs.items():
        if plan.workers[name]:
            continue
        slots = _worker_slots(snapshot, spec, left)
        fitting = sorted(t for t, n in slots.items() if n >= spec.min_workers)
        if fitting:
            found[name] = fitting[0]
        elif spec.mix_gpu_types and sum(slots.values()) >= spec.min_workers:
            found[name] = "+".join(sorted(slots))
    return found


def _worker_slots(snapshot: ClusterSnapshot, spec: TrainingJob, left: Mapping[str, int]) -> dict[str, int]:
    """Workers of ``spec`` that the free GPUs hold, per GPU type it may use (a worker's GPUs on one server)."""
    slots: dict[str, int] = {}
    for server, gpus in left.items():
        gpu_type = snapshot.server(server).gpu_type
        if spec.may_use(snapshot.gpus[gpu_type]):
            slots[gpu_type] = slots.get(gpu_type, 0) + gpus // spec.gpus_per_worker
    return slots


@dataclass(frozen=True)
class ReclaimOutcome:
    preempted: set[str]
    scaled_in: dict[str, int]
    already_preempted: set[str]


def reclaim_outcome(snapshot: ClusterSnapshot, servers: Iterable[str]) -> ReclaimOutcome:
    """What reclaiming ``servers`` does to each job, recounted from the snapshot.

    Workers on servers already ``reclaiming`` are gone. A job they leave below its base is doomed: an earlier
    reclaim preempted it (``already``, when it has workers on the chosen servers). Any other job is preempted iff
    the chosen servers take more workers than it can spare (``workers - gone - min_workers``), else scaled in.
    """
    chosen = set(servers)
    leaving = {s.name for s in snapshot.servers if s.state is LoanState.RECLAIMING}
    preempted: set[str] = set()
    scaled: dict[str, int] = {}
    already: set[str] = set()
    for spec in snapshot.jobs:
        staying = spec.workers - sum(n for s, n in spec.placement.items() if s in leaving)
        removed = sum(n for s, n in spec.placement.items() if s in chosen)
        if not removed:
            continue
        if staying < spec.min_workers:
            already.add(spec.name)
        elif removed > staying - spec.min_workers:
            preempted.add(spec.name)
        else:
            scaled[spec.name] = removed
    return ReclaimOutcome(preempted, scaled, already)
