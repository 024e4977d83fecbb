from __future__ import annotations

import random

import pytest

from lyra.sim.calibration import calibrate, inference_utilisation, req_per_server_for
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
