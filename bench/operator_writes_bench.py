"""The busy pass as the operator pays it, writes included: read, decide and apply against a stand-in API server.

``uv run python -m bench.operator_writes_bench`` builds the scale benchmark's cluster
(:mod:`bench.operator_scale_bench`) at 500, 1,000 and 5,000 nodes and runs, in this process as the running operator
does (its collector settings, a burst of changes read from the caches, its readings kept), busy passes: ``read``,
``decide`` and then :meth:`lyra.operator.commit.Cluster.apply` of every action the pass decides (at 5,000 nodes
7,374 writes), through the operator's own commit step and client configuration (HTTPS, the server's certificate
verified, a bearer token, the fence asked before each write). The writes go to a stand-in API server in a child
process (its CPU is not this process's): it answers every write as kube-apiserver does (the object whole, a new
resourceVersion; a created object echoed with the fields the server adds, managed fields included; or, when the
request's Accept asks ``as=PartialObjectMetadata`` as the operator's writes do, only the object's metadata in a
``meta.k8s.io/v1`` PartialObjectMetadata, as kube-apiserver was observed to answer each such write in
``tests/integration/test_write_answers.py``) after a fixed latency per request (``--latency-ms``). The figures of
record are this process's CPU time (``time.process_time``: every thread of the client's), beside wall.

It prints, per size, the pass's CPU split into read and decide and apply, wall, the number of writes and the CPU per
write; at the largest size, the CPU per write of each kind of action; and the whole process's peak resident memory
(``VmHWM``). ``--sizes`` and ``--repeats`` choose what is run.
"""

from __future__ import annotations

import argparse
import email.utils
import gc
import http.server
import json
import logging
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from bench.__main__ import load_average, machine
from bench.operator_scale_bench import SIZES, STAMP, _managed, _operator_heap, kubelet_node, kubelet_pod
from lyra.operator import heap
from lyra.operator.actions import Action, Decision
from lyra.operator.commit import WRITERS, Cluster
from lyra.operator.decide import decide
from lyra.operator.world import World

PASS_TARGET_S = 2.0
DEFAULT_LATENCY_MS = 2.0
TOKEN = "bench-token"  # the stand-in's bearer token, checked by nothing
#: The API Priority and Fairness identifiers the stand-in's answers carry, as kube-apiserver's do.
FLOW_UID = "6bf05434-0819-41a2-a0d8-651630fca8e3"
PRIORITY_UID = "d6d338c0-86c3-41a8-bf77-18e36681f95f"


#: The kind and API version of what a POST to each resource creates (the commit step's creations).
_CREATED_KINDS = {
    "pods": ("Pod", "v1"),
    "services": ("Service", "v1"),
    "events": ("Event", "v1"),
    "deployments": ("Deployment", "apps/v1"),
}


