"""Golden runs small enough to compute by hand, and the driver's shortcuts checked against the core."""

from __future__ import annotations

import random

import pytest

from lyra.core.allocation import allocate_workers
from lyra.core.model import TrainingJob
from lyra.sim.engine import Simulation, SimulationResult
from lyra.sim.load import LoadSeries
from lyra.sim.metrics import summarise
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import SCHEMES
from lyra.sim.workload import Window, build_workload
from tests.unit.sim.builders import flat_load, scenario, trace

THREE_JOBS = trace((0, 100, 8), (10, 50, 8), (20, 10, 4))


def run(
    scheme: str,
    jobs: object = THREE_JOBS,
    *,
    load: LoadSeries | None = None,
    setup: Scenario | None = None,
    length_s: float = 200.0,
) -> SimulationResult:
    chosen = setup or scenario()
    workload = build_workload(jobs, chosen, Window(0.0, length_s))  # type: ignore[arg-type]
    return Simulation(workload, chosen, SCHEMES[scheme], load or flat_load(0.0)).run()


def by_name(result: SimulationResult) -> dict[str, tuple[float, float, float]]:
    return {r.name: (r.first_start_s, r.finish_s, r.queue_s) for r in result.records}


def test_baseline_is_shortest_job_first_with_backfilling() -> None:
    result = run("baseline")
    # A runs 0-100; at 100, C (10 s) beats B (50 s); B cannot share the server with C, so it waits.
    assert by_name(result) == {"job-0": (0, 100, 0), "job-1": (110, 160, 100), "job-2": (100, 110, 80)}
    metrics = summarise(result)
    assert metrics.queue_mean_s == pytest.approx(60.0)
    assert metrics.queue_median_s == 80.0
    assert metrics.queue_p95_s == pytest.approx(98.0)  # 80 + 0.9 * (100 - 80)
    assert metrics.jct_mean_s == pytest.approx(340 / 3)
    assert metrics.jct_median_s == 100.0
    assert metrics.jct_p95_s == pytest.approx(145.0)
    # 1240 busy GPU-seconds over 200 s of 8 training GPUs; 24 GPUs in all, inference serving nothing.
    assert metrics.usage_training == pytest.approx(1240 / 1600)
    assert metrics.usage_overall == pytest.approx(1240 / 4800)
    assert metrics.preemption_ratio == 0.0


def test_fifo_blocks_behind_the_head_and_sjf_matches_baseline() -> None:
    assert by_name(run("fifo")) == {"job-0": (0, 100, 0), "job-1": (100, 150, 90), "job-2": (150, 160, 130)}
    assert by_name(run("sjf")) == by_name(run("baseline"))


def test_basic_runs_on_loaned_servers_at_their_speed() -> None:
    # No inference demand: both inference servers are lent. B does not fit on the training server and runs
    # on a loaned T4 server at half speed: 800 worker-seconds at rate 4.
    result = run("basic", trace((0, 1000, 8), (1, 100, 8)), length_s=2000)
    assert by_name(result)["job-1"] == (1, 201, 0)


def test_a_reclaim_preempts_and_the_job_restarts_from_its_checkpoint() -> None:
    rising = LoadSeries("<t>", 600.0, (0.0,) + (200.0,) * 143)  # from 600 s inference needs both servers
    result = run("basic", trace((0, 1000, 8), (1, 1000, 8)), load=rising, length_s=3000)
    records = {r.name: r for r in result.records}
    b = records["job-1"]
    # B ran on a loaned server from 1 s; at 600 s the reclaim preempts it; no checkpoint yet, so all is lost.
    # It restarts when A leaves the training server at 1000 s and runs 1000 s at full speed.
    assert (b.first_start_s, b.finish_s, b.queue_s, b.preemptions) == (1, 2000, 400, 1)
    metrics = summarise(result)
    assert metrics.preemption_ratio == 0.5
    assert metrics.reclaimed_servers == 2


