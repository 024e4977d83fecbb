"""What the operator costs at cluster scale, on its watch caches: an event, a pass, and the memory the caches hold.

``uv run python -m bench --only operator_scale_bench`` times, at 500, 1,000 and 5,000 nodes:

* ``event``: the pods cache applying 1,000 watch events (70% about pods Lyra does not keep, dropped after a look
  at their labels and containers; 30% a kubelet status update of a GPU pod, slimmed and stored);
* ``read-cold``: a first pass reading the caches (a snapshot of each) into a World (``read_world``), every pod read;
* ``read``: a later pass, as the running operator reads, after a burst of changes since the last pass (1,000 pod
  events as in ``event``, 50 node status updates and 50 TrainingJob status writes, applied to the caches within the
  timed call): the objects unchanged since the last pass taken from its readings (``Readings``), the changed ones
  and the InferenceServices read again;
* ``decide``: one decide pass on the World of a first pass, a busy one (it admits 793 queued jobs and creates
  their 5,354 worker pods at 5,000 nodes);
* ``pass``: ``read`` and ``decide`` in one call, what the running operator spends on a busy pass after a burst of
  changes, with its garbage collector's settings and no collection forced between calls (the target, 1 s of CPU at
  5,000 nodes, is judged on it);

``uv run python -m bench.operator_scale_bench --collector`` runs 20 busy passes in a row at 5,000 nodes under each
garbage collector setting (Python's defaults, the operator's, and each half of it), in a fresh process each;
and ``uv run python -m bench.operator_scale_bench --memory`` measures, in a fresh process per size, the resident
memory the five caches hold after their first list (the objects are generated page by page, so the generator's
garbage is not counted).

The cluster at N nodes is generated from a fixed seed, as kubelets, controllers and the operator would have left it,
with objects shaped like the API server's (managed fields, tens of node labels, images, conditions, container
statuses, environment and volumes): 25% training nodes (8 A100), 75% inference nodes (8 T4: 30% serving, 40%
loaned, 30% idle); 10 pods per node of which 30% GPU pods (N/25 InferenceServices of 30 one-GPU replicas on the
serving nodes, their Deployments, and 0.4 N TrainingJobs, every other one running with 3-18 workers of 1-4 GPUs on
training and loaned nodes, statuses as the operator wrote them) and 70% other pods (DaemonSet and web pods). At
5,000 nodes: 50,000 pods, 15,000 of them GPU pods, 2,000 TrainingJobs, 200 InferenceServices.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from bench import Benchmark
from bench.__main__ import load_average, machine
from lyra.kubewatch import WatchCache
from lyra.kubewatch.kinds import Kind
from lyra.operator import heap
from lyra.operator.caches import KINDS
from lyra.operator.decide import decide
from lyra.operator.readers import Readings, read_world
from lyra.operator.world import World

SEED = 20261124
SIZES = (500, 1_000, 5_000)
NOW = 1_800_000_000.0
STAMP = "2027-01-15T08:00:00Z"
A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"
PODS_PER_NODE = 10
REPLICAS_PER_SERVICE = 30
EVENTS_PER_CALL = 1_000
NODE_CHANGES = JOB_CHANGES = 50  # per burst of changes before a later pass
MIN_NODES = 200  # the smallest cluster with that many nodes and TrainingJobs to change (80 jobs)
PASS_TARGET_MS = 1_000.0
WORKER_TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "registry.example/trainer:1"}]}}
REPLICA_TEMPLATE = {"spec": {"containers": [{"name": "server", "image": "registry.example/server:1"}]}}


def _managed(manager: str) -> list[dict[str, Any]]:
    return [
        {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": STAMP, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {f"f:l{i}": {} for i in range(12)}},
                      "f:status": {"f:conditions": {f'k:{{"type":"C{i}"}}': {".": {}} for i in range(6)}}}},
    ]  # fmt: skip


def kubelet_node(name: str, pool: str, product: str, state: str | None) -> dict[str, Any]:
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p4d.24xlarge" if pool == "training" else "g4dn.metal",
        "topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": "eu-west-1a",
        "lyra.dev/pool": pool, "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920" if product == A100 else "15360", "nvidia.com/cuda.driver.major": "550",
        **{f"feature.node.kubernetes.io/cpu-cpuid.{flag}": "true" for flag in
           ("ADX", "AESNI", "AVX", "AVX2", "AVX512F", "AVX512BW", "FMA3", "SHA", "VAES", "VPCLMULQDQ")},
        **{f"feature.node.kubernetes.io/kernel-config.{k}": "true" for k in ("NO_HZ", "NO_HZ_IDLE", "PREEMPT")},
    }  # fmt: skip
    taints = []
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "csi.volume.kubernetes.io/nodeid": '{"ebs.csi.aws.com":"i-0123456789abcdef0"}',
    }
    if state is not None:
        labels["lyra.dev/state"] = state
        taints.append({"key": "lyra.dev/state", "value": state, "effect": "NoSchedule"})
        if state == "idle":
            annotations["lyra.dev/idle-since"] = STAMP
    conditions = [
        {"type": kind, "status": "False", "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
         "reason": f"KubeletHasNo{kind}", "message": f"kubelet has no {kind.lower()}"}
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ] + [{"type": "Ready", "status": "True", "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
          "reason": "KubeletReady", "message": "kubelet is posting ready status"}]  # fmt: skip
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1000", "creationTimestamp": STAMP,
                     "labels": labels, "annotations": annotations, "managedFields": _managed("kubelet")},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"], "providerID": f"aws:///eu-west-1a/{name}",
                 "taints": taints},
        "status": {
            "capacity": {"cpu": "96", "ephemeral-storage": "1966788624Ki", "hugepages-1Gi": "0",
                         "memory": "1176944088Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "95690m", "ephemeral-storage": "1812563979437", "hugepages-1Gi": "0",
                            "memory": "1163424728Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "10.0.1.2"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "0" * 32, "systemUUID": "0" * 36, "bootID": "0" * 36,
                         "kernelVersion": "6.8.0-1015-aws", "osImage": "Ubuntu 24.04.1 LTS",
                         "containerRuntimeVersion": "containerd://1.7.22", "kubeletVersion": "v1.34.4",
                         "kubeProxyVersion": "v1.34.4", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": [f"registry.example/image-{i}@sha256:{i:064x}", f"registry.example/image-{i}:1"],
                        "sizeBytes": 1_000_000_000 + i} for i in range(25)],
        },
    }  # fmt: skip


def kubelet_pod(
    namespace: str, name: str, labels: Mapping[str, str], node: str, gpus: int, *, owner: tuple[str, str] | None = None
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "2", "memory": "8Gi"}
    limits: dict[str, str] = {"memory": "8Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    kind, owner_name = owner or ("ReplicaSet", f"{name.rsplit('-', 1)[0]}-6d4cf56db6")
    return {
        "metadata": {
            "name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "resourceVersion": "2000",
            "creationTimestamp": STAMP, "generateName": f"{name.rsplit('-', 1)[0]}-",
            "labels": {"app.kubernetes.io/name": name.rsplit("-", 1)[0], "app.kubernetes.io/part-of": "platform",
                       "pod-template-hash": "6d4cf56db6", **labels},
            "annotations": {"kubectl.kubernetes.io/restartedAt": STAMP, "prometheus.io/scrape": "true",
                            "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": owner_name,
                                 "uid": f"uid-{owner_name}", "controller": True, "blockOwnerDeletion": True}],
            "managedFields": _managed("kube-controller-manager") + _managed("kubelet"),
        },
        "spec": {
            "nodeName": node, "schedulerName": "default-scheduler", "serviceAccountName": "default",
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "containers": [{
                "name": "main", "image": "registry.example/app:1.2.3", "imagePullPolicy": "IfNotPresent",
                "args": ["--port=8080", "--log-level=info"],
                "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(12)],
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                "resources": {"requests": requests, "limits": limits},
                "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                                 {"name": "data", "mountPath": "/data"}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            }],
            "volumes": [{"name": "data", "emptyDir": {}},
                        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.1.2", "podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}],
            "startTime": STAMP, "qosClass": "Burstable",
            "conditions": [{"type": kind, "status": "True", "lastTransitionTime": STAMP}
                           for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                        "PodScheduled")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "started": True,
                                   "image": "registry.example/app:1.2.3", "imageID": f"sha256:{0:064x}",
                                   "containerID": f"containerd://{1:064x}",
                                   "state": {"running": {"startedAt": STAMP}}}],
        },
    }  # fmt: skip


@functools.cache
def cluster(nodes: int, seed: int = SEED, pods_per_node: int = PODS_PER_NODE) -> dict[str, list[dict[str, Any]]]:
    """The generated cluster at ``nodes`` nodes, by ``read_world``'s argument names (see the module docstring);
    ``pods_per_node`` pods a node on average, the GPU pods the same at any value (the rest are other pods)."""
    rng = random.Random(seed)
    training = nodes // 4
    inference = nodes - training
    node_objects = [kubelet_node(f"a100-{i:05d}", "training", A100, None) for i in range(training)]
    serving, loaned = int(inference * 0.3), int(inference * 0.4)
    states = ["serving"] * serving + ["loaned"] * loaned + ["idle"] * (inference - serving - loaned)
    node_objects += [kubelet_node(f"t4-{i:05d}", "inference", T4, state) for i, state in enumerate(states)]
    free = {n["metadata"]["name"]: 8 for n in node_objects}
    serving_hosts = [f"t4-{i:05d}" for i in range(serving)]
    training_hosts = [n["metadata"]["name"] for n in node_objects[:training]]
    loaned_hosts = [f"t4-{i:05d}" for i in range(serving, serving + loaned)]
    pods: list[dict[str, Any]] = []
    services: list[dict[str, Any]] = []
    deployments: list[dict[str, Any]] = []
    cursor = {"serving": 0, "training": 0, "loaned": 0}

    def place(hosts: list[str], pool: str, gpus: int) -> str | None:
        for _ in range(len(hosts)):
            host = hosts[cursor[pool] % len(hosts)]
            if free[host] >= gpus:
                free[host] -= gpus
                return host
            cursor[pool] += 1
        return None

    for s in range(max(nodes // 25, 1)):
        name = f"svc-{s:04d}"
        services.append({
            "metadata": {"name": name, "namespace": "serve", "uid": f"uid-{name}", "generation": 1,
                         "resourceVersion": "3000", "creationTimestamp": STAMP},
            "spec": {"replicas": REPLICAS_PER_SERVICE, "gpusPerReplica": 1, "minReplicas": 1, "maxReplicas": 64,
                     "gpuType": T4, "template": REPLICA_TEMPLATE},
            "status": {"replicas": REPLICAS_PER_SERVICE, "readyReplicas": REPLICAS_PER_SERVICE},
        })  # fmt: skip
        deployments.append({
            "metadata": {"name": name, "namespace": "serve", "labels": {"lyra.dev/service": name}, "generation": 1,
                         "resourceVersion": "3001", "managedFields": _managed("lyra-operator")},
            "spec": {"replicas": REPLICAS_PER_SERVICE, "template": REPLICA_TEMPLATE},
            "status": {"replicas": REPLICAS_PER_SERVICE, "readyReplicas": REPLICAS_PER_SERVICE,
                       "availableReplicas": REPLICAS_PER_SERVICE, "observedGeneration": 1},
        })  # fmt: skip
        for r in range(REPLICAS_PER_SERVICE):
            host = place(serving_hosts, "serving", 1)
            if host is not None:
                labels = {"lyra.dev/role": "inference", "lyra.dev/service": name}
                pods.append(kubelet_pod("serve", f"{name}-{r:03d}", labels, host, 1, owner=("ReplicaSet", name)))
    jobs: list[dict[str, Any]] = []
    for j in range(int(nodes * 0.4)):
        name = f"job-{j:05d}"
        gpus = rng.choice((1, 1, 2, 4))
        on_t4 = rng.random() < 0.4
        low = rng.randint(3, 9)
        high = low * 2
        spec = {"minWorkers": low, "maxWorkers": high, "gpusPerWorker": gpus, "gpuTypes": [T4 if on_t4 else A100],
                "expectedDuration": rng.expovariate(1 / 3600) + 60, "template": WORKER_TEMPLATE}  # fmt: skip
        status: dict[str, Any] = {"phase": "Queued", "queuedAt": STAMP}
        meta = {"name": name, "namespace": "ml", "uid": f"uid-{name}", "generation": 1, "resourceVersion": "4000",
                "creationTimestamp": STAMP}  # fmt: skip
        if j % 2 == 0:
            hosts, pool = (loaned_hosts, "loaned") if on_t4 else (training_hosts, "training")
            placement: dict[str, int] = {}
            made: list[dict[str, Any]] = []
            for w in range(rng.randint(low, high)):
                host = place(hosts, pool, gpus)
                if host is None:
                    break
                placement[host] = placement.get(host, 0) + 1
                role = "base" if w < low else "flexible"
                labels = {"lyra.dev/role": role, "lyra.dev/job": name}
                made.append(kubelet_pod("ml", f"{name}-w{w}", labels, host, gpus, owner=("TrainingJob", name)))
            placed = sum(placement.values())
            if placed >= low:
                pods += made
                workers = {"current": placed, "target": placed, "base": low, "flexible": placed - low}
                status = {"phase": "Running", "queuedAt": STAMP, "startedAt": STAMP, "workDone": 0.0,
                          "workAsOf": STAMP, "gpuType": T4 if on_t4 else A100, "placements": placement,
                          "workers": workers}  # fmt: skip
            else:
                for host, count in placement.items():
                    free[host] += count * gpus
        jobs.append({"metadata": meta, "spec": spec, "status": status})
    hosts = [n["metadata"]["name"] for n in node_objects]
    others = nodes * pods_per_node - len(pods)
    for i in range(others):
        host = hosts[i % len(hosts)]
        kind = "daemon" if i < 2 * len(hosts) else "web"
        pods.append(kubelet_pod("platform", f"{kind}-{i:06d}", {"tier": kind}, host, 0))
    return {
        "nodes": node_objects,
        "pods": pods,
        "jobs": jobs,
        "services": services,
        "deployments": deployments,
        "budgets": [],
    }


class IdleSource:
    """A :class:`~lyra.kubewatch.Source` whose list is the generated objects (in pages) and whose watch stays open,
    quiet, until closed: the benchmark applies the events itself."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self._event = threading.Event()

    def list_page(self, *, limit: int, continue_token: str) -> Mapping[str, Any]:
        start = int(continue_token or 0)
        more = start + limit < len(self.objects)
        meta: dict[str, Any] = {"resourceVersion": "5000"}
        if more:
            meta["continue"] = str(start + limit)
        return {"metadata": meta, "items": self.objects[start : start + limit]}

    def watch(self, *, resource_version: str, timeout_s: int) -> Iterator[Mapping[str, Any]]:
        self._event.wait()
        return iter(())

    def close(self) -> None:
        self._event.set()


