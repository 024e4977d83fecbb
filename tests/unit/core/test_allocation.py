"""Two-phase allocation on typed GPUs and real servers: base gangs first-class (whole gang or nothing, on the
fastest type with room, making room from flexible workers, backfilling), then flexible workers and GPU types
scored in the fluid model. The poster's worked examples are tests here, now on one 8-GPU V100 server, and so is
the claim that its own-reduction knapsack value gets example 1 wrong.

Every scenario's plan also passes the independent checks of ``plan_checks.check_plan`` (it bin-packs onto the
servers' free GPUs, uses only allowed types, keeps running jobs' bases and types, and its fields agree).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from lyra.core import GpuCatalog, GpuType, InvalidClusterError, Server, TrainingJob, allocate_workers
from lyra.core.fluid import FluidJob, average_jct

from .builders import CATALOG, T4, V100, JobBuilder, cluster, job, loaned, reclaiming, snapshot, training
from .plan_checks import bases_that_fit, check_plan


def ex1() -> list[JobBuilder]:
    """Poster example 1: 8 GPUs; A w 2..6, 50 s at 6 (work 300); B w 2..6, 20 s at 6 (work 120)."""
    return [job("A").workers(2, 6).work(300), job("B").workers(2, 6).work(120)]


def ex2() -> list[JobBuilder]:
    """Poster example 2: 8 GPUs; A w 2..3, 100 s at 3 (work 300); B w 2..6 (work 120)."""
    return [job("A").workers(2, 3).work(300), job("B").workers(2, 6).work(120)]


@pytest.mark.parametrize(
    ("jobs", "expected", "average"),
    [(ex1(), {"A": 2, "B": 6}, 41.67), (ex2(), {"A": 3, "B": 5}, 62.0)],
    ids=["ex1", "ex2"],
)
def test_poster_examples_on_one_v100_server(jobs: list[JobBuilder], expected: dict[str, int], average: float) -> None:
    snap = snapshot([training("v0")], jobs)
    plan = allocate_workers(snap)
    check_plan(snap, plan)
    assert dict(plan.workers) == expected
    assert {n: dict(p) for n, p in plan.placement.items()} == {n: {"v0": w} for n, w in expected.items()}
    assert round(plan.fluid_average_jct, 2) == average
    assert plan.started == ("A", "B")
    assert (plan.gpus_used, plan.capacity_gpus) == (8, 8)


@pytest.mark.parametrize(
    ("current", "expected"),
    [({"A": 6, "B": 2}, {"A": 2, "B": 6}), ({"A": 4, "B": 4}, {"A": 2, "B": 6}), ({"A": 2, "B": 6}, {"A": 2, "B": 6})],
    ids=["from-A6-B2", "from-A4-B4", "already-best"],
)
def test_poster_example_1_from_running_allocations(current: dict[str, int], expected: dict[str, int]) -> None:
    snap = snapshot(
        [training("v0")],
        [
            job("A").workers(2, 6).work(300).on({"v0": current["A"]}),
            job("B").workers(2, 6).work(120).on({"v0": current["B"]}),
        ],
    )
    plan = allocate_workers(snap)
    check_plan(snap, plan)
    assert dict(plan.workers) == expected
    assert plan.started == ()
    assert plan.preempted == ()
    assert plan.resized == tuple(sorted(n for n in expected if expected[n] != current[n]))


def _poster_item_values(spec: TrainingJob) -> list[float]:
    """The poster's knapsack items of one job: value of k more workers = T(base) - T(base + k)."""
    base = spec.time_at(spec.min_workers)
    return [base - spec.time_at(spec.min_workers + k) for k in range(1, spec.max_workers - spec.min_workers + 1)]


