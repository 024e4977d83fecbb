"""Golden runs of the event loop small enough to compute by hand: admission, pace, memory, scaling and the costs
of a preemption. Every run is on the tiny world of :data:`tests.unit.sim.builders.TINY` (V100 speed 1.0, T4 speed
0.4, one 8-GPU V100 server, two 8-GPU T4 servers lent when inference needs none)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from lyra.core.model import TrainingJob
from lyra.sim.engine import Simulation, SimulationResult
from lyra.sim.jobs import SimJob
from lyra.sim.metrics import summarise
from lyra.sim.schemes import SCHEMES
from lyra.sim.workload import Window, build_workload
from tests.unit.sim.builders import flat_load, scenario, simulate, stepped_load, trace

#: A (100 s on 8 GPUs), B (50 s on 8) and C (10 s on 4).
THREE_JOBS = trace((0, 100, 8), (10, 50, 8), (20, 10, 4))


def by_name(result: SimulationResult) -> dict[str, tuple[float, float, float]]:
    return {r.name: (r.first_start_s, r.finish_s, r.queue_s) for r in result.records}


def records(result: SimulationResult) -> dict[str, Any]:
    return {r.name: r for r in result.records}


# ------------------------------------------------------------------------------------------------ admission


def test_baseline_is_shortest_job_first_with_backfilling() -> None:
    result = simulate("baseline", THREE_JOBS)
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
    assert by_name(simulate("fifo", THREE_JOBS)) == {
        "job-0": (0, 100, 0),
        "job-1": (100, 150, 90),
        "job-2": (150, 160, 130),
    }
    assert by_name(simulate("sjf", THREE_JOBS)) == by_name(simulate("baseline", THREE_JOBS))


def test_decisions_are_batched_every_decision_interval() -> None:
    result = simulate("baseline", THREE_JOBS, setup=scenario("scheduler: {decision_interval_s: 30}"))
    # Decisions at 0 (nothing queued yet), then at most every 30 s: at 30 all three wait and C (shortest) starts
    # (30-40); at 40 the next decision is due at 60: B starts (60-110); at 110 A starts (110-210).
    assert by_name(result) == {"job-0": (110, 210, 110), "job-1": (60, 110, 50), "job-2": (30, 40, 10)}


# ------------------------------------------------------------------------------------------------------ pace


def test_an_inelastic_job_that_only_fits_on_t4_runs_at_the_t4_pace() -> None:
    # A holds the V100 server; B (100 s on 8 GPUs: 800 reference worker-seconds) starts at 1 s on a lent T4
    # server at pace 8 x 0.4 = 3.2 and takes 800 / 3.2 = 250 s.
    result = simulate("basic", trace((0, 1000, 8), (1, 100, 8)), length_s=2000)
    assert by_name(result)["job-1"] == (1, 251, 0)
    metrics = summarise(result)
    # B's 8 GPUs for 250 s over the two lent servers' 16 GPUs for the 2000 s window.
    assert metrics.loaned_usage == pytest.approx(8 * 250 / (16 * 2000))


def test_a_job_mixing_gpu_types_runs_at_its_slowest_workers_pace() -> None:
    # Every job elastic and mixing; T4 speed 0.9. A (2 GPUs: w_max 4) takes 4 of the 8 V100s. B (8 GPUs x 1000 s =
    # 8000; w_min 4, w_max 8, the training cluster's size) starts at 1 s with its base on the 4 free V100s and
    # grows onto 4 T4s, since 8 workers at 0.9 (7.2) beat 4 at 1.0. Its pace is 8 x 0.9 = 7.2, not 4 + 4 x 0.9.
    setup = scenario("elasticity: {share: 1, mixing_share: 1}\nspeed: {T4: 0.9}\nscheduler: {migration: false}")
    result = simulate("lyra", trace((0, 10_000, 2), (1, 1000, 8)), setup=setup, length_s=8000)
    b = records(result)["job-1"]
    assert b.finish_s == pytest.approx(1 + 8000 / 7.2)


@pytest.mark.parametrize("workers", [1, 2, 5, 16])
@pytest.mark.parametrize("speed", [0.4, 1.0])
@pytest.mark.parametrize("overhead", [0.0, 0.05, 1.0])
def test_the_engines_pace_is_the_cores(workers: int, speed: float, overhead: float) -> None:
    setup = scenario(f"scaling: {{overhead: {overhead}}}")
    workload = build_workload(trace((0, 10, 1)), setup, Window(0.0, 10.0))
    sim = Simulation(workload, setup, SCHEMES["lyra"], flat_load(0.0))
    core = TrainingJob("j", 1, 1, 16, 1.0, scaling_overhead=overhead)
    assert sim.pace(sim.jobs[0], workers, speed) == pytest.approx(core.pace(workers, speed))


@pytest.mark.parametrize("scheme", ["basic", "lyra"])
def test_a_job_whose_memory_does_not_fit_a_t4_never_runs_on_one(scheme: str) -> None:
    # Both T4 servers are lent (no inference demand) and idle, yet B (8 GPUs, 100 s) waits for A's V100s.
    setup = scenario("memory: {inference_fit_share: 0}")
    result = simulate(scheme, trace((0, 1000, 8), (1, 100, 8)), setup=setup, length_s=2000)
    assert by_name(result)["job-1"] == (1000, 1100, 999)
    assert result.busy_loaned_gpu_s == 0.0
    assert result.loaned_gpu_s == 16 * 2000  # lent all along, never used


# --------------------------------------------------------------------------------------------------- scaling


def test_at_its_trace_width_a_job_takes_its_trace_duration_whatever_the_overhead() -> None:
    # On 2-GPU servers 4 GPUs are w = 2 workers of 2. Work = d w / (1 + o (w - 1)) = 100 x 2 / 1.1; on 2 workers of
    # V100s at pace 2 / 1.1 that is exactly 100 s.
    setup = scenario(
        "scaling: {overhead: 0.1}\ntraining: {servers: 4, gpus_per_server: 2}\ninference: {gpus_per_server: 2}"
    )
    workload = build_workload(trace((0, 100, 4)), setup, Window(0.0, 200.0))
    assert (workload.jobs[0].gpus_per_worker, workload.jobs[0].work) == (2, pytest.approx(200 / 1.1))
    assert by_name(simulate("baseline", trace((0, 100, 4)), setup=setup))["job-0"] == (0, 100, 0)


def test_more_workers_are_faster_but_sublinearly() -> None:
    # On 2-GPU servers 4 GPUs are 2 workers of 2; elastic: w_max = 4. Pace 4 / (1 + 0.1 x 3) = 4 / 1.3; work
    # 200 / 1.1: 200 x 1.3 / (1.1 x 4) = 59.09 s, between linear scaling's 50 s and the trace's 100 s.
    setup = scenario(
        "scaling: {overhead: 0.1}\nelasticity: {share: 1}\ntraining: {servers: 4, gpus_per_server: 2}\n"
        "inference: {gpus_per_server: 2}"
    )
    record = simulate("lyra", trace((0, 100, 4)), setup=setup).records[0]
    assert record.max_workers == 4
    assert record.finish_s == pytest.approx(200 * 1.3 / (1.1 * 4))
    assert 50 < record.finish_s < 100


# ------------------------------------------------------------------------------------------ preemption costs

#: From 600 s inference needs both T4 servers (200 req/s at 100 req/s per server).
RISING = stepped_load(0, 200)
#: A holds the V100s for 1000 s; B (8 GPUs x 1000 s = 8000) runs on a lent T4 server from 1 s at pace 3.2.
B_ON_LOAN = trace((0, 1000, 8), (1, 1000, 8))


def test_a_reclaim_preempts_and_the_job_restarts_from_scratch_without_a_checkpoint() -> None:
    result = simulate("basic", B_ON_LOAN, load=RISING, length_s=3000)
    b = records(result)["job-1"]
    # The reclaim at 600 s preempts B (no checkpoint in 599 s: all lost); it waits from 600 s until A leaves the
    # V100s at 1000 s and runs 8000 at pace 8.
    assert (b.first_start_s, b.finish_s, b.queue_s, b.preemptions) == (1, 2000, 400, 1)
    metrics = summarise(result)
    assert metrics.preemption_ratio == 0.5
    assert metrics.reclaimed_servers == 2


def test_a_checkpoint_limits_the_lost_work() -> None:
    setup = scenario("preemption: {checkpoint_interval_s: 500}")
    b = records(simulate("basic", B_ON_LOAN, load=RISING, setup=setup, length_s=3000))["job-1"]
    # Checkpoint at 501 s: 500 s x 3.2 = 1600 kept, the 99 s after it lost; 6400 left at pace 8 from 1000 s.
    assert b.finish_s == pytest.approx(1000 + 6400 / 8)
    # The 99 s lost ran on 8 GPUs.
    assert b.lost_gpu_s == pytest.approx(99 * 8)


def test_the_work_lost_is_summed_in_gpu_hours() -> None:
    result = simulate("basic", B_ON_LOAN, load=RISING, length_s=3000)
    # No checkpoint: B's 599 s on 8 T4s are lost when inference takes the servers back at 600 s.
    assert records(result)["job-1"].lost_gpu_s == pytest.approx(599 * 8)
    assert summarise(result).work_lost_gpu_h == pytest.approx(599 * 8 / 3600)
    free = simulate("lyra-exact-free", B_ON_LOAN, load=RISING, length_s=3000)
    assert summarise(free).work_lost_gpu_h == 0.0


def test_a_resize_is_a_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    lost: list[tuple[str, float, float]] = []
    preempt = Simulation.preempt

    def spy(sim: Simulation, job: SimJob, t: float) -> None:
        done = job.remaining - job.rate * (t - job.last)
        preempt(sim, job, t)
        lost.append((job.name, t, job.remaining - done))

    monkeypatch.setattr(Simulation, "preempt", spy)
    # Two V100 servers. A (16 GPUs: two 8-GPU workers, w_min 2: nothing to scale in) takes them all; B (8 GPUs: one
    # 8-GPU worker, w_min 1, w_max 2) runs 2 workers on both lent T4s. Inference needs one server from 600 s (B is
    # scaled in to 1: a checkpoint) and both from 1200 s (B is preempted). Checkpoints are otherwise every 10^6 s:
    # B loses only the 600 s since the resize, at pace 1 x 0.4 = 0.4 worker-seconds per second.
    setup = scenario("training: {servers: 2}\nelasticity: {share: 1, min_factor: 1}\nscheduler: {migration: false}")
    jobs = trace((0, 20_000, 16), (1, 2000, 8))
    simulate("lyra", jobs, load=stepped_load(0, 100, 200), setup=setup, length_s=8000)
    ((name, when, work),) = lost
    assert (name, when) == ("job-1", 1200)
    assert work == pytest.approx(600 * 0.4)


def test_a_restart_costs_its_seconds_at_the_new_pace() -> None:
    setup = scenario("preemption: {restart_cost_s: 60}")
    b = records(simulate("basic", B_ON_LOAN, load=RISING, setup=setup, length_s=3000))["job-1"]
    # As from scratch (finish 2000), plus 60 s x pace 8 = 480 worker-seconds: 60 s more.
    assert b.finish_s == pytest.approx(2060)


def test_lyra_exact_free_loses_nothing_on_preemption() -> None:
    setup = scenario("preemption: {restart_cost_s: 60, checkpoint_grace_s: 60}")
    b = records(simulate("lyra-exact-free", B_ON_LOAN, load=RISING, setup=setup, length_s=3000))["job-1"]
    # Free preemption: 599 s x 3.2 = 1916.8 kept, no restart cost, no grace; 6083.2 at pace 8 from 1000 s.
    assert b.finish_s == pytest.approx(1000 + 6083.2 / 8)
    assert b.preemptions == 1


def test_usage_counts_only_the_window() -> None:
    result = simulate("baseline", trace((0, 400, 8)), length_s=100)
    assert summarise(result).usage_training == pytest.approx(1.0)
    assert result.records[0].finish_s == 400  # the job still finishes after the window


def test_an_empty_window_stalls_nothing() -> None:
    result = simulate("lyra", trace((500, 10, 1)), length_s=100)
    assert result.records == ()
    assert math.isclose(result.window_s, 100)


def test_the_queue_is_in_the_cores_admission_order() -> None:
    # Inelastic jobs with a scaling overhead of 0.5: each one's time at base on a V100 is its trace duration (its
    # work is sized so that the trace duration holds at its size). Shortest first, then submit time, then name:
    # job-0 (100 s), job-3 (100 s, submitted later), job-1 (120 s on 4 workers; a key of work per base worker, 48,
    # would put it first), job-2 (300 s).
    setup = scenario("scaling: {overhead: 0.5}")
    workload = build_workload(trace((0, 100, 1), (0, 120, 4), (0, 300, 2), (5, 100, 1)), setup, Window(0.0, 10.0))
    sim = Simulation(workload, setup, SCHEMES["lyra"], flat_load(0.0))
    for job in sim.jobs:
        sim.enqueue(job, job.submit)
    assert [sim.jobs[entry[3]].name for entry in sim.queue.ordered()] == ["job-0", "job-3", "job-1", "job-2"]