def filled_caches(nodes: int) -> dict[str, WatchCache]:
    objects = cluster(nodes)
    caches = {name: WatchCache(KINDS[name], IdleSource(objects[name])) for name in KINDS}
    for cache in caches.values():
        cache.start()
    for cache in caches.values():
        cache.wait_synced(600)
    return caches


def _pod_events(nodes: int, rng: random.Random) -> list[dict[str, Any]]:
    """:data:`EVENTS_PER_CALL` pod MODIFIED events, 30% about GPU pods (kept), 70% about others (dropped)."""
    objects = cluster(nodes)
    gpu_pods = [p for p in objects["pods"] if PODS_KIND.keep(p)]
    other_pods = [p for p in objects["pods"] if not PODS_KIND.keep(p)]
    return [
        {"type": "MODIFIED", "object": rng.choice(gpu_pods) if i % 10 < 3 else rng.choice(other_pods)}
        for i in range(EVENTS_PER_CALL)
    ]


def _events(nodes: int) -> Callable[[], object]:
    pods = filled_caches(nodes)["pods"]
    events = _pod_events(nodes, random.Random(SEED))
    return lambda: [pods.apply(event) for event in events]


PODS_KIND: Kind = KINDS["pods"]


def world_of(caches: Mapping[str, WatchCache], readings: Readings | None = None) -> World:
    snapshot = {name: cache.snapshot() for name, cache in caches.items()}
    return read_world(
        NOW,
        nodes=snapshot["nodes"],
        pods=snapshot["pods"],
        jobs=snapshot["jobs"],
        services=snapshot["services"],
        deployments=snapshot["deployments"],
        budgets=snapshot["budgets"],
        readings=readings,
    )