def _poster_pick(jobs: list[TrainingJob], free: int) -> tuple[int, ...]:
    """The poster's knapsack over its own-reduction values, solved exactly by enumeration (ties: fewer extras)."""
    options = [range(spec.max_workers - spec.min_workers + 1) for spec in jobs]
    best: tuple[float, tuple[int, ...]] = (-1.0, ())
    for extras in itertools.product(*options):
        if sum(extras) > free:
            continue
        value = sum(_poster_item_values(spec)[k - 1] for spec, k in zip(jobs, extras, strict=True) if k)
        if value > best[0] + 1e-9:
            best = (value, extras)
    return tuple(spec.min_workers + k for spec, k in zip(jobs, best[1], strict=True))


def _fluid(jobs: list[TrainingJob]) -> list[FluidJob]:
    return [FluidJob(j.remaining_work, j.gpus_per_worker, j.min_workers, j.max_workers, (1.0,)) for j in jobs]


def test_poster_own_reduction_value_gets_example_1_wrong() -> None:
    """Solved exactly, the poster's knapsack picks (A5, B3) on ex1: average 48.33 s where (A2, B6) gives 41.67 s.
    On ex2 it is right: (A3, B5), 62 s."""
    jobs = [b.build() for b in ex1()]
    assert _poster_item_values(jobs[0]) == [50.0, 75.0, 90.0, 100.0], "the poster's table"
    assert _poster_item_values(jobs[1]) == [20.0, 30.0, 36.0, 40.0]
    picked = _poster_pick(jobs, 4)
    assert picked == (5, 3)
    theirs = average_jct(_fluid(jobs), [[w] for w in picked], [8])
    assert round(theirs, 2) == 48.33
    ours = allocate_workers(snapshot([training("v0")], jobs))
    assert ours.fluid_average_jct < theirs
    jobs2 = [b.build() for b in ex2()]
    assert _poster_pick(jobs2, 4) == (3, 5)
    assert round(average_jct(_fluid(jobs2), [[3], [5]], [8]), 2) == 62.0


# The issue's case: five queued jobs whose bases (9 GPUs) all fit on 11 GPUs. Every job must start.
ISSUE_JOBS = [
    job("j1").workers(2, 5).work(12),
    job("j2").workers(3, 8).work(104),
    job("j3").workers(2, 7).work(111),
    job("j4").workers(1, 3).work(318),
    job("j5").workers(1, 4).work(359),
]


@pytest.mark.parametrize(
    "servers",
    [
        [training("v0", 11)],
        [training("v0", 8), training("v1", 3)],
        [training("v0", 8), loaned("l0", 3)],
        [training("v0", 4), training("v1", 4), loaned("l0", 3)],
    ],
    ids=["one-11-gpu-server", "8-and-3-v100", "8-v100-and-3-t4", "4-4-v100-and-3-t4"],
)
def test_every_base_that_fits_starts(servers: list[Server]) -> None:
    snap = snapshot(servers, ISSUE_JOBS)
    plan = allocate_workers(snap)
    check_plan(snap, plan)
    assert plan.started == ("j1", "j2", "j3", "j4", "j5")
    assert dict(plan.queued) == {}
    assert plan.gpus_used == 11, "and the flexible workers fill the rest"


