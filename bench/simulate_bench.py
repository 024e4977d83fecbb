"""Benchmarks of the simulator: one whole-Philly-trace run per scheme (target: 60 s each on the reference machine).

``benchmarks()`` is what ``python -m bench`` collects (``--only simulate`` selects these); each run is timed
once, without a warm-up run (``repeats=1``, ``warm_up=False``): a run takes tens of seconds, and a warm-up would
double that to leave out the milliseconds a first run spends importing. ``seconds_per_scheme()`` times one run of
each scheme directly and prints seconds per scheme: ``uv run python -m bench.simulate_bench [SCHEME ...]``.

The inputs are the shipped traces (``../shared/traces`` from the repository root) with the default scenario;
without them there is nothing to time and both entry points say so instead.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import Benchmark
from lyra.sim.engine import Simulation
from lyra.sim.load import LoadSeries, read_load
from lyra.sim.scenario import Scenario, load_scenario
from lyra.sim.schemes import CONTEXT_SCHEMES, POSTER_SCHEMES, SCHEMES
from lyra.sim.traces import read_trace
from lyra.sim.workload import Window, Workload, build_workload

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
PHILLY = TRACES / "philly" / "philly.csv"
SERVEGEN = TRACES / "servegen" / "derived_language_total_rate_10min.csv"
TARGET_MS = 60_000.0


@functools.cache
def whole_philly() -> tuple[Workload, Scenario, LoadSeries]:
    trace = read_trace(PHILLY)
    scenario = load_scenario()
    return build_workload(trace, scenario, Window.of(trace, None, None)), scenario, read_load(SERVEGEN)


def _run(scheme: str) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        workload, scenario, load = whole_philly()
        return lambda: Simulation(workload, scenario, SCHEMES[scheme], load).run()

    return setup


def benchmarks() -> list[Benchmark]:
    if not (PHILLY.exists() and SERVEGEN.exists()):
        print(f"bench.simulate_bench: {TRACES} not found; no simulator benchmarks", file=sys.stderr)
        return []
    return [
        Benchmark(
            name=f"simulate/{scheme}",
            setup=_run(scheme),
            what=f"whole Philly trace (82,247 jobs, 109 days) with the ServeGen load, scheme {scheme}",
            target_ms=TARGET_MS,
            repeats=1,
            warm_up=False,
        )
        for scheme in POSTER_SCHEMES + CONTEXT_SCHEMES
    ]


def seconds_per_scheme(schemes: Sequence[str] = POSTER_SCHEMES + CONTEXT_SCHEMES) -> dict[str, float]:
    """Simulate the whole Philly trace once per scheme; print and return the seconds each took."""
    if not (PHILLY.exists() and SERVEGEN.exists()):
        print(f"{TRACES} not found: nothing to time", file=sys.stderr)
        return {}
    workload, scenario, load = whole_philly()
    seconds: dict[str, float] = {}
    for scheme in schemes:
        started = time.perf_counter()
        Simulation(workload, scenario, SCHEMES[scheme], load).run()
        seconds[scheme] = time.perf_counter() - started
        status = "pass" if seconds[scheme] * 1000 <= TARGET_MS else "MISS"
        print(f"simulate/{scheme:<9} {seconds[scheme]:7.1f} s  (target {TARGET_MS / 1000:.0f} s: {status})")
    return seconds


if __name__ == "__main__":
    seconds_per_scheme(sys.argv[1:] or POSTER_SCHEMES + CONTEXT_SCHEMES)
