"""The oracles themselves, on cases worked out by hand: an oracle that is wrong proves nothing."""

from __future__ import annotations

import math
import random

import pytest

from lyra.core import ClusterSnapshot, GpuCatalog, GpuType, LoanState, Pool, Server, TrainingJob

from .oracles import (
    OracleJob,
    PlanSpace,
    ReclaimProblem,
    brute_force_allocation,
    brute_force_plan,
    brute_force_reclaim,
    ilp_reclaim,
    oracle_average_jct,
    oracle_completion_times,
    packs,
    plan_problems,
    poster_allocation,
    poster_item_values,
    reclaim_cost,
)

CATALOG = GpuCatalog.of(GpuType("V100", 1.0, 32.0), GpuType("T4", 0.5, 16.0))


def fluid(name: str, work: float, low: int, high: int, **speeds: float) -> OracleJob:
    return OracleJob(name, work, 1, low, high, speeds or {"V100": 1.0})


@pytest.mark.parametrize(
    ("a", "start", "average"),
    [
        ((2, 6, 300.0), {"A": 2, "B": 6}, 41.67),
        ((2, 6, 300.0), {"A": 6, "B": 2}, 51.67),
        ((2, 6, 300.0), {"A": 4, "B": 4}, 45.0),
        ((2, 3, 300.0), {"A": 3, "B": 5}, 62.0),
        ((2, 3, 300.0), {"A": 2, "B": 6}, 63.33),
    ],
    ids=["ex1-A2B6", "ex1-A6B2", "ex1-A4B4", "ex2-A3B5", "ex2-A2B6"],
)
def test_the_poster_examples(a: tuple[int, int, float], start: dict[str, int], average: float) -> None:
    jobs = [fluid("A", a[2], a[0], a[1]), fluid("B", 120.0, 2, 6)]
    value = oracle_average_jct(jobs, {n: {"V100": w} for n, w in start.items()}, {"V100": 8})
    assert round(value, 2) == average


def test_a_t4_job_does_not_grow_onto_freed_v100s_and_a_queued_job_starts_on_its_fastest_type_with_room() -> None:
    # V100: 2 GPUs, T4: 4. s (V100, 2 workers, work 20) ends at 10; t runs on 2 T4s at 0.5 (pace 1, work 100):
    # it grows on the T4s only, to its maximum 4 when they are free. q (V100 and T4, base 2, work 40) waits
    # behind s: at 10 it takes the 2 freed V100s (its fastest type with room), ends at 10 + 40/2 = 30.
    jobs = [
        fluid("s", 20.0, 2, 2),
        OracleJob("t", 100.0, 1, 2, 4, {"T4": 0.5}),
        OracleJob("q", 40.0, 1, 2, 2, {"V100": 1.0, "T4": 0.5}),
    ]
    times = oracle_completion_times(jobs, {"s": {"V100": 2}, "t": {"T4": 2}}, {"V100": 2, "T4": 4})
    # t: 2 free T4s are there from the start but growth happens only at a completion: at 10 it has 90 left and
    # grows to 4 workers (pace 2): ends at 10 + 45 = 55.
    assert times == {"s": 10.0, "q": 30.0, "t": 55.0}


def test_a_job_that_may_use_no_type_never_starts() -> None:
    jobs = [fluid("a", 10.0, 1, 1), OracleJob("b", 10.0, 1, 1, 1, {})]
    assert oracle_completion_times(jobs, {"a": {"V100": 1}}, {"V100": 1})["b"] == math.inf


def servers(*sizes: int, gpu_type: str = "V100") -> tuple[Server, ...]:
    return tuple(Server(f"{gpu_type}-{i}", Pool.TRAINING, gpu_type, n) for i, n in enumerate(sizes))


def queued(name: str, gpw: int, low: int, high: int, **fields: object) -> TrainingJob:
    return TrainingJob(name, gpw, low, high, 100.0, **fields)  # type: ignore[arg-type]


def test_three_6_gpu_servers_hold_three_4_gpu_workers_not_four() -> None:
    snapshot = ClusterSnapshot(servers(6, 6, 6), (queued("g", 4, 3, 4),), CATALOG)
    assert packs(snapshot, {"g": ("V100", 3)})
    assert not packs(snapshot, {"g": ("V100", 4)})


def test_packing_mixes_sizes_exactly() -> None:
    # Two 8-GPU servers: 3 x 4 + 2 x 2 = 16 fits (4+4 | 4+2+2); 3 x 4 + 3 x 2 = 18 does not.
    jobs = (queued("a", 4, 3, 3), queued("b", 2, 2, 3))
    snapshot = ClusterSnapshot(servers(8, 8), jobs, CATALOG)
    assert packs(snapshot, {"a": ("V100", 3), "b": ("V100", 2)})
    assert not packs(snapshot, {"a": ("V100", 3), "b": ("V100", 3)})
    # 6 + 2: a 4-GPU worker and two 2-GPU ones fit; two 4-GPU workers do not.
    snapshot = ClusterSnapshot(servers(6, 2), jobs, CATALOG)
    assert packs(snapshot, {"a": ("V100", 1), "b": ("V100", 2)})
    assert not packs(snapshot, {"a": ("V100", 2)})


