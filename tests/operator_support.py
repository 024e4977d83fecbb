"""Running Lyra's operator for real in tests (integration and e2e): the operator as a child process with the
ServiceAccount of manifests/operator/rbac.yaml, small readers of jobs, workers and node states, and `lyra check`
(``assert_check_clean``), which every test that ends in a converged cluster calls last."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.localcluster.binaries import BinariesError
from lyra.localcluster.controlplane import ClusterStartError, ControlPlane
from lyra.localcluster.kubeconfig import write_kubeconfig
from lyra.localcluster.profile import parse_profile_text
from lyra.localcluster.testing import session_control_plane
from lyra.localcluster.waiting import wait_for

T4 = "Tesla-T4"
A100 = "NVIDIA-A100-SXM4-80GB"
DEADLINE_S = 90.0
#: The operator's timeouts in these tests (also what ``lyra check`` holds it to).
GANG_TIMEOUT_S = 60
RECLAIM_DEADLINE_S = 60
REPOSITORY = Path(__file__).resolve().parents[1]
OPERATOR_NAMESPACE = "lyra-system"  # manifests/operator/rbac.yaml (lyra.chart.rendering.NAMESPACE)
#: The operators' lease duration, whatever their resync: the Lease is renewed in a loop of its own, and a first
#: operator waits this long before it creates the Lease (it may have just been deleted under a leader).
LEASE_S = 4


class ChildProcess:
    """A component run as a child process by a test, its output in a log file; ``kill`` is SIGKILL, ``stop`` SIGTERM
    and then SIGKILL if it has not gone within 30 s."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def run(self, command: list[str]) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None

    def says(self, text: str) -> bool:
        return self.log.exists() and text in self.log.read_text(errors="replace")


class Operator(ChildProcess):
    """``lyra operator`` as a child process, its output in a log file shown when a test fails."""

    def __init__(
        self, kubeconfig: Path, log: Path, *, resync_s: int = 1, http_port: int = 0, options: tuple[str, ...] = ()
    ) -> None:
        super().__init__(log)
        self.kubeconfig = kubeconfig
        self.resync_s = resync_s
        self.http_port = http_port  # 0: no metrics or health endpoints (tests run several operators at once)
        self.options = options  # more of the operator's options, e.g. ("--node-grace", "10")

    def command(self, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "lyra", "operator", "--kubeconfig", str(self.kubeconfig),
            "--lend-delay", "2", "--resync", str(self.resync_s), "--gang-timeout", str(GANG_TIMEOUT_S),
            "--reclaim-deadline", str(RECLAIM_DEADLINE_S),
            "--lease-duration", str(LEASE_S), "--lease-namespace", OPERATOR_NAMESPACE,
            "--http-port", str(self.http_port), *self.options, *extra,
        ]  # fmt: skip

    def start(self) -> None:
        self.run(self.command())

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def inference_service(
    name: str, *, replicas: int, gpus: int, max_replicas: int = 64, min_replicas: int | None = None, gpu_type: str = T4
) -> dict[str, Any]:
    """An InferenceService of ``replicas`` replicas of ``gpus`` GPUs of ``gpu_type`` (KWOK runs no container: the
    image is never pulled)."""
    spec: dict[str, Any] = {
        "replicas": replicas,
        "maxReplicas": max_replicas,
        "gpusPerReplica": gpus,
        "gpuType": gpu_type,
        "template": {"spec": {"containers": [{"name": "server", "image": "registry.invalid/server:1"}]}},
    }
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.INFERENCE_SERVICE_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def create_service(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    custom(api).create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, body
    )


def create_job(api: client.ApiClient, namespace: str, name: str, **spec: Any) -> None:
    body = {
        "apiVersion": names.API_VERSION,
        "kind": names.TRAINING_JOB_KIND,
        "metadata": {"name": name},
        "spec": {
            "expectedDuration": 3600,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "registry.invalid/trainer:1"}]}},
            "preemption": {"gracePeriodSeconds": 1},
            **spec,
        },
    }
    custom(api).create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, body)


def job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = custom(api).get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, name
    )
    return found


def node_states(api: client.ApiClient) -> dict[str, str]:
    nodes = client.CoreV1Api(api).list_node(label_selector=f"{names.POOL_LABEL}={names.POOL_INFERENCE}").items
    return {n.metadata.name: (n.metadata.labels or {}).get(names.STATE_LABEL, "") for n in nodes}


def workers(api: client.ApiClient, namespace: str, name: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.JOB_LABEL}={name}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def labels_of(api: client.ApiClient, node: str) -> dict[str, str]:
    labels: dict[str, str] = client.CoreV1Api(api).read_node(node).metadata.labels or {}
    return labels


