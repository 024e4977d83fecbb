"""Small synthetic inputs for the simulator tests, written as data."""

from __future__ import annotations

from pathlib import Path

from lyra.sim.load import LoadSeries
from lyra.sim.scenario import Scenario, parse_scenario
from lyra.sim.traces import Trace, TraceFormat, TraceJob


def trace(*jobs: tuple[float, float, int]) -> Trace:
    """Jobs as (submit_s, duration_s, num_gpus), named job-0, job-1, ... in the order given."""
    rows = tuple(TraceJob(f"job-{i}", submit, duration, gpus) for i, (submit, duration, gpus) in enumerate(jobs))
    return Trace("<test>", TraceFormat.GENERIC, tuple(sorted(rows, key=lambda j: (j.submit_s, j.name))))


def flat_load(rate: float, *, step_s: float = 600.0, steps: int = 144) -> LoadSeries:
    return LoadSeries("<test>", step_s, (rate,) * steps)


def scenario(text: str = "") -> Scenario:
    """A tiny cluster (1 training server of 8 GPUs, 2 inference servers of 8) plus any YAML overrides."""
    base = """
training: {servers: 1, gpus_per_server: 8}
inference: {servers: 2, gpus_per_server: 8, req_per_server: 100.0}
preemption: {restart_cost_s: 0, resize_cost_s: 0, checkpoint_interval_s: 1000000}
durations: {knowledge: exact}
"""
    merged = base + text
    return parse_scenario(merged)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