def test_plan_problems_names_every_fault() -> None:
    catalog_servers = servers(4) + servers(4, gpu_type="T4")
    jobs = (queued("a", 2, 1, 2, gpu_types=frozenset({"V100"})), queued("b", 1, 2, 4))
    snapshot = ClusterSnapshot(catalog_servers, jobs, CATALOG)
    assert plan_problems(snapshot, {"a": 2, "b": 2}, {"a": {"V100-0": 2}, "b": {"T4-0": 2}}) == []
    problems = plan_problems(snapshot, {"a": 2, "b": 3}, {"a": {"T4-0": 1, "V100-0": 2}, "b": {"T4-0": 2, "V100-0": 1}})
    assert any("placed 3 workers, planned 2" in p for p in problems)
    assert any("a: server T4-0 is a T4" in p for p in problems)
    assert any("b: on several GPU types" in p for p in problems)
    assert any("V100-0: 5 GPUs used" in p for p in problems)


def test_brute_force_finds_the_poster_optimum() -> None:
    jobs = (queued("A", 1, 2, 6), queued("B", 1, 2, 6))
    jobs = (
        TrainingJob("A", 1, 2, 6, 300.0),
        TrainingJob("B", 1, 2, 6, 120.0),
    )
    snapshot = ClusterSnapshot(servers(8), jobs, CATALOG)
    value, vector = brute_force_allocation(snapshot, all_start=True)
    assert round(value, 2) == 41.67
    assert vector == {"A": ("V100", 2), "B": ("V100", 6)}


def test_brute_force_keeps_a_base_that_fits_started() -> None:
    # One 4-GPU server; a (base 2, work 1000) and b (base 2, work 10). Starting only b at 4 workers would be best
    # for the average in the fluid model if a may wait, but a's base fits next to b's, so a must start.
    jobs = (TrainingJob("a", 1, 2, 4, 1000.0), TrainingJob("b", 1, 2, 4, 10.0))
    snapshot = ClusterSnapshot(servers(4), jobs, CATALOG)
    _, vector = brute_force_allocation(snapshot, all_start=False)
    assert vector["a"][0] is not None
    assert vector["b"][0] is not None


def test_a_running_job_keeps_its_base_where_it_runs_any_way_it_can() -> None:
    # Two 4-GPU servers; r runs 2 workers on each. n has one 4-GPU worker: it needs a whole server. With r's base
    # at 2, r may keep both base workers on one server (and its others anywhere), freeing the other: n fits. With a
    # base of 3, r keeps workers on both servers: n does not fit, though the counts (3 + 4 <= 8) would.
    for base, fits in ((2, True), (3, False)):
        r = TrainingJob("r", 1, base, 4, 100.0, placement={"V100-0": 2, "V100-1": 2})
        space = PlanSpace(ClusterSnapshot(servers(4, 4), (r, queued("n", 4, 1, 1)), CATALOG))
        assert space.packs({"r": ("V100", base), "n": ("V100", 1)}) is fits
    # Held GPUs are outside the decision: one held on each server and r's base (a worker on each) leave 2 GPUs per
    # server, so n's 4-GPU worker does not fit.
    r = TrainingJob("r", 1, 2, 4, 100.0, placement={"V100-0": 1, "V100-1": 1})
    space = PlanSpace(ClusterSnapshot(servers(4, 4), (r, queued("n", 4, 1, 1)), CATALOG), {"V100-0": 1, "V100-1": 1})
    assert not space.packs({"r": ("V100", 2), "n": ("V100", 1)})


def test_a_migration_is_charged_its_restart_at_the_new_pace() -> None:
    # r runs 2 workers on T4s (speed 0.5, work 100: 100 s). Moved to 2 V100s with a 10 s restart: (100 + 2 x 10) / 2
    # = 60 s. It may only move to a faster type, and only with a restart cost; stopping it is out of the space.
    snapshot = ClusterSnapshot(
        servers(2) + servers(2, gpu_type="T4"), (TrainingJob("r", 1, 2, 2, 100.0, placement={"T4-0": 2}),), CATALOG
    )
    space = PlanSpace(snapshot, restart_cost_s=10.0)
    assert space.average_jct({"r": ("T4", 2)}) == 100.0
    assert space.average_jct({"r": ("V100", 2)}) == 60.0
    assert brute_force_plan(snapshot, restart_cost_s=10.0) == (60.0, {"r": ("V100", 2)})
    assert brute_force_plan(snapshot) == (100.0, {"r": ("T4", 2)})
    assert space.problems({"r": {"V100-0": 2}}) == []
    assert space.problems({}) == ["r was stopped"]
    assert PlanSpace(snapshot).problems({"r": {"V100-0": 2}}) == ["r moved from T4 to V100"]


