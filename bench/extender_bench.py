"""Latency of the scheduler extender's prioritize verb over HTTP, under load from a separate process.

``uv run python -m bench.extender_bench`` (part of ``make bench``) starts the extender (uvicorn with
:func:`lyra.extender.serving.server_config`, one process, the app exactly as ``lyra extender`` serves it) on a fixed
view of N nodes in a child process, then sends it ``prioritize`` requests (the verb kube-scheduler calls for every
GPU pod; the extender has no ``filter``) for one pod in the ``nodeCacheCapable`` form (names only) from this
process, with ``--clients`` connections at once
(kube-scheduler runs one scheduling cycle at a time, so 1-2 is what it does; more shows queueing). Latency is
measured at the client: HTTP, JSON and the decision; beside it, the server's CPU time per request (its process's
user and system time over the run, from ``/proc``, divided by the requests), which load from other processes does
not lengthen. Prints p50 and p99 per size against the targets (p50 <= 0.5 ms at 500 nodes, <= 2 ms at 5,000; p99
<= 5 ms at 5,000 with two clients), the load average, and a profile of a round trip by stage in CPU time (decode,
decide and encode, the ASGI app, the HTTP server). ``--baseline-src DIR`` instead compares the server of
another checkout's ``src`` with this one's, in alternating rounds on the same view.

The cluster: 40% training nodes (8 A100), 60% inference nodes (8 T4: 50% serving, 10% idle, 35% loaned, 5%
reclaiming), three pods per node on average from jobs of 1-8 workers; the pod is a flexible worker of a job that
runs on 16 loaned nodes, allocated T4s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import math
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import start_process, stop_process_group, stopped_on_signals
from bench.__main__ import load_average
from lyra.api.objects import Node, Pod
from lyra.extender.app import DEFAULT_CLIENT_TIMEOUT_S, FixedView, create_app
from lyra.extender.serving import serve as serve_as_lyra
from lyra.extender.serving import server_config
from lyra.extender.view import ClusterView, build_view
from lyra.extender.wire import ExtenderArgs
from lyra.listening import bound_sockets
from lyra.localcluster.ports import LOOPBACK, allocate_ports
from lyra.localcluster.waiting import wait_for

SEED = 7
SIZES = (500, 1_000, 5_000)
#: (nodes, clients) -> (p50, p99) bounds in ms at the client (issue 28): a round trip is part of every GPU pod's
#: scheduling cycle.
TARGETS_MS = {(500, 1): (0.5, math.inf), (5_000, 1): (2.0, math.inf), (5_000, 2): (2.0, 5.0)}
T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"


def cluster(nodes: int, seed: int = SEED) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    node_objects: list[dict[str, Any]] = []
    for index in range(nodes):
        training = index < nodes * 0.4
        labels = {
            "nvidia.com/gpu.product": A100 if training else T4,
            "lyra.dev/pool": "training" if training else "inference",
        }
        if not training:
            labels["lyra.dev/state"] = rng.choices(["serving", "idle", "loaned", "reclaiming"], [50, 10, 35, 5])[0]
        node_objects.append(
            {
                "metadata": {"name": f"node-{index:05d}", "labels": labels},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            }
        )
    loaned = [n["metadata"]["name"] for n in node_objects if n["metadata"]["labels"].get("lyra.dev/state") == "loaned"]
    pods: list[dict[str, Any]] = []
    for index in range(nodes * 3):
        host = node_objects[rng.randrange(nodes)]
        state = host["metadata"]["labels"].get("lyra.dev/state")
        role = "inference" if state in ("serving", "idle") else rng.choice(["base", "flexible"])
        labels = {"lyra.dev/role": role}
        if role != "inference":
            labels["lyra.dev/job"] = f"job-{index // rng.randint(1, 8)}"
        pods.append(_pod(f"pod-{index:06d}", host["metadata"]["name"], labels))
    for index, host in enumerate(loaned[:16]):
        pods.append(_pod(f"subject-{index}", host, {"lyra.dev/role": "flexible", "lyra.dev/job": "subject"}))
    return node_objects, pods


def _pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


def request_body(node_objects: list[dict[str, Any]]) -> bytes:
    subject = {
        "metadata": {
            "name": "subject-new",
            "namespace": "bench",
            "uid": "uid-new",
            "labels": {"lyra.dev/role": "flexible", "lyra.dev/job": "subject"},
        },
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": T4},
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        },
    }
    return json.dumps(
        {"Pod": subject, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in node_objects]}
    ).encode()


def fixed_view(nodes: int) -> ClusterView:
    node_objects, pods = cluster(nodes)
    view = build_view([Node.model_validate(n) for n in node_objects], [Pod.model_validate(p) for p in pods])
    gc.collect()
    gc.freeze()  # as the watcher does after each rebuild: the view is never scanned by the cyclic collector
    return view


def serve(nodes: int, port: int) -> None:
    view = fixed_view(nodes)
    app = create_app(FixedView(view))
    config = server_config(app, host=LOOPBACK, port=port, client_timeout_s=DEFAULT_CLIENT_TIMEOUT_S)
    serve_as_lyra(config, bound_sockets(LOOPBACK, port))


def wait_until_ready(port: int, server: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Wait until the extender in ``server`` answers ``/readyz`` with 200 (its view has synced)."""

    def ready() -> bool:
        if server.poll() is not None:
            raise RuntimeError(f"the extender exited with {server.returncode}")
        try:
            connection = http.client.HTTPConnection(LOOPBACK, port, timeout=1)
            connection.request("GET", "/readyz")
            return connection.getresponse().status == 200
        except OSError:
            return False  # not listening yet

    wait_for(ready, timeout_s, "the extender to start and sync")


