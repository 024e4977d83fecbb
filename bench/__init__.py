"""Lyra's benchmarks: ``uv run python -m bench`` (``make bench``) times the policy core and prints a table.

A benchmark module exposes ``benchmarks() -> list[Benchmark]`` and is listed in ``bench.__main__.MODULES``. Each
:class:`Benchmark` builds its input in ``setup`` (not timed; deterministic from a seed) and returns the callable
that is timed. Each call is timed twice: wall time (``perf_counter``) and the process's CPU time
(``process_time``), so that a figure measured on a busy machine can be checked: other processes lengthen the wall
time of a single-threaded call, not its CPU time. Targets are judged on CPU time (every benchmark here is
single-threaded) and are information, not assertions: a miss is reported, never raised. Ratios of two benchmarks
are measured interleaved and timed in CPU time too (:func:`measure_ratio`).

A benchmark that starts processes starts each as its own process group (:func:`start_process`) and stops the
group in ``finally`` (:func:`stop_process_group`), within :func:`stopped_on_signals`: stopped by ``timeout`` or
Ctrl-C, it leaves no process behind (``tests/unit/bench``).
"""

from __future__ import annotations

import gc
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from lyra.cli.stopping import stopped_by, stopped_exit_code, stopped_like_ctrl_c


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
    #: Make one untimed call first (the first call's imports, caches and lazily built tables left out): off for a
    #: call that takes tens of seconds, which a warm-up would double for a few milliseconds it leaves out.
    warm_up: bool = True


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
    """Median wall and CPU time of ``repeats`` calls, after one warm-up call unless the benchmark says not to;
    garbage is collected before each call unless the benchmark says not to."""
    call = benchmark.setup()
    samples: list[float] = []
    cpu: list[float] = []
    frozen = False
    try:
        if benchmark.warm_up:
            call()
        frozen = _freeze_setup() if benchmark.collect_garbage else False
        for _ in range(repeats or benchmark.repeats):
            if benchmark.collect_garbage:
                gc.collect()
            start, start_cpu = time.perf_counter(), time.process_time()
            call()
            cpu.append((time.process_time() - start_cpu) * 1000)
            samples.append((time.perf_counter() - start) * 1000)
    finally:
        if benchmark.collect_garbage and frozen:
            gc.unfreeze()
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


def _freeze_setup() -> bool:
    """Collect once, then move every object alive (the setup's input, the modules) out of the collector's sight,
    so that a collection before each call scans only what earlier calls left: a full collection over a 5,000-node
    setup took about a second per repeat and made a combined run take minutes. ``False`` if the caller had frozen
    objects already (their freeze is theirs to undo)."""
    if gc.get_freeze_count():
        gc.collect()
        return False
    gc.collect()
    gc.freeze()
    return True


def measure_ratio(
    numerator: Benchmark, denominator: Benchmark, repeats: int | None = None, *, clock: str = "cpu"
) -> float:
    """Median of per-round time ratios, the two calls alternating in each round so that machine noise (other
    processes, frequency changes) hits both alike. Timed in CPU time (``clock="cpu"``, as targets are judged) or
    wall time (``clock="wall"``)."""
    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock must be 'cpu' or 'wall', not {clock!r}")
    timer = time.process_time if clock == "cpu" else time.perf_counter
    top, bottom = numerator.setup(), denominator.setup()
    top()
    bottom()
    frozen = _freeze_setup()
    ratios: list[float] = []
    try:
        for _ in range(repeats or max(numerator.repeats, denominator.repeats)):
            times = []
            for call in (top, bottom):
                gc.collect()
                start = timer()
                call()
                times.append(timer() - start)
            ratios.append(times[0] / times[1] if times[1] > 0 else math.inf)
    finally:
        if frozen:
            gc.unfreeze()
    return statistics.median(ratios)


def stop_process_group(process: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    """Stop ``process`` and everything it started: SIGTERM to its process group, SIGKILL to what is left after
    ``timeout_s``. The process must lead its own group (:func:`start_process`)."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the group's stragglers too, even once its leader is gone
    process.wait()


def start_process(argv: Sequence[str], **options: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group, so that :func:`stop_process_group` stops it with all
    it started. Pair it with :func:`stopped_on_signals` so that a benchmark stopped by ``timeout`` (SIGTERM) or
    Ctrl-C (SIGINT) still runs its ``finally`` blocks."""
    return subprocess.Popen(list(argv), start_new_session=True, **options)


@contextmanager
def stopped_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP unwind it as Ctrl-C's SIGINT does (:mod:`lyra.cli.stopping`), so that
    the ``finally`` blocks that stop a benchmark's processes run when it is stopped from outside; a second signal
    does not cut that short. The benchmark then ends with one line and the shell's code for the signal (128 plus
    its number), not a traceback."""
    try:
        with stopped_like_ctrl_c():
            yield
    except KeyboardInterrupt as interrupt:
        print(f"stopped by {stopped_by(interrupt)}; the processes the benchmark started are stopped", file=sys.stderr)
        raise SystemExit(stopped_exit_code(interrupt)) from None
