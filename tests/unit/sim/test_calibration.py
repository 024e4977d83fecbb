from __future__ import annotations

import math
import random

import pytest

from lyra.sim.calibration import calibrate, inference_problems, inference_utilisation, req_per_server_for
from lyra.sim.load import LoadSeries
from lyra.sim.workload import Window
from tests.unit.sim.builders import scenario, trace


def test_req_per_server_gives_the_target_utilisation() -> None:
    load = LoadSeries("<t>", 3600.0, tuple(100.0 * (1 + (h % 24) / 12) for h in range(24)))
    rate = req_per_server_for(load, 20, 0.4)
    assert inference_utilisation(load, 20, rate) == pytest.approx(0.4, abs=0.03)
    assert inference_utilisation(load, 20, rate * 1.1) < 0.4


def test_calibration_sizes_the_training_cluster_for_the_baseline_usage() -> None:
    rng = random.Random(5)
    jobs = trace(*((rng.uniform(0, 86_400), rng.uniform(600, 6000), rng.choice((1, 2, 4))) for _ in range(300)))
    load = LoadSeries("<t>", 3600.0, (100.0,) * 24)
    sized, report = calibrate(jobs, load, scenario(), Window(0, 86_400))
    assert sized.training.servers == report.training_servers
    usages = dict(report.tried)
    # The chosen size is the one closest to 0.72 among its neighbours that were tried.
    for other in (report.training_servers - 1, report.training_servers + 1):
        if other in usages:
            assert abs(usages[other] - 0.72) >= abs(report.training_usage - 0.72)
    assert sized.inference.servers == round(report.training_servers * 8 * 5 / 3 / 8)
    # Whole servers: with a flat load the utilisation moves in steps of one server.
    assert abs(report.inference_utilisation - 0.4) <= 1 / sized.inference.servers


def test_a_spiky_load_still_reaches_the_target_utilisation() -> None:
    # One step at 1000 req/s and fifteen at 10: the utilisation 0.40 needs 6 of 16 servers in the quiet steps,
    # i.e. under 2 req/s per server, far below a quarter of the peak per server.
    load = LoadSeries("<t>", 3600.0, (1000.0,) + (10.0,) * 15)
    rate = req_per_server_for(load, 16, 0.4)
    # By hand: at this rate the spike takes the 16 servers and each quiet step ceil(10 / rate) of them.
    quiet = min(16, math.ceil(10.0 / rate))
    assert (16 + 15 * quiet) / (16 * 16) == pytest.approx(inference_utilisation(load, 16, rate))
    assert quiet == 6
    assert inference_problems(load, 16, inference_utilisation(load, 16, rate), 0.4) == ()


def test_a_load_idle_too_often_is_reported_with_the_reason() -> None:
    load = LoadSeries("<t>", 3600.0, (100.0,) * 3 + (0.0,) * 7)
    rate = req_per_server_for(load, 10, 0.4)
    utilisation = inference_utilisation(load, 10, rate)
    assert utilisation == pytest.approx(0.3)  # every step with load takes the whole pool: the most there is
    (problem,) = inference_problems(load, 10, utilisation, 0.4)
    assert "the load is zero in 70% of its steps" in problem
    assert "at most 0.300" in problem


def test_whole_servers_stepping_over_the_target_are_reported() -> None:
    load = LoadSeries("<t>", 3600.0, (100.0,) * 24)
    rate = req_per_server_for(load, 7, 0.4)
    # A flat load uses k of 7 servers in every step: 2/7 = 0.286 or 3/7 = 0.429; 3/7 is the closer.
    assert inference_utilisation(load, 7, rate) == pytest.approx(3 / 7)
    (problem,) = inference_problems(load, 7, 3 / 7, 0.4)
    assert "jumps over the target" in problem


def test_a_trace_too_small_for_one_server_is_reported() -> None:
    jobs = trace((0.0, 600.0, 1), (3600.0, 600.0, 1))
    load = LoadSeries("<t>", 3600.0, (100.0,) * 24)
    _, report = calibrate(jobs, load, scenario(), Window(0, 86_400))
    assert report.training_servers == 1
    assert any("one server of 8 GPUs is already more than the trace keeps busy" in p for p in report.problems)
    assert report.as_dict()["problems"] == list(report.problems)