class StandInState:
    """What the stand-in answers: the object each kind of write returns, with a resourceVersion that grows."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self._version = 100_000
        self._lock = threading.Lock()
        node = kubelet_node("t4-00000", "inference", "Tesla-T4", "loaned")
        pod = kubelet_pod("ml", "job-00000-w0", {"lyra.dev/role": "base", "lyra.dev/job": "job-00000"}, "t4-0", 1)
        job = {
            "apiVersion": "lyra.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {
                "name": "job-00000",
                "namespace": "ml",
                "uid": "uid-job",
                "resourceVersion": "1",
                "generation": 1,
                "creationTimestamp": STAMP,
                "managedFields": _managed("lyra-operator"),
            },
            "spec": {
                "minWorkers": 3,
                "maxWorkers": 6,
                "gpusPerWorker": 1,
                "gpuTypes": ["Tesla-T4"],
                "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}},
            },
            "status": {
                "phase": "Running",
                "queuedAt": STAMP,
                "startedAt": STAMP,
                "workers": {"current": 3, "target": 3, "base": 3, "flexible": 0},
            },
        }
        objects = {
            "node": {"kind": "Node", "apiVersion": "v1", **node},
            "pod": {"kind": "Pod", "apiVersion": "v1", **pod},
            "job": job,
        }
        # What a patch or a delete answers, by kind: the object whole, or its metadata alone.
        self._whole = {kind: as_go_writes(whole) for kind, whole in objects.items()}
        self._metadata = {kind: as_go_writes(_partial(whole["metadata"])) for kind, whole in objects.items()}

    def version(self) -> str:
        with self._lock:
            self._version += 1
            return str(self._version)

    def answer(self, method: str, path: str, body: bytes, accept: str = "") -> tuple[int, bytes]:
        """The answer to one write: the object whole, or its metadata alone when ``accept`` asks for it (each built
        directly, so that answering the metadata costs the stand-in no more CPU than answering the whole would)."""
        metadata_only = "as=PartialObjectMetadata" in accept
        version = self.version()
        if method == "POST":
            made = json.loads(body or b"{}")
            kind, api_version = _CREATED_KINDS.get(path.rpartition("/")[2], ("Unknown", "v1"))
            made = {"kind": kind, "apiVersion": api_version, **made}
            meta = made.setdefault("metadata", {})
            name = meta.get("name") or f"{meta.get('generateName', 'x')}{version}"
            meta.update(
                name=name,
                uid=f"uid-{version}",
                resourceVersion=version,
                creationTimestamp=STAMP,
                managedFields=_managed_by_request(made),
            )
            if kind in {"Pod", "Deployment"}:
                meta["generation"] = 1
            if metadata_only:
                return 201, as_go_writes(_partial(meta)).encode()
            if path.endswith("/pods"):
                made["status"] = {"phase": "Pending", "qosClass": "Burstable"}
            return 201, as_go_writes(made).encode()
        kind = "node" if "/nodes/" in path else "pod" if "/pods/" in path else "job"
        text = (self._metadata if metadata_only else self._whole)[kind]
        return 200, text.replace('"resourceVersion":"', f'"resourceVersion":"{version}', 1).encode()


#: The fields of an object's metadata in the order Go declares them (``ObjectMeta``), the order kube-apiserver writes
#: them in; after the type's own (``kind``, ``apiVersion``), the metadata comes first.
GO_METADATA_ORDER = (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
)  # fmt: skip
_TYPE_FIRST = ("kind", "apiVersion", "metadata")


def as_go_writes(made: dict[str, Any]) -> str:
    """An object as kube-apiserver's JSON writes it: compact, its type's fields and then its metadata first, the
    metadata's fields in Go's order (each kept as it is within)."""
    ordered = {key: made[key] for key in _TYPE_FIRST if key in made} | made
    meta = ordered.get("metadata")
    if isinstance(meta, dict):
        ordered["metadata"] = {key: meta[key] for key in GO_METADATA_ORDER if key in meta} | meta
    return json.dumps(ordered, separators=(",", ":"))


def _field_set(value: object) -> dict[str, Any]:
    """The fields ``value`` sets, as server-side apply's ``FieldsV1`` names them, in the order Go writes a map (its
    keys sorted): ``f:<name>`` for a map's keys, ``k:{"name":...}`` for the items of a list keyed by name
    (containers, env, ports) and ``k:{"uid":...}`` for owner references; ``.`` marks a field that is itself a map or
    an item."""
    if isinstance(value, dict):
        return {
            f"f:{key}": _owners(value[key]) if key == "ownerReferences" else _field_set(value[key])
            for key in sorted(value)
        }
    if isinstance(value, list) and all(isinstance(item, dict) and "name" in item for item in value):
        items = {f'k:{{"name":{json.dumps(item["name"])}}}': {".": {}, **_field_set(item)} for item in value}
        return {".": {}} | {key: items[key] for key in sorted(items)}
    return {}


def _owners(references: object) -> dict[str, Any]:
    if not isinstance(references, list):
        return {}
    keys = sorted(f'k:{{"uid":{json.dumps(r.get("uid", ""))}}}' for r in references if isinstance(r, dict))
    return {".": {}} | {key: {} for key in keys}


#: What kube-apiserver sets on a created pod that its manifest left out, and its managed fields then name as the
#: creator's (the local control plane's answer to a pod of 30 environment variables named every one of these).
POD_DEFAULTS = {
    "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "restartPolicy": "Always",
    "schedulerName": "default-scheduler", "securityContext": {}, "terminationGracePeriodSeconds": 30,
}  # fmt: skip
CONTAINER_DEFAULTS = {
    "imagePullPolicy": "IfNotPresent", "resources": {}, "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}  # fmt: skip


def _defaulted(made: dict[str, Any]) -> dict[str, Any]:
    """A created pod's request with what the API server defaults in it (:data:`POD_DEFAULTS`); any other as it is."""
    spec = made.get("spec")
    if made.get("kind") != "Pod" or not isinstance(spec, dict):
        return made
    containers = [{**CONTAINER_DEFAULTS, **c} for c in spec.get("containers") or [] if isinstance(c, dict)]
    return {**made, "spec": {**POD_DEFAULTS, **spec, "containers": containers}}


