"""The fluid JCT model, on cases computed by hand (each case's comment shows the arithmetic)."""

from __future__ import annotations

import math

import pytest

from lyra.core.fluid import FluidJob, average_jct, fluid_completion_times, queue_order, total_completion_time


def fj(work: float, low: int, high: int, gpus: int = 1, priority: int = 0) -> FluidJob:
    return FluidJob(work=work, gpus_per_worker=gpus, min_workers=low, max_workers=high, priority=priority)


EX1 = [fj(300, 2, 6), fj(120, 2, 6)]
EX2 = [fj(300, 2, 3), fj(120, 2, 6)]

# (id, jobs, initial workers, capacity, expected completion times)
CASES = [
    # The poster's example 1: B ends at 20 having freed 6 GPUs; A did 40 of 300, then 260 / 6 = 43.33 more.
    ("ex1-A2-B6", EX1, [2, 6], 8, [63.0 + 1 / 3, 20.0]),
    # A ends at 50; B did 100 of 120, then 20 / 6.
    ("ex1-A6-B2", EX1, [6, 2], 8, [50.0, 50.0 + 20 / 6]),
    # B ends at 30; A did 120, then 180 / 6 = 30.
    ("ex1-A4-B4", EX1, [4, 4], 8, [60.0, 30.0]),
    # Example 2: A is capped at 3. B ends at 24; A did 72, then 228 / 3 = 76.
    ("ex2-A3-B5", EX2, [3, 5], 8, [100.0, 24.0]),
    # B ends at 20; A did 40, then 260 / 3.
    ("ex2-A2-B6", EX2, [2, 6], 8, [20.0 + 260 / 3, 20.0]),
    # A ends at 20; the queued C gets its base before B grows: C runs 20..30. B did 40 by 20, 20 more by 30,
    # then takes C's 2 GPUs: 40 / 4 = 10 more.
    ("queued-before-growth", [fj(40, 2, 4), fj(100, 2, 4), fj(20, 2, 2)], [2, 2, 0], 4, [20.0, 40.0, 30.0]),
    # C ends at 10; its 2 GPUs go to B (earliest projected finish, 50) not A: B did 20, then 80 / 4 = 20.
    # B ends at 30; A did 60, then 140 / 6.
    ("growth-shortest-first", [fj(200, 2, 6), fj(100, 2, 4), fj(20, 2, 2)], [2, 2, 2], 6, [30 + 140 / 6, 30.0, 10.0]),
    # Multi-GPU workers: B ends at 10 and frees 2 GPUs, one more 2-GPU worker for A: 90 / 2 = 45 more.
    ("two-gpu-workers", [fj(100, 1, 2, gpus=2), fj(20, 2, 2)], [1, 2], 4, [55.0, 10.0]),
    # B frees 1 GPU, too few for one of A's 2-GPU workers: A keeps 1 worker.
    (
        "freed-gpus-below-a-worker",
        [fj(100, 1, 2, gpus=2), fj(10, 1, 1), fj(1000, 2, 2)],
        [1, 1, 2],
        5,
        [100.0, 10.0, 500.0],
    ),
    # R ends at 10; the higher-priority Y starts first although X is shorter; X waits for Y.
    (
        "queue-by-priority",
        [fj(20, 2, 2), fj(10, 2, 2), fj(100, 2, 2, priority=1)],
        [2, 0, 0],
        2,
        [10.0, 65.0, 60.0],
    ),
    # Two queued gangs of 2 and 3 on 4 GPUs: at 10 the shorter-at-base 3-gang (20 / 3 s) starts, the 2-gang
    # does not fit beside it and waits until 10 + 20/3.
    (
        "queue-by-time-at-base",
        [fj(40, 4, 4), fj(40, 2, 2), fj(20, 3, 3)],
        [4, 0, 0],
        4,
        [10.0, 10 + 20 / 3 + 20, 10 + 20 / 3],
    ),
    # A gang larger than the cluster never starts.
    ("never-fits", [fj(10, 1, 1), fj(10, 5, 5)], [1, 0], 4, [10.0, math.inf]),
    # Nothing running: nothing ever starts in the fluid model (no completion to trigger admission).
    ("nothing-running", [fj(10, 1, 1)], [0], 4, [math.inf]),
    # Zero remaining work completes at once.
    ("zero-work", [fj(0, 1, 1), fj(10, 1, 2)], [1, 1], 2, [0.0, 5.0]),
    ("empty", [], [], 0, []),
]


@pytest.mark.parametrize(("jobs", "workers", "capacity", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fluid_completion_times(jobs: list[FluidJob], workers: list[int], capacity: int, expected: list[float]) -> None:
    assert fluid_completion_times(jobs, workers, capacity) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("jobs", "workers", "average"),
    [(EX1, [6, 2], 51.67), (EX1, [2, 6], 41.67), (EX1, [4, 4], 45.0), (EX2, [3, 5], 62.0), (EX2, [2, 6], 63.33)],
    ids=["ex1-A6-B2", "ex1-A2-B6", "ex1-A4-B4", "ex2-A3-B5", "ex2-A2-B6"],
)
def test_poster_average_jct_table(jobs: list[FluidJob], workers: list[int], average: float) -> None:
    """The poster's tables, to the 2 decimals it prints."""
    assert round(average_jct(jobs, workers, 8), 2) == average


def test_totals_and_averages_with_a_job_that_never_starts() -> None:
    jobs = [fj(10, 1, 1), fj(10, 5, 5)]
    assert total_completion_time(jobs, [1, 0], 4) == 10.0, "the total counts only jobs that start"
    assert average_jct(jobs, [1, 0], 4) == math.inf
    assert average_jct([], [], 0) == 0.0


def test_queue_order_is_priority_then_time_at_base_then_index() -> None:
    jobs = [fj(100, 2, 2), fj(10, 1, 1), fj(500, 1, 1, priority=1), fj(20, 2, 2), fj(10, 1, 1)]
    # times at base: 50, 10, 500, 10, 10
    assert queue_order(jobs) == [2, 1, 3, 4, 0]


@pytest.mark.parametrize(
    ("workers", "capacity", "message"),
    [([1], 8, r"1 worker counts for 2 jobs"), ([6, 6], 8, r"initial allocation uses 12 GPUs, capacity is 8")],
    ids=["length-mismatch", "over-capacity"],
)
def test_fluid_refuses_bad_input(workers: list[int], capacity: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fluid_completion_times(EX1, workers, capacity)