# Scenarios as data. (id, servers, jobs, expected workers, expected plan fields (placement compared as plain
# dicts), keyword arguments of allocate_workers)
Scenario = tuple[str, list[Server], list[JobBuilder], dict[str, int], dict[str, Any], dict[str, Any]]
SCENARIOS: list[Scenario] = [
    # ---- phase 1: admission order when bases compete for one 4-GPU V100 server
    (
        "phase-1-shortest-time-at-base-first",
        [training("v0", 4)],
        [job("long").workers(4).work(400), job("short").workers(4).work(40)],
        {"long": 0, "short": 4},
        {"started": ("short",)},
        {},
    ),
    (
        "phase-1-ties-break-by-submit-time",
        [training("v0", 2)],
        [job("a").workers(2).work(40).submitted(5), job("b").workers(2).work(40).submitted(1)],
        {"a": 0, "b": 2},
        {},
        {},
    ),
    (
        "phase-1-ties-break-by-name",
        [training("v0", 2)],
        [job("b").workers(2).work(40), job("a").workers(2).work(40)],
        {"a": 2, "b": 0},
        {},
        {},
    ),
    (
        "phase-1-priority-before-length",
        [training("v0", 4)],
        [job("low").workers(4).work(40), job("high").workers(4).work(4000).priority(1)],
        {"low": 0, "high": 4},
        {"started": ("high",)},
        {},
    ),
    (
        # a is measured at its fastest type (60 / 4 = 15 s on V100s), b at the T4s it is limited to (40 / 2 = 20 s):
        # a goes first, and takes the only room there is, on the T4s.
        "phase-1-time-at-base-on-the-fastest-type",
        [training("v0", 4), loaned("l0", 4)],
        [
            job("r").workers(4).work(1000).on({"v0": 4}),
            job("a").workers(4).work(60),
            job("b").workers(4).work(40).types(T4),
        ],
        {"r": 4, "a": 4, "b": 0},
        {"placement": {"r": {"v0": 4}, "a": {"l0": 4}}},
        {},
    ),
    (
        "base-on-the-fastest-type-with-room",
        [training("v0", 4), loaned("l0", 8)],
        [job("q").workers(2, 4).work(100)],
        {"q": 4},
        {"gpu_types": {"q": (V100,)}},
        {},
    ),
    (
        "base-that-only-fits-on-t4-starts-there",
        [training("v0", 4), loaned("l0", 8)],
        [job("r").workers(4).work(1000).on({"v0": 4}), job("q").workers(2, 4).work(100)],
        {"r": 4, "q": 4},
        {"placement": {"r": {"v0": 4}, "q": {"l0": 4}}, "started": ("q",)},
        {},
    ),
    (
        "base-makes-room-by-scaling-in-flexible-workers",
        [training("v0")],
        [job("r").workers(2, 8).work(10000).on({"v0": 8}), job("q").workers(4).work(100)],
        {"r": 4, "q": 4},
        {"started": ("q",), "resized": ("r",), "preempted": ()},
        {},
    ),
    (
        "room-is-made-from-the-job-with-most-to-spare",
        [training("v0")],
        [
            job("r").workers(1, 4).work(1000).on({"v0": 4}),
            job("s").workers(1, 4).work(1000).on({"v0": 3}),
            job("q").workers(4).work(100),
        ],
        {"r": 1, "s": 3, "q": 4},
        {"resized": ("r",)},
        {},
    ),
    (
        "room-for-multi-gpu-workers-on-one-server",
        [training("v0", 4), training("v1", 4)],
        [job("r").workers(1, 8).work(10000).on({"v0": 4, "v1": 4}), job("q").gpus(2).workers(2).work(100)],
        {"r": 4, "q": 2},
        {"placement": {"r": {"v1": 4}, "q": {"v0": 2}}},
        {},
    ),
    (
        # "big" (shortest) does not fit beside the running job; "small" behind it starts.
        "backfilling",
        [training("v0", 4)],
        [
            job("r").workers(2).work(200).on({"v0": 2}),
            job("big").workers(4).work(40),
            job("small").workers(2).work(30),
        ],
        {"r": 2, "big": 0, "small": 2},
        {"started": ("small",)},
        {},
    ),
    (
        "running-job-keeps-its-base-for-a-shorter-queued-one",
        [training("v0", 4)],
        [job("r").workers(2, 4).work(4000).on({"v0": 4}), job("q").workers(2).work(10)],
        {"r": 2, "q": 2},
        {"started": ("q",), "resized": ("r",), "preempted": ()},
        {},
    ),
    (
        "higher-priority-queued-job-does-not-preempt-a-running-base",
        [training("v0", 2)],
        [job("r").workers(2).work(4000).on({"v0": 2}), job("q").workers(2).work(10).priority(5)],
        {"r": 2, "q": 0},
        {
            "preempted": (),
            "started": (),
            "queued": {"q": "base of 2 workers x 1 GPU does not fit: V100 holds 0 now, at most 2"},
        },
        {},
    ),
    (
        "steady-cluster-is-not-rescaled",
        [training("v0", 3)],
        [job("r").workers(1, 6).work(300).on({"v0": 3})],
        {"r": 3},
        {"resized": (), "gpus_used": 3},
        {},
    ),
    (
        "running-job-grows-into-free-gpus",
        [training("v0")],
        [job("r").workers(1, 6).work(300).on({"v0": 3})],
        {"r": 6},
        {"resized": ("r",), "gpus_used": 6},
        {},
    ),
    # ---- gangs that do not fit, and why
    (
        "gang-larger-than-the-cluster-stays-queued",
        [training("v0"), loaned("l0", 4)],
        [job("g").gpus(2).workers(5, 6).work(100)],
        {"g": 0},
        {
            "queued": {
                "g": "base of 5 workers x 2 GPUs does not fit: V100 holds 4 now, at most 4; T4 holds 2 now, at most 2"
            },
            "gpus_used": 0,
        },
        {},
    ),
    (
        "three-6-gpu-servers-hold-three-4-gpu-workers",
        [training("a", 6), training("b", 6), training("c", 6)],
        [job("q").gpus(4).workers(1, 4).work(100)],
        {"q": 3},
        {"placement": {"q": {"a": 1, "b": 1, "c": 1}}},
        {},
    ),
    (
        "three-6-gpu-servers-do-not-hold-four",
        [training("a", 6), training("b", 6), training("c", 6)],
        [job("q").gpus(4).workers(4).work(100)],
        {"q": 0},
        {"queued": {"q": "base of 4 workers x 4 GPUs does not fit: V100 holds 3 now, at most 3"}},
        {},
    ),
    (
        "worker-larger-than-any-server",
        [training("v0"), loaned("l0", 4)],
        [job("g").gpus(16).work(100)],
        {"g": 0},
        {
            "queued": {
                "g": "base of 1 worker x 16 GPUs does not fit: V100 holds 0 now, at most 0; T4 holds 0 now, at most 0"
            }
        },
        {},
    ),
    (
        "no-type-it-may-use",
        [training("v0")],
        [job("g").types(T4).work(100)],
        {"g": 0},
        {"queued": {"g": "may use none of the GPU types training can use now (present: V100)"}},
        {},
    ),
    (
        "no-servers",
        [],
        [job("g").work(100)],
        {"g": 0},
        {"queued": {"g": "may use none of the GPU types training can use now (present: none)"}, "capacity_gpus": 0},
        {},
    ),
    # ---- GPU types a job may not use, and mixing
    (
        "restricted-to-v100-never-lands-on-t4",
        [training("v0", 4), loaned("l0", 8)],
        [job("r").workers(4).work(1000).on({"v0": 4}), job("q").workers(2, 4).work(100).types(V100)],
        {"r": 4, "q": 0},
        {"queued": {"q": "base of 2 workers x 1 GPU does not fit: V100 holds 0 now, at most 4 (may not use T4)"}},
        {},
    ),
    (
        "too-much-memory-for-t4-never-lands-on-t4",
        [training("v0", 4), loaned("l0", 8)],
        [job("r").workers(4).work(1000).on({"v0": 4}), job("q").workers(2, 4).work(100).memory(24)],
        {"r": 4, "q": 0},
        {"queued": {"q": "base of 2 workers x 1 GPU does not fit: V100 holds 0 now, at most 4 (may not use T4)"}},
        {},
    ),
    (
        "restricted-to-t4-never-lands-on-v100",
        [training("v0"), loaned("l0", 4)],
        [job("r").workers(4).work(1000).on({"l0": 4}), job("q").workers(2, 4).work(100).types(T4)],
        {"r": 4, "q": 0},
        {},
        {},
    ),
    (
        "non-mixing-job-never-spans-two-types",
        [training("v0", 2), loaned("l0", 2)],
        [job("q").workers(3, 4).work(100)],
        {"q": 0},
        {
            "queued": {
                "q": "base of 3 workers x 1 GPU does not fit: V100 holds 2 now, at most 2; T4 holds 2 now, at most 2"
            }
        },
        {},
    ),
    (
        # Its base of 3 needs both types. A job on several types does not grow (as in the fluid model), so the
        # fourth free GPU stays free although 4 x 0.5 would beat 3 x 0.5.
        "mixing-job-spans-two-types-when-its-base-needs-them",
        [training("v0", 2), loaned("l0", 2)],
        [job("q").workers(3, 4).work(100).mixing()],
        {"q": 3},
        {"gpu_types": {"q": (T4, V100)}, "placement": {"q": {"l0": 1, "v0": 2}}},
        {},
    ),
    (
        # 6 V100 workers run at 6; adding the 2 T4s would slow all 8 to 8 x 0.5 = 4.
        "mixing-job-does-not-grow-onto-a-slower-type-that-lowers-its-pace",
        [training("v0", 6), loaned("l0", 2)],
        [job("q").workers(1, 8).work(1000).mixing()],
        {"q": 6},
        {"gpu_types": {"q": (V100,)}},
        {},
    ),
    (
        # 2 V100 workers run at 2, 4 T4 workers alone at 2 too; the 6 together run at 6 x 0.5 = 3.
        "mixing-job-grows-onto-a-slower-type-that-raises-its-pace",
        [training("v0", 2), loaned("l0", 4)],
        [job("q").workers(1, 8).work(1000).mixing()],
        {"q": 6},
        {"gpu_types": {"q": (T4, V100)}},
        {},
    ),
    # ---- reclaiming servers: their workers count as gone
    (
        "running-job-below-its-base-on-a-reclaiming-server-is-preempted",
        [training("v0", 4), reclaiming("r0")],
        [job("r1").workers(4).work(400).on({"r0": 4}), job("r2").workers(4).work(40).on({"v0": 4})],
        {"r1": 0, "r2": 4},
        {"preempted": ("r1",), "started": (), "resized": ()},
        {},
    ),
    (
        "preempted-job-restarts-where-there-is-room",
        [training("v0"), loaned("l0"), reclaiming("r0")],
        [job("d").workers(4, 6).work(1000).on({"r0": 4, "l0": 2}), job("x").workers(8).work(100).on({"v0": 8})],
        {"d": 6, "x": 8},
        {"preempted": ("d",), "started": ("d",), "placement": {"d": {"l0": 6}, "x": {"v0": 8}}},
        {},
    ),
    (
        # d loses its 2 workers on r0 and keeps its base on l0, where it grows back to 4: same count, so it is
        # not reported resized (the placement says where the workers go).
        # The reclaim takes d's 2 workers on r0; the plan regrows it on l0: a resize of this plan.
        "job-above-its-base-after-the-reclaim-scales-in-and-grows-back",
        [training("v0", 2), loaned("l0", 4), reclaiming("r0")],
        [job("d").workers(2, 6).work(1000).on({"r0": 2, "l0": 2}), job("x").workers(2).work(1000).on({"v0": 2})],
        {"d": 4, "x": 2},
        {"preempted": (), "started": (), "resized": ("d",), "placement": {"d": {"l0": 4}, "x": {"v0": 2}}},
        {},
    ),
    (
        # The reclaim scales d in (its workers on r0 go); this plan keeps what survives: not its resize.
        "job-scaled-in-by-the-reclaim-keeps-what-survives",
        [training("v0", 2), loaned("l0", 2), reclaiming("r0")],
        [job("d").workers(2, 6).work(1000).on({"r0": 2, "l0": 2}), job("x").workers(2).work(1000).on({"v0": 2})],
        {"d": 2, "x": 2},
        {"preempted": (), "resized": (), "placement": {"d": {"l0": 2}, "x": {"v0": 2}}},
        {},
    ),
    # ---- GPUs held by work outside the decision
    (
        "held-gpus-are-not-used",
        [training("v0")],
        [job("q").workers(2, 8).work(1000)],
        {"q": 3},
        {"capacity_gpus": 3},
        {"held": {"v0": 5}},
    ),
    (
        "held-gpus-keep-a-base-out",
        [training("v0")],
        [job("q").workers(4, 8).work(1000)],
        {"q": 0},
        {"queued": {"q": "base of 4 workers x 1 GPU does not fit: V100 holds 3 now, at most 3"}},
        {"held": {"v0": 5}},
    ),
    ("no-jobs", [training("v0")], [], {}, {"gpus_used": 0, "capacity_gpus": 8}, {}),
]


