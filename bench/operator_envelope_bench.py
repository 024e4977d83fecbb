"""The operator at Kubernetes' own scale envelope: 5,000 nodes and 150,000 pods, and how each cost grows to it.

``uv run python -m bench.operator_envelope_bench`` measures, at 500, 1,000, 2,000 and 5,000 nodes with 30 pods a node
(150,000 pods at 5,000 nodes, the upstream scalability limits; the GPU pods, jobs and services as in
:mod:`bench.operator_scale_bench`, the other pods DaemonSet and web pods with environment, volumes, probes and managed
fields), each size in a fresh process that runs as the operator does:

* its collector settings (:mod:`lyra.operator.heap`) from the start, then the five watch caches filled by their
  first list, from pages of 500 written as the API server sends them (JSON parsed a page at a time, slimmed);
* ``read-cold``: the first pass's read of every cached object, then the first pass's ``decide``, after which what
  survived is frozen (as the running operator does);
* ``pass``: busy passes after a burst of changes (1,000 pod watch events, 50 nodes' and 50 TrainingJobs' updates,
  applied to the caches in the timed call), each read and decided, no collection forced: the median CPU time of
  ``--repeats``, and the actions the pass decides (its writes are :mod:`bench.operator_writes_bench`'s);
* the whole process's resident memory after the caches' first list and its peak (``VmHWM``) at the end: the Python
  interpreter, Lyra and the kubernetes client imported, the caches, the readings and every pass's garbage.

Targets at 5,000 nodes and 150,000 pods: a pass <= 1 s of CPU (without its writes) and the whole process's peak
memory <= 2 GB. ``--plot PATH`` draws the growth (``uv run --extra report ...``; matplotlib).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.__main__ import load_average, machine
from bench.operator_scale_bench import NOW, PODS_KIND, PageFiles, cluster, write_pages
from lyra.kubewatch import WatchCache
from lyra.operator import heap
from lyra.operator.caches import KINDS
from lyra.operator.decide import decide
from lyra.operator.readers import Readings, read_world

SIZES = (500, 1_000, 2_000, 5_000)
PODS_PER_NODE = 30
PASS_TARGET_S = 1.0
PEAK_TARGET_MIB = 2_048
EVENTS = 1_000
CHANGES = 50
SEED = 20261126


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def _page(directory: Path, kind: str, page: int) -> list[dict[str, Any]]:
    path = directory / f"{kind}-{page:05d}.json"
    if not path.exists():
        return []
    items: list[dict[str, Any]] = json.loads(path.read_bytes())["items"]
    return items


def _burst(directory: Path, caches: Mapping[str, Any]) -> Callable[[], None]:
    """A burst of changes as in :func:`bench.operator_scale_bench.burst_of_changes`, its objects taken from a few
    of the written pages (not the whole cluster: this process holds only what the operator would)."""
    rng = random.Random(SEED)
    pages = sorted(directory.glob("pods-*.json"))
    raw_pods = _page(directory, "pods", 0) + _page(directory, "pods", 10) + _page(directory, "pods", len(pages) - 1)
    gpu = [p for p in raw_pods if PODS_KIND.keep(p)]
    other = [p for p in raw_pods if not PODS_KIND.keep(p)]
    events = [
        {"type": "MODIFIED", "object": rng.choice(gpu) if i % 10 < 3 else rng.choice(other)} for i in range(EVENTS)
    ]
    nodes = rng.sample(_page(directory, "nodes", 0), CHANGES)
    jobs = rng.sample(_page(directory, "jobs", 0), CHANGES)
    version = iter(range(10_000, 10**9))

    def changed(raw: dict[str, Any]) -> dict[str, Any]:
        return {**raw, "metadata": {**raw["metadata"], "resourceVersion": str(next(version))}}

    def apply() -> None:
        for event in events:
            caches["pods"].apply(event)
        for name, items in (("nodes", nodes), ("jobs", jobs)):
            for raw in items:
                caches[name].apply({"type": "MODIFIED", "object": changed(raw)})

    return apply


def measure(directory: Path, repeats: int) -> dict[str, float]:
    """In this (fresh) process, as the operator runs: the caches listed from ``directory``'s pages, a first pass,
    then ``repeats`` busy passes; CPU seconds, actions and memory (MiB)."""
    heap.tune_collector()
    started = _status_kib("VmRSS")
    caches = {name: WatchCache(KINDS[name], PageFiles(directory, name)) for name in KINDS}
    listing = time.process_time()
    for cache in caches.values():
        cache.start()
        cache.wait_synced(3600)
    listed_s = time.process_time() - listing
    listed = _status_kib("VmRSS")
    readings = Readings()

    def read() -> Any:
        snapshot = {name: cache.snapshot() for name, cache in caches.items()}
        return read_world(NOW, **snapshot, readings=readings)

    start = time.process_time()
    world = read()
    cold_s = time.process_time() - start
    start = time.process_time()
    decide(world)
    first_decide_s = time.process_time() - start
    burst = _burst(directory, caches)
    heap.freeze_survivors()
    passes: list[float] = []
    actions = 0
    for _ in range(repeats):
        start = time.process_time()
        burst()
        actions = len(decide(read()).actions)
        passes.append(time.process_time() - start)
    for cache in caches.values():
        cache.stop()
    gc.collect()
    return {
        "list_s": listed_s,
        "read_cold_s": cold_s,
        "first_decide_s": first_decide_s,
        "pass_s": statistics.median(passes),
        "pass_max_s": max(passes),
        "actions": actions,
        "start_mib": started / 1024,
        "listed_mib": listed / 1024,
        "peak_mib": _status_kib("VmHWM") / 1024,
        "gpu_pods": len(caches["pods"]),
    }


def _run(command: list[str]) -> str:
    return subprocess.run([sys.executable, "-m", "bench.operator_envelope_bench", *command], capture_output=True,
                          text=True, check=True, timeout=3600).stdout  # fmt: skip


def envelope(sizes: tuple[int, ...], repeats: int) -> list[dict[str, float]]:
    rows = []
    for nodes in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            listed = int(_run(["--write-pages", str(nodes), scratch]).strip())
            row = json.loads(_run(["--measure", scratch, str(repeats)]))
        row |= {"nodes": nodes, "pods": nodes * PODS_PER_NODE, "objects": listed}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        "| nodes | pods (GPU pods kept) | first list CPU s | read-cold CPU s | first decide CPU s | busy pass CPU s "
        "(median) | largest | actions | RSS after list MiB | peak RSS (VmHWM) MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['nodes']:,} | {r['pods']:,} ({r['gpu_pods']:,}) | {r['list_s']:.2f} | {r['read_cold_s']:.3f} | "
        f"{r['first_decide_s']:.3f} | **{r['pass_s']:.3f}** | {r['pass_max_s']:.3f} | {r['actions']:,} | "
        f"{r['listed_mib']:.0f} | **{r['peak_mib']:.0f}** |"
        for r in rows
    ]
    return "\n".join(lines)


def plot(rows: list[dict[str, float]], path: Path) -> None:
    """CPU seconds (read-cold, first decide, busy pass) and peak memory against nodes, on two axes."""
    import matplotlib  # noqa: PLC0415 - the report extra, needed only to plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    nodes = [r["nodes"] for r in rows]
    figure, (cpu, memory) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("pass_s", "busy pass"), ("read_cold_s", "first read"), ("first_decide_s", "first decide")):
        cpu.plot(nodes, [r[key] for r in rows], marker="o", label=label)
    cpu.axhline(PASS_TARGET_S, color="grey", linestyle="--", label="pass target")
    cpu.set_xlabel(f"nodes ({PODS_PER_NODE} pods a node)")
    cpu.set_ylabel("CPU seconds")
    cpu.legend()
    memory.plot(nodes, [r["peak_mib"] for r in rows], marker="o", label="peak (VmHWM)")
    memory.plot(nodes, [r["listed_mib"] for r in rows], marker="o", label="after the first list")
    memory.axhline(PEAK_TARGET_MIB, color="grey", linestyle="--", label="target")
    memory.set_xlabel(f"nodes ({PODS_PER_NODE} pods a node)")
    memory.set_ylabel("whole process RSS, MiB")
    memory.legend()
    figure.suptitle("The operator from 500 to 5,000 nodes (bench/operator_envelope_bench.py)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def _count(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(_count(part, 200) for part in text.split(","))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.operator_envelope_bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sizes", type=_sizes, default=SIZES, help="node counts, comma-separated")
    parser.add_argument("--repeats", type=lambda t: _count(t, 1), default=5, help="busy passes a size (5)")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="draw the growth into this file (matplotlib)")
    parser.add_argument("--write-pages", nargs=2, metavar=("NODES", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs=2, metavar=("DIR", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_pages is not None:
        nodes = _count(args.write_pages[0], 200)
        write_pages(nodes, Path(args.write_pages[1]), pods_per_node=PODS_PER_NODE)
        print(sum(len(items) for items in cluster(nodes, pods_per_node=PODS_PER_NODE).values()))
        return 0
    if args.measure is not None:
        print(json.dumps(measure(Path(args.measure[0]), int(args.measure[1]))))
        return 0
    if args.plot is not None and args.plot.suffix != ".png":
        parser.error(f"--plot: the file must end in .png, got {args.plot}")
    print(f"Machine: {machine()}")
    rows = envelope(args.sizes, args.repeats)
    print(table(rows))
    if args.plot is not None:
        plot(rows, args.plot)
        print(f"plot written to {args.plot}")
    print(f"load average at the end {load_average()}; targets at the largest size: a pass <= {PASS_TARGET_S} s of "
          f"CPU, peak RSS <= {PEAK_TARGET_MIB} MiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