def _read_cold(nodes: int) -> Callable[[], object]:
    caches = filled_caches(nodes)
    return lambda: world_of(caches)


def burst_of_changes(nodes: int, caches: Mapping[str, WatchCache]) -> Callable[[], None]:
    """Applies, at each call, a burst of changes to ``caches``: the pod events of ``event``, :data:`NODE_CHANGES`
    nodes' status updates and :data:`JOB_CHANGES` TrainingJobs' status writes (each a new resourceVersion: every
    call changes these objects again)."""
    objects = cluster(nodes)
    rng = random.Random(SEED + 1)
    pod_events = _pod_events(nodes, rng)
    changed_nodes = rng.sample(objects["nodes"], NODE_CHANGES)
    changed_jobs = rng.sample(objects["jobs"], JOB_CHANGES)
    version = iter(range(10_000, 10**9))

    def changed(raw: dict[str, Any]) -> dict[str, Any]:
        return {**raw, "metadata": {**raw["metadata"], "resourceVersion": str(next(version))}}

    def apply() -> None:
        for event in pod_events:
            caches["pods"].apply(event)
        for name, items in (("nodes", changed_nodes), ("jobs", changed_jobs)):
            for raw in items:
                caches[name].apply({"type": "MODIFIED", "object": changed(raw)})

    return apply