def test_brute_force_over_one_admitted_set() -> None:
    # One 4-GPU V100 server. s (w 4..4, work 40: 10 s) and l (w 2..2, work 200: 100 s) cannot both start. Admitting
    # s: s ends at 10, then l runs 100 s: mean 60. Admitting l: l ends at 100 (s's base never fits beside it), then s
    # runs 10 s: mean 105. Either is first-class (the other's base does not fit), so the optimum over sets is 60.
    jobs = (TrainingJob("s", 1, 4, 4, 40.0), TrainingJob("l", 1, 2, 2, 200.0))
    snapshot = ClusterSnapshot(servers(4), jobs, CATALOG)
    assert brute_force_plan(snapshot, admitted=["l"]) == (105.0, {"s": (None, 0), "l": ("V100", 2)})
    assert brute_force_plan(snapshot, admitted=["s"])[0] == 60.0
    assert brute_force_plan(snapshot)[0] == 60.0


def test_poster_knapsack() -> None:
    ex1 = [TrainingJob("A", 1, 2, 6, 300.0), TrainingJob("B", 1, 2, 6, 120.0)]
    assert poster_item_values(ex1[0]) == [50.0, 75.0, 90.0, 100.0]
    assert poster_item_values(ex1[1]) == [20.0, 30.0, 36.0, 40.0]
    assert poster_allocation(ex1, 8) == [5, 3]
    ex2 = [TrainingJob("A", 1, 2, 3, 300.0), TrainingJob("B", 1, 2, 6, 120.0)]
    assert poster_allocation(ex2, 8) == [3, 5]


def loaned(name: str) -> Server:
    return Server(name, Pool.INFERENCE, "T4", 8, LoanState.LOANED)


def test_the_poster_reclaim_layout() -> None:
    # s1 = {a, b}, s2 = {a, c}, s3 = {c, p}, s4 = {p}, every job inelastic with one worker per server listed.
    placements = {"a": ("s1", "s2"), "b": ("s1",), "c": ("s2", "s3"), "p": ("s3", "s4")}
    jobs = tuple(
        TrainingJob(n, 1, len(hosts), len(hosts), 100.0, placement=dict.fromkeys(hosts, 1))
        for n, hosts in placements.items()
    )
    snapshot = ClusterSnapshot(tuple(loaned(f"s{i}") for i in range(1, 5)), jobs, CATALOG)
    problem = ReclaimProblem.of(snapshot)
    assert brute_force_reclaim(problem, 2)[0] == 2
    assert ilp_reclaim(problem, 2)[0] == 2
    assert reclaim_cost(problem, ("s3", "s4"))[0] == 2
    assert reclaim_cost(problem, ("s1", "s2"))[0] == 3


def test_a_doomed_job_is_not_a_new_preemption() -> None:
    # d: base 3, one worker on loaned l0 and two on reclaiming r0: it already cannot keep its base.
    servers_ = (loaned("l0"), loaned("l1"), Server("r0", Pool.INFERENCE, "T4", 8, LoanState.RECLAIMING))
    jobs = (
        TrainingJob("d", 1, 3, 3, 100.0, placement={"l0": 1, "r0": 2}, seconds_since_checkpoint=60.0),
        TrainingJob("e", 1, 1, 1, 100.0, placement={"l1": 1}),
    )
    problem = ReclaimProblem.of(ClusterSnapshot(servers_, jobs, CATALOG))
    assert reclaim_cost(problem, ("l0",)) == (0, 0.0, 0)
    assert brute_force_reclaim(problem, 1) == (0, 0.0, 0)
    assert ilp_reclaim(problem, 1) == (0, 0.0, 0)


def test_ilp_and_brute_force_agree_on_random_instances() -> None:
    rng = random.Random(7)
    for case in range(300):
        loaned_servers = [loaned(f"l{i}") for i in range(rng.randint(2, 7))]
        reclaiming = [Server(f"r{i}", Pool.INFERENCE, "T4", 8, LoanState.RECLAIMING) for i in range(rng.randint(0, 2))]
        hosts = loaned_servers + reclaiming
        free = {s.name: 8 for s in hosts}
        jobs = []
        for j in range(rng.randint(1, 8)):
            placement: dict[str, int] = {}
            for s in rng.sample(hosts, rng.randint(1, min(3, len(hosts)))):
                n = min(rng.randint(1, 3), free[s.name])
                if n:
                    placement[s.name] = n
                    free[s.name] -= n
            workers = sum(placement.values())
            if not workers:
                continue
            low = rng.randint(1, workers)
            jobs.append(
                TrainingJob(
                    f"j{j}", 1, low, workers + rng.randint(0, 2), 100.0, placement=placement,
                    seconds_since_checkpoint=float(rng.choice([0, 60, 600])),
                )
            )  # fmt: skip
        problem = ReclaimProblem.of(ClusterSnapshot(tuple(hosts), tuple(jobs), CATALOG))
        count = rng.randint(1, len(loaned_servers))
        brute, exact = brute_force_reclaim(problem, count), ilp_reclaim(problem, count)
        assert brute[0] == exact[0], case
        assert brute[1] == pytest.approx(exact[1], abs=1e-6), case
        assert brute[2] == exact[2], case
