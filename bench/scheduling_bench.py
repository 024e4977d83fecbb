"""Scheduling throughput of the real kube-scheduler on the local control plane, with and without Lyra's extender.

``uv run python -m bench.scheduling_bench [--nodes 500 5000] [--rounds 3]`` (``make bench`` runs 500 nodes; needs the
cached binaries, ``make binaries``) starts a local control plane with N KWOK GPU nodes (40% training A100 x 8, 60%
inference T4 x 8, a third of those labelled loaned) and schedules 1,000 GPU pods (inference replicas, base and
flexible workers of 100 jobs, one or two GPUs each).

**What is timed: scheduling alone.** The kube-scheduler that will bind the run's pods is held (``SIGSTOP``) while
they are created, then resumed, and the run is timed from the resume until every pod is bound. On a small machine the
API server creates pods no faster than kube-scheduler binds them, extender or not, so timing from the first create
measured creation (every pod was bound within 0.7 s of the last create, in every mode) and hid what each scheduling
cycle waits on the extender. ``--while-creating`` times that way still (from the first create, the scheduler running),
as every run recorded in docs/benchmarks.md before the held runs was.

Interleaved: each round runs with the extender (nodeCacheCapable, as ``lyra cluster up`` configures it) between two runs
without it, which count as one (their pods over their total time); the ratio is the median of the rounds' ratios (target
>= 0.9x). Beside each rate, kube-scheduler's CPU time over the timed span (and the extender's), from ``/proc``: the
extender costs the scheduler its round trips, and both share the machine's cores. Pods are created from 16 threads. With
``--floor``, each round also runs the second scheduler against an extender that answers at once and scores nothing
(:mod:`bench.null_extender`): what one round trip per pod costs whatever the extender does, and, as the ratio of the
extender's rate to that one, what its own work costs beyond it; and against the same null extender written in Go
(``bench/null_extender_go``, built with the Go toolchain that builds the cluster's binaries, into the cache): the floor
of a round trip per pod whatever the extender's language. With ``--probes``, each round also runs the Go null extender
as it is, answering a fixed time late (latency and no work), and decoding each request to score a fixed number of the
nodes it names (the work and the answer's length of a real extender, with no view behind it): what kube-scheduler pays
for an answer's latency and for its length, each apart from the other.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from bench import start_process, stop_process_group, stopped_on_signals
from bench.__main__ import load_average
from bench.extender_bench import wait_until_ready
from lyra.localcluster import componentconfig, gobuild, populate
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.locations import cache_root
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.profile import parse_profile
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import wait_for

PODS = 1_000
#: The fewest nodes that hold every pod: 500 base workers (750 GPUs) on the A100s, 40% of the nodes with 8 each.
MIN_NODES = 300
TARGET_RATIO = 0.9
T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
#: The second kube-scheduler's profile: the one that calls the extender.
EXTENDER_SCHEDULER = "with-lyra-extender"


def loaned_nodes(nodes: int) -> int:
    """Inference nodes labelled loaned: a third of them."""
    return nodes * 3 // 5 // 3


def profile(nodes: int = 500) -> Any:
    """``nodes`` KWOK GPU nodes: 40% training A100 x 8, 60% inference T4 x 8."""
    training, inference = nodes * 2 // 5, nodes - nodes * 2 // 5
    group = {"count": 0, "cpu": "96", "memory": "512Gi", "pods": 110}
    return parse_profile(
        {
            "name": f"bench-{nodes}",
            "nodeGroups": [
                group
                | {"name": "training-a100", "pool": "training", "count": training,
                   "gpu": {"product": A100, "count": 8, "memoryMiB": 81920}},
                group
                | {"name": "inference-t4", "pool": "inference", "count": inference,
                   "gpu": {"product": T4, "count": 8, "memoryMiB": 15360}},
            ],
        },
        "bench",
    )  # fmt: skip


def pods(scheduler_name: str | None = None) -> list[dict[str, Any]]:
    """The run's 1,000 GPU pods, for the scheduler named ``scheduler_name`` (``None``: the default one)."""
    made = []
    for index in range(PODS):
        kind = index % 4
        labels: dict[str, str]
        selector: dict[str, str] = {}
        if kind == 0:
            labels = {"lyra.dev/role": "inference"}
        else:
            job = f"job-{index % 100}"
            flexible = kind == 3
            labels = {"lyra.dev/role": "flexible" if flexible else "base", "lyra.dev/job": job}
            selector = {"nvidia.com/gpu.product": T4 if flexible else A100}
        gpus = str(1 + index % 2)
        made.append(
            {
                "metadata": {"name": f"pod-{index:04d}", "labels": labels},
                "spec": {
                    **({"schedulerName": scheduler_name} if scheduler_name else {}),
                    "automountServiceAccountToken": False,
                    "nodeSelector": selector,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/app:1",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                },
            }
        )
    return made


def _stat_fields(path: Path) -> list[str]:
    """The fields of a ``stat`` file of ``/proc`` (a process's or a thread's) after the command name (Linux), the
    state first."""
    return path.read_text().rsplit(")", 1)[1].split()


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name, the process state first."""
    return _stat_fields(Path(f"/proc/{pid}/stat"))


def _cpu_of(fields: Sequence[str]) -> float:
    """User plus system CPU seconds from the fields :func:`_stat_fields` reads."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _state(pid: int) -> str:
    """A process's state letter: ``T`` once it is stopped."""
    return _stat(pid)[0]


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (Linux)."""
    return _cpu_of(_stat(pid))


#: What the extender's main thread is called in a breakdown: it runs the HTTP server and answers the verbs.
MAIN_THREAD = "main"


def _threads_cpu_seconds(pid: int) -> dict[str, float]:
    """User plus system CPU time of each thread of a process, by the name the kernel has for it (Lyra names its
    threads, :mod:`lyra.osthreads`; the main thread is :data:`MAIN_THREAD`), threads of one name summed. A thread
    that ends between the listing and its read is left out."""
    seconds: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().rstrip("\n")
            spent = _cpu_of(_stat_fields(task / "stat"))
        except OSError:
            continue
        name = MAIN_THREAD if task.name == str(pid) else comm
        seconds[name] = seconds.get(name, 0.0) + spent
    return seconds


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each thread name took between two readings, most first (a thread started meanwhile from 0)."""
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    return dict(sorted(spent.items(), key=lambda item: (-item[1], item[0])))


class Mode(StrEnum):
    """What the run's pods are scheduled with."""

    WITHOUT = "without the extender"
    LYRA = "with the extender"
    NULL = "with an extender that does nothing"
    NULL_GO = "with an extender that does nothing, in Go"
    GO_LATE = "with the Go null extender answering late"
    GO_SCORING = "with the Go null extender decoding the request and scoring nodes"


#: ``--probes``: how late the Go null extender answers in :attr:`Mode.GO_LATE` (Lyra's extender spends 0.2-0.3 ms of
#: CPU on an answer at 500 nodes in this benchmark), and how many of the named nodes it scores in
#: :attr:`Mode.GO_SCORING` (Lyra's answers at 500 nodes list about 40).
PROBE_DELAY = "300us"
PROBE_ANSWER_NODES = 40
PROBES = (Mode.NULL_GO, Mode.GO_LATE, Mode.GO_SCORING)


#: The Go null extender's sources, and what its build is cached under (their hash: an edit rebuilds it).
NULL_EXTENDER_GO = Path(__file__).resolve().parent / "null_extender_go"
NULL_EXTENDER_GO_FILES = ("go.mod", "main.go")


def null_extender_go() -> Path:
    """The Go null extender's executable, built into the cache the first time (and after an edit of its sources).
    Raises :class:`lyra.localcluster.gobuild.BuildError` (with the build's log) when Go cannot build it."""
    sources = [NULL_EXTENDER_GO / name for name in NULL_EXTENDER_GO_FILES]
    version = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:12]
    root = cache_root()
    executable = root / "bench" / f"null-extender-go-{version}" / "null-extender"
    if not os.access(executable, os.X_OK):
        executable.parent.mkdir(parents=True, exist_ok=True)
        gobuild.build_local_module(
            gobuild.find_go(root),
            sources=sources,
            work_dir=root / "go" / "work" / f"null-extender-go-{version}",
            output=executable,
            log_path=executable.parent / "build.log",
            report=lambda line: print(f"  {line}", flush=True),
        )
    return executable