def running(api: client.ApiClient, namespace: str, name: str, count: int) -> bool:
    pods = workers(api, namespace, name)
    status = job(api, namespace, name).get("status", {})
    return (
        len(pods) == count
        and all(p.spec.node_name and p.status.phase == "Running" for p in pods)
        and status.get("workers", {}).get("current") == count
    )


def lease_holder(api: client.ApiClient) -> str:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(names.OPERATOR_NAME, OPERATOR_NAMESPACE)
    except ApiException as error:
        if error.status == 404:
            return ""  # not created yet
        raise
    return str(lease.spec.holder_identity or "")


def dry_run_once(operator: Operator) -> str:
    command = operator.command("--dry-run", "--once")
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy())
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_quiet(operator: Operator, deadline_s: float) -> None:
    """Wait until a dry-run pass with ``operator``'s configuration proposes nothing; a timeout names what the last
    pass still proposed."""
    last: list[Any] = []

    def quiet() -> bool:
        last[:] = json.loads(dry_run_once(operator))["actions"]
        return not last

    try:
        wait_for(quiet, deadline_s, "a pass with nothing left to do")
    except TimeoutError as error:
        raise AssertionError(f"{error}; the last dry-run pass proposed {last}") from error


def lyra_node_fields(api: client.ApiClient) -> dict[str, Any]:
    """What the operator writes on nodes (KWOK's heartbeats move the resourceVersion, so that cannot be compared)."""
    return {
        n.metadata.name: (n.metadata.labels, n.metadata.annotations, [t.to_dict() for t in n.spec.taints or []])
        for n in client.CoreV1Api(api).list_node().items
    }


def service_account_kubeconfig(cluster: ControlPlane, api: client.ApiClient, directory: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount with the RBAC of manifests/operator (rendered from the Helm
    chart): least privilege, tested. The manifests name the namespace but do not create it (helm's --namespace)."""
    core = client.CoreV1Api(api)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=OPERATOR_NAMESPACE)))
    except ApiException as error:
        if error.status != 409:
            raise
    utils.create_from_yaml(api, str(REPOSITORY / "manifests" / "operator" / "rbac.yaml"))
    return token_kubeconfig(cluster, api, names.OPERATOR_NAME, OPERATOR_NAMESPACE, directory / "kubeconfig")


def kubeconfig_through(kubeconfig: Path, server: str, name: str) -> Path:
    """A copy of ``kubeconfig`` (written beside it as ``name``) whose server is ``server``, a proxy in front of the
    API server: same CA, same credentials."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = server
    copied = kubeconfig.with_name(name)
    copied.write_text(yaml.safe_dump(config, sort_keys=False))
    copied.chmod(0o600)
    return copied


def token_kubeconfig(cluster: ControlPlane, api: client.ApiClient, account: str, namespace: str, path: Path) -> Path:
    """A kubeconfig with a TokenRequest token (an hour) of the ServiceAccount ``namespace/account``: what a pod of
    that account would mount."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(account, namespace, cast(Any, request))
        .status.token
    )
    return write_kubeconfig(
        path,
        cluster_name="pytest",
        server=cluster.state.api_server,
        ca_cert=cluster.credentials.ca_cert,
        user=account,
        token=token,
    )


def lend_to_an_elastic_job(api: client.ApiClient, namespace: str, operator: Operator) -> list[str]:
    """An InferenceService needing one T4 server and an elastic job of up to four 8-GPU T4 workers, then the
    operator started: it lends the idle T4 servers and the job runs four workers on them. The lent servers."""
    create_service(api, namespace, inference_service("chat", replicas=2, gpus=2, min_replicas=1))
    create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=4, gpusPerWorker=8, gpuTypes=[T4])
    operator.start()
    wait_for(lambda: running(api, namespace, "elastic", 4), DEADLINE_S, "the elastic job on lent servers")
    lent = sorted(node for node, state in node_states(api).items() if state == "loaned")
    assert lent
    return lent


def loans_settled(api: client.ApiClient, namespace: str) -> int:
    """The scene of the operator's tests, settled: 8 T4 servers, every idle one lent (two or more), the elastic job of
    4-GPU T4 workers grown on the lent servers (two per server, up to 12), the A100-only job of two workers running on
    training servers. The number of T4 servers still serving."""

    def settled() -> bool:
        states = list(node_states(api).values())
        return "idle" not in states and "" not in states and states.count("loaned") >= 2

    wait_for(settled, DEADLINE_S, "the idle T4 servers to be lent")
    loaned = list(node_states(api).values()).count("loaned")
    grown = min(12, 2 * loaned)
    wait_for(lambda: running(api, namespace, "elastic", grown), DEADLINE_S, f"the elastic job at {grown} workers")
    wait_for(lambda: running(api, namespace, "a100-only", 2), DEADLINE_S, "the A100-only job running")
    for pod in workers(api, namespace, "elastic"):
        assert labels_of(api, pod.spec.node_name).get(names.STATE_LABEL) == "loaned", pod.metadata.name
    for pod in workers(api, namespace, "a100-only"):
        assert labels_of(api, pod.spec.node_name)[names.POOL_LABEL] == names.POOL_TRAINING
    return 8 - loaned