def _read(nodes: int) -> Callable[[], World]:
    """As the running operator reads: its readings kept from the last pass; a burst of changes since (applied in
    the call) read again."""
    caches = filled_caches(nodes)
    readings = Readings()
    world_of(caches, readings)
    burst = burst_of_changes(nodes, caches)

    def read() -> World:
        burst()
        return world_of(caches, readings)

    return read


def _decide(nodes: int) -> Callable[[], object]:
    world = world_of(filled_caches(nodes))
    return lambda: decide(world)


def _operator_heap(nodes: int) -> Callable[[], World]:
    """``read`` (a burst of changes, then read) in a heap like the running operator's after its first pass: the
    generator's objects, the benchmark's and not the operator's, frozen first so the collector sees only the
    operator's; a first pass made."""
    cluster(nodes)
    gc.collect()
    gc.freeze()
    read = _read(nodes)
    decide(read())
    return read


def _pass(nodes: int) -> Callable[[], object]:
    """A busy pass of the running operator, as it runs: a burst of changes read (as ``read``), then decided (as
    ``decide``), with the operator's collector settings (:mod:`lyra.operator.heap`: its thresholds, what survived the
    first pass frozen). No collection is forced between calls, so what the collector does during a pass, full
    collections included, is in the figure."""
    read = _operator_heap(nodes)
    heap.freeze_survivors()

    def busy_pass() -> object:
        before = heap.tune_collector()
        try:
            return decide(read())
        finally:
            gc.set_threshold(*before)  # the other cases run with the defaults

    return busy_pass


