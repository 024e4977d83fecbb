"""The operator live on the local control plane: how long a change takes to be acted on, and what it costs.

``uv run python -m bench.operator_live_bench [--nodes N --gpu-pods G --other-pods P --jobs J]`` (needs the cached
binaries) starts a local control plane with N KWOK nodes (a quarter training A100 x 8, the rest inference T4 x 8),
fills it with G one-GPU pods that Lyra does not manage (bound to inference nodes, eight a node, as another team's
workload) and P pods without GPUs, starts ``lyra operator`` as its own process, waits until it is ready (its caches
have listed), then submits J TrainingJobs one after the other (1-2 A100 workers each) and scales an
InferenceService up, and measures, through a watch cache of its own (``lyra.kubewatch``):

* change to action: from a job's creation to the operator's first status write on it (its intent, written before
  any of its pods), and from a scale change to the Deployment's new replica count; median and p95;
* the operator's CPU time and resident memory (``/proc``) over the stream;
* the operator's writes per minute during the stream (its Lease's renewals left out), from the API server's audit
  log (its lists are counted by
  ``tests/integration/test_watch_caches.py``: one per kind, before its first pass).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.__main__ import load_average
from bench.scheduling_bench import _cpu_seconds
from lyra.api import names
from lyra.kubewatch import ApiSource, WatchCache
from lyra.kubewatch.kinds import DEPLOYMENTS, TRAINING_JOBS, JsonObject
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ClusterOptions
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.profile import parse_profile
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import wait_for
from lyra.operator.metrics import ACTIONS, PASSES, SUCCEEDED

T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
TARGET_MEDIAN_S = 2.0
CRDS = Path(__file__).resolve().parents[1] / "manifests" / "crds"


def profile(nodes: int) -> Any:
    group = {"count": 0, "cpu": "96", "memory": "512Gi", "pods": 110}
    training = nodes // 4
    return parse_profile(
        {
            "name": f"live-{nodes}",
            "nodeGroups": [
                group | {"name": "training-a100", "pool": "training", "count": training,
                         "gpu": {"product": A100, "count": 8, "memoryMiB": 81920}},
                group | {"name": "inference-t4", "pool": "inference", "count": nodes - training,
                         "gpu": {"product": T4, "count": 8, "memoryMiB": 15360}},
            ],
        },
        "bench",
    )  # fmt: skip


def bound_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    resources = {"requests": {"cpu": "100m"}}
    if gpus:
        resources = {"requests": {names.GPU_RESOURCE: str(gpus)}, "limits": {names.GPU_RESOURCE: str(gpus)}}
    return {
        "metadata": {"name": name, "labels": {"app": "other-team"}},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": resources}],
        },
    }


def fill(api: client.ApiClient, namespace: str, nodes: int, gpu_pods: int, other_pods: int) -> None:
    training = nodes // 4
    inference = [f"inference-t4-{i}" for i in range(nodes - training)]
    everyone = inference + [f"training-a100-{i}" for i in range(training)]
    bodies = [bound_pod(f"gpu-{i:05d}", inference[(i // 8) % len(inference)], 1) for i in range(gpu_pods)]
    bodies += [bound_pod(f"web-{i:05d}", everyone[i % len(everyone)], 0) for i in range(other_pods)]
    core = client.CoreV1Api(api)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))


def job_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.TRAINING_JOB_KIND,
        "metadata": {"name": name},
        "spec": {
            "minWorkers": 1, "maxWorkers": 2, "gpusPerWorker": 1, "gpuTypes": [A100], "expectedDuration": 3600,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "registry.invalid/trainer:1"}]}},
        },
    }  # fmt: skip


def service_body(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.INFERENCE_SERVICE_KIND,
        "metadata": {"name": "chat"},
        "spec": {
            "replicas": replicas, "maxReplicas": 64, "gpusPerReplica": 1, "gpuType": T4,
            "template": {"spec": {"containers": [{"name": "server", "image": "registry.invalid/chat:1"}]}},
        },
    }  # fmt: skip


class Stopwatch:
    """When each awaited condition on a watched object first held (called back by a watch cache)."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.awaited: dict[str, Callable[[JsonObject], bool]] = {}
        self._lock = threading.Lock()

    def await_(self, key: str, condition: Callable[[JsonObject], bool]) -> None:
        with self._lock:
            self.awaited[key] = condition

    def __call__(self, key: str, obj: JsonObject | None) -> None:
        with self._lock:
            condition = self.awaited.get(key)
            if obj is not None and condition is not None and key not in self.seen and condition(obj):
                self.seen[key] = time.perf_counter()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    custom_path = (names.GROUP, names.VERSION)
    with (
        session_control_plane(
            state, profile=profile(args.nodes), crd_dir=CRDS, step_timeout=start_deadline_s(args.nodes)
        ) as control_plane,
        populate.admin_api(control_plane.kubeconfig) as api,
        temporary_namespace(api, "live-bench") as namespace,
    ):
        filled = time.perf_counter()
        fill(api, namespace, args.nodes, args.gpu_pods, args.other_pods)
        print(f"  filled in {time.perf_counter() - filled:.0f} s", file=sys.stderr, flush=True)
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(*custom_path, namespace, names.INFERENCE_SERVICE_PLURAL, service_body(4))
        stopwatch = Stopwatch()
        watches = [
            WatchCache(TRAINING_JOBS, ApiSource(api, TRAINING_JOBS), on_change=stopwatch),
            WatchCache(DEPLOYMENTS, ApiSource(api, DEPLOYMENTS), on_change=stopwatch),
        ]
        for cache in watches:
            cache.start()
        port = allocate_ports(1)[0]
        log = (state / "operator.log").open("wb")
        command = [sys.executable, "-m", "lyra", "operator", "--kubeconfig", str(control_plane.kubeconfig),
                   "--lend-delay", "5", "--http-port", str(port)]  # fmt: skip
        operator = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        operator_log = state / "operator.log"
        try:
            started = time.perf_counter()

            def ready() -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                        return bool(response.status == 200)
                except OSError:
                    return False

            wait_for(ready, 600, "the operator to be ready", interval=0.2)
            synced_s = time.perf_counter() - started
            steady = Steadiness(f"http://127.0.0.1:{port}/metrics")
            wait_for(steady, 600, "the operator's first passes to be done (a pass with no action)", interval=0.5)
            settled_s = time.perf_counter() - started
            print(f"  ready after {synced_s:.1f} s, steady after {settled_s:.1f} s", file=sys.stderr, flush=True)
            deployment = f"{namespace}/chat"
            wait_for(lambda: deployment in stopwatch_keys(watches[1]), 120, "the service's Deployment")
            cpu_before, wall_before = _cpu_seconds(operator.pid), time.perf_counter()
            stream_began = datetime.now(UTC)
            submitted: dict[str, float] = {}
            for index in range(args.jobs):
                name = f"job-{index:03d}"
                key = f"{namespace}/{name}"
                stopwatch.await_(key, lambda obj: bool((obj.get("status") or {}).get("phase")))
                submitted[key] = time.perf_counter()
                custom.create_namespaced_custom_object(
                    *custom_path, namespace, names.TRAINING_JOB_PLURAL, job_body(name)
                )
                if index % 5 == 4:  # and every fifth change, inference grows by two replicas
                    replicas = 4 + 2 * (index // 5 + 1)
                    scale_key = f"{deployment}@{replicas}"
                    stopwatch.await_(deployment, lambda obj, r=replicas: (obj.get("spec") or {}).get("replicas") == r)
                    stopwatch.seen.pop(deployment, None)
                    submitted[scale_key] = time.perf_counter()
                    custom.patch_namespaced_custom_object(
                        *custom_path,
                        namespace,
                        names.INFERENCE_SERVICE_PLURAL,
                        "chat",
                        {"spec": {"replicas": replicas}},
                    )
                    wait_for(lambda: deployment in stopwatch.seen, 120, f"the Deployment at {replicas} replicas")
                    stopwatch.seen[scale_key] = stopwatch.seen.pop(deployment)
                # A benchmark's load generator, not a test: the stream offers one change per interval, as users
                # would, and the time to action is measured from each change's own submission.
                time.sleep(args.interval)
            wait_for(lambda: all(key in stopwatch.seen for key in submitted), 300, "every change acted on")
            cpu = _cpu_seconds(operator.pid) - cpu_before
            wall = time.perf_counter() - wall_before
            memory = rss_mib(operator.pid)
            stream_ended = datetime.now(UTC)
        finally:
            operator.terminate()
            operator.wait(timeout=30)
            passes = [line for line in operator_log.read_text().splitlines() if "pass " in line or "WARN" in line]
            print("\n".join(f"  operator: {line}" for line in passes[-40:]), file=sys.stderr)
            for cache in watches:
                cache.stop()
        marker = f"-{operator.pid}-"
        writes = 0
        for line in control_plane.layout.audit_log.read_text().splitlines():
            event = json.loads(line)
            at = datetime.fromisoformat(
                str(event.get("requestReceivedTimestamp", "")).replace("Z", "+00:00") or "1970-01-01T00:00:00+00:00"
            )
            if (
                marker in event.get("userAgent", "")
                and event.get("stage") == "ResponseComplete"
                and stream_began <= at <= stream_ended
                and "/leases/" not in event.get("requestURI", "")
            ):
                writes += event.get("verb") in ("create", "update", "patch", "delete")
        for key, at in submitted.items():  # in the order of the changes
            print(f"  {key}: acted on after {stopwatch.seen[key] - at:.2f} s", file=sys.stderr)
        latencies = sorted(stopwatch.seen[key] - submitted[key] for key in submitted)
        return {
            "synced_s": synced_s,
            "settled_s": settled_s,
            "latencies": latencies,
            "cpu_s": cpu,
            "wall_s": wall,
            "rss_mib": memory,
            "writes": writes,
        }


def start_deadline_s(nodes: int) -> float:
    """How long each step of the local control plane's start may take: the default 90 s, or 0.2 s a node when that
    is longer (a thousand KWOK nodes did not all turn Ready within 90 s here)."""
    return max(ClusterOptions.step_timeout, nodes / 5)


class Steadiness:
    """True once the operator has finished a pass that applied nothing since its last pass that applied something:
    its first passes label, taint and lend every inference server (hundreds of writes), and a change submitted
    meanwhile would measure them, not the operator's response to the change. Read from its ``/metrics``: the
    count of succeeded passes and of actions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.last: tuple[float, float] | None = None  # (passes, actions) at the previous poll

    def __call__(self) -> bool:
        with urllib.request.urlopen(self.url, timeout=5) as response:
            text = response.read().decode()
        passes = actions = 0.0
        for line in text.splitlines():
            if line.startswith(f'{PASSES.name}{{result="{SUCCEEDED}"}}'):
                passes = float(line.split()[-1])
            elif line.startswith(f"{ACTIONS.name}{{"):
                actions += float(line.split()[-1])
        previous, self.last = self.last, (passes, actions)
        return previous is not None and passes > previous[0] and actions == previous[1] and passes >= 2


def stopwatch_keys(cache: WatchCache) -> set[str]:
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in cache.snapshot()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_live_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--gpu-pods", type=int, default=5_000)
    parser.add_argument("--other-pods", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two changes (default 1)")
    args = parser.parse_args(argv)
    if args.gpu_pods > 8 * (args.nodes - args.nodes // 4):
        parser.error("--gpu-pods: more than the inference nodes hold")
    start_load = load_average()
    with tempfile.TemporaryDirectory(prefix="lyra-live-bench-") as directory:
        result = run(args, Path(directory))
    latencies = result["latencies"]
    median = statistics.median(latencies)
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    status = "pass" if median <= TARGET_MEDIAN_S else "MISS"
    print(
        f"live operator: {args.nodes} nodes, {args.gpu_pods} GPU pods + {args.other_pods} other pods, "
        f"{len(latencies)} changes; load average at start {start_load}, at the end {load_average()}"
    )
    print(
        "| ready after | steady after | change to action median | p95 | operator CPU | over | RSS | writes/min | "
        "target |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| {result['synced_s']:.1f} s | {result['settled_s']:.1f} s | {median:.2f} s | {p95:.2f} s | "
        f"{result['cpu_s']:.1f} s | "
        f"{result['wall_s']:.0f} s | {result['rss_mib']:.0f} MiB | {60 * result['writes'] / result['wall_s']:.0f} | "
        f"median <= {TARGET_MEDIAN_S:.0f} s: {status} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
