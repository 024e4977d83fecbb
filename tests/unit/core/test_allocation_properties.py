"""Properties of ``allocate_workers`` on random job mixes (hypothesis, derandomised)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lyra.core import TrainingJob, allocate_workers
from lyra.core.fluid import average_jct

from .oracles import fluid_jobs
from .strategies import PROPERTY, job_mixes


@PROPERTY
@given(jobs=job_mixes(), capacity=st.integers(0, 40), allow_deferral=st.booleans())
def test_plans_fit_and_respect_worker_ranges(jobs: list[TrainingJob], capacity: int, allow_deferral: bool) -> None:
    plan = allocate_workers(jobs, capacity, allow_deferral=allow_deferral)
    by_name = {j.name: j for j in jobs}
    assert set(plan.workers) == set(by_name)
    used = sum(w * by_name[n].gpus_per_worker for n, w in plan.workers.items())
    assert used == plan.gpus_used <= capacity, "capacity is never exceeded"
    for name, w in plan.workers.items():
        spec = by_name[name]
        assert w == 0 or spec.min_workers <= w <= spec.max_workers, (name, w)
    assert set(plan.started) == {j.name for j in jobs if not j.is_running and plan.workers[j.name] > 0}
    assert set(plan.resized) == {j.name for j in jobs if j.is_running and plan.workers[j.name] not in (0, j.workers)}
    assert all(by_name[n].is_running and plan.workers[n] == 0 for n in plan.preempted)


@PROPERTY
@given(jobs=job_mixes(), capacity=st.integers(0, 40))
def test_running_jobs_keep_their_base_while_the_bases_fit(jobs: list[TrainingJob], capacity: int) -> None:
    plan = allocate_workers(jobs, capacity)
    running = [j for j in jobs if j.is_running]
    kept_bases = sum(j.min_workers * j.gpus_per_worker for j in running if plan.workers[j.name])
    if sum(j.min_workers * j.gpus_per_worker for j in running) <= capacity:
        assert plan.preempted == ()
        assert all(plan.workers[j.name] >= j.min_workers for j in running)
    for name in plan.preempted:
        spec = next(j for j in running if j.name == name)
        assert spec.min_workers * spec.gpus_per_worker + kept_bases > capacity, f"{name} was preempted but fits"
    assert set(plan.preempted) == {j.name for j in running if plan.workers[j.name] == 0}


@PROPERTY
@given(jobs=job_mixes(), capacity=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_same_input_same_plan_in_any_order(jobs: list[TrainingJob], capacity: int, seed: int) -> None:
    plan = allocate_workers(jobs, capacity)
    assert allocate_workers(jobs, capacity) == plan
    shuffled = list(jobs)
    random.Random(seed).shuffle(shuffled)
    assert allocate_workers(shuffled, capacity) == plan


@PROPERTY
@given(jobs=job_mixes(), capacity=st.integers(1, 40))
def test_reported_fluid_jct_matches_the_plan(jobs: list[TrainingJob], capacity: int) -> None:
    plan = allocate_workers(jobs, capacity)
    if not any(plan.workers.values()):
        return  # see test_fluid_jct_of_a_plan_that_runs_nothing
    ordered = sorted(jobs, key=lambda j: j.name)
    expected = average_jct(fluid_jobs(ordered), [plan.workers[j.name] for j in ordered], capacity)
    assert plan.fluid_average_jct == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("jobs", "capacity", "allow_deferral"),
    [
        ([TrainingJob("r", 1, 1, 2, 10.0, placement={"t0": 2})], 0, True),
        ([TrainingJob("q", 1, 4, 4, 10.0)], 2, False),
    ],
    ids=["running-job-preempted-by-zero-capacity", "queued-gang-too-big-without-deferral"],
)
def test_fluid_jct_of_a_plan_that_runs_nothing(jobs: list[TrainingJob], capacity: int, allow_deferral: bool) -> None:
    plan = allocate_workers(jobs, capacity, allow_deferral=allow_deferral)
    assert not any(plan.workers.values())
    assert plan.fluid_average_jct == average_jct(fluid_jobs(jobs), [0] * len(jobs), capacity)