@dataclass(frozen=True)
class Run:
    """One timed run: pods bound per second, and the CPU seconds kube-scheduler and the extender used meanwhile."""

    mode: Mode
    rate: float
    elapsed_s: float
    scheduler_cpu_s: float
    extender_cpu_s: float | None
    #: The extender's CPU seconds by thread (:func:`_threads_cpu_seconds`); empty without an extender.
    extender_threads_cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def ms_per_pod(self) -> float:
        return 1000.0 / self.rate


@contextmanager
def extender(kubeconfig: Path, port: int, mode: Mode = Mode.LYRA) -> Iterator[subprocess.Popen[bytes]]:
    """``lyra extender`` (or, ``Mode.NULL``, :mod:`bench.null_extender`; ``Mode.NULL_GO``, the Go one, and the Go
    one's probes) as its own process (and process group), as it runs in a cluster."""
    profile_to = os.environ.get("LYRA_BENCH_PROFILE")  # a path: write Lyra's extender's cProfile there
    if mode is Mode.NULL:
        argv = [sys.executable, "-m", "bench.null_extender", "--port", str(port)]
    elif mode in PROBES:
        argv = [str(null_extender_go()), "--port", str(port)]
        if mode is Mode.GO_LATE:
            argv += ["--delay", PROBE_DELAY]
        elif mode is Mode.GO_SCORING:
            argv += ["--answer-nodes", str(PROBE_ANSWER_NODES)]
    else:
        command = [sys.executable, *(["-m", "cProfile", "-o", profile_to] if profile_to else []), "-m", "lyra"]
        argv = [*command, "extender", "--kubeconfig", str(kubeconfig), "--port", str(port)]
    # uvicorn stops cleanly on either signal; cProfile writes its file only on SIGINT (a KeyboardInterrupt, which the
    # CLI reports as "interrupted" on stderr: noise in a benchmark's log when nothing is being profiled).
    stop_with = signal.SIGINT if mode is Mode.LYRA and profile_to else signal.SIGTERM
    server = start_process(argv, stdout=subprocess.DEVNULL)
    try:
        wait_until_ready(port, server)
        yield server
    finally:
        server.send_signal(stop_with)
        with suppress(subprocess.TimeoutExpired):
            server.wait(timeout=30)
        stop_process_group(server)


