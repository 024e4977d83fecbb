"""Properties of ``allocate_workers`` on random two-type clusters (hypothesis, derandomised).

The checks (``plan_checks``) recount everything from the snapshot and the plan: they share no code with the
core's packing or search.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lyra.core import AllocationPlan, ClusterSnapshot, allocate_workers
from lyra.core.fluid import FluidJob, average_jct

from .builders import T4, job, loaned, snapshot, training
from .plan_checks import bases_that_fit, check_plan, doomed, types_of, usable_free
from .strategies import PROPERTY, allocation_cases

Case = tuple[ClusterSnapshot, dict[str, int]]


@PROPERTY
@given(case=allocation_cases())
def test_plans_pack_onto_the_servers_and_respect_ranges_and_types(case: Case) -> None:
    """Never more than a server's free GPUs, every started job within min..max on types it may use, one type
    unless it mixes, running jobs on their own type, and the plan's fields agree."""
    snap, held = case
    check_plan(snap, allocate_workers(snap, held=held), held)


@PROPERTY
@given(case=allocation_cases())
def test_running_jobs_are_never_preempted_unless_doomed(case: Case) -> None:
    snap, held = case
    plan = allocate_workers(snap, held=held)
    gone = doomed(snap)
    assert set(plan.preempted) == gone
    for spec in snap.jobs:
        if spec.is_running and spec.name not in gone:
            assert plan.workers[spec.name] >= spec.min_workers, spec.name


#: The smallest counterexample hypothesis found (see test_allocation.py: a phase-2 type swap frees T4s that the
#: queued T4-only t could use, and t is not reconsidered).
SWAP_FREES_ROOM: Case = (
    snapshot(
        [loaned("l0", 6), training("v0", 4), training("v1", 2)],
        [job("a").gpus(2).workers(3).work(10), job("b").workers(2).work(1), job("t").types(T4).work(10)],
    ),
    {},
)


@PROPERTY
@example(case=SWAP_FREES_ROOM)
@given(case=allocation_cases())
def test_base_demand_is_first_class(case: Case) -> None:
    """No queued job whose base alone fits in what the plan leaves free, on a type it may use, stays queued."""
    snap, held = case
    plan = allocate_workers(snap, held=held)
    assert bases_that_fit(snap, plan, held) == {}, {n: plan.queued[n] for n in bases_that_fit(snap, plan, held)}


@PROPERTY
@given(case=allocation_cases(), seed=st.integers(0, 2**16))
def test_same_input_same_plan_in_any_order(case: Case, seed: int) -> None:
    snap, held = case
    plan = allocate_workers(snap, held=held)
    assert allocate_workers(snap, held=held) == plan
    rng = random.Random(seed)
    servers, jobs, holds = list(snap.servers), list(snap.jobs), list(held.items())
    rng.shuffle(servers)
    rng.shuffle(jobs)
    rng.shuffle(holds)
    shuffled = ClusterSnapshot(tuple(servers), tuple(jobs), snap.gpus)
    assert allocate_workers(shuffled, held=dict(holds)) == plan


def _fluid_of(snap: ClusterSnapshot, plan: AllocationPlan, held: dict[str, int]) -> float:
    """The fluid model's average JCT of the plan's placement, built from the snapshot (types in name order)."""
    free = usable_free(snap, held)
    types = sorted({snap.server(s).gpu_type for s in free})
    capacity = [sum(g for s, g in free.items() if snap.server(s).gpu_type == t) for t in types]
    total = sum(capacity)
    fluid, start = [], []
    for spec in snap.jobs:
        speeds = tuple(spec.speed_on(snap.gpus[t]) if spec.may_use(snap.gpus[t]) else 0.0 for t in types)
        # The allocator caps a job's width at what the cluster could ever hold.
        high = max(spec.min_workers, min(spec.max_workers, total // spec.gpus_per_worker))
        fluid.append(
            FluidJob(
                spec.remaining_work,
                spec.gpus_per_worker,
                spec.min_workers,
                high,
                speeds,
                spec.priority,
                spec.scaling_overhead,
            )
        )
        placement = plan.placement.get(spec.name, {})
        start.append([sum(n for s, n in placement.items() if snap.server(s).gpu_type == t) for t in types])
    return average_jct(fluid, start, capacity)


@PROPERTY
@given(case=allocation_cases())
def test_reported_fluid_jct_is_that_of_the_placement(case: Case) -> None:
    snap, held = case
    plan = allocate_workers(snap, held=held)
    expected = _fluid_of(snap, plan, held)
    if math.isinf(expected):
        assert math.isinf(plan.fluid_average_jct)
    else:
        assert plan.fluid_average_jct == pytest.approx(expected, rel=1e-9)


@PROPERTY
@given(case=allocation_cases(), restart_cost=st.sampled_from([0.0, 60.0, 600.0]))
def test_migration_plans_are_valid_and_only_move_jobs_to_faster_types(case: Case, restart_cost: float) -> None:
    snap, held = case
    plan = allocate_workers(snap, held=held, restart_cost_s=restart_cost)
    check_plan(snap, plan, held, migration=True)
    free = usable_free(snap, held)
    for name in plan.migrated:
        spec = snap.job(name)
        before = types_of(snap, {s: n for s, n in spec.placement.items() if s in free})
        after = types_of(snap, plan.placement[name])
        slowest_before = min(spec.speed_on(snap.gpus[t]) for t in before)
        slowest_after = min(spec.speed_on(snap.gpus[t]) for t in after)
        assert slowest_after > slowest_before or (spec.mix_gpu_types and before <= after), (name, before, after)
