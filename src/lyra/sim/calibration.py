"""Size the clusters like the poster's baseline before comparing anything, and never after.

* Training: the number of training servers is chosen by bisection so that ``baseline``'s training-GPU usage is
  as close as possible to ``calibration.training_usage`` (0.72). Usage falls as servers are added, so the
  bisection finds the smallest size at or below the target and keeps whichever neighbour is closer.
* Inference: the inference GPUs are ``calibration.inference_gpus_per_training_gpu`` (5/3, from the poster's
  baseline usages) times the training GPUs, in whole servers; then ``req_per_server`` is chosen by bisection so
  that the mean of ``min(servers, ceil(rate / req_per_server)) / servers`` over one period of the load series
  is ``calibration.inference_utilisation`` (0.40). The search spans every utilisation the load allows: from one
  server per step with load (the lowest) to the whole pool in every step with load (the highest).

Calibration says when it misses a target, and why (:attr:`CalibrationReport.problems`): a trace too small for one
training server, one server more or less moving usage past the tolerance, a load idle in too many steps, or whole
servers making the utilisation jump over the target.

It also checks what it produced (:attr:`CalibrationReport.flags`), because reaching both targets can still mislead:

* the inference shortfall the calibrated rate implies (demand beyond the whole pool, server-seconds over one period
  of the load and share of its demand) is always reported, and flagged above :data:`SHORTFALL_TOLERANCE`: a
  utilisation target met by asking more of the pool than it has is not the poster's inference cluster;
* a baseline usage that is not monotone in the training servers tried (more servers, higher usage) is flagged: the
  bisection assumes usage falls as servers are added, so its choice is the closest among the sizes it tried only.

A load that is zero in :data:`ZERO_SHARE_LIMIT` or more of its steps is refused (:class:`CalibrationError`): the
utilisation target would then have to come from the few steps with load, and the rate it picks says nothing about
the pool (ServeGen's zero cells are collection gaps, not idle time).

Only ``baseline`` runs during calibration: Lyra's numbers play no part in the sizes. It sizes pools of one server
group each (one GPU type per pool); a scenario with several groups in a pool gives its sizes itself, and
:func:`check_calibratable` refuses it with a message saying so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from lyra.sim.engine import Simulation
from lyra.sim.load import LoadSeries
from lyra.sim.metrics import summarise
from lyra.sim.scenario import Scenario, ScenarioError
from lyra.sim.schemes import SCHEMES
from lyra.sim.traces import Trace
from lyra.sim.workload import Window, build_workload

#: A calibrated figure further than this from its target is reported as a miss, with the reason.
TRAINING_TOLERANCE = 0.05
INFERENCE_TOLERANCE = 0.02
#: Inference demand beyond the whole pool, as a share of the demand's server-seconds, above which the calibrated
#: rate is flagged.
SHORTFALL_TOLERANCE = 0.01
#: A load zero in this share of its steps or more cannot be calibrated (refused).
ZERO_SHARE_LIMIT = 0.5
#: A rise of baseline usage by more than this when servers are added is flagged as a non-monotone curve.
MONOTONE_TOLERANCE = 0.001


class CalibrationError(ValueError):
    """The inputs cannot be calibrated meaningfully; the message says why and what to do instead."""


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    training_servers: int
    training_usage: float
    inference_servers: int
    req_per_server: float
    inference_utilisation: float
    tried: tuple[tuple[int, float], ...]
    #: Inference demand beyond the whole pool at the calibrated rate, over one period of the load: server-seconds
    #: and share of the demanded server-seconds.
    inference_short_server_s: float
    inference_short_share: float
    #: Share of the load's steps (one period) with no load.
    load_zero_share: float
    #: Why a target was missed, one sentence each; empty when both were reached within their tolerance.
    problems: tuple[str, ...] = ()
    #: What makes the result doubtful although it was produced (shortfall, non-monotone usage), one sentence each.
    flags: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "training_servers": self.training_servers,
            "baseline_training_usage": self.training_usage,
            "inference_servers": self.inference_servers,
            "req_per_server": self.req_per_server,
            "inference_utilisation": self.inference_utilisation,
            "inference_short_server_s": self.inference_short_server_s,
            "inference_short_share": self.inference_short_share,
            "load_zero_share": self.load_zero_share,
            "tried": [{"training_servers": n, "baseline_training_usage": u} for n, u in self.tried],
            "problems": list(self.problems),
            "flags": list(self.flags),
        }


def baseline_training_usage(trace: Trace, load: LoadSeries, scenario: Scenario, window: Window) -> float:
    workload = build_workload(trace, scenario, window)
    result = Simulation(workload, scenario, SCHEMES["baseline"], load).run()
    return summarise(result).usage_training


def calibrate(
    trace: Trace,
    load: LoadSeries,
    scenario: Scenario,
    window: Window,
    *,
    on_try: Callable[[int, float], None] | None = None,
) -> tuple[Scenario, CalibrationReport]:
    """The scenario with calibrated sizes, and how they were found. Raises :class:`CalibrationError` (a
    :class:`ValueError`) for a load that cannot be calibrated, :class:`ScenarioError` for a scenario."""
    check_calibratable(scenario)
    check_load_calibratable(load, scenario.calibration.inference_utilisation)
    target = scenario.calibration.training_usage
    per_server = scenario.training.groups[0].gpus_per_server
    tried: dict[int, float] = {}

    def usage(servers: int) -> float:
        if servers not in tried:
            sized = _sized(scenario, servers, load)
            tried[servers] = baseline_training_usage(trace, load, sized, window)
            if on_try is not None:
                on_try(servers, tried[servers])
        return tried[servers]

    inside = [job for job in trace.jobs if window.start_s <= job.submit_s < window.start_s + window.length_s]
    work = math.fsum(job.duration_s * job.num_gpus for job in inside)
    high = max(1, math.ceil(work / (per_server * window.length_s)))
    low = high
    if usage(high) > target:
        while usage(high) > target:
            low, high = high, high * 2
    else:
        while low > 1 and usage(low) <= target:
            high, low = low, max(1, low // 2)
    while high - low > 1:
        middle = (low + high) // 2
        if usage(middle) > target:
            low = middle
        else:
            high = middle
    best = min((n for n in (low, high) if n in tried), key=lambda n: (abs(tried[n] - target), n))
    sized = _sized(scenario, best, load)
    servers, rate = sized.inference.servers, sized.inference.req_per_server
    utilisation = inference_utilisation(load, servers, rate)
    problems = _training_problems(tried, best, target, per_server)
    problems += inference_problems(load, servers, utilisation, scenario.calibration.inference_utilisation)
    short_s, short_share = inference_shortfall(load, servers, rate)
    flags = non_monotone_usage(tried, best)
    flags += shortfall_flags(load, servers, rate)
    report = CalibrationReport(
        training_servers=best,
        training_usage=tried[best],
        inference_servers=servers,
        req_per_server=rate,
        inference_utilisation=utilisation,
        tried=tuple(sorted(tried.items())),
        inference_short_server_s=short_s,
        inference_short_share=short_share,
        load_zero_share=zero_share(load),
        problems=problems,
        flags=flags,
    )
    return sized, report


def zero_share(load: LoadSeries) -> float:
    """Share of the steps of one period of ``load`` whose rate is zero."""
    rates = _period_rates(load)
    return sum(1 for r in rates if r <= 0) / len(rates)


def check_load_calibratable(load: LoadSeries, target: float) -> None:
    """Raise :class:`CalibrationError` for a load zero in :data:`ZERO_SHARE_LIMIT` of its steps or more."""
    zero = zero_share(load)
    if zero >= ZERO_SHARE_LIMIT:
        steps = len(_period_rates(load))
        raise CalibrationError(
            f"--calibrate cannot size the inference pool from the load {load.path}: its rate is zero in {zero:.0%} "
            f"of the {steps} steps of one period (calibration needs it under {ZERO_SHARE_LIMIT:.0%}), so an "
            f"inference utilisation of {target} would have to come from the few steps with load, asking more of the "
            "pool there than it has. Fill the gaps (zero cells of a recorded load are usually collection gaps), or "
            "give inference.servers and inference.req_per_server in the scenario and drop --calibrate"
        )


def inference_shortfall(load: LoadSeries, servers: int, req_per_server: float) -> tuple[float, float]:
    """Demand beyond the whole pool of ``servers`` over one period of ``load``: server-seconds, and their share of
    the demanded server-seconds (0 for a load with no demand)."""
    needed = [math.ceil(r / req_per_server - 1e-9) for r in _period_rates(load)]
    demanded = math.fsum(needed) * load.step_s
    short = math.fsum(max(0, n - servers) for n in needed) * load.step_s
    return short, short / demanded if demanded else 0.0


def shortfall_flags(load: LoadSeries, servers: int, req_per_server: float) -> tuple[str, ...]:
    """A sentence when the calibrated rate leaves more than :data:`SHORTFALL_TOLERANCE` of the demand unmet."""
    short, share = inference_shortfall(load, servers, req_per_server)
    if share <= SHORTFALL_TOLERANCE:
        return ()
    period = len(_period_rates(load)) * load.step_s
    return (
        f"the calibrated {req_per_server:g} req/s per server leaves {share:.1%} of the inference demand beyond the "
        f"whole pool of {servers} servers ({short:.0f} server-seconds over one {period / 3600:g}-hour period of the "
        f"load, {short / (servers * period):.2f} times the pool's capacity): the utilisation target is met by asking "
        "more of the pool than it has, so the inference figures describe an overloaded pool (the table's "
        "'inf. short' column counts that shortfall)",
    )


def non_monotone_usage(tried: dict[int, float], best: int) -> tuple[str, ...]:
    """A sentence when baseline usage rises (by more than :data:`MONOTONE_TOLERANCE`) as servers are added, among
    the sizes tried."""
    sizes = sorted(tried)
    rises = [
        (fewer, more)
        for i, fewer in enumerate(sizes)
        for more in sizes[i + 1 :]
        if tried[more] > tried[fewer] + MONOTONE_TOLERANCE
    ]
    if not rises:
        return ()
    shown = "; ".join(f"{a} servers give {tried[a]:.3f}, {b} give {tried[b]:.3f}" for a, b in rises[:3])
    more = f" (and {len(rises) - 3} more pairs)" if len(rises) > 3 else ""
    return (
        f"baseline training usage is not monotone in the training servers tried ({shown}{more}): the bisection "
        f"assumes usage falls as servers are added, so {best} servers ({tried[best]:.3f}) is the closest to the "
        "target among the sizes tried, not necessarily among all sizes",
    )


def check_calibratable(scenario: Scenario) -> None:
    """Raise :class:`ScenarioError` unless each pool is one server group: calibration sizes one group per pool."""
    for pool, groups in (("training", scenario.training.groups), ("inference", scenario.inference.groups)):
        if len(groups) != 1:
            raise ScenarioError(
                f"--calibrate sizes pools of one server group, and {pool} has {len(groups)} "
                f"({', '.join(group.gpu_type for group in groups)}): give the sizes in the scenario and drop "
                "--calibrate"
            )


def _training_problems(tried: dict[int, float], best: int, target: float, per_server: int) -> tuple[str, ...]:
    usage = tried[best]
    if abs(usage - target) <= TRAINING_TOLERANCE:
        return ()
    if best == 1 and usage < target:
        return (
            f"training usage {usage:.3f}, not {target}: one server of {per_server} GPUs is already more than the "
            "trace keeps busy; use smaller servers (e.g. scenarios/small-servers.yaml)",
        )
    neighbours = ", ".join(f"{n} servers give {tried[n]:.3f}" for n in (best - 1, best + 1) if n in tried)
    return (
        f"training usage {usage:.3f}, not {target}: whole servers of {per_server} GPUs step over the target "
        f"({best} servers give {usage:.3f}; {neighbours}); use smaller servers for a closer fit",
    )


def inference_problems(load: LoadSeries, servers: int, utilisation: float, target: float) -> tuple[str, ...]:
    """Why the inference utilisation missed ``target`` by more than :data:`INFERENCE_TOLERANCE`, if it did."""
    if abs(utilisation - target) <= INFERENCE_TOLERANCE:
        return ()
    rates = _period_rates(load)
    with_load = sum(1 for r in rates if r > 0) / len(rates)
    if with_load < target:
        return (
            f"inference utilisation {utilisation:.3f}, not {target}: the load is zero in {1 - with_load:.0%} of its "
            f"steps, so even the whole pool serving whenever there is load gives at most {with_load:.3f}",
        )
    if with_load / servers > target:
        return (
            f"inference utilisation {utilisation:.3f}, not {target}: one server serving each step with load already "
            f"gives {with_load / servers:.3f} of a pool of {servers}",
        )
    return (
        f"inference utilisation {utilisation:.3f}, not {target}: with {servers} whole servers the utilisation of "
        "this load jumps over the target (no request rate per server gives a closer value)",
    )


def _sized(scenario: Scenario, training_servers: int, load: LoadSeries) -> Scenario:
    ratio = scenario.calibration.inference_gpus_per_training_gpu
    training_gpus = training_servers * scenario.training.groups[0].gpus_per_server
    inference_servers = max(1, round(training_gpus * ratio / scenario.inference.groups[0].gpus_per_server))
    rate = req_per_server_for(load, inference_servers, scenario.calibration.inference_utilisation)
    return scenario.with_sizes(
        training_servers=training_servers, inference_servers=inference_servers, req_per_server=rate
    )


def _period_rates(load: LoadSeries) -> tuple[float, ...]:
    return load.rates[: max(1, round(load.period_s / load.step_s))]


def inference_utilisation(load: LoadSeries, servers: int, req_per_server: float) -> float:
    """Mean share of inference servers serving over one period of the load series."""
    rates = _period_rates(load)
    needed = (min(servers, math.ceil(r / req_per_server - 1e-9)) for r in rates)
    return math.fsum(needed) / (servers * len(rates))


def req_per_server_for(load: LoadSeries, servers: int, target: float) -> float:
    """Requests per second per server giving the mean utilisation closest to ``target`` (bisection, 60 halvings).

    The search starts from the extremes the load allows: at ``low`` every step with load needs the whole pool (the
    highest utilisation), at ``high`` one server (the lowest). Utilisation falls as the rate per server rises, in
    steps (whole servers), so the bisection ends on the step's two sides and keeps the closer."""
    with_load = [r for r in _period_rates(load) if r > 0]
    if not with_load:
        return 1.0
    low, high = min(with_load) / (2 * servers), 2 * max(with_load)
    for _ in range(60):
        middle = (low + high) / 2
        if inference_utilisation(load, servers, middle) > target:
            low = middle
        else:
            high = middle
    below, above = high, low
    if abs(inference_utilisation(load, servers, above) - target) < abs(
        inference_utilisation(load, servers, below) - target
    ):
        return above
    return below
