"""Sensitivity sweep: where Lyra's gain holds and where it does not, one assumption at a time.

The world model rests on assumptions no trace records: how fast an inference GPU trains, how many jobs are
elastic, how well jobs scale, how many fit an inference GPU's memory. The sweep varies each around the scenario's
value, keeping the others at the scenario's, and runs ``basic``, the two ablations of ``lyra`` (``lyra-no-loaning``,
``lyra-no-elasticity``) and ``lyra`` at every point (``baseline`` uses none of these knobs, so it runs once). A point
*holds* when ``lyra`` is no slower on mean JCT than ``basic`` and than each ablation (within ``tolerance``) and beats
``baseline``: then both parts of Lyra pay at that point. Every point also carries its lower bound on mean JCT
(:func:`lyra.sim.bound.jct_bound` on that point's workload and cluster: a knob that changes the fit draws or a GPU
type's speed changes it), so ``lyra``'s distance from the best possible is read per point, and the table shows
``lyra``'s inference shortfall (all of it: beyond the whole pool and waiting for reclaims) beside its JCT.

Points are independent simulations, so they run in parallel processes (``workers``); results come back in the
order of the grid whatever the order they finish in, so a sweep is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from lyra.sim.bound import JctBound, jct_bound
from lyra.sim.engine import Simulation
from lyra.sim.load import LoadSeries
from lyra.sim.metrics import SchemeMetrics, summarise
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import SCHEMES
from lyra.sim.traces import Trace
from lyra.sim.workload import Window, build_workload

#: Schemes run at every point of the sweep; ``baseline`` runs once, on the scenario as given.
SWEPT_SCHEMES = ("basic", "lyra-no-loaning", "lyra-no-elasticity", "lyra")
#: The schemes ``lyra`` must be no slower than for a point to hold.
RIVALS = ("basic", "lyra-no-loaning", "lyra-no-elasticity")


@dataclass(frozen=True, slots=True)
class Knob:
    """One swept assumption: its name in the output, how to set it on a scenario, and its default values."""

    name: str
    label: str
    values: tuple[float, ...]
    apply: Callable[[Scenario, float], Scenario]


def _inference_speed(scenario: Scenario, value: float) -> Scenario:
    speed = dict(scenario.speed)
    for gpu_type in scenario.inference.gpu_types:
        speed[gpu_type] = value
    return scenario.model_copy(update={"speed": speed})


def _elastic_share(scenario: Scenario, value: float) -> Scenario:
    return scenario.model_copy(update={"elasticity": scenario.elasticity.model_copy(update={"share": value})})


def _scaling_overhead(scenario: Scenario, value: float) -> Scenario:
    return scenario.model_copy(update={"scaling": scenario.scaling.model_copy(update={"overhead": value})})


def _fit_share(scenario: Scenario, value: float) -> Scenario:
    return scenario.model_copy(update={"memory": scenario.memory.model_copy(update={"inference_fit_share": value})})


def _fit_size_exponent(scenario: Scenario, value: float) -> Scenario:
    return scenario.model_copy(update={"memory": scenario.memory.model_copy(update={"size_exponent": value})})


KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        Knob("inference-speed", "inference GPU training speed (x reference)", (0.3, 0.4, 0.5), _inference_speed),
        Knob("elastic-share", "share of elastic jobs", (0.25, 0.5, 0.75), _elastic_share),
        Knob("scaling-overhead", "scaling overhead (e(w) = 1 / (1 + o (w - 1)))", (0.0, 0.02, 0.05), _scaling_overhead),
        Knob("fit-share", "share of jobs that fit an inference GPU", (0.25, 0.5, 0.75, 1.0), _fit_share),
        Knob("fit-size-exponent", "fit falls with job size (share x n^-exponent)", (0.0, 0.5, 1.0), _fit_size_exponent),
    )
}


class SweepError(ValueError):
    """A ``--sweep`` specification is malformed; the message says what to write instead."""


def parse_knobs(specs: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """``["inference-speed=0.3,0.5", "fit-share"]`` -> values per knob; no spec sweeps every knob's defaults."""
    if not specs:
        return {name: knob.values for name, knob in KNOBS.items()}
    chosen: dict[str, tuple[float, ...]] = {}
    for spec in specs:
        name, _, values = spec.partition("=")
        knob = KNOBS.get(name.strip())
        if knob is None:
            raise SweepError(f"unknown sweep knob {name.strip()!r}; choose from {', '.join(KNOBS)}")
        if not values:
            chosen[knob.name] = knob.values
            continue
        try:
            parsed = tuple(float(v) for v in values.split(","))
        except ValueError:
            raise SweepError(f"--sweep {spec}: values must be numbers separated by commas") from None
        if not parsed or not all(math.isfinite(v) for v in parsed):
            raise SweepError(f"--sweep {spec}: values must be finite numbers")
        chosen[knob.name] = parsed
    return chosen


@dataclass(frozen=True, slots=True)
class SweepPoint:
    knob: str
    value: float
    metrics: Mapping[str, SchemeMetrics]
    #: The lower bound on mean JCT on this point's workload and cluster (no scheme goes below it).
    bound: JctBound

    def jct(self, scheme: str) -> float:
        return self.metrics[scheme].jct_mean_s