def _size(nodes: int) -> str:
    objects = cluster(nodes)
    gpu = sum(1 for p in objects["pods"] if PODS_KIND.keep(p))
    return (
        f"{nodes:,} nodes, {len(objects['pods']):,} pods ({gpu:,} GPU), {len(objects['jobs']):,} jobs, "
        f"{len(objects['services'])} services"
    )


def benchmarks() -> list[Benchmark]:
    made = []
    for nodes in SIZES:
        repeats = 5 if nodes >= 5_000 else 7
        made += [
            Benchmark(
                f"operator-scale/event/{nodes}-nodes",
                functools.partial(_events, nodes),
                f"the pods cache applies {EVENTS_PER_CALL:,} watch events (30% GPU pods): ms per call = us per "
                f"event; {_size(nodes)}",
                repeats=repeats,
            ),
            Benchmark(
                f"operator-scale/read-cold/{nodes}-nodes",
                functools.partial(_read_cold, nodes),
                f"a first pass reads the caches into a World, every pod read: {_size(nodes)}",
                repeats=repeats,
            ),
            Benchmark(
                f"operator-scale/read/{nodes}-nodes",
                functools.partial(_read, nodes),
                f"a later pass reads the caches into a World after a burst of changes ({EVENTS_PER_CALL:,} pod events, "
                f"{NODE_CHANGES} node and {JOB_CHANGES} job updates, applied in the call), the objects unchanged since "
                f"the last pass taken from its readings: {_size(nodes)}",
                repeats=repeats,
            ),
            Benchmark(
                f"operator-scale/decide/{nodes}-nodes",
                functools.partial(_decide, nodes),
                f"one busy decide pass on the World of a first pass: {_size(nodes)}",
                repeats=repeats,
            ),
            Benchmark(
                f"operator-scale/pass/{nodes}-nodes",
                functools.partial(_pass, nodes),
                f"read after a burst of changes, then decide, with the operator's collector settings, no "
                f"collection forced between calls: {_size(nodes)}",
                target_ms=PASS_TARGET_MS if nodes == SIZES[-1] else None,
                repeats=repeats,
                collect_garbage=False,
                after=gc.unfreeze,  # the cases after it run with the collector as it was
            ),
        ]
    return made


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def write_pages(nodes: int, directory: Path, page_size: int = 500, pods_per_node: int = PODS_PER_NODE) -> None:
    """The generated cluster as the API server would page it: ``<kind>-<page>.json`` list bodies."""
    objects = cluster(nodes, pods_per_node=pods_per_node)
    for name, items in objects.items():
        for page, start in enumerate(range(0, max(len(items), 1), page_size)):
            body = {"metadata": {"resourceVersion": "5000"}, "items": items[start : start + page_size]}
            if start + page_size < len(items):
                body["metadata"]["continue"] = str(page + 1)
            (directory / f"{name}-{page:05d}.json").write_text(json.dumps(body))