def _replaced(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``--flag=...`` set to ``value`` (the local control plane writes its flags in that form)."""
    prefix = f"--{flag}="
    if not any(argument.startswith(prefix) for argument in argv):
        raise RuntimeError(f"kube-scheduler's command line has no {prefix}: {list(argv)}")
    return [prefix + value if argument.startswith(prefix) else argument for argument in argv]


@contextmanager
def scheduler_with_extender(control_plane: ControlPlane, extender_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """A second kube-scheduler beside the control plane's own: the same binary, client settings and credentials, one
    profile named :data:`EXTENDER_SCHEDULER` that calls the extender at ``extender_url`` as ``lyra cluster up``
    configures it. Pods choose it by ``spec.schedulerName``; the control plane's scheduler (no extender) takes the
    others. Both run through every run, so each run pays the same idle scheduler beside the working one."""
    own = next(record for record in control_plane.state.processes if record.name == "kube-scheduler")
    config = componentconfig.scheduler_config(control_plane.layout.component_kubeconfig("kube-scheduler"), extender_url)
    config["profiles"] = [{"schedulerName": EXTENDER_SCHEDULER}]
    path = control_plane.layout.state_dir / "kube-scheduler-with-extender.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    port = allocate_ports(1)[0]
    argv = _replaced(_replaced(own.argv, "config", str(path)), "secure-port", str(port))
    log = (control_plane.layout.state_dir / "kube-scheduler-with-extender.log").open("wb")
    scheduler = start_process(argv, stdout=log, stderr=subprocess.STDOUT)
    try:

        def healthy() -> bool:
            if scheduler.poll() is not None:
                raise RuntimeError(f"the second kube-scheduler exited ({scheduler.returncode}); see {log.name}")
            try:
                url = f"https://127.0.0.1:{port}/healthz"
                return populate.https_get(url, control_plane.layout.pki / "ca.crt").strip() == "ok"
            except OSError:
                return False

        wait_for(healthy, 120, "the second kube-scheduler (with the extender) to be healthy", interval=0.2)
        yield scheduler
    finally:
        stop_process_group(scheduler)
        log.close()


@dataclass
class Bench:
    """One size's cluster, kept through all its runs: the control plane with its own scheduler (no extender), the
    second scheduler (with it) and the namespace the pods go to."""

    nodes: int
    control_plane: ControlPlane
    core: client.CoreV1Api
    namespace: str
    plain_scheduler: int
    extender_scheduler: int
    extender_port: int


@contextmanager
def cluster(nodes: int, state: Path) -> Iterator[Bench]:
    """Start the local control plane with ``nodes`` KWOK nodes once, label a third of the inference nodes loaned and
    start the second scheduler: every run of this size reuses them (starting 5,000 KWOK nodes takes minutes)."""
    port = allocate_ports(1)[0]
    started = time.perf_counter()
    with (
        session_control_plane(state, profile=profile(nodes), step_timeout=max(60.0, nodes / 5)) as control_plane,
        populate.admin_api(control_plane.kubeconfig) as api,
        temporary_namespace(api, "scheduling-bench") as namespace,
        scheduler_with_extender(control_plane, f"http://127.0.0.1:{port}") as second,
    ):
        core = client.CoreV1Api(api)
        for index in range(loaned_nodes(nodes)):
            core.patch_node(f"inference-t4-{index}", {"metadata": {"labels": {"lyra.dev/state": "loaned"}}})
        own = next(record.pid for record in control_plane.state.processes if record.name == "kube-scheduler")
        print(
            f"  {nodes} nodes: the cluster and both schedulers ready in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        yield Bench(nodes, control_plane, core, namespace, own, second.pid, port)


def _cleared(bench: Bench) -> None:
    """Delete the last run's pods (at once: KWOK runs no container) and wait until none is left, so that each run
    starts on empty nodes."""
    bench.core.delete_collection_namespaced_pod(bench.namespace, grace_period_seconds=0)
    wait_for(
        lambda: not bench.core.list_namespaced_pod(bench.namespace, limit=1).items,
        300,
        "the last run's pods to be deleted",
        interval=0.2,
    )


@contextmanager
def held(pid: int, hold: bool) -> Iterator[None]:
    """Process ``pid`` stopped (``SIGSTOP``) while the block runs, resumed however it ends; nothing if not ``hold``."""
    if not hold:
        yield
        return
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _state(pid) == "T", 10, f"process {pid} to stop", interval=0.001, max_interval=0.01)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def run(mode: Mode, bench: Bench, *, hold: bool = True) -> Run:
    """Pods bound per second, with the CPU time of the scheduler that bound them (and the extender's) over the span:
    from the scheduler's resume once every pod was created while it was held (``hold``), else from the first
    create."""
    core, namespace = bench.core, bench.namespace
    _cleared(bench)
    kubeconfig = bench.control_plane.kubeconfig
    with_extender = mode is not Mode.WITHOUT
    with extender(kubeconfig, bench.extender_port, mode) if with_extender else nullcontext() as server:
        bodies = pods(EXTENDER_SCHEDULER if with_extender else None)
        scheduler = bench.extender_scheduler if with_extender else bench.plain_scheduler

        def cpu() -> tuple[float, float]:
            return _cpu_seconds(scheduler), _cpu_seconds(server.pid) if server is not None else 0.0

        def threads() -> dict[str, float]:
            return _threads_cpu_seconds(server.pid) if server is not None else {}

        creating = time.perf_counter()
        started, (scheduler_before, extender_before), threads_before = creating, cpu(), threads()
        with held(scheduler, hold):
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))
            creation_s = time.perf_counter() - creating
            if hold:  # timed from the resume, just after this; the extender's work for the creates left out too
                threads_before = threads()
                (scheduler_before, extender_before), started = cpu(), time.perf_counter()

        def all_bound() -> bool:
            return not core.list_namespaced_pod(namespace, field_selector="spec.nodeName=", limit=1).items

        # Polled often: a held run binds 1,000 pods in a few seconds, and a poll's delay is counted against it.
        wait_for(all_bound, 600, "every pod to be bound", interval=0.02, max_interval=0.05)
        elapsed = time.perf_counter() - started
        scheduler_after, extender_after = cpu()
        by_thread = _spent(threads_before, threads())
        scheduler_cpu = scheduler_after - scheduler_before
        extender_cpu = extender_after - extender_before if server is not None else None
    measured = Run(mode, PODS / elapsed, elapsed, scheduler_cpu, extender_cpu, by_thread)
    extender_note = (
        f", extender {extender_cpu:.1f} s of CPU ({thread_breakdown(by_thread)})" if extender_cpu is not None else ""
    )
    timed = (
        f"created in {creation_s:.1f} s, scheduler held; bound in {elapsed:.2f} s from its resume"
        if hold
        else (f"bound in {elapsed:.1f} s from the first create")
    )
    print(
        f"  {bench.nodes} nodes, {mode}: {PODS} pods {timed} ({measured.rate:.1f}/s, {measured.ms_per_pod:.2f} ms"
        f" a pod); kube-scheduler {scheduler_cpu:.1f} s of CPU{extender_note}",
        flush=True,
    )
    return measured


def thread_breakdown(seconds: dict[str, float]) -> str:
    """CPU seconds by thread as ``main 0.31, watch-pods 0.20``: threads that took at least 0.01 s, in the given
    order."""
    shown = [f"{name} {spent:.2f}" for name, spent in seconds.items() if spent >= 0.01]
    return ", ".join(shown) or "no thread took 0.01 s"


def round_order(modes: Sequence[Mode], round_: int) -> list[Mode]:
    """The runs of round ``round_`` (from 0): one without an extender first and one last, and between them one per
    other mode of ``modes``, their order rotated each round so that none always follows the run without."""
    others = [mode for mode in modes if mode is not Mode.WITHOUT]
    shift = round_ % len(others) if others else 0
    return [Mode.WITHOUT, *others[shift:], *others[:shift], Mode.WITHOUT]


def bracketed(before: Run, after: Run) -> Run:
    """The two runs without an extender that open and close a round, as the round's one: their pods over their
    total time (so a run that a burst of the machine's own work slowed or sped counts half), their mean CPU."""
    elapsed_s = (before.elapsed_s + after.elapsed_s) / 2
    return Run(
        Mode.WITHOUT,
        PODS / elapsed_s,
        elapsed_s,
        (before.scheduler_cpu_s + after.scheduler_cpu_s) / 2,
        None,
    )


def interleaved(
    nodes: int, rounds: int, directory: Path, modes: Sequence[Mode], *, hold: bool = True
) -> list[dict[Mode, Run]]:
    """``rounds`` rounds on one cluster, each as :func:`round_order` says: every mode's run lies between two runs
    without an extender, which count as one (:func:`bracketed`). One run without per round made each round's ratios
    follow that run's luck: in two rounds of seven at 500 nodes it was fast and every mode read 0.61-0.78x of it."""
    results = []
    with cluster(nodes, directory / str(nodes)) as bench:
        for round_ in range(rounds):
            order = round_order(modes, round_)
            first = run(order[0], bench, hold=hold)
            measured = {mode: run(mode, bench, hold=hold) for mode in order[1:-1]}
            measured[Mode.WITHOUT] = bracketed(first, run(order[-1], bench, hold=hold))
            results.append(measured)
    return results


def per_round_ratios(rounds: Sequence[dict[Mode, Run]], mode: Mode, over: Mode = Mode.WITHOUT) -> list[float]:
    """Each round's rate of ``mode`` over its rate of ``over``, in the rounds' order."""
    return [round_[mode].rate / round_[over].rate for round_ in rounds]


def scheduler_cpu(rounds: Sequence[dict[Mode, Run]], mode: Mode) -> float:
    """kube-scheduler's CPU seconds in the runs of ``mode``, the median of the rounds."""
    return statistics.median(round_[mode].scheduler_cpu_s for round_ in rounds)


def summary(results: dict[int, list[dict[Mode, Run]]], *, floor: bool) -> list[str]:
    """The results as a Markdown table, a row per size: medians of the rates and of the per-round ratios (with
    ``floor``, also the null extender's and the extender's rate over the null one's, per round, and the Go null
    extender's ratio with kube-scheduler's CPU beside it)."""
    rows = []
    floor_head = (
        " | floor: with a null extender pods/s (median) | its ratio (median of rounds)"
        " | with the extender / with a null one (median of rounds)"
        " | with a null extender in Go: its ratio (median of rounds) | kube-scheduler CPU s with it"
        if floor
        else ""
    )
    rows.append(
        "| nodes | rounds | without pods/s (median) | with pods/s (median) | ms a pod without / with (median) "
        "| ratio (median of rounds) | per-round ratios | kube-scheduler CPU s without / with | extender CPU s"
        f"{floor_head} | target | status |"
    )
    floor_rule = "---:|" * 5 if floor else ""
    rows.append("|---:|---:|---:|---:|---:|---:|---|---:|---:|" + floor_rule + "---|---|")
    for nodes, rounds in results.items():
        ratios = per_round_ratios(rounds, Mode.LYRA)
        ratio = statistics.median(ratios)
        status = "pass" if ratio >= TARGET_RATIO else "MISS"
        cells = ""
        if floor:
            null_rate = statistics.median(round_[Mode.NULL].rate for round_ in rounds)
            null_ratio = statistics.median(per_round_ratios(rounds, Mode.NULL))
            # what the extender's own work costs beyond a round trip per pod, which kube-scheduler pays for any
            own = statistics.median(per_round_ratios(rounds, Mode.LYRA, over=Mode.NULL))
            go_ratio = statistics.median(per_round_ratios(rounds, Mode.NULL_GO))
            go_cpu = scheduler_cpu(rounds, Mode.NULL_GO)
            cells = f" | {null_rate:.1f} | {null_ratio:.3f}x | {own:.3f}x | {go_ratio:.3f}x | {go_cpu:.1f}"
        rows.append(
            f"| {nodes:,} | {len(rounds)} | {statistics.median(r[Mode.WITHOUT].rate for r in rounds):.1f} | "
            f"{statistics.median(r[Mode.LYRA].rate for r in rounds):.1f} | "
            f"{statistics.median(r[Mode.WITHOUT].ms_per_pod for r in rounds):.2f} / "
            f"{statistics.median(r[Mode.LYRA].ms_per_pod for r in rounds):.2f} | {ratio:.3f}x | "
            f"{', '.join(f'{r:.2f}' for r in ratios)} | "
            f"{scheduler_cpu(rounds, Mode.WITHOUT):.1f} / {scheduler_cpu(rounds, Mode.LYRA):.1f} | "
            f"{statistics.median(r[Mode.LYRA].extender_cpu_s or 0.0 for r in rounds):.1f}{cells} | "
            f">= {TARGET_RATIO}x | {status} |"
        )
    return rows


def probes_summary(results: dict[int, list[dict[Mode, Run]]]) -> list[str]:
    """A Markdown table, a row per size and mode of ``--probes`` (and Lyra's extender beside them): the median of
    the per-round ratios to the run without an extender, the rounds' ratios, and kube-scheduler's CPU seconds
    (median), without an extender first."""
    rows = [
        "| nodes | scheduled | ratio to without (median of rounds) | per-round ratios"
        " | kube-scheduler CPU s (median) |",
        "|---:|---|---:|---|---:|",
    ]
    for nodes, rounds in results.items():
        rows.append(f"| {nodes:,} | {Mode.WITHOUT} | 1 | - | {scheduler_cpu(rounds, Mode.WITHOUT):.2f} |")
        for mode in (*PROBES, Mode.LYRA):
            ratios = per_round_ratios(rounds, mode)
            shown = ", ".join(f"{ratio:.2f}" for ratio in ratios)
            cpu = scheduler_cpu(rounds, mode)
            rows.append(f"| {nodes:,} | {mode} | {statistics.median(ratios):.3f}x | {shown} | {cpu:.2f} |")
    return rows


def threads_summary(results: dict[int, list[dict[Mode, Run]]]) -> list[str]:
    """A line per size: the extender's CPU seconds by thread over the timed spans (median of the rounds, a thread
    absent from a round counted 0), most first."""
    lines = []
    for nodes, rounds in results.items():
        names = sorted({name for round_ in rounds for name in round_[Mode.LYRA].extender_threads_cpu_s})
        medians = {
            name: statistics.median(round_[Mode.LYRA].extender_threads_cpu_s.get(name, 0.0) for round_ in rounds)
            for name in names
        }
        ordered = dict(sorted(medians.items(), key=lambda item: (-item[1], item[0])))
        lines.append(f"{nodes:,} nodes, the extender's CPU s by thread (median of rounds): {thread_breakdown(ordered)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[500], help="cluster sizes (default 500; 5000 too)")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs per size (default 3)")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run against an extender that does nothing, in Python and in Go, each round (the floor of a round "
        "trip per pod)",
    )
    parser.add_argument(
        "--probes",
        action="store_true",
        help=f"also run, each round, the Go null extender as it is, answering {PROBE_DELAY} late, and decoding each "
        f"request to score {PROBE_ANSWER_NODES} nodes: what an answer's latency and length cost kube-scheduler",
    )
    parser.add_argument(
        "--while-creating",
        action="store_true",
        help="time from the first create with the scheduler running (bound by how fast the API server creates "
        "pods on a small machine), not from the held scheduler's resume",
    )
    args = parser.parse_args(argv)
    if any(nodes < MIN_NODES or nodes % 10 for nodes in args.nodes) or args.rounds < 1:
        parser.error(
            f"--nodes must be multiples of 10 of at least {MIN_NODES} (fewer cannot hold the {PODS:,} pods: their base"
            " workers alone need 750 A100s) and --rounds at least 1"
        )
    modes = [Mode.WITHOUT, Mode.LYRA, *([Mode.NULL, Mode.NULL_GO] if args.floor else [])]
    if args.probes:
        modes += [mode for mode in PROBES if mode not in modes]
    if args.floor or args.probes:  # built before any cluster starts, so that a missing Go fails at once
        try:
            print(f"the Go null extender: {null_extender_go()}", flush=True)
        except gobuild.BuildError as error:
            print(f"scheduling_bench: --floor and --probes need the Go null extender built: {error}", file=sys.stderr)
            return 2
    started_load = load_average()
    results = {}
    with stopped_on_signals(), tempfile.TemporaryDirectory(prefix="lyra-scheduling-bench-") as directory:
        for nodes in args.nodes:
            results[nodes] = interleaved(nodes, args.rounds, Path(directory), modes, hold=not args.while_creating)
    print(f"load average at the start {started_load}, at the end {load_average()}")
    print(
        "timed from the first create, the scheduler running (--while-creating)"
        if args.while_creating
        else "timed from the resume of the scheduler, held while the pods were created: scheduling alone"
    )
    probe_lines = probes_summary(results) if args.probes else []
    for line in [*summary(results, floor=args.floor), *threads_summary(results), *probe_lines]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
