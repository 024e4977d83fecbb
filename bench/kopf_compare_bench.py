"""The operator's two watch layers side by side on the live benchmark: ``kubewatch`` (Lyra's list-and-watch caches)
and ``kopf`` (kopf's indexes, ``lyra operator --watch-layer kopf``), the same pass on each.

``uv run python -m bench.kopf_compare_bench [--nodes N --gpu-pods G --other-pods P --jobs J --layers kubewatch,kopf]``
runs :func:`bench.operator_live_bench.run_live` once per layer, one after the other in one process (each on a control
plane of its own, the layer chosen through ``$LYRA_WATCH_LAYER``, which the operator it starts inherits), and reports
per layer: the LIST requests the operator made (pages, from the API server's audit log, over the whole run), its CPU
time over the whole run and over the stream of changes, its peak resident memory (``VmHWM``, read from ``/proc``
while it runs: the live benchmark reads ``VmRSS`` only at the stream's end), change to action (median, p95) and the
live benchmark's checks; then each figure of kopf's as a ratio of kubewatch's in the same run (the machine is noisy:
compare the ratios, not the figures across runs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from bench.__main__ import load_average
from bench.operator_live_bench import LiveResult, LiveSizes, run_live
from bench.scheduling_bench import _cpu_seconds
from lyra.cli.operator_commands import WATCH_LAYER_ENV
from lyra.operator.caches import WATCH_LAYERS

POLL_S = 0.5


def _status_kib(pid: int, field: str) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _operator_pids() -> list[int]:
    """This process's children that run ``lyra operator``."""
    mine = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if parent == mine and b"lyra" in command and b"operator" in command:
            found.append(int(entry.name))
    return found


class Peak:
    """The operator's peak resident memory and its CPU time, read from ``/proc`` every :data:`POLL_S` while it runs
    (both only grow, so the last reading before it exits is the figure, short of one poll)."""

    def __init__(self) -> None:
        self.hwm_kib = 0
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            for pid in _operator_pids():
                self.hwm_kib = max(self.hwm_kib, _status_kib(pid, "VmHWM"))
                with contextlib.suppress(OSError, IndexError):  # it has just exited
                    self.cpu_s = max(self.cpu_s, _cpu_seconds(pid))

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True, slots=True)
class LayerRun:
    layer: str
    result: LiveResult
    hwm_mib: float
    total_cpu_s: float

    @property
    def lists(self) -> int:
        return len(self.result.first_lists) + len(self.result.lists_in_passes)

    @property
    def median_s(self) -> float:
        latencies = self.result.latencies
        return statistics.median(latencies) if latencies else float("nan")

    @property
    def p95_s(self) -> float:
        latencies = self.result.latencies
        return latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] if latencies else float("nan")


def run_layer(layer: str, sizes: LiveSizes) -> LayerRun:
    os.environ[WATCH_LAYER_ENV] = layer
    try:
        with tempfile.TemporaryDirectory(prefix=f"lyra-{layer}-bench-") as directory, Peak() as peak:
            result = run_live(sizes, Path(directory))
    finally:
        os.environ.pop(WATCH_LAYER_ENV, None)
    return LayerRun(layer, result, peak.hwm_kib / 1024, peak.cpu_s)


def report(runs: list[LayerRun], start_load: str) -> str:
    sizes = runs[0].result.sizes
    lines = [
        f"watch layers: {sizes.nodes} nodes, {sizes.gpu_pods} GPU pods + {sizes.other_pods} other pods, {sizes.jobs} "
        f"jobs; load average at start {start_load}, at the end {load_average()}",
        "| layer | ready after | LISTs (pages, whole run) | watched | CPU, whole run | CPU, stream | VmHWM | "
        "RSS at the end | change to action median | p95 | missed | checks |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        result = run.result
        problems = result.problems()
        lines.append(
            f"| {run.layer} | {result.synced_s:.1f} s | {run.lists} | {', '.join(sorted(result.watched))} | "
            f"{run.total_cpu_s:.1f} s | {result.cpu_s:.1f} s | {run.hwm_mib:.0f} MiB | {result.rss_mib:.0f} MiB | "
            f"{run.median_s:.2f} s | {run.p95_s:.2f} s | {len(result.missed)} | "
            f"{'pass' if not problems else 'FAILED: ' + '; '.join(problems[:5])} |"
        )
    if len(runs) == 2:
        base, other = runs
        pairs = [
            ("LISTs", base.lists, other.lists),
            ("CPU, whole run", base.total_cpu_s, other.total_cpu_s),
            ("CPU, stream", base.result.cpu_s, other.result.cpu_s),
            ("VmHWM", base.hwm_mib, other.hwm_mib),
            ("change to action median", base.median_s, other.median_s),
            ("p95", base.p95_s, other.p95_s),
        ]
        ratios = ", ".join(f"{name} {b / a:.2f}" if a else f"{name} -" for name, a, b in pairs)
        lines.append(f"{other.layer} / {base.layer} in this run: {ratios}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = LiveSizes()
    parser = argparse.ArgumentParser(prog="python -m bench.kopf_compare_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--gpu-pods", type=int, default=defaults.gpu_pods)
    parser.add_argument("--other-pods", type=int, default=defaults.other_pods)
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--layers", default=",".join(WATCH_LAYERS), help="comma-separated, run in this order")
    args = parser.parse_args(argv)
    layers = [layer for layer in args.layers.split(",") if layer]
    unknown = [layer for layer in layers if layer not in WATCH_LAYERS]
    if unknown or not layers:
        parser.error(f"--layers: {', '.join(unknown) or 'none given'}: not watch layers (of {', '.join(WATCH_LAYERS)})")
    sizes = LiveSizes(nodes=args.nodes, gpu_pods=args.gpu_pods, other_pods=args.other_pods, jobs=args.jobs)
    problem = sizes.problem()
    if problem is not None:
        parser.error(problem)
    start_load = load_average()
    runs = []
    for layer in layers:
        print(f"{layer}:", file=sys.stderr, flush=True)
        runs.append(run_layer(layer, sizes))
        print(report(runs[-1:], start_load), file=sys.stderr, flush=True)  # kept if a later layer's run fails
    print(report(runs, start_load))
    return 1 if any(run.result.problems() for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