class PageFiles(IdleSource):
    """A source whose list reads pages written by :func:`write_pages` (parsed as the API client does, per page)."""

    def __init__(self, directory: Path, name: str) -> None:
        super().__init__([])
        self.directory = directory
        self.name = name

    def list_page(self, *, limit: int, continue_token: str) -> Mapping[str, Any]:
        page = int(continue_token or 0)
        parsed: Mapping[str, Any] = json.loads((self.directory / f"{self.name}-{page:05d}.json").read_bytes())
        return parsed


def memory_held(directory: Path) -> tuple[float, dict[str, int]]:
    """In this (fresh) process: the resident memory (MiB) the five caches add by their first list of the pages in
    ``directory``, and how many objects each keeps."""
    gc.collect()
    before = _rss_kib()
    caches = {name: WatchCache(KINDS[name], PageFiles(directory, name)) for name in KINDS}
    for cache in caches.values():
        cache.start()
        cache.wait_synced(3600)
    gc.collect()
    return (_rss_kib() - before) / 1024, {name: len(cache) for name, cache in caches.items()}


def memory_table() -> str:
    lines = [
        "| nodes | objects listed | nodes and pods kept | RSS the caches hold (MiB) | target |",
        "|---:|---:|---:|---:|---|",
    ]
    for nodes in SIZES:
        with tempfile.TemporaryDirectory() as scratch:
            command = [sys.executable, "-m", "bench.operator_scale_bench"]
            listed = subprocess.run(
                [*command, "--write-pages", str(nodes), scratch], capture_output=True, text=True, check=True
            ).stdout.strip()
            held, kept = subprocess.run(
                [*command, "--memory-of", scratch], capture_output=True, text=True, check=True
            ).stdout.split()
        lines.append(f"| {nodes:,} | {int(listed):,} | {int(kept):,} | {float(held):.0f} | <= 1,024 |")
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