def _managed_by_request(made: dict[str, Any]) -> list[dict[str, Any]]:
    """The managed fields kube-apiserver records for a created object: one entry naming every field the request set
    and the server defaulted in it (a created pod's answer grows with its manifest: 2,876 bytes of metadata for a
    pod of 30 environment variables on the local control plane, docs/benchmarks.md)."""
    meta = {key: value for key, value in made.get("metadata", {}).items() if key not in {"name", "namespace"}}
    sets = {
        key: value for key, value in _defaulted(made).items() if key not in {"apiVersion", "kind", "status", "metadata"}
    }
    fields = _field_set({"metadata": meta, **sets} if meta else sets)
    return [
        {"manager": "lyra-operator", "operation": "Update", "apiVersion": "v1", "time": STAMP,
         "fieldsType": "FieldsV1", "fieldsV1": fields},
    ]  # fmt: skip


def _partial(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` as kube-apiserver answers a write that asks for the object's metadata alone."""
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}


#: The longest body kube-apiserver (Go's ``net/http``) answers with a ``Content-Length``; a longer one goes chunked.
CHUNKING_AFTER = 2048
_REASONS = {200: "OK", 201: "Created"}


def framed(status: int, payload: bytes) -> bytes:
    """An answer as kube-apiserver was observed to send one to the operator's writes (``tests/integration/
    test_write_answers.py``; docs/benchmarks.md, "The stand-in answers as the API server does"): its seven headers,
    the body with a newline (Go's JSON encoder ends with one) chunked whole in one chunk when it is longer than
    :data:`CHUNKING_AFTER`, else with a ``Content-Length``, and all of it in one write, so the client reads it in one
    TLS record as it reads the real server's."""
    body = payload + b"\n"
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
        f"Audit-Id: {uuid.uuid4()}\r\n"
        "Cache-Control: no-cache, private\r\n"
        "Content-Type: application/json\r\n"
        f"X-Kubernetes-Pf-Flowschema-Uid: {FLOW_UID}\r\n"
        f"X-Kubernetes-Pf-Prioritylevel-Uid: {PRIORITY_UID}\r\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\r\n"
    )
    if len(body) > CHUNKING_AFTER:
        framing = f"Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    else:
        framing = f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    return head.encode() + framing


class StandInHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StandInServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no delayed-ACK stall per answer

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        state = self.server.state
        if state.latency_s:
            # The stand-in's chosen API latency (--latency-ms): what a real server's round trip costs the writer's
            # wall time, not a wait for a state.
            time.sleep(state.latency_s)
        status, payload = state.answer(self.command, self.path, body, self.headers.get("Accept") or "")
        self.wfile.write(framed(status, payload))

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer  # noqa: N815 - the names http.server calls

    def log_message(self, format: str, *args: Any) -> None:
        return


class StandInServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: StandInState) -> None:
        super().__init__(("127.0.0.1", 0), StandInHandler)
        self.state = state


def serve(directory: Path, latency_ms: float) -> None:
    """The stand-in API server (run in a child process): HTTPS with ``directory``'s certificate, its port written to
    ``directory/port``; it serves until its parent closes its standard input."""
    server = StandInServer(StandInState(latency_ms / 1000))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (directory / "port.tmp").write_text(str(server.server_address[1]))
    (directory / "port.tmp").rename(directory / "port")
    sys.stdin.read()
    server.shutdown()


@contextmanager
def stand_in(latency_ms: float) -> Iterator[client.ApiClient]:
    """An API client of the operator's kind (HTTPS, the server's certificate verified, a bearer token) talking to a
    stand-in API server in a child process, stopped on exit."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem")],
            check=True, capture_output=True,
        )  # fmt: skip
        command = [sys.executable, "-m", "bench.operator_writes_bench", "--serve", scratch, str(latency_ms)]
        child = subprocess.Popen(command, stdin=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not (directory / "port").exists():
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the stand-in API server did not start")
                time.sleep(0.05)  # polled with a deadline: the child writes its port file once it listens
            configuration = client.Configuration()
            configuration.host = f"https://127.0.0.1:{(directory / 'port').read_text()}"
            configuration.ssl_ca_cert = str(directory / "cert.pem")
            configuration.api_key = {"authorization": f"Bearer {TOKEN}"}
            api = client.ApiClient(configuration)
            try:
                yield api
            finally:
                api.close()
        finally:
            assert child.stdin is not None
            child.stdin.close()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


@dataclass(frozen=True)
class PassCost:
    nodes: int
    writes: int
    read_cpu_s: float
    decide_cpu_s: float
    apply_cpu_s: float
    wall_s: float
    apply_wall_s: float

    @property
    def cpu_s(self) -> float:
        return self.read_cpu_s + self.decide_cpu_s + self.apply_cpu_s


def _kind(action: Action) -> str:
    return type(action).__name__


def busy_passes(nodes: int, api: client.ApiClient, repeats: int) -> tuple[list[PassCost], Decision, World]:
    """``repeats`` busy passes at ``nodes`` nodes, each read after a burst of changes, decided and applied."""
    read = _operator_heap(nodes)
    heap.freeze_survivors()
    cluster = Cluster(api)
    cluster.fence = lambda: True
    before = heap.tune_collector()
    costs: list[PassCost] = []
    try:
        world = read()
        decision = decide(world)
        cluster.apply(decision, world.now, world)  # warm-up: connections open, code paths taken once
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            world = read()
            read_cpu = time.process_time()
            decision = decide(world)
            decide_cpu = time.process_time()
            apply_start = time.perf_counter()
            outcome = cluster.apply(decision, world.now, world)
            end_cpu = time.process_time()
            end = time.perf_counter()
            if outcome.applied != len(decision.actions):
                raise RuntimeError(f"{len(decision.actions) - outcome.applied} writes not applied: {outcome.failures}")
            costs.append(
                PassCost(
                    nodes,
                    len(decision.actions),
                    read_cpu - start_cpu,
                    decide_cpu - read_cpu,
                    end_cpu - decide_cpu,
                    end - start,
                    end - apply_start,
                )
            )
    finally:
        gc.set_threshold(*before)
    return costs, decision, world


def per_kind(cluster: Cluster, decision: Decision, world: World, repeats: int) -> dict[str, tuple[int, float, float]]:
    """Each kind of action applied alone, one write at a time: its count, and the median CPU and wall microseconds a
    write."""
    cluster.writers = 1
    kinds = Counter(_kind(a) for a in decision.actions)
    made: dict[str, tuple[int, float, float]] = {}
    for kind, count in kinds.items():
        alone = Decision(tuple(a for a in decision.actions if _kind(a) == kind))
        cpu, wall = [], []
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            cluster.apply(alone, world.now, world)
            cpu.append((time.process_time() - start_cpu) / count * 1e6)
            wall.append((time.perf_counter() - start) / count * 1e6)
        made[kind] = (count, statistics.median(cpu), statistics.median(wall))
    return made


#: The ways of writing compared, in the order each round runs them: the commit step's calls through the kubernetes
#: client (as the operator wrote before :mod:`lyra.operator.writes`: its ``CoreV1Api``, ``AppsV1Api`` and
#: ``CustomObjectsApi``, one write at a time), and through the lean requests one at a time and with 4 and 8 writers
#: (the operator's :data:`~lyra.operator.commit.WRITERS`).
WAYS = (
    "kubernetes client, 1 writer",
    "lean requests, 1 writer",
    "lean requests, 4 writers",
    "lean requests, 8 writers",
)


def ways_compared(
    api: client.ApiClient, decision: Decision, world: World, rounds: int
) -> dict[str, tuple[float, float, float]]:
    """The whole decision applied each of the :data:`WAYS`, alternating in each of ``rounds`` rounds: the median CPU
    and wall seconds of each, and the median of the per-round ratios of its CPU to the first way's."""
    lean = Cluster(api)
    lean.fence = lambda: True
    reference = Cluster(api)
    reference.fence = lambda: True
    reference.core = cast(Any, client.CoreV1Api(api))
    reference.apps = cast(Any, client.AppsV1Api(api))
    reference.custom = cast(Any, client.CustomObjectsApi(api))
    setups: list[tuple[Cluster, int]] = [(reference, 1), (lean, 1), (lean, 4), (lean, 8)]
    cpu: dict[str, list[float]] = {way: [] for way in WAYS}
    wall: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(rounds):
        for way, (cluster, writers) in zip(WAYS, setups, strict=True):
            cluster.writers = writers
            start, start_cpu = time.perf_counter(), time.process_time()
            cluster.apply(decision, world.now, world)
            cpu[way].append(time.process_time() - start_cpu)
            wall[way].append(time.perf_counter() - start)
    return {
        way: (
            statistics.median(cpu[way]),
            statistics.median(wall[way]),
            statistics.median(c / r for c, r in zip(cpu[way], cpu[WAYS[0]], strict=True)),
        )
        for way in WAYS
    }


def peak_mib() -> float:
    """The whole process's peak resident memory (``VmHWM``), MiB."""
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _median(costs: list[PassCost], field: Callable[[PassCost], float]) -> float:
    return statistics.median(field(c) for c in costs)


def run(sizes: tuple[int, ...], repeats: int, latency_ms: float) -> str:
    lines = [
        "| nodes | writes | read CPU s | decide CPU s | apply CPU s | pass CPU s | us CPU a write | apply wall s | "
        "pass wall s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    kinds: dict[str, tuple[int, float, float]] = {}
    compared: dict[str, tuple[float, float, float]] = {}
    with stand_in(latency_ms) as api:
        for nodes in sizes:
            costs, decision, world = busy_passes(nodes, api, repeats)
            writes = costs[0].writes
            apply_cpu = _median(costs, lambda c: c.apply_cpu_s)
            lines.append(
                f"| {nodes:,} | {writes:,} | {_median(costs, lambda c: c.read_cpu_s):.3f} | "
                f"{_median(costs, lambda c: c.decide_cpu_s):.3f} | {apply_cpu:.3f} | "
                f"**{_median(costs, lambda c: c.cpu_s):.3f}** | {apply_cpu / max(writes, 1) * 1e6:.0f} | "
                f"{_median(costs, lambda c: c.apply_wall_s):.2f} | {_median(costs, lambda c: c.wall_s):.2f} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
            if nodes == max(sizes):
                cluster = Cluster(api)
                cluster.fence = lambda: True
                compared = ways_compared(api, decision, world, repeats)
                kinds = per_kind(cluster, decision, world, repeats)
            gc.unfreeze()
    lines += ["", "| action (largest size) | writes | us CPU a write | us wall a write |", "|---|---:|---:|---:|"]
    lines += [f"| `{kind}` | {n:,} | {cpu:.0f} | {wall:.0f} |" for kind, (n, cpu, wall) in sorted(kinds.items())]
    lines += [
        "",
        "| writing (largest size, interleaved rounds) | apply CPU s | apply wall s | CPU / the kubernetes client's |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {way} | {cpu:.3f} | {wall:.2f} | {ratio:.2f} |" for way, (cpu, wall, ratio) in compared.items()]
    lines.append("")
    lines.append(
        f"whole process peak RSS (VmHWM): {peak_mib():.0f} MiB; stand-in latency {latency_ms} ms a request; "
        f"the operator writes with {WRITERS} writers"
    )
    return "\n".join(lines)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected node counts separated by commas, got {text!r}") from None
    if not sizes or min(sizes) < 200:
        raise argparse.ArgumentTypeError(f"each size must be at least 200 nodes, got {text!r}")
    return sizes


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _latency(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be within 0-1000 ms, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_writes_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=SIZES, help="node counts, comma-separated (500,1000,5000)")
    parser.add_argument("--repeats", type=_positive, default=3, help="busy passes per size (3)")
    parser.add_argument(
        "--latency-ms", type=_latency, default=DEFAULT_LATENCY_MS, help="the stand-in's latency a request (2)"
    )
    parser.add_argument("--serve", nargs=2, metavar=("DIR", "LATENCY_MS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(Path(args.serve[0]), float(args.serve[1]))
        return 0
    with open(os.devnull, "w", encoding="utf-8") as discard:  # the operator's log lines made, as it makes them
        logging.basicConfig(
            level=logging.INFO, stream=discard, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        return _report(args)


def _report(args: argparse.Namespace) -> int:
    print(f"Machine: {machine()}; pid {os.getpid()}")
    print(run(args.sizes, args.repeats, args.latency_ms))
    print(f"load average at the end {load_average()}; pass target <= {PASS_TARGET_S} s of CPU at the largest size")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