def load(port: int, verb: str, body: bytes, clients: int, requests_per_client: int) -> list[float]:
    """Latencies in ms of ``clients`` keep-alive connections sending ``requests_per_client`` requests each."""
    latencies: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        for _ in range(requests_per_client):
            started = time.perf_counter()
            connection.request("POST", f"/{verb}", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            mine.append((time.perf_counter() - started) * 1000)
            if response.status != 200:
                raise RuntimeError(f"{verb}: HTTP {response.status}")
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def _cpu_ms_per_call(call: Callable[[], object], calls: int) -> float:
    call()  # warm-up (a table of the extender's view is built on its first request)
    started = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - started) * 1000 / calls


def stages(nodes: int, calls: int = 300) -> dict[str, float]:
    """CPU ms per request of each stage of a ``prioritize`` round trip, measured in this process: the body decoded
    into the wire models (``model_validate_json``, parsing and validating in one pass, as the server does), decided
    and encoded (the view's score tables), and the whole verb as
    the server calls it (straight from the HTTP protocol: the stages before and the metrics; the ASGI app for a
    ``--baseline-src`` that predates that). The HTTP server's share is the server process's CPU per request
    (measured over HTTP) less the verb's."""
    from lyra.extender.app import prioritize_answer  # noqa: PLC0415 (a --baseline-src server may predate it)

    view = fixed_view(nodes)
    body = request_body(cluster(nodes)[0])
    args = ExtenderArgs.model_validate_json(body)
    app = create_app(FixedView(view))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/prioritize",
        "raw_path": b"/prioritize",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    loop = asyncio.new_event_loop()
    answered: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    def asgi_call() -> None:
        loop.run_until_complete(app(dict(scope), receive, send))

    verb = getattr(app, "verbs", {}).get("/prioritize")
    direct = getattr(verb, "answer", None)

    def whole() -> None:
        if direct is None:
            asgi_call()
        else:
            answered.append(direct(body, time.perf_counter()).status)

    try:
        figures = {
            "decode": _cpu_ms_per_call(lambda: ExtenderArgs.model_validate_json(body), calls),
            "decide+encode": _cpu_ms_per_call(lambda: prioritize_answer(args, view), calls),
            "verb": _cpu_ms_per_call(whole, calls),
        }
    finally:
        loop.close()
    if set(answered) != {200}:
        raise RuntimeError(f"the app answered {sorted(set(answered))}")
    return figures


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--clients", type=int, nargs="+", default=[1, 2], help="concurrent connections, one run each (default 1 2)"
    )
    parser.add_argument("--requests", type=int, default=300, help="requests per client and verb (default 300)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="cluster sizes in nodes")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="another checkout's src/ (git archive REV src | tar -x -C DIR): compare its server with this one's, "
        "interleaved, instead of the tables",
    )
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    with stopped_on_signals():
        return compare(args) if args.baseline_src else measure_all(args)