def _plain(value: Any) -> Any:
    """Mappings of mappings as plain dicts, to compare with the expected values."""
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize(
    ("servers", "builders", "expected", "fields", "kwargs"),
    [c[1:] for c in SCENARIOS],
    ids=[c[0] for c in SCENARIOS],
)
def test_allocation_scenarios(
    servers: list[Server],
    builders: list[JobBuilder],
    expected: dict[str, int],
    fields: dict[str, Any],
    kwargs: dict[str, Any],
) -> None:
    snap = snapshot(servers, builders)
    plan = allocate_workers(snap, **kwargs)
    check_plan(snap, plan, kwargs.get("held"))
    assert dict(plan.workers) == expected
    for name, value in fields.items():
        got = _plain(getattr(plan, name))
        if name in ("gpu_types", "placement"):
            got = {n: got[n] for n in value}
        assert got == value, name
    assert bases_that_fit(snap, plan, kwargs.get("held")) == {}, "a queued base that fits should have started"


def test_a_lone_job_runs_where_it_finishes_first() -> None:
    """Core gap: one job (1..8 workers, 1000 worker-seconds) and two V100s or eight T4s. On the V100s it takes
    1000 / 2 = 500 s, on the T4s 1000 / (8 x 0.5) = 250 s: the allocator's own objective prefers the T4s, but
    phase 1 puts the base on the faster type, the search grows it there, and its type move keeps the width
    (2 T4 workers: slower), so it never finds the 8 T4s."""
    snap = snapshot([training("v0", 2), loaned("l0")], [job("q").workers(1, 8).work(1000)])
    plan = allocate_workers(snap)
    check_plan(snap, plan)
    assert plan.fluid_average_jct == pytest.approx(250.0), dict(plan.placement)
    assert _plain(plan.placement) == {"q": {"l0": 8}}


