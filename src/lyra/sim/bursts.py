"""Inference bursts over a recorded load series: rises the lending cycle does not see coming.

A recorded series such as ServeGen's (10-minute steps, peak/mean 2.2 over a day) changes slowly, so lent servers
come back a few at a time and reclaims rarely meet training work. A burst is a sudden multiplication of the
request rate for minutes, as a product launch or a retry storm causes. Rules (seeded, one draw sequence per seed):

* The series is resampled to ``bursts.step_s`` (each step of the series becomes several equal ones), over one
  period of it (the part that repeats, :attr:`lyra.sim.load.LoadSeries.period_s`); the bursts repeat with it.
* Burst starts are Poisson arrivals, ``bursts.per_day`` per day on average, from ``random.Random(f"{seed}/bursts")``:
  per burst, in order, an exponential gap, a factor uniform in [``factor_min``, ``factor_max``] and a duration
  uniform in [``duration_min_s``, ``duration_max_s``]. Every resampled step that the burst overlaps is multiplied by
  its factor; where bursts overlap the larger factor holds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lyra.sim.load import LoadSeries
from lyra.sim.scenario import Bursts


class BurstError(ValueError):
    """The bursts cannot be laid over this series; the message names the field."""


def with_bursts(load: LoadSeries, bursts: Bursts, seed: int) -> LoadSeries:
    """The series with the scenario's bursts laid over it; the series itself when there are none."""
    if bursts.per_day <= 0:
        return load
    parts = load.step_s / bursts.step_s
    if parts < 1 or abs(parts - round(parts)) > 1e-9:
        raise BurstError(f"bursts.step_s ({bursts.step_s:g}) must divide the load's step ({load.step_s:g} s)")
    parts = round(parts)
    steps = max(1, round(load.period_s / load.step_s))
    rates = [rate for rate in load.rates[:steps] for _ in range(parts)]
    factors = [1.0] * len(rates)
    rng = random.Random(f"{seed}/bursts")
    length = len(rates) * bursts.step_s
    mean_gap = 86_400.0 / bursts.per_day
    t = 0.0
    while True:
        t += rng.expovariate(1.0 / mean_gap)
        factor = rng.uniform(bursts.factor_min, bursts.factor_max)
        duration = rng.uniform(bursts.duration_min_s, bursts.duration_max_s)
        if t >= length:
            break
        first = int(t // bursts.step_s)
        last = min(len(rates) - 1, math.ceil((t + duration) / bursts.step_s) - 1)
        for i in range(first, last + 1):
            factors[i] = max(factors[i], factor)
    burst_rates = tuple(rate * factor for rate, factor in zip(rates, factors, strict=True))
    return LoadSeries(f"{load.path} + bursts", bursts.step_s, burst_rates, load.gaps_filled)


def burst_share(load: LoadSeries, bursty: LoadSeries) -> float:
    """Share of the time a burst is on (the bursty rate above the recorded one)."""
    on = sum(1 for i, rate in enumerate(bursty.rates) if rate > load.rate_at(i * bursty.step_s) * (1 + 1e-12))
    return on / len(bursty.rates)


@dataclass(frozen=True, slots=True)
class ForecastError:
    """How wrong the lender's forecast is. The lender sees demand only as observed: a server is lent once idle for
    ``lend_hysteresis_s`` (:mod:`lyra.core.loan_cycle`), so it keeps from lending the peak demand of that span or
    the present demand plus headroom, whichever is more: that is its forecast of the next step. A step *surprises*
    it when demand exceeds what the previous step kept: those servers must come back from loan at once."""

    #: Share of the steps (of one period of the series) that surprise the lender.
    surprise_share: float
    #: Mean servers missing from the forecast in a surprising step.
    mean_surprise_servers: float
    #: Mean |demand - previous step's recent peak| over every step, in servers (the forecast's error without the
    #: headroom).
    mean_abs_error_servers: float


def forecast_error(
    load: LoadSeries, *, servers: int, req_per_server: float, hysteresis_s: float, headroom_servers: int
) -> ForecastError:
    """The recent-peak forecast's error over one period of ``load`` (demand in whole servers, capped at the pool)."""
    steps = max(1, round(load.period_s / load.step_s))
    demand = [min(servers, max(0, math.ceil(r / req_per_server - 1e-9))) for r in load.rates[:steps]]
    span = max(1, math.ceil(hysteresis_s / load.step_s))
    surprises: list[int] = []
    errors: list[int] = []
    for i in range(1, len(demand)):
        peak = max(demand[max(0, i - span) : i])
        errors.append(abs(demand[i] - peak))
        missing = demand[i] - max(peak, demand[i - 1] + headroom_servers)
        if missing > 0:
            surprises.append(missing)
    counted = max(1, len(errors))
    return ForecastError(
        surprise_share=len(surprises) / counted,
        mean_surprise_servers=math.fsum(surprises) / len(surprises) if surprises else 0.0,
        mean_abs_error_servers=math.fsum(errors) / counted,
    )
