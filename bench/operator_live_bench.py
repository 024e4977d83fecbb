"""The operator live on the local control plane: change to action, what it costs, whether its caches keep up.

``uv run python -m bench.operator_live_bench [--nodes N --gpu-pods G --other-pods P --jobs J]`` (needs the cached
binaries) starts a local control plane with N KWOK nodes (a quarter training A100 x 8, the rest inference T4 x 8),
fills it with G one-GPU pods that Lyra does not manage (bound to inference nodes, eight a node, as another team's
workload) and P pods without GPUs, starts ``lyra operator`` as its own process (as its ServiceAccount, with the
chart's RBAC, and ``--debug-endpoints``), waits until it is ready (its caches have listed) and steady, then submits J
TrainingJobs one after the other (1-2 A100 workers each); every fifth change also scales the InferenceService chat up by
``--scale-step`` replicas (a T4 server's worth: the stream reclaims) and deletes the job submitted four changes
earlier once it was acted on (not timed). It measures,
through a watch cache of its own (``lyra.kubewatch``):

* change to action: from a job's creation to the operator's first status write on it (its intent, written before
  any of its pods), and from a scale change to the Deployment's new replica count; median and p95. A change not
  acted on within ``--change-deadline`` is reported missed (a missed event shows so), not waited for without end;
* the operator's CPU time and resident memory (``/proc``) over the stream;
* the operator's API requests during the stream, by verb (its Lease's included), and per minute, from the API
  server's audit log (every write, and every get, list and watch by a ServiceAccount), and the lists it made after
  its first pass began (none expected: every list comes first, one per kind, paginated).

And it checks, once the stream is over and the cluster has converged: that the operator's caches hold what a fresh
paginated list holds (its ``/debug/caches``, each object at least at the listed resourceVersion: a cache that missed
an event stays behind), and that steady passes write nothing. Converged means every job running or queued, the
service's replicas ready, no worker in flight (leaving, left behind by a deleted job, or bound and not started: a
worker's GPUs are free only once it is gone, and a queued job may start then) and two quiet passes since.
:func:`run_live` returns all of it as a :class:`LiveResult`; ``tests/integration/test_live_benchmark.py`` runs it
at small sizes and asserts on it.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from tests.operator_support import OPERATOR_NAMESPACE, service_account_kubeconfig

from bench.__main__ import load_average
from bench.scheduling_bench import _cpu_seconds
from lyra.api import names
from lyra.api.resources import JobPhase, Preemption
from lyra.kubewatch import ApiSource, WatchCache
from lyra.kubewatch.cache import key_of
from lyra.kubewatch.kinds import DEPLOYMENTS, TRAINING_JOBS, JsonObject, Kind, section, slim_pod
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ClusterOptions, ControlPlane
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.profile import parse_profile
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import WaitTimeoutError, wait_for
from lyra.operator.caches import KINDS, list_once
from lyra.operator.endpoints import CACHES_PATH, METRICS_PATH, READINESS_PATH
from lyra.operator.metrics import ACTIONS, PASSES, SUCCEEDED

T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
TARGET_MEDIAN_S = 1.0
TARGET_P95_S = 3.0
CRDS = Path(__file__).resolve().parents[1] / "manifests" / "crds"
WRITES = ("create", "update", "patch", "delete")
VERBS = ("list", "watch", "get", *WRITES)
#: How long the end-of-run checks wait for the caches to reach a fresh list, and for the cluster to converge.
CHECK_DEADLINE_S = 60.0
#: ``chat``'s replicas before the stream, and its maxReplicas.
CHAT_REPLICAS, CHAT_MAX_REPLICAS = 4, 64
#: How long the operator's first passes may take before the stream (and half a second more per queued TrainingJob:
#: the local scheduler and KWOK start thousands of workers on a shared machine).
STEADY_DEADLINE_S = 600.0


@dataclass(frozen=True, slots=True)
class LiveSizes:
    """What the benchmark runs: the cluster's size, the stream of changes, and its deadlines."""

    nodes: int = 1_000
    gpu_pods: int = 5_000
    other_pods: int = 10_000
    jobs: int = 20
    interval_s: float = 1.0  # between two changes
    change_deadline_s: float = 60.0  # a change not acted on within this is reported missed
    resync_s: float | None = None  # the operator's --resync (None: its default)
    steady_passes: int = 3  # passes on the converged cluster that must write nothing
    queued_jobs: int = 0  # TrainingJobs submitted before the operator starts (a real workload to decide over)
    services: int = 1  # InferenceServices ("chat", scaled by the stream, and others of service_replicas each)
    #: Replicas of each service but chat: a T4 x 8 server's worth, so that the services fill their servers and chat's
    #: scale-ups need servers of their own.
    service_replicas: int = 8
    rich_pods: bool = False  # the cluster's and Lyra's pods shaped like real ones (environment, volumes, probes)
    start_timeout_s: float | None = None  # the operator's --start-timeout (None: its default, 300 s)
    #: Replicas each scale-up of ``chat`` adds (one every fifth change): a whole T4 x 8 server's worth, so that the
    #: scale-ups outgrow the servers still serving and the operator reclaims lent ones during the stream.
    scale_step: int = 8

    @property
    def inference_gpus(self) -> int:
        """The GPUs the services claim at most (chat at its maxReplicas): the operator's ``--inference-gpu-cap`` for
        the benchmark's namespace. Its default (64) bounded the 50 services' replicas, and chat never outgrew the
        servers kept serving."""
        return (self.services - 1) * self.service_replicas + CHAT_MAX_REPLICAS

    def problem(self) -> str | None:
        if self.gpu_pods > 8 * (self.nodes - self.nodes // 4):
            return "--gpu-pods: more than the inference nodes hold"
        if self.nodes < 4:
            return "--nodes: at least 4 (a quarter of them train)"
        if self.queued_jobs < 0 or not 1 <= self.services <= 1_000:
            return "--queued-jobs: at least 0; --services: 1 to 1,000"
        if self.start_timeout_s is not None and not 0 < self.start_timeout_s < 86_400:
            return "--start-timeout: seconds above 0 and below a day"
        if not 1 <= self.service_replicas <= CHAT_MAX_REPLICAS:
            return f"--service-replicas: 1 to {CHAT_MAX_REPLICAS}"
        t4_servers = self.nodes - self.nodes // 4 - math.ceil(self.gpu_pods / 8)
        serving = (self.services - 1) * math.ceil(self.service_replicas / 8) + math.ceil(CHAT_MAX_REPLICAS / 8)
        if serving > t4_servers:
            return (
                f"--services x --service-replicas: the services could need {serving} T4 servers, and the inference "
                f"nodes the --gpu-pods leave hold {t4_servers}"
            )
        if self.scale_step < 1 or CHAT_REPLICAS + self.scale_step * (self.jobs // 5) > CHAT_MAX_REPLICAS:
            return (
                f"--scale-step: at least 1, and {CHAT_REPLICAS} + --scale-step x (--jobs // 5) at most"
                f" {CHAT_MAX_REPLICAS} (chat's maxReplicas)"
            )
        return None


@dataclass(slots=True)
class LiveResult:
    """What one run measured and found; the lists of problems are empty on a run where all went well."""

    sizes: LiveSizes
    synced_s: float = 0.0  # the operator ready (its caches listed) after its start
    settled_s: float = 0.0  # its first passes done
    acted: dict[str, float] = field(default_factory=dict)  # change -> seconds to its action, in submission order
    missed: list[str] = field(default_factory=list)  # changes not acted on within the deadline
    cpu_s: float = 0.0  # the operator's CPU time over the stream
    wall_s: float = 0.0  # the stream's length
    rss_mib: float = 0.0  # the operator's resident memory at the end of the stream
    peak_mib: float = 0.0  # the operator process's peak resident memory (VmHWM) at the end of the run
    reclaims: float = 0.0  # reclaims the operator started during the stream (its lyra_reclaims_total)
    requests: Counter[str] = field(default_factory=Counter)  # the operator's requests during the stream, by verb
    first_lists: list[str] = field(default_factory=list)  # its lists before its first write (request URIs)
    lists_in_passes: list[str] = field(default_factory=list)  # its lists from its first write on
    watched: set[str] = field(default_factory=set)  # the resources it watched
    writes: int = 0  # its writes over the whole run, its Lease's left out
    cache_differences: list[str] = field(default_factory=list)  # where its caches differ from a fresh list
    #: Every job running or queued (none failed: a reclaim may rightly send a job back to the queue when the
    #: cluster is full), the Deployment ready at its replicas, two passes in a row with no action, and then
    #: ``steady_passes`` more passes, within :data:`CHECK_DEADLINE_S` each.
    converged: bool = False
    end_state: str = ""  # the jobs' phases and the Deployment's ready replicas when the checks ended
    steady_writes: list[str] = field(default_factory=list)  # writes of the steady passes

    @property
    def latencies(self) -> list[float]:
        return sorted(self.acted.values())

    @property
    def requests_per_minute(self) -> float:
        return 60 * sum(self.requests.values()) / self.wall_s if self.wall_s else 0.0

    def problems(self) -> list[str]:
        """What went wrong, in words (empty: nothing)."""
        found = [f"{key}: not acted on within {self.sizes.change_deadline_s:.0f} s" for key in self.missed]
        found += [f"a list after the first pass began: {uri}" for uri in self.lists_in_passes]
        found += [f"cache differs from a fresh list: {difference}" for difference in self.cache_differences]
        if not self.converged:
            found.append(
                f"the cluster did not converge after the stream (or the operator made no {self.sizes.steady_passes} "
                f"passes after): {self.end_state}"
            )
        found += [f"a steady pass wrote: {write}" for write in self.steady_writes]
        return found


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


def rich(pod_spec: dict[str, Any], role: str) -> dict[str, Any]:
    """A pod spec as real workloads write them: every container with arguments, twelve environment variables,
    ports, probes, volume mounts, and the pod with volumes and tolerations (the API server adds its defaults and
    the managed fields)."""
    containers = [
        container
        | {
            "args": ["--port=8080", "--log-level=info"],
            "env": [*container.get("env", []), *({"name": f"{role.upper()}_SETTING_{i}", "value": f"value-{i}"}
                                                  for i in range(12))],
            "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "config", "mountPath": "/etc/app"}],
        }
        for container in pod_spec["containers"]
    ]  # fmt: skip
    return pod_spec | {
        "containers": containers,
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "config", "configMap": {"name": f"{role}-config",
                                                                                       "optional": True}}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}],
    }  # fmt: skip


