"""The typed fluid JCT model, on cases computed by hand (each case's comment shows the arithmetic).

GPU types are indexed in name order, as the allocator passes them: in the two-type cases type 0 is the T4
(speed 0.5) and type 1 the V100 (speed 1.0).
"""

from __future__ import annotations

import math

import pytest

from lyra.core.fluid import (
    FluidJob,
    FluidModel,
    average_jct,
    fluid_completion_times,
    queue_order,
    total_completion_time,
)

ANY = (1.0,)  # one type, reference speed
BOTH = (0.5, 1.0)  # T4, V100
T4_ONLY = (0.5, 0.0)
V100_ONLY = (0.0, 1.0)


def fj(
    work: float,
    low: int,
    high: int,
    *,
    gpus: int = 1,
    priority: int = 0,
    speeds: tuple[float, ...] = ANY,
    overhead: float = 0.0,
) -> FluidJob:
    return FluidJob(
        work=work,
        gpus_per_worker=gpus,
        min_workers=low,
        max_workers=high,
        speeds=speeds,
        priority=priority,
        overhead=overhead,
    )


def one_type(*workers: int) -> list[list[int]]:
    return [[w] for w in workers]


EX1 = [fj(300, 2, 6), fj(120, 2, 6)]
EX2 = [fj(300, 2, 3), fj(120, 2, 6)]

