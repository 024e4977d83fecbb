"""``allocate_workers`` today against an earlier commit's, in one process: the CPU time of each on the core
benchmark's 2,000 jobs (:func:`bench.core_bench.allocation_cluster`), interleaved round by round, and the median of
the per-round ratios (today / then). The earlier allocation package and fluid model are taken from git into a
temporary directory and imported under another name; both decide the same snapshot, and their plans must agree.

``uv run python -m bench.allocation_ab --base eb09324 --rounds 5``
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench.core_bench import allocation_cluster
from lyra.core.allocation import AllocationPlan, allocate_workers

_FILES = ("__init__", "admission", "explanation", "plan", "problem", "search")


def earlier_package(commit: str, directory: Path) -> ModuleType:
    """``lyra.core.allocation`` (and ``lyra.core.fluid``) at ``commit``, importable as ``allocation_then``."""
    package = directory / "allocation_then"
    package.mkdir()

    def show(path: str) -> str:
        return subprocess.run(["git", "show", f"{commit}:{path}"], check=True, capture_output=True, text=True).stdout

    for name in _FILES:
        source = show(f"src/lyra/core/allocation/{name}.py")
        source = source.replace("lyra.core.allocation", "allocation_then").replace(
            "lyra.core.fluid", "allocation_then.fluid"
        )
        (package / f"{name}.py").write_text(source, encoding="utf-8")
    (package / "fluid.py").write_text(show("src/lyra/core/fluid.py"), encoding="utf-8")
    sys.path.insert(0, str(directory))
    return importlib.import_module("allocation_then")


def cpu_seconds(call: Callable[[], AllocationPlan]) -> tuple[float, AllocationPlan]:
    start = time.process_time()
    plan = call()
    return time.process_time() - start, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="eb09324", help="the earlier commit (default: eb09324)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    snapshot = allocation_cluster()
    with tempfile.TemporaryDirectory() as directory:
        try:
            then = earlier_package(args.base, Path(directory))
        except subprocess.CalledProcessError as error:
            parser.error(f"cannot read the allocation package at {args.base}: {error.stderr.strip()}")
        for restart_cost_s in (None, 60.0):
            label = "no migration" if restart_cost_s is None else f"restart_cost_s={restart_cost_s:g}"
            compare(
                f"allocate_workers, {len(snapshot.jobs):,} jobs, {label}",
                lambda: then.allocate_workers(snapshot, restart_cost_s=restart_cost_s),  # noqa: B023
                lambda: allocate_workers(snapshot, restart_cost_s=restart_cost_s),  # noqa: B023
                args.base,
                args.rounds,
            )


def compare(
    title: str, then: Callable[[], AllocationPlan], now: Callable[[], AllocationPlan], base: str, rounds: int
) -> None:
    """One warm-up call of each, then ``rounds`` rounds of (then, today), and the figures."""
    then(), now()
    ratios, now_times, then_times = [], [], []
    for _ in range(rounds):
        then_s, then_plan = cpu_seconds(then)
        now_s, now_plan = cpu_seconds(now)
        if (dict(now_plan.placement), now_plan.evaluations) != (dict(then_plan.placement), then_plan.evaluations):
            raise SystemExit("the two packages decide differently")
        then_times.append(then_s)
        now_times.append(now_s)
        ratios.append(now_s / then_s)
    print(f"{title}: {rounds} interleaved rounds, CPU seconds")
    print(f"  at {base}: {_figures(then_times)}")
    print(f"  today: {_figures(now_times)}")
    print(f"  today / then per round: {_figures(ratios)}")


def _figures(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values) + f"; median {statistics.median(values):.3f}"


if __name__ == "__main__":
    main()
