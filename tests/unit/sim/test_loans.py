"""Lending and reclaiming in time: a reclaim waits for the workers' grace and a drain while inference is short,
lending waits for the lend delay (the loan cycle's hysteresis), reclaiming never does. Golden runs on the tiny world
(:data:`tests.unit.sim.builders.TINY`: 100 req/s per inference server, T4 speed 0.4)."""

from __future__ import annotations

from typing import Any

import pytest

from lyra.sim.engine import SimulationResult
from lyra.sim.metrics import summarise
from lyra.sim.scenario import Scenario
from lyra.sim.traces import Trace
from tests.unit.sim.builders import scenario, simulate, stepped_load, trace

#: No inference demand for the first 600 s, then both servers (200 req/s).
RISING = stepped_load(0, 200)
#: Grace 60 s, drain 30 s: a reclaimed server that hosted training serves 90 s after the reclaim.
SLOW_RECLAIM = scenario("preemption: {checkpoint_grace_s: 60}\nloaning: {drain_s: 30}")
#: A holds the V100s for 1000 s; B (8 GPUs x 1000 s = 8000) runs on the lent T4 server infer-0000 from 1 s at
#: pace 8 x 0.4 = 3.2.
B_ON_LOAN = trace((0, 1000, 8), (1, 1000, 8))


def records(result: SimulationResult) -> dict[str, Any]:
    return {r.name: r for r in result.records}


def run(scheme: str, jobs: Trace = B_ON_LOAN, setup: Scenario = SLOW_RECLAIM, **kwargs: Any) -> SimulationResult:
    return simulate(scheme, jobs, setup=setup, load=kwargs.pop("load", RISING), length_s=3000, **kwargs)


# -------------------------------------------------------------------------------------------- reclaim timing


def test_a_server_with_training_on_it_serves_after_grace_and_drain() -> None:
    result = run("basic")
    # At 600 s both lent servers are called back. infer-0001 is empty: it serves at once. infer-0000 hosts B: it
    # serves at 600 + 60 + 30 = 690 s. Demand is 2 servers from 600 s, so 1 server is missing for 90 s.
    assert result.short_server_s == pytest.approx(90)
    assert result.structural_short_server_s == 0
    assert result.demand_server_s == pytest.approx(2 * (3000 - 600))
    metrics = summarise(result)
    assert metrics.inference_short_server_s == pytest.approx(90)
    assert metrics.reclaim_wait_server_s == pytest.approx(90)
    assert metrics.reclaim_wait_share == pytest.approx(90 / 4800)
    assert (metrics.reclaims, metrics.reclaimed_servers) == (1, 2)


def test_idle_loaned_servers_come_back_at_once() -> None:
    # Only A, on the V100s: the lent servers host nothing and serve as soon as they are called back.
    result = run("basic", trace((0, 1000, 8)))
    assert summarise(result).reclaimed_servers == 2
    assert result.short_server_s == 0


def test_demand_beyond_the_whole_pool_is_not_a_reclaim_wait() -> None:
    # 300 req/s from 600 s: 3 servers for a pool of 2. Missing: 2 servers while infer-0000 drains (600-690 s),
    # then 1 (the pool is too small) until the window ends: 2 x 90 + 1 x 2310 = 2490 server-seconds, of which
    # 1 x 2400 exceed the pool at any time. The reclaim's own share is still one server for 90 s.
    result = run("basic", load=stepped_load(0, 300))
    metrics = summarise(result)
    assert metrics.inference_short_server_s == pytest.approx(2490)
    assert result.structural_short_server_s == pytest.approx(2400)
    assert metrics.reclaim_wait_server_s == pytest.approx(90)
    assert metrics.reclaim_wait_share == pytest.approx(90 / (3 * 2400))


def test_baseline_never_waits_for_a_reclaim() -> None:
    metrics = summarise(run("baseline"))
    assert (metrics.inference_short_server_s, metrics.reclaim_wait_server_s, metrics.reclaim_wait_share) == (0, 0, 0)
    assert metrics.reclaims == 0


def test_lyra_exact_free_skips_the_grace_but_not_the_drain() -> None:
    result = run("lyra-exact-free")
    # Free preemption: no grace; the server still drains 30 s: one server short for 30 s.
    assert result.short_server_s == pytest.approx(30)


