"""Run several schemes on one workload and gather what the report needs.

Every scheme sees the same workload (same seed, same window, same draws); a scheme only changes how the jobs'
fields are used (see :mod:`lyra.sim.schemes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lyra.sim.bound import JctBound, jct_bound
from lyra.sim.calibration import CalibrationReport
from lyra.sim.engine import ProgressCallback, Simulation, SimulationResult
from lyra.sim.load import LoadSeries
from lyra.sim.metrics import SchemeMetrics, summarise
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import Scheme
from lyra.sim.traces import Trace
from lyra.sim.workload import Window, build_workload


@dataclass(frozen=True, slots=True)
class Comparison:
    results: tuple[SimulationResult, ...]
    metrics: dict[str, SchemeMetrics]
    context: dict[str, Any]
    #: The lower bound on mean JCT that no scheme can beat on this workload (:mod:`lyra.sim.bound`).
    bound: JctBound


def compare(
    trace: Trace,
    load: LoadSeries,
    scenario: Scenario,
    window: Window,
    schemes: Sequence[Scheme],
    *,
    calibration: CalibrationReport | None = None,
    progress: Callable[[str], ProgressCallback] | None = None,
) -> Comparison:
    workload = build_workload(trace, scenario, window)
    results = []
    for scheme in schemes:
        callback = progress(scheme.name) if progress is not None else None
        results.append(Simulation(workload, scenario, scheme, load, progress=callback).run())
    metrics = {result.scheme: summarise(result) for result in results}
    bound = jct_bound(workload, scenario)
    context: dict[str, Any] = {
        "inputs": {
            "trace": trace.path,
            "trace_format": trace.format.value,
            "trace_jobs": len(trace.jobs),
            "trace_rows_skipped": dict(trace.skipped),
            "load": load.path,
            "load_step_s": load.step_s,
            "load_gaps_filled": load.gaps_filled,
            "window_start_s": window.start_s,
            "window_days": window.length_s / 86_400.0,
            "jobs_in_window": len(workload.jobs),
            "jobs_clamped_to_cluster": workload.clamped,
            "elastic_jobs_drawn": sum(1 for job in workload.jobs if job.drawn_elastic),
        },
        "scenario": scenario.model_dump(mode="json"),
        "calibration": calibration.as_dict() if calibration is not None else None,
        "jct_bound": bound.as_dict(),
    }
    return Comparison(tuple(results), metrics, context, bound)