def test_a_checkpoint_limits_the_lost_work() -> None:
    rising = LoadSeries("<t>", 600.0, (0.0,) + (200.0,) * 143)
    setup = scenario("preemption: {restart_cost_s: 0, resize_cost_s: 0, checkpoint_interval_s: 500}\n")
    result = run("basic", trace((0, 1000, 8), (1, 1000, 8)), load=rising, setup=setup, length_s=3000)
    b = {r.name: r for r in result.records}["job-1"]
    # Checkpoint at 501 s: 500 s at rate 4 kept (2000 of 8000 worker-seconds); 6000 left at rate 8 from 1000 s.
    assert b.finish_s == pytest.approx(1750)


def test_ideal_loses_nothing_on_preemption() -> None:
    rising = LoadSeries("<t>", 600.0, (0.0,) + (200.0,) * 143)
    setup = scenario("elasticity: {share: 0}\n")
    result = run("ideal", trace((0, 1000, 8), (1, 1000, 8)), load=rising, setup=setup, length_s=3000)
    b = {r.name: r for r in result.records}["job-1"]
    # 599 s at rate 4 kept: 8000 - 2396 = 5604 worker-seconds at rate 8 from 1000 s.
    assert b.finish_s == pytest.approx(1000 + 5604 / 8)


def test_lyra_scales_an_elastic_job_up_to_its_maximum_when_alone() -> None:
    busy_inference = flat_load(200.0)  # both inference servers serving: nothing to lend
    setup = scenario("elasticity: {share: 1, min_factor: 0.5, max_factor: 2}\n")
    result = run("lyra", trace((0, 100, 2)), load=busy_inference, setup=setup)
    record = result.records[0]
    assert (record.min_workers, record.max_workers) == (1, 4)
    assert (record.first_start_s, record.finish_s) == (0, 50)  # 200 worker-seconds on 4 workers


def test_lyra_scales_in_instead_of_preempting_on_reclaim() -> None:
    rising = LoadSeries("<t>", 600.0, (0.0,) + (200.0,) * 143)
    setup = scenario("elasticity: {share: 1, min_factor: 0.5, max_factor: 2}\n")
    # One elastic job of 8 GPUs: w_min 4, w_max 16. Its base sits on the training server, flexible workers on
    # a loaned one; the reclaim at 600 s scales it in, no preemption.
    result = run("lyra", trace((0, 4000, 8)), load=rising, setup=setup, length_s=8000)
    metrics = summarise(result)
    assert metrics.preemption_ratio == 0.0
    assert metrics.reclaimed_servers >= 1
    assert result.records[0].resizes >= 1


def test_usage_counts_only_the_window() -> None:
    result = run("baseline", trace((0, 400, 8)), length_s=100)
    assert summarise(result).usage_training == pytest.approx(1.0)
    assert result.records[0].finish_s == 400  # the job still finishes after the window


def test_the_everyone_fits_shortcut_agrees_with_the_allocator() -> None:
    """When free GPUs cover every offered job at its maximum the driver skips the call, assuming the allocator
    would start every queued job and grow every running one to its maximum. Check that on random instances."""
    rng = random.Random(7)
    for case in range(300):
        jobs = []
        for i in range(rng.randint(1, 6)):
            low = rng.randint(1, 3)
            high = low + rng.randint(0, 3)
            running = rng.random() < 0.5
            jobs.append(
                TrainingJob(
                    name=f"j{case}-{i}",
                    gpus_per_worker=1,
                    min_workers=low,
                    max_workers=high,
                    remaining_work=rng.uniform(1, 1000),
                    placement={"pool": rng.randint(low, high)} if running else {},
                )
            )
        capacity = sum(j.max_workers for j in jobs) + rng.randint(0, 4)
        plan = allocate_workers(jobs, capacity, search_budget=60, allow_deferral=True)
        assert dict(plan.workers) == {j.name: j.max_workers for j in jobs}, case
