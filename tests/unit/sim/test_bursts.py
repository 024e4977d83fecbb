"""Bursts laid over a load series: resampled, seeded, each step multiplied by its burst's factor or left alone."""

from __future__ import annotations

import pytest

from lyra.sim.bursts import BurstError, burst_share, forecast_error, with_bursts
from lyra.sim.load import LoadSeries
from lyra.sim.scenario import Bursts

DAILY = LoadSeries("<t>", 600.0, tuple(100.0 + i for i in range(144)))


def test_no_bursts_leaves_the_series_as_it_is() -> None:
    assert with_bursts(DAILY, Bursts(), seed=0) is DAILY


def test_each_step_is_the_recorded_rate_or_a_burst_of_it() -> None:
    rule = Bursts(per_day=20, factor_min=1.5, factor_max=2.0, duration_min_s=120, duration_max_s=600, step_s=60)
    bursty = with_bursts(DAILY, rule, seed=3)
    assert bursty.step_s == 60
    assert len(bursty.rates) == 1440  # one day in one-minute steps
    factors = [bursty.rates[i] / DAILY.rates[i // 10] for i in range(1440)]
    assert all(f == 1.0 or 1.5 <= f <= 2.0 for f in factors)
    on = sum(1 for f in factors if f > 1)
    assert 0 < on < 1440
    assert burst_share(DAILY, bursty) == pytest.approx(on / 1440)
    assert bursty.period_s == DAILY.period_s


def test_the_share_of_time_in_a_burst_follows_the_rate_and_the_durations() -> None:
    # 200 bursts a day of exactly 60 s, on a 60 s grid: each covers one or two steps. The expected covered share of
    # the day is 1 - exp(-200 x (60 + 60) / 86400) = 0.242 (Poisson starts, a step is hit by starts in 120 s).
    long = LoadSeries("<t>", 600.0, (100.0,) * (144 * 20))
    rule = Bursts(per_day=200, factor_min=2, factor_max=2, duration_min_s=60, duration_max_s=60, step_s=60)
    share = burst_share(long, with_bursts(long, rule, seed=1))
    assert share == pytest.approx(0.242, abs=0.015)


def test_the_same_seed_gives_the_same_bursts_and_another_seed_others() -> None:
    rule = Bursts(per_day=10)
    assert with_bursts(DAILY, rule, seed=1) == with_bursts(DAILY, rule, seed=1)
    assert with_bursts(DAILY, rule, seed=1).rates != with_bursts(DAILY, rule, seed=2).rates


def test_a_step_that_does_not_divide_the_series_step_is_refused() -> None:
    with pytest.raises(BurstError, match=r"bursts.step_s \(70\) must divide the load's step \(600 s\)"):
        with_bursts(DAILY, Bursts(per_day=1, step_s=70), seed=0)


def test_inverted_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="factor_max"):
        Bursts(factor_min=3, factor_max=2)


def test_the_forecast_error_counts_rises_beyond_the_recent_peak_and_headroom() -> None:
    # Demand in servers (100 req/s each), 10-minute steps; the lender keeps the peak of the last 20 minutes or the
    # last demand + 1, whichever is more.
    load = LoadSeries("<t>", 600.0, tuple(100.0 * d for d in (2, 2, 5, 1, 1, 1, 4, 2)))
    error = forecast_error(load, servers=4, req_per_server=100.0, hysteresis_s=1200.0, headroom_servers=1)
    # Steps 1..7: demand 2,4(capped),1,1,1,4,2 against recent peaks 2,2,4,4,1,1,4: errors 0,2,3,3,0,3,2;
    # kept max(peak, previous + 1): 3,3,5,4,2,2,5; surprises: step 2 (4 > 3, one server), step 6 (4 > 2, two).
    assert error.mean_abs_error_servers == pytest.approx(13 / 7)
    assert error.surprise_share == pytest.approx(2 / 7)
    assert error.mean_surprise_servers == pytest.approx(1.5)
