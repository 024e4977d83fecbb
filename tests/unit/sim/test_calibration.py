from __future__ import annotations

import math
import random

import pytest

from lyra.sim.calibration import (
    SHORTFALL_TOLERANCE,
    CalibrationError,
    calibrate,
    check_load_calibratable,
    inference_problems,
    inference_shortfall,
    inference_utilisation,
    non_monotone_usage,
    req_per_server_for,
    shortfall_flags,
)
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


# --- calibration checks what it produced: the shortfall, a load it refuses, a non-monotone usage curve ---------


def test_a_load_zero_in_half_of_its_steps_is_refused_with_the_reason() -> None:
    jobs = trace((0.0, 3600.0, 8))
    load = LoadSeries("<half idle>", 3600.0, (100.0, 0.0) * 12)
    with pytest.raises(CalibrationError) as refused:
        calibrate(jobs, load, scenario(), Window(0, 86_400))
    message = str(refused.value)
    assert "its rate is zero in 50% of the 24 steps of one period" in message
    assert "drop --calibrate" in message


def test_a_load_with_load_in_most_steps_is_not_refused() -> None:
    check_load_calibratable(LoadSeries("<t>", 3600.0, (100.0,) * 13 + (0.0,) * 11), 0.4)


def test_the_shortfall_beyond_the_pool_is_computed_and_a_large_one_is_flagged() -> None:
    # Four idle steps, five quiet ones and a spike: 0.40 of a pool of 10 needs 40 server-steps from the six steps
    # with load. At the rate chosen (about 10/6 req/s) the quiet steps take 6 servers each and the spike its whole
    # pool, while it asks for about 60: some 50 server-steps beyond the pool.
    load = LoadSeries("<spiky>", 3600.0, (0.0,) * 4 + (10.0,) * 5 + (100.0,))
    rate = req_per_server_for(load, 10, 0.4)
    assert inference_utilisation(load, 10, rate) == pytest.approx(0.4)
    assert math.ceil(10.0 / rate - 1e-9) == 6
    spike = math.ceil(100.0 / rate - 1e-9)
    assert spike in (60, 61)
    short, share = inference_shortfall(load, 10, rate)
    assert short == pytest.approx((spike - 10) * 3600.0)
    assert share == pytest.approx((spike - 10) / (5 * 6 + spike))
    (flag,) = shortfall_flags(load, 10, rate)
    assert f"leaves {share:.1%} of the inference demand beyond the whole pool of 10 servers" in flag
    assert f"{short:.0f} server-seconds over one 10-hour period of the load, {short / 36_000 / 10:.2f} times" in flag


def test_a_calibration_reports_its_shortfall_and_flags_it() -> None:
    jobs = trace((0.0, 20_000.0, 8), (100.0, 20_000.0, 8))
    load = LoadSeries("<spiky>", 3600.0, ((0.0,) * 4 + (10.0,) * 5 + (100.0,)) * 2 + (10.0,) * 4)
    _, report = calibrate(jobs, load, scenario(), Window(0, 86_400))
    short, share = inference_shortfall(load, report.inference_servers, report.req_per_server)
    assert share > SHORTFALL_TOLERANCE
    assert (report.inference_short_server_s, report.inference_short_share) == (short, share)
    assert report.load_zero_share == pytest.approx(8 / 24)
    assert any("beyond the whole pool" in flag for flag in report.flags)
    figures = report.as_dict()
    assert figures["inference_short_share"] == share
    assert figures["flags"] == list(report.flags)


def test_a_smooth_load_leaves_no_shortfall_and_no_flag() -> None:
    load = LoadSeries("<t>", 3600.0, tuple(100.0 * (1 + (h % 24) / 12) for h in range(24)))
    rate = req_per_server_for(load, 20, 0.4)
    assert inference_shortfall(load, 20, rate) == (0.0, 0.0)
    assert shortfall_flags(load, 20, rate) == ()


def test_a_usage_curve_that_rises_with_servers_is_flagged() -> None:
    # The poster-usage calibration's figures: 34 servers gave 0.886 and 36 gave 0.899.
    tried = {32: 0.900, 33: 0.898, 34: 0.886, 36: 0.899}
    (flag,) = non_monotone_usage(tried, 32)
    assert "not monotone" in flag
    assert "34 servers give 0.886, 36 give 0.899" in flag
    assert "32 servers (0.900) is the closest to the target among the sizes tried" in flag
    assert non_monotone_usage({32: 0.900, 33: 0.898, 34: 0.886, 36: 0.8865}, 32) == ()  # within 0.001


def test_a_calibration_that_lands_on_a_non_monotone_curve_says_so() -> None:
    # Gangs of 8 to 24 GPUs on whole 8-GPU servers: 4 servers leave a 24-GPU gang waiting that 6 can run.
    rng = random.Random(21)
    jobs = trace(
        *(
            (rng.uniform(0, 86_400), rng.uniform(3600, 40000), rng.choice((8, 16, 16, 24)))
            for _ in range(rng.randint(10, 40))
        )
    )
    _, report = calibrate(jobs, LoadSeries("<t>", 3600.0, (100.0,) * 24), scenario(), Window(0, 86_400))
    usage = dict(report.tried)
    sizes = sorted(usage)
    assert any(usage[b] > usage[a] + 0.001 for i, a in enumerate(sizes) for b in sizes[i + 1 :])
    assert any("not monotone" in flag for flag in report.flags)