def fill(
    api: client.ApiClient, namespace: str, nodes: int, gpu_pods: int, other_pods: int, *, rich_pods: bool = False
) -> None:
    training = nodes // 4
    inference = [f"inference-t4-{i}" for i in range(nodes - training)]
    everyone = inference + [f"training-a100-{i}" for i in range(training)]
    bodies = [bound_pod(f"gpu-{i:05d}", inference[(i // 8) % len(inference)], 1) for i in range(gpu_pods)]
    bodies += [bound_pod(f"web-{i:05d}", everyone[i % len(everyone)], 0) for i in range(other_pods)]
    if rich_pods:
        for body in bodies:
            body["spec"] = rich(body["spec"], "web")
            body["metadata"]["labels"] |= {"app.kubernetes.io/part-of": "platform", "tier": "web", "team": "other"}
            body["metadata"]["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}
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


def queued_job_body(index: int, *, rich_pods: bool = False) -> dict[str, Any]:
    """One of the TrainingJobs submitted before the operator starts: 1 to 4 one-GPU workers (at least 1), on A100
    or (two in five) T4, so the T4 ones run on loaned inference servers, which the stream's scale-ups reclaim."""
    body = job_body(f"bg-{index:04d}")
    spec = body["spec"]
    spec["maxWorkers"] = 1 + index % 4
    spec["gpuTypes"] = [T4 if index % 5 < 2 else A100]
    spec["expectedDuration"] = 1800 + 60 * (index % 97)
    if rich_pods:
        spec["template"] = {"spec": rich(spec["template"]["spec"], "trainer")}
    return body


def service_body(replicas: int, name: str = "chat", *, rich_pods: bool = False) -> dict[str, Any]:
    template: dict[str, Any] = {"containers": [{"name": "server", "image": f"registry.invalid/{name}:1"}]}
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.INFERENCE_SERVICE_KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "maxReplicas": CHAT_MAX_REPLICAS, "gpusPerReplica": 1, "gpuType": T4,
            "template": {"spec": rich(template, "server") if rich_pods else template},
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
            self.seen.pop(key, None)

    def __call__(self, key: str, obj: JsonObject | None) -> None:
        with self._lock:
            condition = self.awaited.get(key)
            if obj is not None and condition is not None and key not in self.seen and condition(obj):
                self.seen[key] = time.perf_counter()


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory (``VmRSS``) or its peak (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def not_running(api: client.ApiClient, namespace: str, shown: int = 8) -> str:
    """The pods of ``namespace`` that do not run (the benchmark's own pods run from the start, so these are Lyra's
    workers and replicas), each with why, when a convergence check misses: the operator's or the scheduler's?"""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, field_selector="status.phase!=Running").items
    described = []
    for pod in pods[:shown]:
        scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        why = f"{scheduled.reason}: {scheduled.message}" if scheduled is not None and scheduled.status != "True" else ""
        where = pod.spec.node_name or "no node"
        described.append(f"{pod.metadata.name} ({pod.status.phase}, {where}{', ' + why if why else ''})")
    more = f" and {len(pods) - shown} more" if len(pods) > shown else ""
    return f"{len(pods)} pods not running: {', '.join(described)}{more}" if pods else "every pod running"


#: Lyra's workers (pods labelled with their TrainingJob), watched by the end-of-run checks: slim, and only once the
#: stream is over (a watch of its own during the stream would compete with the operator for the machine).
WORKERS = Kind(
    "pods",
    lambda api: client.CoreV1Api(api).list_pod_for_all_namespaces,
    label_selector=names.JOB_LABEL,
    slim=slim_pod,
)


def workers_in_flight(workers: WatchCache, jobs: WatchCache) -> list[str]:
    """Lyra's workers still on their way in or out: leaving (``deletionTimestamp`` set), left behind by a deleted
    TrainingJob (the garbage collector has yet to delete them), or bound to a node and not started. A worker that
    leaves frees its GPUs only once it is gone, and a queued job may start then: the cluster has not converged while
    one is in flight, however quiet the operator's passes meanwhile. ``workers`` must have listed."""
    current = {key_of(job) for job in jobs.snapshot()}
    found = []
    for pod in workers.snapshot():
        meta, spec, status = section(pod, "metadata"), section(pod, "spec"), section(pod, "status")
        job = f"{meta.get('namespace')}/{section(meta, 'labels').get(names.JOB_LABEL)}"
        if meta.get("deletionTimestamp"):
            found.append(f"{meta.get('name')} (leaving)")
        elif job not in current:
            found.append(f"{meta.get('name')} (its job deleted)")
        elif spec.get("nodeName") and status.get("phase") == names.POD_PENDING:
            found.append(f"{meta.get('name')} (bound, not started)")
    return found


def held_within(condition: Callable[[], bool], timeout_s: float, what: str) -> bool:
    """Whether ``condition`` held before the deadline (a benchmark reports what did not happen, it does not stop)."""
    try:
        wait_for(condition, max(timeout_s, 0.1), what, interval=0.1)
    except WaitTimeoutError:
        return False
    return True


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def run_live(sizes: LiveSizes, state: Path) -> LiveResult:
    """Run the benchmark at ``sizes`` on a control plane of its own (state under ``state``): see the module
    docstring."""
    with (
        session_control_plane(
            state, profile=profile(sizes.nodes), crd_dir=CRDS, step_timeout=start_deadline_s(sizes.nodes)
        ) as control_plane,
        populate.admin_api(control_plane.kubeconfig) as api,
        temporary_namespace(api, "live-bench") as namespace,
    ):
        account = state / "operator-account"
        account.mkdir(exist_ok=True)
        kubeconfig = service_account_kubeconfig(control_plane, api, account)
        filled = time.perf_counter()
        fill(api, namespace, sizes.nodes, sizes.gpu_pods, sizes.other_pods, rich_pods=sizes.rich_pods)
        custom = client.CustomObjectsApi(api)
        where = (names.GROUP, names.VERSION, namespace)
        bodies = [(names.INFERENCE_SERVICE_PLURAL, service_body(CHAT_REPLICAS, rich_pods=sizes.rich_pods))]
        bodies += [
            (
                names.INFERENCE_SERVICE_PLURAL,
                service_body(sizes.service_replicas, f"svc-{i:03d}", rich_pods=sizes.rich_pods),
            )
            for i in range(1, sizes.services)
        ]
        bodies += [
            (names.TRAINING_JOB_PLURAL, queued_job_body(i, rich_pods=sizes.rich_pods)) for i in range(sizes.queued_jobs)
        ]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda item: custom.create_namespaced_custom_object(*where, *item), bodies))
        print(f"  filled in {time.perf_counter() - filled:.0f} s", file=sys.stderr, flush=True)
        stopwatch = Stopwatch()
        jobs = WatchCache(TRAINING_JOBS, ApiSource(api, TRAINING_JOBS), on_change=stopwatch)
        deployments = WatchCache(DEPLOYMENTS, ApiSource(api, DEPLOYMENTS), on_change=stopwatch)
        workers = WatchCache(WORKERS, ApiSource(api, WORKERS))
        port = allocate_ports(1)[0]
        command = [sys.executable, "-m", "lyra", "operator", "--kubeconfig", str(kubeconfig),
                   "--lease-namespace", OPERATOR_NAMESPACE, "--lend-delay", "5", "--http-port", str(port),
                   "--debug-endpoints", "--inference-gpu-cap", f"*={sizes.inference_gpus}",
                   *(["--resync", str(sizes.resync_s)] if sizes.resync_s else []),
                   *(["--start-timeout", str(sizes.start_timeout_s)] if sizes.start_timeout_s else [])]  # fmt: skip
        operator_log = state / "operator.log"
        result = LiveResult(sizes)
        with operator_log.open("wb") as log:
            operator = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        jobs.start()
        deployments.start()
        try:
            stream = Stream(
                sizes, namespace=namespace, custom=custom, stopwatch=stopwatch, jobs=jobs, deployments=deployments
            )
            result.synced_s, result.settled_s = wait_steady(
                port, STEADY_DEADLINE_S + sizes.queued_jobs / 2, kubelets_caught_up(api, namespace)
            )
            reclaims_before = reclaims_made(port)
            cpu_before, wall_before = _cpu_seconds(operator.pid), time.perf_counter()
            began = datetime.now(UTC)
            stream.run()
            result.acted = stream.acted
            result.missed = stream.missed
            result.cpu_s = _cpu_seconds(operator.pid) - cpu_before
            result.wall_s = time.perf_counter() - wall_before
            result.rss_mib = rss_mib(operator.pid)
            result.reclaims = reclaims_made(port) - reclaims_before
            ended = datetime.now(UTC)
            result.cache_differences = caches_behind(port, api)
            steadiness = Steadiness(port)
            quiet_from = steady_until = datetime.now(UTC)
            # A reclaim's scale-in gives its workers the TrainingJob's grace before the servers are free.
            grace_s = Preemption().grace_period_seconds
            workers.start()  # the list and watch of Lyra's workers, for what is in flight
            flown: set[str] = set()  # the workers seen in flight while the rest had converged

            def converged_now() -> bool:
                if not (stream.converged() and workers.synced):
                    return False
                flying = workers_in_flight(workers, jobs)
                if flying:
                    flown.update(flying)
                    steadiness.restart()  # quiet passes count only once nothing is in flight
                    return False
                return steadiness.twice()

            converged = held_within(converged_now, CHECK_DEADLINE_S + grace_s, "a converged cluster")
            if flown:
                shown = ", ".join(sorted(flown)[:8])
                print(f"  converging waited for {len(flown)} workers in flight: {shown}", file=sys.stderr, flush=True)
            if converged:
                quiet_from = datetime.now(UTC)
                passes = passes_made(port)
                converged = held_within(
                    lambda: passes_made(port) >= passes + sizes.steady_passes,
                    CHECK_DEADLINE_S,
                    f"{sizes.steady_passes} more passes",
                )
                steady_until = datetime.now(UTC)
            result.converged = converged
            result.end_state = stream.end_state()
            result.peak_mib = rss_mib(operator.pid, "VmHWM")
            if not converged:
                result.end_state += "; " + not_running(api, namespace)
                if not workers.synced:
                    result.end_state += "; the workers in flight unknown (their watch never listed)"
                elif flying := workers_in_flight(workers, jobs):
                    result.end_state += f"; {len(flying)} workers in flight: {', '.join(flying[:8])}"
        finally:
            operator.terminate()
            operator.wait(timeout=30)
            jobs.stop()
            deployments.stop()
            workers.stop()
            shown = [line for line in operator_log.read_text().splitlines() if "pass " in line or "WARN" in line]
            print("\n".join(f"  operator: {line}" for line in shown[-40:]), file=sys.stderr)
        audit = audited(control_plane, operator.pid)
        result.requests = Counter(e["verb"] for e in audit if began <= received(e) <= ended)
        # The Lease's writes left out: its create (before the first pass) and its renewals are not a pass's.
        writes = [e for e in audit if e["verb"] in WRITES and (e.get("objectRef") or {}).get("resource") != "leases"]
        result.writes = len(writes)
        first_write = received(writes[0]) if writes else datetime.max.replace(tzinfo=UTC)
        lists = [e for e in audit if e["verb"] == "list"]
        result.first_lists = [e["requestURI"] for e in lists if received(e) < first_write]
        result.lists_in_passes = [e["requestURI"] for e in lists if received(e) >= first_write]
        result.watched = {e["objectRef"]["resource"] for e in audit if e["verb"] == "watch"}
        if result.converged:
            result.steady_writes = [
                f"{e['verb']} {e['requestURI']}" for e in writes if quiet_from <= received(e) <= steady_until
            ]
        for key, seconds in result.acted.items():
            print(f"  {key}: acted on after {seconds:.2f} s", file=sys.stderr)
        return result


class Stream:
    """The stream of changes (see the module docstring), and when each was acted on."""

    def __init__(
        self,
        sizes: LiveSizes,
        *,
        namespace: str,
        custom: client.CustomObjectsApi,
        stopwatch: Stopwatch,
        jobs: WatchCache,
        deployments: WatchCache,
    ) -> None:
        self.sizes = sizes
        self.namespace = namespace
        self.custom = custom
        self.stopwatch = stopwatch
        self.jobs = jobs
        self.deployments = deployments
        self.deployment = f"{namespace}/chat"
        self.replicas = CHAT_REPLICAS
        self.submitted: dict[str, float] = {}  # change -> when it was made, in order
        self.done: dict[str, float] = {}  # change -> when it was seen acted on
        self.scales: set[str] = set()  # the changes that are scale changes (timed as they are made)
        self.acted: dict[str, float] = {}
        self.missed: list[str] = []

    def _custom(self, plural: str) -> tuple[str, str, str, str]:
        return names.GROUP, names.VERSION, self.namespace, plural

    def run(self) -> None:
        sizes, stopwatch = self.sizes, self.stopwatch
        wait_for(lambda: self.deployments.get(self.deployment) is not None, 120, "the service's Deployment")
        submitted = self.submitted
        for index in range(sizes.jobs):
            key = f"{self.namespace}/job-{index:03d}"
            stopwatch.await_(key, lambda obj: bool((obj.get("status") or {}).get("phase")))
            submitted[key] = time.perf_counter()
            self.custom.create_namespaced_custom_object(
                *self._custom(names.TRAINING_JOB_PLURAL), job_body(key.split("/")[1])
            )
            if index % 5 == 4:
                self.scale(self.replicas + sizes.scale_step)
                earlier = f"{self.namespace}/job-{index - 4:03d}"
                if earlier in stopwatch.seen:
                    self.custom.delete_namespaced_custom_object(
                        *self._custom(names.TRAINING_JOB_PLURAL), earlier.split("/")[1]
                    )
            # A benchmark's load generator, not a test: the stream offers one change per interval, as users
            # would, and the time to action is measured from each change's own submission.
            time.sleep(sizes.interval_s)
        last = max(submitted.values(), default=time.perf_counter())
        jobs = [key for key in submitted if key not in self.scales]
        held_within(
            lambda: all(key in stopwatch.seen for key in jobs),
            last + sizes.change_deadline_s - time.perf_counter(),
            "every change acted on",
        )
        self.done |= {key: stopwatch.seen[key] for key in jobs if key in stopwatch.seen}
        for key, at in submitted.items():
            if key in self.done:
                self.acted[key] = self.done[key] - at
            else:
                self.missed.append(key)

    def scale(self, replicas: int) -> None:
        """Scale the service and wait (up to the change deadline) for its Deployment to follow; timed."""
        key = f"{self.deployment}@{replicas}"
        self.stopwatch.await_(self.deployment, lambda obj: (obj.get("spec") or {}).get("replicas") == replicas)
        self.submitted[key] = time.perf_counter()
        self.scales.add(key)
        self.custom.patch_namespaced_custom_object(
            *self._custom(names.INFERENCE_SERVICE_PLURAL), "chat", {"spec": {"replicas": replicas}}
        )
        self.replicas = replicas
        if held_within(
            lambda: self.deployment in self.stopwatch.seen,
            self.sizes.change_deadline_s,
            f"the Deployment at {replicas} replicas",
        ):
            self.done[key] = self.stopwatch.seen[self.deployment]

    def converged(self) -> bool:
        """Every job left running or queued (a reclaim for the inference scale-ups may send jobs back to the queue
        of a full cluster; none failed), and the Deployment at its replicas, all ready. Together with the
        operator's passes applying nothing, this is the end of the stream's work."""
        phases = self.phases()
        deployment = self.deployments.get(self.deployment) or {}
        status = deployment.get("status") or {}
        settled = set(phases) <= {JobPhase.RUNNING.value, JobPhase.QUEUED.value}
        return settled and status.get("readyReplicas") == self.replicas == (deployment.get("spec") or {}).get(
            "replicas"
        )

    def phases(self) -> Counter[str]:
        return Counter(str((job.get("status") or {}).get("phase") or "none") for job in self.jobs.snapshot())

    def end_state(self) -> str:
        deployment = self.deployments.get(self.deployment) or {}
        ready = (deployment.get("status") or {}).get("readyReplicas") or 0
        jobs = ", ".join(f"{count} {phase}" for phase, count in sorted(self.phases().items()))
        return f"jobs: {jobs or 'none'}; {self.deployment}: {ready} of {self.replicas} replicas ready"


def kubelets_caught_up(api: client.ApiClient, namespace: str) -> Callable[[], bool]:
    """True once no pod of ``namespace`` is bound to a node and still Pending: KWOK, playing every kubelet, has
    started what the scheduler placed. The first passes create thousands of workers at once, and a stream started
    while the fake kubelets still work through them would time their backlog (and the operator's gang timeout would
    fire for pods that no real kubelet keeps waiting)."""
    core = client.CoreV1Api(api)

    def caught_up() -> bool:
        waiting = core.list_namespaced_pod(
            namespace, field_selector=f"status.phase={names.POD_PENDING},spec.nodeName!=", limit=1
        )
        return not waiting.items

    return caught_up


def wait_steady(
    port: int, deadline_s: float = 600.0, settled: Callable[[], bool] = lambda: True
) -> tuple[float, float]:
    """Wait until the operator is ready (its caches have listed), then steady (its first passes done, and
    ``settled`` true, within ``deadline_s``); how long each took from now."""
    started = time.perf_counter()

    def ready() -> bool:
        try:
            http_get(f"http://127.0.0.1:{port}{READINESS_PATH}")
        except OSError:
            return False
        return True

    wait_for(ready, 600, "the operator to be ready", interval=0.2)
    synced_s = time.perf_counter() - started
    steady = Steadiness(port)
    wait_for(
        lambda: steady() and settled(),
        deadline_s,
        "the operator's first passes to be done (a pass with no action) and the cluster settled",
        interval=0.5,
    )
    settled_s = time.perf_counter() - started
    print(f"  ready after {synced_s:.1f} s, steady after {settled_s:.1f} s", file=sys.stderr, flush=True)
    return synced_s, settled_s


def caches_behind(port: int, api: client.ApiClient) -> list[str]:
    """Where the operator's caches (``/debug/caches``) differ from a fresh paginated list: an object missing or
    extra, or held at a resourceVersion older than the list's. Lists again at each try, for up to
    :data:`CHECK_DEADLINE_S`, until the caches reach a list: the operator may still be writing when the stream ends
    (its queued jobs' workers, a reclaim's scale-in), and a list taken once would miss what it wrote after; a cache
    that missed an event differs from every later list. Nodes' versions move on with every heartbeat of KWOK's: a
    cache ahead of the list is fine."""
    differences: list[str] = []

    def reached() -> bool:
        fresh = {
            name: {key_of(obj): str(obj["metadata"].get("resourceVersion") or "") for obj in objects}
            for name, objects in list_once(api).items()
        }
        held: Mapping[str, Mapping[str, str]] = json.loads(http_get(f"http://127.0.0.1:{port}{CACHES_PATH}"))
        differences[:] = compared(held, fresh)
        return not differences

    held_within(reached, CHECK_DEADLINE_S, "the operator's caches to reach a fresh list")
    return differences


def compared(held: Mapping[str, Mapping[str, str]], fresh: Mapping[str, Mapping[str, str]]) -> list[str]:
    differences = []
    for kind in KINDS:
        cached, listed = held.get(kind, {}), fresh.get(kind, {})
        differences += [f"{kind} {key}: listed, not cached" for key in sorted(listed.keys() - cached.keys())]
        differences += [f"{kind} {key}: cached, gone from the list" for key in sorted(cached.keys() - listed.keys())]
        differences += [
            f"{kind} {key}: cached at version {cached[key]}, listed at {listed[key]}"
            for key in sorted(listed.keys() & cached.keys())
            if int(cached[key] or 0) < int(listed[key] or 0)
        ]
    return differences


def audited(cluster: ControlPlane, pid: int) -> list[dict[str, Any]]:
    """The operator process's requests the audit log recorded, in order: complete ones, and watches (which stay open:
    their response has started). Its user agent names its Lease identity, which holds its process id."""
    marker = f"-{pid}-"
    events = []
    for line in cluster.layout.audit_log.read_text().splitlines():
        event = json.loads(line)
        stage = "ResponseStarted" if event.get("verb") == "watch" else "ResponseComplete"
        if marker in event.get("userAgent", "") and event.get("stage") == stage:
            events.append(event)
    return sorted(events, key=lambda e: e["requestReceivedTimestamp"])


def received(event: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00"))


def start_deadline_s(nodes: int) -> float:
    """How long each step of the local control plane's start may take: the default 90 s, or 0.2 s a node when that
    is longer (a thousand KWOK nodes did not all turn Ready within 90 s here)."""
    return max(ClusterOptions.step_timeout, nodes / 5)


def passes_made(port: int) -> float:
    """The operator's successful passes so far, from its ``/metrics``."""
    return metric_sums(port)[0]


def reclaims_made(port: int) -> float:
    """The reclaims the operator has started so far (every series of ``lyra_reclaims_total``), from its ``/metrics``."""
    return sum(
        float(line.split()[-1])
        for line in http_get(f"http://127.0.0.1:{port}{METRICS_PATH}").splitlines()
        if line.startswith("lyra_reclaims_total{")
    )


def metric_sums(port: int) -> tuple[float, float]:
    """The count of the operator's succeeded passes and of its actions, from its ``/metrics``."""
    passes = actions = 0.0
    for line in http_get(f"http://127.0.0.1:{port}{METRICS_PATH}").splitlines():
        if line.startswith(f'{PASSES.name}{{result="{SUCCEEDED}"}}'):
            passes = float(line.split()[-1])
        elif line.startswith(f"{ACTIONS.name}{{"):
            actions += float(line.split()[-1])
    return passes, actions


class Steadiness:
    """True once the operator has finished a pass that applied nothing since its last pass that applied something:
    its first passes label, taint and lend every inference server (hundreds of writes), and a change submitted
    meanwhile would measure them, not the operator's response to the change. Read from its ``/metrics``: the
    count of succeeded passes and of actions."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.last: tuple[float, float] | None = None  # (passes, actions) at the previous poll
        self.in_a_row = 0

    def __call__(self) -> bool:
        now = metric_sums(self.port)
        if self.last is not None and now[0] <= self.last[0]:
            return False  # no pass since the last poll: nothing learnt
        previous, self.last = self.last, now
        steady = previous is not None and now[1] == previous[1] and now[0] >= 2
        self.in_a_row = self.in_a_row + 1 if steady else 0
        return steady

    def restart(self) -> None:
        """Count quiet passes from the next one observed."""
        self.in_a_row = 0

    def twice(self) -> bool:
        """Two observations in a row of new passes with no action (polled by the caller's wait)."""
        self()
        return self.in_a_row >= 2


def main(argv: list[str] | None = None) -> int:
    defaults = LiveSizes()
    parser = argparse.ArgumentParser(prog="python -m bench.operator_live_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--gpu-pods", type=int, default=defaults.gpu_pods)
    parser.add_argument("--other-pods", type=int, default=defaults.other_pods)
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--interval", type=float, default=defaults.interval_s, help="seconds between two changes")
    parser.add_argument(
        "--change-deadline",
        type=float,
        default=defaults.change_deadline_s,
        help="a change not acted on within this many seconds is reported missed",
    )
    parser.add_argument(
        "--queued-jobs",
        type=int,
        default=defaults.queued_jobs,
        help="TrainingJobs submitted before the operator starts",
    )
    parser.add_argument("--services", type=int, default=defaults.services, help="InferenceServices (chat, and others)")
    parser.add_argument(
        "--service-replicas",
        type=int,
        default=defaults.service_replicas,
        help="replicas of each service but chat (default: a T4 server's worth, so that they fill their servers)",
    )
    parser.add_argument(
        "--rich-pods", action="store_true", help="pods with environment, volumes, probes (as real workloads write them)"
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=None,
        help="the operator's --start-timeout (its default: 300 s; raise it where the local scheduler is slow)",
    )
    parser.add_argument(
        "--scale-step",
        type=int,
        default=defaults.scale_step,
        help="replicas each scale-up of chat adds (default: a whole server's worth, so that the stream reclaims)",
    )
    parser.add_argument(
        "--keep-log", type=Path, metavar="PATH", help="copy the operator's whole log here after the run"
    )
    args = parser.parse_args(argv)
    sizes = LiveSizes(
        nodes=args.nodes,
        gpu_pods=args.gpu_pods,
        other_pods=args.other_pods,
        jobs=args.jobs,
        interval_s=args.interval,
        change_deadline_s=args.change_deadline,
        queued_jobs=args.queued_jobs,
        services=args.services,
        service_replicas=args.service_replicas,
        rich_pods=args.rich_pods,
        start_timeout_s=args.start_timeout,
        scale_step=args.scale_step,
    )
    problem = sizes.problem()
    if problem is not None:
        parser.error(problem)
    start_load = load_average()
    with tempfile.TemporaryDirectory(prefix="lyra-live-bench-") as directory:
        try:
            result = run_live(sizes, Path(directory))
        finally:  # kept when the run fails too: that is when it is read
            if args.keep_log is not None and (Path(directory) / "operator.log").exists():
                shutil.copyfile(Path(directory) / "operator.log", args.keep_log)
                print(f"  the operator's log: {args.keep_log}", file=sys.stderr)
    print(report(result, start_load))
    return 1 if result.problems() else 0


def report(result: LiveResult, start_load: str) -> str:
    sizes, latencies = result.sizes, result.latencies
    median = statistics.median(latencies) if latencies else float("nan")
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] if latencies else float("nan")
    status = "pass" if median <= TARGET_MEDIAN_S and p95 <= TARGET_P95_S else "MISS"
    by_verb = ", ".join(f"{verb} {result.requests[verb]}" for verb in VERBS if result.requests[verb])
    lines = [
        f"live operator: {sizes.nodes} nodes, {sizes.gpu_pods} GPU pods + {sizes.other_pods} other pods"
        f"{' (rich)' if sizes.rich_pods else ''}, {sizes.queued_jobs} TrainingJobs before the stream, "
        f"{sizes.services} InferenceServices, {len(result.acted) + len(result.missed)} changes; load average at "
        f"start {start_load}, at the end {load_average()}",
        "| ready after | steady after | change to action median | p95 | operator CPU | over | RSS | peak RSS | "
        "reclaims | requests/min | lists in the stream | target |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {result.synced_s:.1f} s | {result.settled_s:.1f} s | {median:.2f} s | {p95:.2f} s | {result.cpu_s:.1f} s | "
        f"{result.wall_s:.0f} s | {result.rss_mib:.0f} MiB | {result.peak_mib:.0f} MiB | {result.reclaims:.0f} | "
        f"{result.requests_per_minute:.0f} | {result.requests['list']} | median <= {TARGET_MEDIAN_S:.0f} s, p95 <= "
        f"{TARGET_P95_S:.0f} s: {status} |",
        f"requests during the stream, by verb: {by_verb or 'none'}; lists (pages) before its first write: "
        f"{len(result.first_lists)}, after: {len(result.lists_in_passes)}",
    ]
    problems = result.problems()
    lines.append("checks: " + ("caches equal a fresh list, every change acted on, steady passes wrote nothing"
                               if not problems else "FAILED: " + "; ".join(problems[:20])))  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