COLLECTOR_SETTINGS = ("defaults", "frozen", "thresholds", "operator")
SUSTAINED_PASSES = 20


def sustained_passes(nodes: int, setting: str) -> tuple[float, float, int]:
    """In this (fresh) process: :data:`SUSTAINED_PASSES` busy passes in a row, each after a burst of changes, with
    no collection forced between them, under one of :data:`COLLECTOR_SETTINGS` (Python's defaults; what survived
    the first pass frozen; the operator's thresholds; both, as the operator runs). The mean and the largest CPU
    seconds of a pass, and the full collections they ran."""
    read = _operator_heap(nodes)
    if setting in ("thresholds", "operator"):
        heap.tune_collector()
    if setting in ("frozen", "operator"):
        heap.freeze_survivors()
    full_before = gc.get_stats()[2]["collections"]
    seconds = []
    for _ in range(SUSTAINED_PASSES):
        start = time.process_time()
        decide(read())
        seconds.append(time.process_time() - start)
    return sum(seconds) / len(seconds), max(seconds), gc.get_stats()[2]["collections"] - full_before


def collector_table(nodes: int = SIZES[-1]) -> str:
    lines = [
        f"| collector ({nodes:,} nodes, {SUSTAINED_PASSES} passes in a row) | CPU s a pass (mean) | largest | "
        "full collections |",
        "|---|---:|---:|---:|",
    ]
    for setting in COLLECTOR_SETTINGS:
        command = [sys.executable, "-m", "bench.operator_scale_bench", "--sustained", str(nodes), setting]
        mean, largest, full = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
        lines.append(f"| {setting} | {float(mean):.3f} | {float(largest):.3f} | {int(full)} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def _node_count(parser: argparse.ArgumentParser, flag: str, text: str) -> int:
    """``text`` as a count of nodes, or the parser's error (exit 2) saying what was wrong."""
    try:
        nodes = int(text)
    except ValueError:
        parser.error(f"{flag}: NODES must be a whole number, got {text!r}")
    if nodes < MIN_NODES:
        parser.error(f"{flag}: NODES must be at least {MIN_NODES} (a burst of changes updates {NODE_CHANGES} nodes and "
                     f"{JOB_CHANGES} TrainingJobs), got {nodes}")  # fmt: skip
    return nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_scale_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--memory", action="store_true", help="measure the caches' memory at each size")
    parser.add_argument(
        "--collector", action="store_true", help="busy passes in a row at 5,000 nodes under each collector setting"
    )
    parser.add_argument("--sustained", nargs=2, metavar=("NODES", "SETTING"), help=argparse.SUPPRESS)
    parser.add_argument("--write-pages", nargs=2, metavar=("NODES", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--memory-of", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_pages is not None:
        nodes = _node_count(parser, "--write-pages", args.write_pages[0])
        write_pages(nodes, Path(args.write_pages[1]))
        print(sum(len(items) for items in cluster(nodes).values()))
        return 0
    if args.memory_of is not None:
        held, kept = memory_held(args.memory_of)
        print(f"{held:.1f} {kept['nodes'] + kept['pods']}")
        return 0
    if args.sustained is not None:
        if args.sustained[1] not in COLLECTOR_SETTINGS:
            parser.error(f"--sustained: the setting must be one of {', '.join(COLLECTOR_SETTINGS)}")
        mean, largest, full = sustained_passes(_node_count(parser, "--sustained", args.sustained[0]), args.sustained[1])
        print(f"{mean:.4f} {largest:.4f} {full}")
        return 0
    if args.collector:
        print(f"Machine: {machine()}")
        print(collector_table())
        print(f"load average at the end {load_average()}")
        return 0
    if args.memory:
        print(f"Machine: {machine()}")
        print(memory_table())
        print(f"load average at the end {load_average()}")
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