def test_a_preempted_job_re_enters_the_queue_after_its_grace() -> None:
    # A now ends at 630 s. B, preempted at 600 s, is leaving until 660 s: the free V100s wait for it, and it runs
    # 8000 (nothing saved) at pace 8 from 660 s. With no grace it would start at 630 s, as A leaves.
    jobs = trace((0, 630, 8), (1, 1000, 8))
    b = records(run("basic", jobs))["job-1"]
    assert (b.preemptions, b.finish_s) == (1, pytest.approx(660 + 1000))
    assert b.queue_s == 60  # B waits from its preemption at 600 s: its grace counts as queuing (no progress)
    no_grace = scenario("preemption: {checkpoint_grace_s: 0}\nloaning: {drain_s: 30}")
    b = records(run("basic", jobs, setup=no_grace))["job-1"]
    assert (b.finish_s, b.queue_s) == (pytest.approx(630 + 1000), pytest.approx(30))


def test_a_job_that_saves_on_the_signal_loses_no_work() -> None:
    setup = scenario("preemption: {checkpoint_grace_s: 60, saves_on_signal: true}\nloaning: {drain_s: 30}")
    b = records(run("basic", trace((0, 630, 8), (1, 1000, 8)), setup=setup))["job-1"]
    # 599 s x 3.2 = 1916.8 saved at 600 s; 6083.2 at pace 8 from 660 s (after the grace): 760.4 s.
    assert b.finish_s == pytest.approx(660 + 760.4)


def test_a_server_that_lyra_scales_in_also_waits_for_grace_and_drain() -> None:
    # Two V100 servers: A (16 GPUs, w_min 16: nothing to scale in) takes them all; B (8 GPUs x 2000 s = 16000, w_min
    # 8, w_max 16) runs on both T4 servers with 16 workers. At 600 s inference needs one server: B is scaled in to 8
    # (no preemption) and the returned server serves at 690 s: one server short for 90 s.
    setup = scenario(
        "training: {servers: 2}\nelasticity: {share: 1, min_factor: 1}\nscheduler: {migration: false}\n"
        "preemption: {checkpoint_grace_s: 60}\nloaning: {drain_s: 30}"
    )
    result = run("lyra", trace((0, 20_000, 16), (1, 2000, 8)), setup=setup, load=stepped_load(0, 100))
    b = records(result)["job-1"]
    assert (b.preemptions, b.resizes) == (0, 1)
    assert result.short_server_s == pytest.approx(90)


# ---------------------------------------------------------------------------------------------- hysteresis

#: Inference needs both servers for the first 600 s, then none.
DIP = stepped_load(200, 0)


def test_a_server_freed_by_a_dip_is_lent_once_idle_for_the_lend_delay() -> None:
    # With a 1800 s lend delay, the servers idle since 600 s are lent at 600 + 1800 = 2400 s (a load step). B (8
    # GPUs) waits for them and runs 8000 at pace 3.2: 2500 s.
    setup = scenario("loaning: {lend_hysteresis_s: 1800}")
    result = simulate("basic", trace((0, 10_000, 8), (1, 1000, 8)), setup=setup, load=DIP, length_s=6000)
    b = records(result)["job-1"]
    assert (b.first_start_s, b.finish_s) == (2400, 4900)


def test_lending_is_decided_at_load_steps() -> None:
    # A 1000 s lend delay: the servers are idle for it at 1600 s, and the next load step is at 1800 s.
    setup = scenario("loaning: {lend_hysteresis_s: 1000}")
    result = simulate("basic", trace((0, 10_000, 8), (1, 1000, 8)), setup=setup, load=DIP, length_s=6000)
    assert records(result)["job-1"].first_start_s == 1800


def test_each_server_waits_for_its_own_lend_delay() -> None:
    # Demand 2, 1, then 0 servers (steps at 0, 600, 1200 s); a 1800 s lend delay. infer-0000 is idle from 600 s
    # (infer-0001 is kept: the reverse of the lend order) and lent at 2400 s (B starts); infer-0001 is idle from
    # 1200 s and lent at 3000 s (C starts).
    setup = scenario("loaning: {lend_hysteresis_s: 1800}")
    jobs = trace((0, 10_000, 8), (1, 10_000, 8), (2, 10_000, 8))
    result = simulate("basic", jobs, setup=setup, load=stepped_load(200, 100, 0), length_s=6000)
    started = {r.name: r.first_start_s for r in result.records}
    assert started == {"job-0": 0, "job-1": 2400, "job-2": 3000}


def test_reclaims_never_wait_for_the_hysteresis() -> None:
    setup = scenario("loaning: {lend_hysteresis_s: 1800}")
    result = simulate("basic", B_ON_LOAN, setup=setup, load=RISING, length_s=3000)
    b = records(result)["job-1"]
    # Lent at 0 s (the window opens on a settled pool), called back at 600 s as demand rises.
    assert (b.first_start_s, b.preemptions) == (1, 1)
    assert result.short_server_s == 0  # no grace, no drain: back at once
