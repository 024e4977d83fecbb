"""Lyra's benchmarks: ``uv run python -m bench`` (``make bench``) times the policy core and prints a table.

A benchmark module exposes ``benchmarks() -> list[Benchmark]`` and is listed in ``bench.__main__.MODULES``. Each
:class:`Benchmark` builds its input in ``setup`` (not timed; deterministic from a seed) and returns the callable
that is timed. Each call is timed twice: wall time (``perf_counter``) and the process's CPU time
(``process_time``), so that a figure measured on a busy machine can be checked: other processes lengthen the wall
time of a single-threaded call, not its CPU time. Targets are judged on CPU time (every benchmark here is
single-threaded) and are information, not assertions: a miss is reported, never raised.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One timed case: ``setup()`` builds the input and returns the call to time."""

    name: str
    setup: Callable[[], Callable[[], object]]
    what: str
    target_ms: float | None = None
    repeats: int = 15
    #: Collect garbage before each call (the call pays only for its own): off for a case that measures what a
    #: process pays call after call, collections included.
    collect_garbage: bool = True
    #: Run after the last call: puts back what ``setup`` changed for the whole process (the collector's state).
    after: Callable[[], None] | None = None


@dataclass(frozen=True)
class Measurement:
    name: str
    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    target_ms: float | None
    what: str
    cpu_median_ms: float = 0.0

    @property
    def status(self) -> str:
        if self.target_ms is None:
            return "-"
        return "pass" if self.cpu_median_ms <= self.target_ms else "MISS"


@dataclass(frozen=True)
class Ratio:
    """A comparison of two benchmarks: ``numerator`` time / ``denominator`` time, measured interleaved."""

    name: str
    numerator: str
    denominator: str


def measure(benchmark: Benchmark, repeats: int | None = None) -> Measurement:
    """Median wall and CPU time of ``repeats`` calls after one warm-up call; garbage is collected before each call
    unless the benchmark says not to."""
    call = benchmark.setup()
    samples: list[float] = []
    cpu: list[float] = []
    try:
        call()
        for _ in range(repeats or benchmark.repeats):
            if benchmark.collect_garbage:
                gc.collect()
            start, start_cpu = time.perf_counter(), time.process_time()
            call()
            cpu.append((time.process_time() - start_cpu) * 1000)
            samples.append((time.perf_counter() - start) * 1000)
    finally:
        if benchmark.after is not None:
            benchmark.after()
    return Measurement(
        name=benchmark.name,
        median_ms=statistics.median(samples),
        min_ms=min(samples),
        max_ms=max(samples),
        repeats=len(samples),
        target_ms=benchmark.target_ms,
        what=benchmark.what,
        cpu_median_ms=statistics.median(cpu),
    )


def measure_ratio(numerator: Benchmark, denominator: Benchmark, repeats: int | None = None) -> float:
    """Median of per-round time ratios, the two calls alternating in each round so that machine noise (other
    processes, frequency changes) hits both alike."""
    top, bottom = numerator.setup(), denominator.setup()
    top()
    bottom()
    ratios: list[float] = []
    for _ in range(repeats or max(numerator.repeats, denominator.repeats)):
        times = []
        for call in (top, bottom):
            gc.collect()
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        ratios.append(times[0] / times[1])
    return statistics.median(ratios)