def test_a_base_that_fits_after_phase_2_moves_jobs_starts() -> None:
    """Core bug: base demand first-class is checked in phase 1 only. Phase 1 admits b (0.5 s at base) on v1's two
    V100s, then a (three 2-GPU workers; the V100s hold only two) on the T4s, so the T4-only t (20 s at base)
    finds no room and is queued. Phase 2 then swaps a and b (a to v0 + v1, b to the T4s), which frees 4 T4s, but
    t is never reconsidered: it stays queued with the reason "T4 holds 4 now", which contradicts itself."""
    snap = snapshot(
        [loaned("l0", 6), training("v0", 4), training("v1", 2)],
        [job("a").gpus(2).workers(3).work(10), job("b").workers(2).work(1), job("t").types(T4).work(10)],
    )
    plan = allocate_workers(snap)
    check_plan(snap, plan)
    assert plan.workers["t"] == 1, plan.queued.get("t")
    assert bases_that_fit(snap, plan) == {}


def test_priority_first_survives_phase_two() -> None:
    """Phase 1 admits higher priority first; phase 2 must not undo that."""
    snap = snapshot(
        [training("v0", 4)], [job("low").workers(4).work(40), job("high").workers(4).work(4000).priority(1)]
    )
    assert dict(allocate_workers(snap).workers) == {"low": 0, "high": 4}


