"""Run Lyra's benchmarks: ``uv run python -m bench [--only NAME] [--repeats N] [--markdown] [--list]``.

Benchmark modules are listed in ``MODULES``; a module that is not there yet (e.g. the simulator's) is skipped with
a note. Each module exposes ``benchmarks() -> list[bench.Benchmark]`` and may expose ``ratios() ->
list[bench.Ratio]``, comparisons of two of its benchmarks, measured interleaved in the same run.

``--only`` selects benchmarks by exact name, by name prefix (``reclaim`` or ``reclaim/lyra``) or by module
(``core_bench``); repeat it to select several.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from bench import Benchmark, Measurement, Ratio, measure, measure_ratio

#: Benchmark modules, in the order their tables are printed. Optional ones may be absent.
MODULES = ["bench.core_bench", "bench.operator_bench", "bench.operator_scale_bench", "bench.simulate_bench"]


@dataclass(frozen=True)
class Suite:
    module: str
    benchmarks: list[Benchmark]
    ratios: list[Ratio]


def load_suites(modules: Sequence[str] = MODULES) -> tuple[list[Suite], list[str]]:
    """Import every benchmark module; return the suites and a note for each module that is not present."""
    suites: list[Suite] = []
    missing: list[str] = []
    for name in modules:
        try:
            module: ModuleType = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            missing.append(name)
            continue
        ratios = module.ratios() if hasattr(module, "ratios") else []
        suites.append(Suite(name, list(module.benchmarks()), list(ratios)))
    return suites, missing


def selected(suite: Suite, benchmark: Benchmark, only: Sequence[str]) -> bool:
    if not only:
        return True
    short = suite.module.rsplit(".", 1)[-1]
    return any(
        pattern in (benchmark.name, suite.module, short) or benchmark.name.startswith(pattern.rstrip("/") + "/")
        for pattern in only
    )


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average at start {load_average()}"
    )


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (runnable processes; this machine has ``os.cpu_count()``)."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _fmt(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}"


def text_table(results: Sequence[Measurement]) -> str:
    width = max([len("benchmark"), *(len(r.name) for r in results)])
    lines = [
        f"{'benchmark':<{width}}  {'cpu ms':>9}  {'wall ms':>9}  {'min ms':>8}  {'n':>3}  {'target ms':>9}  status"
    ]
    for r in results:
        lines.append(
            f"{r.name:<{width}}  {_fmt(r.cpu_median_ms):>9}  {_fmt(r.median_ms):>9}  {_fmt(r.min_ms):>8}  "
            f"{r.repeats:>3}  {_fmt(r.target_ms):>9}  {r.status}"
        )
    return "\n".join(lines)


def markdown_table(results: Sequence[Measurement]) -> str:
    lines = [
        "| benchmark | CPU ms (median) | wall ms (median) | min wall ms | repeats | target ms (CPU) | status | case |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| `{r.name}` | {_fmt(r.cpu_median_ms)} | {_fmt(r.median_ms)} | {_fmt(r.min_ms)} | {r.repeats} | "
            f"{_fmt(r.target_ms)} | {r.status} | {r.what} |"
        )
    return "\n".join(lines)


def measure_ratios(
    ratios: Sequence[Ratio], chosen: Sequence[Benchmark], repeats: int | None
) -> list[tuple[Ratio, float]]:
    """Every ratio whose two benchmarks were both selected, measured interleaved."""
    by_name = {b.name: b for b in chosen}
    measured = []
    for ratio in ratios:
        top, bottom = by_name.get(ratio.numerator), by_name.get(ratio.denominator)
        if top is not None and bottom is not None:
            measured.append((ratio, measure_ratio(top, bottom, repeats)))
            print(f"  {ratio.name}: {measured[-1][1]:.2f}x", file=sys.stderr, flush=True)
    return measured


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="benchmark, prefix or module")
    parser.add_argument("--repeats", type=int, default=None, help="override every benchmark's repeat count")
    parser.add_argument("--markdown", action="store_true", help="also print a block for docs/benchmarks.md")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)

    suites, missing = load_suites()
    for name in missing:
        print(f"(skipping {name}: not present)", file=sys.stderr)
    chosen = [(suite, b) for suite in suites for b in suite.benchmarks if selected(suite, b, args.only)]
    if args.list:
        for suite, b in chosen:
            print(f"{b.name:<45} {suite.module:<22} {b.what}")
        return 0
    if not chosen:
        print(f"no benchmark matches {args.only}", file=sys.stderr)
        return 2

    header = machine()
    print(header)
    results: list[Measurement] = []
    for _, benchmark in chosen:
        started = time.perf_counter()
        result = measure(benchmark, args.repeats)
        results.append(result)
        print(
            f"  {result.name}: {_fmt(result.cpu_median_ms)} ms CPU, {_fmt(result.median_ms)} ms wall"
            f" ({time.perf_counter() - started:.0f} s with its setup and every call)",
            file=sys.stderr,
            flush=True,
        )
    ratios = measure_ratios([r for suite in suites for r in suite.ratios], [b for _, b in chosen], args.repeats)
    print()
    print(text_table(results))
    if ratios:
        print("\nratios (interleaved, median of per-round ratios of CPU time):")
        for ratio, value in ratios:
            print(f"  {ratio.name}: {value:.2f}x")
    if args.markdown:
        print("\n<!-- generated by: uv run python -m bench --markdown -->")
        print(f"Machine: {header}; load average at the end {load_average()}\n")
        print(markdown_table(results))
        if ratios:
            print("\n| ratio (interleaved, median of per-round ratios of CPU time) | value |\n|---|---:|")
            for ratio, value in ratios:
                print(f"| {ratio.name} | {value:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