@dataclass(frozen=True, slots=True)
class SweepResult:
    baseline: SchemeMetrics
    points: tuple[SweepPoint, ...]
    tolerance: float
    #: The lower bound on the scenario as given (the baseline's workload and cluster).
    baseline_bound: JctBound

    def holds(self, point: SweepPoint) -> bool:
        """``lyra`` no slower than ``basic`` and than each ablation on mean JCT (within the tolerance), and faster
        than baseline."""
        slack = 1.0 + self.tolerance
        lyra = point.jct("lyra")
        return all(lyra <= point.jct(rival) * slack for rival in RIVALS) and lyra < self.baseline.jct_mean_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.as_dict(),
            "baseline_jct_bound": self.baseline_bound.as_dict(),
            "tolerance": self.tolerance,
            "points": [
                {
                    "knob": p.knob,
                    "value": p.value,
                    "holds": self.holds(p),
                    "jct_bound": p.bound.as_dict(),
                    "schemes": {name: m.as_dict() for name, m in p.metrics.items()},
                }
                for p in self.points
            ],
        }


def _scenario_for(scenario: Scenario, knob: str, value: float) -> Scenario:
    """The scenario with one knob set, checked again as a whole (a copy with updates is not validated)."""
    varied = KNOBS[knob].apply(scenario, value)
    try:
        return Scenario.model_validate(varied.model_dump())
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'scenario'}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in error.errors()
        )
        raise SweepError(f"--sweep {knob}={value:g}: {problems}") from None


def _run_point(task: tuple[Trace, LoadSeries, Scenario, Window, str]) -> SchemeMetrics:
    trace, load, scenario, window, scheme = task
    workload = build_workload(trace, scenario, window)
    return summarise(Simulation(workload, scenario, SCHEMES[scheme], load).run())


def run_sweep(
    trace: Trace,
    load: LoadSeries,
    scenario: Scenario,
    window: Window,
    knobs: Mapping[str, Sequence[float]],
    *,
    workers: int = 1,
    tolerance: float = 0.01,
    on_done: Callable[[str, float, str], None] | None = None,
) -> SweepResult:
    """Every (knob, value, scheme) simulation, plus one baseline; in parallel processes if ``workers > 1``."""
    grid: list[tuple[str, float, str]] = []
    tasks: list[tuple[Trace, LoadSeries, Scenario, Window, str]] = []
    bounds: dict[tuple[str, float], JctBound] = {}
    for knob, values in knobs.items():
        for value in values:
            varied = _scenario_for(scenario, knob, value)
            bounds[(knob, value)] = jct_bound(build_workload(trace, varied, window), varied)
            for scheme in SWEPT_SCHEMES:
                grid.append((knob, value, scheme))
                tasks.append((trace, load, varied, window, scheme))
    grid.append(("", math.nan, "baseline"))
    tasks.append((trace, load, scenario, window, "baseline"))
    results: list[SchemeMetrics | None] = [None] * len(tasks)
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_run_point, task) for task in tasks]
            for index, future in enumerate(futures):
                results[index] = future.result()
                if on_done is not None:
                    on_done(*grid[index])
    else:
        for index, task in enumerate(tasks):
            results[index] = _run_point(task)
            if on_done is not None:
                on_done(*grid[index])
    by_point: dict[tuple[str, float], dict[str, SchemeMetrics]] = {}
    baseline: SchemeMetrics | None = None
    for (knob, value, scheme), metrics in zip(grid, results, strict=True):
        assert metrics is not None
        if scheme == "baseline":
            baseline = metrics
        else:
            by_point.setdefault((knob, value), {})[scheme] = metrics
    assert baseline is not None
    points = tuple(SweepPoint(knob, value, dict(m), bounds[(knob, value)]) for (knob, value), m in by_point.items())
    return SweepResult(baseline, points, tolerance, jct_bound(build_workload(trace, scenario, window), scenario))


def format_sweep(result: SweepResult) -> str:
    """A table: per point, mean JCT of each scheme, lyra's gain over basic and baseline, lyra's overall usage,
    queue and inference shortfall (server-seconds and share of the demand), the point's bound on mean JCT with
    lyra's mean JCT over it, and whether the point holds."""
    header = (
        f"{'assumption':<18} {'value':>6} {'basic JCT':>10} {'no-loan JCT':>11} {'no-elast JCT':>12} "
        f"{'lyra JCT':>10} {'lyra/basic':>10} {'lyra/base':>10} {'lyra usage':>10} {'lyra queue':>10} "
        f"{'lyra inf. short (s / share)':>27} {'bound (lyra/bound)':>18}  holds"
    )
    base = result.baseline.jct_mean_s
    lines = [
        f"baseline (unaffected by these knobs): mean JCT {base:.0f} s; bound "
        f"{_against_bound(base, result.baseline_bound)} (each point's bound is its own, below)",
        header,
    ]
    lines.append("-" * len(header))
    for point in result.points:
        basic, lyra = point.jct("basic"), point.jct("lyra")
        no_loan, no_elast = point.jct("lyra-no-loaning"), point.jct("lyra-no-elasticity")
        figures = point.metrics["lyra"]
        short = f"{figures.inference_short_server_s:.0f} / {figures.inference_short_share:.4%}"
        bound = _against_bound(lyra, point.bound)
        lines.append(
            f"{point.knob:<18} {point.value:>6g} {basic:>10.0f} {no_loan:>11.0f} {no_elast:>12.0f} {lyra:>10.0f} "
            f"{basic / lyra:>9.2f}x {base / lyra:>9.2f}x {figures.usage_overall:>10.2f} {figures.queue_mean_s:>10.0f} "
            f"{short:>27} {bound:>18}  {'yes' if result.holds(point) else 'NO'}"
        )
    return "\n".join(lines)


def _against_bound(jct_s: float, bound: JctBound) -> str:
    """``"6920 (1.10x)"``: the bound in seconds and the mean JCT over it; ``"-"`` for a window without jobs."""
    if bound.mean_jct_s <= 0:
        return "-"
    return f"{bound.mean_jct_s:.0f} ({jct_s / bound.mean_jct_s:.2f}x)"