def test_huge_max_workers_on_a_small_cluster_returns_quickly() -> None:
    snap = snapshot(
        [training("v0"), loaned("l0")],
        [job("q").workers(2, 100_000).work(1e6), job("p").workers(1, 100_000).work(1e5)],
    )
    started = time.perf_counter()
    plan = allocate_workers(snap)
    elapsed = time.perf_counter() - started
    check_plan(snap, plan)
    assert plan.started == ("p", "q")
    assert plan.evaluations < 200
    assert elapsed < 5.0, f"{elapsed:.2f} s"


def test_same_input_same_plan() -> None:
    servers = [training("v0", 4), training("v1", 4), loaned("l0", 3)]
    forward = snapshot(servers, ISSUE_JOBS)
    backward = snapshot(list(reversed(servers)), list(reversed(ISSUE_JOBS)))
    plan = allocate_workers(forward)
    assert allocate_workers(forward) == plan
    assert allocate_workers(backward) == plan


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"search_budget": -1}, r"search_budget must be an integer >= 0, got -1"),
        ({"search_budget": 1.5}, r"search_budget must be an integer >= 0, got 1.5"),
        ({"restart_cost_s": -1.0}, r"restart_cost_s must be in \[0, 1e9\] seconds, got -1.0"),
        ({"restart_cost_s": float("inf")}, r"restart_cost_s must be in \[0, 1e9\] seconds"),
        ({"restart_cost_s": 2e9}, r"restart_cost_s must be in \[0, 1e9\] seconds"),
        ({"held": {"zz": 1}}, r"held GPUs on unknown server 'zz'"),
        ({"held": {"v0": -1}}, r"held GPUs on v0 must be an integer >= 0, got -1"),
        ({"held": {"v0": 1.0}}, r"held GPUs on v0 must be an integer >= 0, got 1.0"),
        ({"held": {"v0": 9}}, r"server v0: 9 GPUs held, it has 8"),
        ({"held": {"v0": 7}}, r"the running jobs and held GPUs overbook a server"),
    ],
    ids=[
        "negative-budget",
        "float-budget",
        "negative-restart-cost",
        "infinite-restart-cost",
        "huge-restart-cost",
        "held-on-unknown-server",
        "negative-held",
        "float-held",
        "held-beyond-the-server",
        "held-overbooks-running-jobs",
    ],
)
def test_allocation_refuses_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    snap = snapshot([training("v0")], [job("r").workers(2).on({"v0": 2}), *ex1()])
    with pytest.raises(InvalidClusterError, match=message):
        allocate_workers(snap, **kwargs)


def test_zero_search_budget_still_gives_a_valid_plan() -> None:
    snap = snapshot([training("v0")], ex1())
    plan = allocate_workers(snap, search_budget=0)
    check_plan(snap, plan)
    assert plan.started == ("A", "B")


def test_plan_uses_the_catalogue_speeds() -> None:
    """The same job on the same servers: with the T4 described at 0.5 the V100s win; described at 2.0, the T4s."""
    servers = [training("v0", 4), loaned("l0", 4)]
    jobs = [job("q").workers(4).work(100)]
    assert allocate_workers(snapshot(servers, jobs)).gpu_types["q"] == (V100,)
    fast_t4 = cluster(*servers).jobs(*jobs).catalog(GpuCatalog.of(CATALOG[V100], GpuType(T4, 2.0, 16.0))).build()
    assert allocate_workers(fast_t4).gpu_types["q"] == (T4,)
    own = snapshot(servers, [job("q").workers(4).work(100).speed(T4, 3.0)])
    assert allocate_workers(own).gpu_types["q"] == (T4,), "a job's own measured speed wins over the catalogue's"