def scale_chat(api: client.ApiClient, namespace: str, replicas: int) -> None:
    """The scene's InferenceService ``chat`` scaled to ``replicas`` through its scale subresource (as an autoscaler)."""
    custom(api).patch_namespaced_custom_object_scale(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, "chat", {"spec": {"replicas": replicas}}
    )


def reclaimed_by_scale_in(api: client.ApiClient, namespace: str, loaned: int, replicas: int) -> None:
    """After ``chat`` grew by two servers' worth: two of the ``loaned`` servers came back, no server is reclaiming,
    all ``replicas`` are ready, and the elastic job gave them up by scaling in, never preempted."""

    def converged() -> bool:
        states = list(node_states(api).values())
        deployment = client.AppsV1Api(api).read_namespaced_deployment("chat", namespace)
        return (
            "reclaiming" not in states
            and states.count("loaned") == loaned - 2
            and (deployment.status.ready_replicas or 0) == replicas
        )

    wait_for(converged, DEADLINE_S, f"the reclaim to finish and {replicas} replicas to be ready")
    elastic = job(api, namespace, "elastic")["status"]
    assert elastic["phase"] == "Running"
    assert elastic["preemptions"] == 0
    assert elastic["scaleIns"] > 0


def lyra_check(
    kubeconfig: Path, *, gang_timeout_s: float = GANG_TIMEOUT_S, reclaim_deadline_s: float = RECLAIM_DEADLINE_S
) -> tuple[int, dict[str, Any]]:
    """``lyra check --json`` run as a command: its exit code and its report."""
    command = [
        sys.executable, "-m", "lyra", "check", "--json", "--kubeconfig", str(kubeconfig),
        "--gang-timeout", str(gang_timeout_s), "--reclaim-deadline", str(reclaim_deadline_s),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy())
    assert result.returncode in (0, 3), f"lyra check exited {result.returncode}: {result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout)
    return result.returncode, report


def assert_check_clean(kubeconfig: Path, **limits: float) -> dict[str, Any]:
    """``lyra check`` finds no violated invariant (exit 0); the violations are the failure's message."""
    code, report = lyra_check(kubeconfig, **limits)
    problems = "\n".join(
        f"  {v['invariant']}: {v['kind']} {v['namespace']}/{v['name']}: {v['message']}" for v in report["violations"]
    )
    assert code == 0, f"lyra check found violations:\n{problems}"
    assert report["clean"], problems
    return report


def scale_service(api: client.ApiClient, namespace: str, name: str, replicas: int) -> None:
    """``kubectl scale`` of an InferenceService (its scale subresource)."""
    custom(api).patch_namespaced_custom_object_scale(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, name, {"spec": {"replicas": replicas}}
    )


def running_replicas(api: client.ApiClient, namespace: str, service: str) -> int:
    """The service's replicas that run and are not being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}={service}")
    return sum(1 for p in pods.items if p.metadata.deletion_timestamp is None and p.status.phase == "Running")


def t4_servers_profile(name: str, servers: int) -> str:
    """A cluster profile of ``servers`` T4 inference servers of 8 GPUs and nothing else."""
    return f"""
name: {name}
nodeGroups:
  - {{name: serve, pool: inference, count: {servers}, gpu: {{product: {T4}, count: 8}}, cpu: "96", memory: 384Gi,
     pods: 110}}
"""


def profile_control_plane(
    tmp_path_factory: pytest.TempPathFactory, profile_text: str, what: str, directory: str
) -> Iterator[ControlPlane]:
    """A module's own control plane with the nodes of ``profile_text`` (a cluster profile, ``what`` it is) and
    Lyra's CRDs, for a fixture to ``yield from``; one that cannot start fails the test with the reason."""
    profile = parse_profile_text(profile_text, what)
    try:
        with session_control_plane(
            tmp_path_factory.mktemp(directory), profile=profile, crd_dir=REPOSITORY / "manifests" / "crds"
        ) as control_plane:
            yield control_plane
    except (BinariesError, ClusterStartError) as error:
        pytest.fail(str(error), pytrace=False)
