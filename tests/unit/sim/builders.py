"""Small synthetic inputs for the simulator tests, written as data.

:data:`TINY` is the cluster and world of every golden run. It states every knob that changes a result, set so that
a hand computation stays short: one 8-GPU V100 training server (speed 1.0), two 8-GPU T4 inference servers (speed
0.4, 100 req/s each, no headroom), every job fits a T4's memory, linear scaling, no elastic job, free preemption
(no restart or resize cost, no grace, no drain, no hysteresis, checkpoints too rare to matter), exact durations,
a decision at every event. A test overrides only what it is about: ``scenario("preemption: {checkpoint_grace_s:
60}")`` changes the grace and keeps every other knob of :data:`TINY` (the override is merged field by field).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lyra.sim.engine import Simulation, SimulationResult
from lyra.sim.load import LoadSeries
from lyra.sim.scenario import Scenario, parse_scenario
from lyra.sim.schemes import SCHEMES
from lyra.sim.traces import Trace, TraceFormat, TraceJob
from lyra.sim.workload import Window, build_workload

TINY = """
training: {servers: 1, gpus_per_server: 8, gpu_type: V100}
inference: {servers: 2, gpus_per_server: 8, gpu_type: T4, req_per_server: 100.0, headroom_share: 0}
speed: {V100: 1.0, T4: 0.4}
loaning: {lend_hysteresis_s: 0, drain_s: 0}
memory: {inference_fit_share: 1}
scaling: {overhead: 0}
elasticity: {share: 0, min_factor: 0.5, max_factor: 2, mixing_share: 0}
preemption:
  restart_cost_s: 0
  resize_cost_s: 0
  checkpoint_interval_s: 1000000
  checkpoint_grace_s: 0
  saves_on_signal: false
durations: {knowledge: exact, sigma: 0}
scheduler:
  decision_interval_s: 0
  rebalance_interval_s: 600
  view_jobs: 8
  search_evaluations: 4
  las_thresholds_gpu_s: [3600, 36000]
  migration: true
seed: 0
"""


def trace(*jobs: tuple[float, float, int]) -> Trace:
    """Jobs as (submit_s, duration_s, num_gpus), named job-0, job-1, ... in the order given."""
    rows = tuple(TraceJob(f"job-{i}", submit, duration, gpus) for i, (submit, duration, gpus) in enumerate(jobs))
    return Trace("<test>", TraceFormat.GENERIC, tuple(sorted(rows, key=lambda j: (j.submit_s, j.name))))


def flat_load(rate: float, *, step_s: float = 600.0, steps: int = 144) -> LoadSeries:
    return LoadSeries("<test>", step_s, (rate,) * steps)


def stepped_load(*rates: float, step_s: float = 600.0, steps: int = 144) -> LoadSeries:
    """One rate per load step from midnight, the last one held to the end of the day:
    ``stepped_load(0, 200)`` is 0 req/s for the first 600 s and 200 req/s after."""
    held = (rates[-1],) * (steps - len(rates))
    return LoadSeries("<test>", step_s, (*(float(r) for r in rates), *held))


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def scenario(text: str = "") -> Scenario:
    """:data:`TINY` with the YAML ``text`` merged into it field by field."""
    base = yaml.safe_load(TINY)
    override = yaml.safe_load(text) or {}
    return parse_scenario(yaml.safe_dump(_merge(base, override)), "<tiny>")


def simulate(
    scheme: str,
    jobs: Trace,
    *,
    load: LoadSeries | None = None,
    setup: Scenario | None = None,
    length_s: float = 200.0,
) -> SimulationResult:
    """One scheme over ``jobs`` on :data:`TINY` (or ``setup``), with no inference demand unless ``load`` says."""
    chosen = setup or scenario()
    workload = build_workload(jobs, chosen, Window(0.0, length_s))
    return Simulation(workload, chosen, SCHEMES[scheme], load or flat_load(0.0)).run()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
