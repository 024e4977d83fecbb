"""Benchmarks of one operator pass at cluster scale: reading the listed objects, and deciding on them.

The objects are generated as the API server would list them (JSON dicts) from a fixed seed in ``setup`` (not
timed): 250 training servers of 8 A100s and 750 inference servers of 8 T4s; 40 InferenceServices of 1-2 GPUs per
replica whose 240 replicas already run on 60 serving servers; 600 TrainingJobs, every other one started (about 1,000
worker pods on the training servers and on 200 loaned T4 servers, statuses as the operator wrote them), the rest
queued. The decide pass is a busy one: it starts and resizes jobs (about 1,200 pod creations, 170 deletions, 640
status writes), lends idle servers and sizes inference.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from bench import Benchmark
from lyra.operator.decide import decide
from lyra.operator.readers import read_world
from lyra.operator.world import World

SEED = 20261123
NOW = 1_800_000_000.0
STAMP = "2027-01-15T08:00:00Z"
TRAINING_SERVERS = 250
INFERENCE_SERVERS = 750
SERVING = 60
LOANED = 200
SERVICES = 40
JOBS = 600
WORKER_TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}
REPLICA_TEMPLATE = {"spec": {"containers": [{"name": "server", "image": "server:1"}]}}
A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"


def _node(name: str, pool: str, product: str, state: str | None) -> dict[str, Any]:
    labels = {"lyra.dev/pool": pool, "nvidia.com/gpu.product": product, "kubernetes.io/hostname": name}
    spec: dict[str, Any] = {}
    annotations: dict[str, str] = {}
    if state is not None:
        labels["lyra.dev/state"] = state
        spec["taints"] = [{"key": "lyra.dev/state", "value": state, "effect": "NoSchedule"}]
        if state == "idle":
            annotations["lyra.dev/idle-since"] = STAMP
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "7", "labels": labels, "annotations": annotations},
        "spec": spec,
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def _pod(namespace: str, name: str, labels: dict[str, str], node: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}/{name}", "labels": labels,
                     "creationTimestamp": STAMP},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }  # fmt: skip


@functools.cache
def cluster_objects(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    nodes = [_node(f"a100-{i:03d}", "training", A100, None) for i in range(TRAINING_SERVERS)]
    for i in range(INFERENCE_SERVERS):
        state = "serving" if i < SERVING else "loaned" if i < SERVING + LOANED else "idle"
        nodes.append(_node(f"t4-{i:03d}", "inference", T4, state))
    free = {n["metadata"]["name"]: 8 for n in nodes}
    pods: list[dict[str, Any]] = []
    services: list[dict[str, Any]] = []
    deployments: list[dict[str, Any]] = []
    serving = [f"t4-{i:03d}" for i in range(SERVING)]
    for s in range(SERVICES):
        gpus, replicas = rng.choice((1, 2)), 6
        name = f"svc-{s:02d}"
        services.append({
            "metadata": {"name": name, "namespace": "serve", "uid": name, "generation": 1},
            "spec": {"replicas": replicas, "gpusPerReplica": gpus, "minReplicas": 1, "maxReplicas": 64,
                     "gpuType": T4, "template": REPLICA_TEMPLATE},
        })  # fmt: skip
        deployments.append({
            "metadata": {"name": name, "namespace": "serve", "labels": {"lyra.dev/service": name}},
            "spec": {"replicas": replicas}, "status": {"replicas": replicas, "readyReplicas": replicas},
        })  # fmt: skip
        for r in range(replicas):
            node = next(n for n in serving if free[n] >= gpus)
            free[node] -= gpus
            labels = {"lyra.dev/role": "inference", "lyra.dev/service": name}
            pods.append(_pod("serve", f"{name}-{r}", labels, node, gpus))
    training_hosts = [n["metadata"]["name"] for n in nodes[:TRAINING_SERVERS]]
    loaned_hosts = [f"t4-{i:03d}" for i in range(SERVING, SERVING + LOANED)]
    jobs: list[dict[str, Any]] = []
    for j in range(JOBS):
        name = f"job-{j:03d}"
        gpus = rng.choice((1, 1, 2, 4))
        low = rng.choice((1, 1, 2, 4))
        high = low * rng.choice((1, 2, 4))
        on_t4 = rng.random() < 0.4
        spec = {"minWorkers": low, "maxWorkers": high, "gpusPerWorker": gpus,
                "expectedDuration": rng.expovariate(1 / 3600) + 60, "template": WORKER_TEMPLATE,
                "gpuTypes": [T4 if on_t4 else A100]}  # fmt: skip
        status: dict[str, Any] = {"phase": "Queued", "queuedAt": STAMP}
        if j % 2 == 0:
            hosts = loaned_hosts if on_t4 else training_hosts
            workers = rng.randint(low, high)
            placement: dict[str, int] = {}
            for w in range(workers):
                node = next((n for n in hosts if free[n] >= gpus), None)
                if node is None:
                    break
                free[node] -= gpus
                placement[node] = placement.get(node, 0) + 1
                role = "base" if w < low else "flexible"
                pods.append(_pod("ml", f"{name}-w{w}", {"lyra.dev/role": role, "lyra.dev/job": name}, node, gpus))
            placed = sum(placement.values())
            if placed >= low:
                status = {"phase": "Running", "queuedAt": STAMP, "startedAt": STAMP, "workDone": 0.0,
                          "workAsOf": STAMP, "gpuType": T4 if on_t4 else A100, "placements": placement,
                          "workers": {"current": placed, "target": placed, "base": low,
                                      "flexible": placed - low}}  # fmt: skip
            else:
                pods = [p for p in pods if p["metadata"]["labels"].get("lyra.dev/job") != name]
        jobs.append({"metadata": {"name": name, "namespace": "ml", "uid": name, "generation": 1,
                                  "creationTimestamp": STAMP}, "spec": spec, "status": status})  # fmt: skip
    return {"nodes": nodes, "pods": pods, "jobs": jobs, "services": services, "deployments": deployments, "budgets": []}


def world() -> World:
    return read_world(NOW, **cluster_objects())


def _observe() -> Callable[[], object]:
    objects = cluster_objects()
    return lambda: read_world(NOW, **objects)


def _decide() -> Callable[[], object]:
    seen = world()
    return lambda: decide(seen)


def benchmarks() -> list[Benchmark]:
    objects = cluster_objects()
    size = f"{len(objects['nodes']):,} nodes, {len(objects['pods']):,} GPU pods, {len(objects['jobs'])} jobs"
    return [
        Benchmark("operator/observe", _observe, f"read_world on {size}, {SERVICES} services", repeats=7),
        Benchmark("operator/decide", _decide, f"one decide pass on {size}: loans, allocation, pods", repeats=5),
    ]
