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


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    training_servers: int
    training_usage: float
    inference_servers: int
    req_per_server: float
    inference_utilisation: float
    tried: tuple[tuple[int, float], ...]
    #: Why a target was missed, one sentence each; empty when both were reached within their tolerance.
    problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "training_servers": self.training_servers,
            "baseline_training_usage": self.training_usage,
            "inference_servers": self.inference_servers,
            "req_per_server": self.req_per_server,
            "inference_utilisation": self.inference_utilisation,
            "tried": [{"training_servers": n, "baseline_training_usage": u} for n, u in self.tried],
            "problems": list(self.problems),
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
    """The scenario with calibrated sizes, and how they were found."""
    check_calibratable(scenario)
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
    report = CalibrationReport(
        training_servers=best,
        training_usage=tried[best],
        inference_servers=servers,
        req_per_server=rate,
        inference_utilisation=utilisation,
        tried=tuple(sorted(tried.items())),
        problems=problems,
    )
    return sized, report


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