# (id, jobs, start[i][t], capacity[t], expected completion times)
CASES: list[tuple[str, list[FluidJob], list[list[int]], list[int], list[float]]] = [
    # The poster's example 1: B ends at 20 having freed 6 GPUs; A did 40 of 300, then 260 / 6 = 43.33 more.
    ("ex1-A2-B6", EX1, one_type(2, 6), [8], [63.0 + 1 / 3, 20.0]),
    # A ends at 50; B did 100 of 120, then 20 / 6.
    ("ex1-A6-B2", EX1, one_type(6, 2), [8], [50.0, 50.0 + 20 / 6]),
    # B ends at 30; A did 120, then 180 / 6 = 30.
    ("ex1-A4-B4", EX1, one_type(4, 4), [8], [60.0, 30.0]),
    # Example 2: A is capped at 3. B ends at 24; A did 72, then 228 / 3 = 76.
    ("ex2-A3-B5", EX2, one_type(3, 5), [8], [100.0, 24.0]),
    # B ends at 20; A did 40, then 260 / 3.
    ("ex2-A2-B6", EX2, one_type(2, 6), [8], [20.0 + 260 / 3, 20.0]),
    # A ends at 20; the queued C gets its base before B grows: C runs 20..30. B did 40 by 20, 20 more by 30,
    # then takes C's 2 GPUs: 40 / 4 = 10 more.
    (
        "queued-before-growth",
        [fj(40, 2, 4), fj(100, 2, 4), fj(20, 2, 2)],
        one_type(2, 2, 0),
        [4],
        [20.0, 40.0, 30.0],
    ),
    # C ends at 10; its 2 GPUs go to B (earliest projected finish, 50) not A: B did 20, then 80 / 4 = 20.
    # B ends at 30; A did 60, then 140 / 6.
    (
        "growth-shortest-first",
        [fj(200, 2, 6), fj(100, 2, 4), fj(20, 2, 2)],
        one_type(2, 2, 2),
        [6],
        [30 + 140 / 6, 30.0, 10.0],
    ),
    # Multi-GPU workers: B ends at 10 and frees 2 GPUs, one more 2-GPU worker for A: 90 / 2 = 45 more.
    ("two-gpu-workers", [fj(100, 1, 2, gpus=2), fj(20, 2, 2)], one_type(1, 2), [4], [55.0, 10.0]),
    # B frees 1 GPU, too few for one of A's 2-GPU workers: A keeps 1 worker.
    (
        "freed-gpus-below-a-worker",
        [fj(100, 1, 2, gpus=2), fj(10, 1, 1), fj(1000, 2, 2)],
        one_type(1, 1, 2),
        [5],
        [100.0, 10.0, 500.0],
    ),
    # R ends at 10; the higher-priority Y starts first although X is shorter; X waits for Y.
    (
        "queue-by-priority",
        [fj(20, 2, 2), fj(10, 2, 2), fj(100, 2, 2, priority=1)],
        one_type(2, 0, 0),
        [2],
        [10.0, 65.0, 60.0],
    ),
    # Two queued gangs of 2 and 3 on 4 GPUs: at 10 the shorter-at-base 3-gang (20 / 3 s) starts, the 2-gang
    # does not fit beside it and waits until 10 + 20/3.
    (
        "queue-by-time-at-base",
        [fj(40, 4, 4), fj(40, 2, 2), fj(20, 3, 3)],
        one_type(4, 0, 0),
        [4],
        [10.0, 10 + 20 / 3 + 20, 10 + 20 / 3],
    ),
    # A gang larger than the cluster never starts.
    ("never-fits", [fj(10, 1, 1), fj(10, 5, 5)], one_type(1, 0), [4], [10.0, math.inf]),
    # Nothing running: nothing ever starts in the fluid model (no completion to trigger admission).
    ("nothing-running", [fj(10, 1, 1)], one_type(0), [4], [math.inf]),
    # Zero remaining work completes at once.
    ("zero-work", [fj(0, 1, 1), fj(10, 1, 2)], one_type(1, 1), [2], [0.0, 5.0]),
    # Scaling overhead 0.5: 4 workers run at 4 / (1 + 0.5 * 3) = 1.6, so 100 takes 62.5 s.
    ("overhead", [fj(100, 4, 4, overhead=0.5)], one_type(4), [4], [62.5]),
    # With overhead, growth is sublinear too: B (linear) ends at 40 / 4 = 10; A, at 2 / 1.5, did 13.33 of 100 by
    # then, and runs the remaining 86.67 at 6 / (1 + 0.5 * 5) = 6 / 3.5.
    (
        "overhead-on-growth",
        [fj(100, 2, 6, overhead=0.5), fj(40, 4, 4)],
        one_type(2, 4),
        [6],
        [10 + (100 - 10 * 2 / 1.5) / (6 / 3.5), 10.0],
    ),
    ("empty", [], [], [0], []),
    # ---- two types: T4 (index 0, 0.5) and V100 (index 1, 1.0)
    # Slowest worker: one T4 and one V100 worker run at 2 x 0.5 = 1.0, so 100 takes 100 s (not 100 / 1.5).
    ("spread-runs-at-the-slowest-pace", [fj(100, 2, 2, speeds=BOTH)], [[1, 1]], [1, 1], [100.0]),
    # A T4-only job on 4 T4s: 4 x 0.5 = 2, 100 s for 200.
    ("slow-type", [fj(200, 4, 4, speeds=T4_ONLY)], [[4, 0]], [4, 4], [100.0]),
    # The job's own measured speed on a T4 (0.8): 4 x 0.8 = 3.2.
    ("own-speed", [fj(320, 4, 4, speeds=(0.8, 1.0))], [[4, 0]], [4, 4], [100.0]),
    # R (V100, 40 / 4) ends at 10; the queued Q starts on the fastest type with room, the V100s: 20 / 2 = 10.
    (
        "queued-starts-on-its-fastest-type",
        [fj(40, 4, 4, speeds=BOTH), fj(20, 2, 2, speeds=BOTH)],
        [[0, 4], [0, 0]],
        [4, 4],
        [10.0, 20.0],
    ),
    # R2 (T4, 2 x 0.5) ends at 5; the V100s are full (R1 until 100), so Q starts on the T4s: 10 / 1 = 10.
    (
        "queued-starts-on-the-slower-type-if-that-has-room",
        [fj(400, 4, 4, speeds=BOTH), fj(5, 2, 2, speeds=BOTH), fj(10, 2, 2, speeds=BOTH)],
        [[0, 4], [2, 0], [0, 0]],
        [2, 4],
        [100.0, 5.0, 15.0],
    ),
    # A T4-only queued job never starts on V100s, however free they are.
    (
        "queued-never-on-an-excluded-type",
        [fj(40, 4, 4, speeds=BOTH), fj(10, 2, 2, speeds=T4_ONLY)],
        [[0, 4], [0, 0]],
        [0, 4],
        [10.0, math.inf],
    ),
    # B (V100) ends at 10 and frees 4 V100s; A runs on both T4s and does not grow onto them: 100 / (2 x 0.5).
    (
        "t4-job-does-not-grow-onto-v100s",
        [fj(100, 2, 8, speeds=BOTH), fj(40, 4, 4, speeds=BOTH)],
        [[2, 0], [0, 4]],
        [2, 4],
        [100.0, 10.0],
    ),
    # C (T4) ends at 5 and frees 2 T4s: A grows on its own type, 2 -> 4 workers: 95 / 2 = 47.5 more.
    (
        "t4-job-grows-on-t4s",
        [fj(100, 2, 4, speeds=BOTH), fj(5, 2, 2, speeds=BOTH)],
        [[2, 0], [2, 0]],
        [4, 4],
        [52.5, 5.0],
    ),
    # B (V100) ends at 10; S runs on both types and does not grow: 100 / (2 x 0.5) = 100.
    (
        "spread-job-does-not-grow",
        [fj(100, 2, 8, speeds=BOTH), fj(20, 2, 2, speeds=BOTH)],
        [[1, 1], [0, 2]],
        [4, 4],
        [100.0, 10.0],
    ),
]