def compare(args: argparse.Namespace, rounds: int = 5) -> int:
    """Server CPU per request and client latency of the baseline's extender and this one, on the same view, in
    alternating rounds (the order flips each round); the ratio is the median of the rounds' ratios."""
    started_load = load_average()
    print("| nodes | clients | baseline CPU ms/request | this CPU ms/request | CPU ratio this/baseline (median) "
          "| baseline p50 ms | this p50 ms |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for nodes in args.sizes:
        servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            for variant, source in (("baseline", str(args.baseline_src.resolve())), ("this", None)):
                port = allocate_ports(1)[0]
                environment = os.environ | ({"PYTHONPATH": source} if source else {})
                argv = [sys.executable, "-m", "bench.extender_bench", "--serve", str(nodes), "--port", str(port)]
                servers[variant] = (start_process(argv, env=environment), port)
            body = request_body(cluster(nodes)[0])
            for server, port in servers.values():
                wait_until_ready(port, server)
                load(port, "prioritize", body, 1, 20)  # warm-up
            for clients in args.clients:
                cpu: dict[str, list[float]] = {"baseline": [], "this": []}
                p50: dict[str, list[float]] = {"baseline": [], "this": []}
                for round_ in range(rounds):
                    for variant in ("baseline", "this") if round_ % 2 == 0 else ("this", "baseline"):
                        server, port = servers[variant]
                        before = cpu_seconds(server.pid)
                        latencies = load(port, "prioritize", body, clients, args.requests)
                        cpu[variant].append((cpu_seconds(server.pid) - before) * 1000 / len(latencies))
                        p50[variant].append(percentile(latencies, 0.5))
                ratio = statistics.median(t / b for t, b in zip(cpu["this"], cpu["baseline"], strict=True))
                print(
                    f"| {nodes:,} | {clients} | {statistics.median(cpu['baseline']):.2f} | "
                    f"{statistics.median(cpu['this']):.2f} | {ratio:.2f} | {statistics.median(p50['baseline']):.2f} | "
                    f"{statistics.median(p50['this']):.2f} |",
                    flush=True,
                )
        finally:
            for server, _ in servers.values():
                stop_process_group(server)
    print(f"load average at the start {started_load}, at the end {load_average()}; {rounds} rounds")
    return 0


def measure_all(args: argparse.Namespace) -> int:
    rows = []
    profiles: dict[int, dict[str, float]] = {}
    started_load = load_average()
    for nodes in args.sizes:
        port = allocate_ports(1)[0]
        argv = [sys.executable, "-m", "bench.extender_bench", "--serve", str(nodes), "--port", str(port)]
        server = start_process(argv)
        try:
            wait_until_ready(port, server)
            body = request_body(cluster(nodes)[0])
            for clients in args.clients:
                load(port, "prioritize", body, 1, 20)  # warm-up
                cpu_before = cpu_seconds(server.pid)
                latencies = load(port, "prioritize", body, clients, args.requests)
                cpu_ms = (cpu_seconds(server.pid) - cpu_before) * 1000 / len(latencies)
                p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
                target = TARGETS_MS.get((nodes, clients))
                status = "-" if target is None else ("pass" if p50 <= target[0] and p99 <= target[1] else "MISS")
                name = f"extender/prioritize/{nodes}-nodes/{clients}-client{'s' if clients > 1 else ''}"
                rows.append((name, cpu_ms, p50, p99, statistics.mean(latencies), len(latencies), target, status))
                profiles.setdefault(nodes, {"server (HTTP, 1 client)": cpu_ms})
        finally:
            stop_process_group(server)
        profiles[nodes] = stages(nodes) | profiles[nodes]
    print(
        f"extender over HTTP, nodeCacheCapable, {args.clients} concurrent clients from this process, server in a child;"
        f" load average at start {started_load}, at the end {load_average()}"
    )
    print(
        "| benchmark | server CPU ms per request | p50 ms | p99 ms | mean ms | requests | target p50 / p99 | status |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, cpu_ms, p50, p99, mean, count, target, status in rows:
        bound = "-" if target is None else f"{target[0]:g} / {target[1]:g} ms"
        print(f"| `{name}` | {cpu_ms:.2f} | {p50:.2f} | {p99:.2f} | {mean:.2f} | {count} | {bound} | {status} |")
    print()
    print("CPU ms per request by stage (the first four in this process; HTTP server = server process less the verb)")
    print("| nodes | decode | decide+encode | the verb (all before) | HTTP server | server process |")
    print("|---:|---:|---:|---:|---:|---:|")
    for nodes, figures in profiles.items():
        server_ms = figures["server (HTTP, 1 client)"]
        print(
            f"| {nodes:,} | {figures['decode']:.3f} | {figures['decide+encode']:.3f} | "
            f"{figures['verb']:.3f} | {server_ms - figures['verb']:.3f} | {server_ms:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