@pytest.mark.parametrize(("jobs", "start", "capacity", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fluid_completion_times(
    jobs: list[FluidJob], start: list[list[int]], capacity: list[int], expected: list[float]
) -> None:
    assert fluid_completion_times(jobs, start, capacity) == pytest.approx(expected, rel=1e-12)
    assert FluidModel(jobs, capacity).completion_times(start) == fluid_completion_times(jobs, start, capacity)


@pytest.mark.parametrize(
    ("jobs", "workers", "average"),
    [(EX1, [6, 2], 51.67), (EX1, [2, 6], 41.67), (EX1, [4, 4], 45.0), (EX2, [3, 5], 62.0), (EX2, [2, 6], 63.33)],
    ids=["ex1-A6-B2", "ex1-A2-B6", "ex1-A4-B4", "ex2-A3-B5", "ex2-A2-B6"],
)
def test_poster_average_jct_table(jobs: list[FluidJob], workers: list[int], average: float) -> None:
    """The poster's tables, to the 2 decimals it prints."""
    assert round(average_jct(jobs, one_type(*workers), [8]), 2) == average


def test_one_model_scores_many_starts() -> None:
    model = FluidModel(EX1, [8])
    assert model.completion_times(one_type(2, 6)) == pytest.approx([63.0 + 1 / 3, 20.0])
    assert model.completion_times(one_type(6, 2)) == pytest.approx([50.0, 50.0 + 20 / 6])
    assert model.completion_times(one_type(2, 6)) == pytest.approx([63.0 + 1 / 3, 20.0]), "no state leaks"


def test_totals_and_averages_with_a_job_that_never_starts() -> None:
    jobs = [fj(10, 1, 1), fj(10, 5, 5)]
    assert total_completion_time(jobs, one_type(1, 0), [4]) == 10.0, "the total counts only jobs that start"
    assert average_jct(jobs, one_type(1, 0), [4]) == math.inf
    assert average_jct([], [], [0]) == 0.0


def test_queue_order_is_priority_then_time_at_base_on_the_fastest_type_then_index() -> None:
    jobs = [
        fj(100, 2, 2, speeds=BOTH),  # 50 s at base on V100
        fj(10, 1, 1, speeds=T4_ONLY),  # 20 s at base on its only type, the T4
        fj(500, 1, 1, priority=1, speeds=BOTH),  # priority first
        fj(20, 2, 2, speeds=BOTH),  # 10 s
        fj(10, 1, 1, speeds=V100_ONLY),  # 10 s
    ]
    assert queue_order(jobs) == [2, 3, 4, 1, 0]


@pytest.mark.parametrize(
    ("speeds", "best", "time_at_base"),
    [(BOTH, 1, 50.0), (T4_ONLY, 0, 100.0), ((0.7, 0.7), 0, 50 / 0.7), ((0.0, 0.0), -1, math.inf)],
    ids=["fastest", "only-allowed", "tie-lower-index", "none"],
)
def test_best_type_and_time_at_base(speeds: tuple[float, ...], best: int, time_at_base: float) -> None:
    spec = fj(100, 2, 4, speeds=speeds)
    assert spec.best_type == best
    assert spec.time_at_base == pytest.approx(time_at_base)


# (id, jobs, start, capacity, message)
BAD_INPUT: list[tuple[str, list[FluidJob], list[list[int]], list[int], str]] = [
    ("length-mismatch", EX1, one_type(1), [8], r"1 allocations for 2 jobs"),
    ("over-capacity", EX1, one_type(6, 6), [8], r"the initial allocation does not fit the capacity \[8\]"),
    ("over-capacity-of-one-type", [fj(10, 4, 4, speeds=BOTH)], [[4, 0]], [2, 8], r"does not fit the capacity"),
    ("on-an-excluded-type", [fj(10, 2, 2, speeds=T4_ONLY)], [[0, 2]], [4, 4], r"job 0 starts on type 1, which it may"),
    (
        "spread-onto-an-excluded-type",
        [fj(10, 2, 2, speeds=V100_ONLY)],
        [[1, 1]],
        [4, 4],
        r"job 0 starts on type 0, which it may not use",
    ),
]


@pytest.mark.parametrize(
    ("jobs", "start", "capacity", "message"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_fluid_refuses_bad_input(
    jobs: list[FluidJob], start: list[list[int]], capacity: list[int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        fluid_completion_times(jobs, start, capacity)
