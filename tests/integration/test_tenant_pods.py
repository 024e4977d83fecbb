"""A tenant's ordinary pod powers against the real operator (``lyra operator`` as its ServiceAccount) on a local
control plane of its own (4 A100 training servers, 8 T4 inference servers, KWOK): Lyra knows its pods by their
controller's UID, never by labels a tenant may edit (docs/security.md, "Pods are Lyra's by their owner").

* **A worker held terminating** by its namespace (its own finalizer, then its own delete): another namespace's job
  starts beside it, and the stuck pod's job waits alone.
* **Workers stripped of** ``lyra.dev/role`` **and** ``lyra.dev/job`` on lent servers: the operator writes the labels
  back; with the operator stopped, ``lyra check`` names the stripped worker (``worker-labels``); stripped again just
  before a reclaim, they leave the reclaimed servers and every replica runs, no worker is left on a serving server.
* **Plain GPU pods tolerating Lyra's taint** beside the replicas on both serving servers: no reclaim, no preemption.

Each ends with ``lyra check`` clean.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    A100,
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_job,
    create_service,
    inference_service,
    job,
    lyra_check,
    node_states,
    running_replicas,
    scale_service,
    wait_quiet,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

T4_SERVERS = 8
HOLD = "example.com/hold"  # a tenant's own finalizer: nobody but the tenant removes it
RELEASE = "example.com/release"


@pytest.fixture
def operator(operator_kubeconfig: Path, tmp_path: Path) -> Iterator[Operator]:
    running = Operator(operator_kubeconfig, tmp_path / "operator.log")
    try:
        yield running
    except BaseException:
        print("--- operator ---\n" + running.tail(120))
        raise
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def _no_gpu_pod_left(api: client.ApiClient) -> None:
    """Each story starts on servers that the last one's namespaces (deleted as it ended) no longer hold."""
    wait_for(lambda: not _gpu_pods(api), DEADLINE_S, "the previous story's pods gone")


def _gpu_pods(api: client.ApiClient) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_pod_for_all_namespaces().items
    return [p for p in pods if any(names.GPU_RESOURCE in (c.resources.limits or {}) for c in p.spec.containers)]


def owned(api: client.ApiClient, namespace: str, job_name: str, *, live: bool = True) -> list[client.V1Pod]:
    """The job's workers by their controller reference (what Lyra goes by), whatever their labels."""
    uid = job(api, namespace, job_name)["metadata"]["uid"]
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return [
        p
        for p in pods
        if any(r.uid == uid and r.controller for r in p.metadata.owner_references or [])
        and not (live and p.metadata.deletion_timestamp is not None)
    ]


def all_running(api: client.ApiClient, namespace: str, job_name: str, count: int) -> bool:
    pods = owned(api, namespace, job_name)
    return len(pods) == count and all(p.spec.node_name and p.status.phase == "Running" for p in pods)


def strip(api: client.ApiClient, pod: client.V1Pod) -> None:
    """``kubectl label pod ... lyra.dev/role- lyra.dev/job-``: the pod's namespace may."""
    body = {"metadata": {"labels": {names.ROLE_LABEL: None, names.JOB_LABEL: None}}}
    client.CoreV1Api(api).patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, body)


def labelled(api: client.ApiClient, namespace: str, job_name: str) -> bool:
    return all(
        (p.metadata.labels or {}).get(names.JOB_LABEL) == job_name
        and (p.metadata.labels or {}).get(names.ROLE_LABEL) in (names.ROLE_BASE, names.ROLE_FLEXIBLE)
        for p in owned(api, namespace, job_name)
    )


def hold_policy(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding to ``namespace``) that keeps :data:`HOLD` on a pod until the pod
    is annotated :data:`RELEASE`. KWOK (v0.7) empties a deleted pod's finalizers at once, where a real kubelet would
    leave the pod to its finalizer's controller, or run it out its grace: this is that pod, held terminating."""
    name = f"hold-{namespace}"[:63]
    keeps = (
        f"!has(oldObject.metadata.finalizers) || !('{HOLD}' in oldObject.metadata.finalizers) || "
        f"(has(object.metadata.finalizers) && '{HOLD}' in object.metadata.finalizers) || "
        f"(has(object.metadata.annotations) && '{RELEASE}' in object.metadata.annotations)"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
                ]
            },
            "validations": [{"expression": keeps, "message": f"{HOLD} stays until the pod is annotated {RELEASE}"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    return policy, binding


def release(api: client.ApiClient, namespace: str, name: str) -> None:
    """What the finalizer's controller would do: let the pod go."""
    core = client.CoreV1Api(api)
    try:
        core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {RELEASE: "true"}}})
        core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
    except ApiException as error:
        if error.status != 404:
            raise


@contextmanager
def pods_held(api: client.ApiClient, namespace: str) -> Iterator[None]:
    """:func:`hold_policy` in force in ``namespace`` (probed with a pod that is never scheduled), then removed."""
    admission = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    policy, binding = hold_policy(namespace)
    admission.create_validating_admission_policy(cast(Any, policy))
    admission.create_validating_admission_policy_binding(cast(Any, binding))
    probe = {
        "metadata": {"name": "probe", "finalizers": [HOLD]},
        "spec": {"nodeSelector": {"example.com/nowhere": "true"}, "containers": [{"name": "c", "image": "x"}]},
    }
    core.create_namespaced_pod(namespace, cast(Any, probe))

    def refused() -> bool:
        try:
            core.patch_namespaced_pod("probe", namespace, {"metadata": {"finalizers": None}})
        except ApiException as error:
            if error.status in (400, 403, 422):
                return True
            raise
        core.patch_namespaced_pod("probe", namespace, {"metadata": {"finalizers": [HOLD]}})
        return False

    try:
        wait_for(refused, 30, "the finalizer policy in force")
        yield
    finally:
        release(api, namespace, "probe")
        admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
        admission.delete_validating_admission_policy(policy["metadata"]["name"])


def test_a_worker_held_terminating_delays_only_its_own_job(
    api: client.ApiClient, cluster: ControlPlane, operator: Operator
) -> None:
    core = client.CoreV1Api(api)
    with (
        temporary_namespace(api, "tenant-stuck") as stuck_ns,
        temporary_namespace(api, "tenant-other") as other_ns,
        pods_held(api, stuck_ns),
    ):
        create_job(api, stuck_ns, "stuck", minWorkers=1, maxWorkers=1, gpusPerWorker=8, gpuTypes=[A100])
        operator.start()
        wait_for(lambda: all_running(api, stuck_ns, "stuck", 1), DEADLINE_S, "the stuck job running")
        (pod,) = owned(api, stuck_ns, "stuck")
        name, uid, held_node = pod.metadata.name, pod.metadata.uid, pod.spec.node_name
        try:
            core.patch_namespaced_pod(name, stuck_ns, {"metadata": {"finalizers": [HOLD]}})
            core.delete_namespaced_pod(name, stuck_ns)  # the tenant deletes its own worker; it stays terminating
            create_job(api, other_ns, "small", minWorkers=1, maxWorkers=1, gpusPerWorker=1, gpuTypes=[A100])
            started = time.monotonic()
            wait_for(lambda: all_running(api, other_ns, "small", 1), DEADLINE_S, "another namespace's job running")
            print(f"terminating worker: another namespace's job ran {time.monotonic() - started:.1f} s after it came")
            still = core.read_namespaced_pod(name, stuck_ns)
            assert still.metadata.uid == uid
            assert still.metadata.deletion_timestamp is not None, "held terminating all along"
            assert still.spec.node_name == held_node
            wait_quiet(operator, DEADLINE_S)
            replacing = owned(api, stuck_ns, "stuck")
            assert held_node not in {p.spec.node_name for p in replacing}, "the held pod's GPUs stay counted"
            assert_check_clean(cluster.kubeconfig)
        finally:
            release(api, stuck_ns, name)
        wait_for(lambda: all_running(api, stuck_ns, "stuck", 1), DEADLINE_S, "the stuck job running again once gone")
        wait_quiet(operator, DEADLINE_S)
        assert_check_clean(cluster.kubeconfig)


def test_stripped_workers_get_their_labels_back_and_leave_a_reclaim(
    api: client.ApiClient, cluster: ControlPlane, operator: Operator
) -> None:
    with temporary_namespace(api, "tenant-strip") as namespace:
        create_service(api, namespace, inference_service("chat", replicas=1, gpus=8, max_replicas=T4_SERVERS))
        lent = T4_SERVERS - 1
        create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=lent, gpusPerWorker=8, gpuTypes=[T4])
        operator.start()
        wait_for(lambda: all_running(api, namespace, "elastic", lent), DEADLINE_S, "a worker on each lent server")
        assert list(node_states(api).values()).count("loaned") == lent

        # Stripped while the operator runs: the labels come back.
        for pod in owned(api, namespace, "elastic"):
            strip(api, pod)
        wait_for(lambda: labelled(api, namespace, "elastic"), DEADLINE_S, "the workers' labels written back")
        wait_quiet(operator, DEADLINE_S)
        assert_check_clean(cluster.kubeconfig)

        # Stripped while it is stopped: lyra check names the worker.
        operator.stop()
        victim = owned(api, namespace, "elastic")[0]
        strip(api, victim)
        code, report = lyra_check(cluster.kubeconfig)
        assert code == 3
        found = [(v["invariant"], v["name"]) for v in report["violations"]]
        assert found == [("worker-labels", victim.metadata.name)], report["violations"]

        # Stripped, all of them, right before inference needs every server back.
        for pod in owned(api, namespace, "elastic"):
            strip(api, pod)
        operator.start()
        scale_service(api, namespace, "chat", T4_SERVERS)
        scaled = time.monotonic()
        wait_for(
            lambda: running_replicas(api, namespace, "chat") == T4_SERVERS,
            DEADLINE_S,
            f"all {T4_SERVERS} replicas running",
        )
        print(f"stripped workers: {T4_SERVERS} replicas running {time.monotonic() - scaled:.1f} s after the scale-up")
        assert set(node_states(api).values()) == {"serving"}, node_states(api)
        on_servers = [p for p in owned(api, namespace, "elastic", live=False) if p.spec.node_name]
        assert on_servers == [], [(p.metadata.name, p.spec.node_name) for p in on_servers]
        assert job(api, namespace, "elastic")["status"]["phase"] == "Queued", "preempted by the reclaim, re-queued"
        wait_quiet(operator, DEADLINE_S)
        assert_check_clean(cluster.kubeconfig)


def plain_gpu_pod(name: str, node_name: str, gpus: int) -> dict[str, Any]:
    """A pod Lyra did not make, tolerating the serving state's taint, pinned to ``node_name`` by its hostname."""
    return {
        "metadata": {"name": name, "labels": {"app": "theirs"}},
        "spec": {
            "nodeSelector": {names.HOSTNAME_LABEL: node_name},
            "tolerations": [{"key": names.STATE_TAINT, "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/theirs:1",
                    "resources": {"limits": {names.GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }


def test_plain_gpu_pods_beside_replicas_on_serving_servers_cause_no_reclaim(
    api: client.ApiClient, cluster: ControlPlane, operator: Operator
) -> None:
    core = client.CoreV1Api(api)
    with temporary_namespace(api, "tenant-serve") as namespace, temporary_namespace(api, "tenant-plain") as plain:
        create_service(api, namespace, inference_service("chat", replicas=2, gpus=6, max_replicas=T4_SERVERS))
        lent = T4_SERVERS - 2
        create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=lent, gpusPerWorker=8, gpuTypes=[T4])
        operator.start()
        wait_for(lambda: running_replicas(api, namespace, "chat") == 2, DEADLINE_S, "2 replicas running")
        wait_for(lambda: all_running(api, namespace, "elastic", lent), DEADLINE_S, "a worker on each lent server")
        states = node_states(api)
        serving = sorted(n for n, s in states.items() if s == "serving")
        assert len(serving) == 2, states
        before = {p.metadata.name for p in owned(api, namespace, "elastic")}

        came = time.time()
        for index, server in enumerate(serving):
            core.create_namespaced_pod(plain, cast(Any, plain_gpu_pod(f"plain-{index}", server, 2)))

        def plain_running() -> bool:
            pods = core.list_namespaced_pod(plain).items
            return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

        wait_for(plain_running, DEADLINE_S, "the plain GPU pods running beside the replicas")
        wait_quiet(operator, DEADLINE_S)
        assert node_states(api) == states, "no reclaim"
        assert {p.metadata.name for p in owned(api, namespace, "elastic")} == before, "no worker preempted"
        status = job(api, namespace, "elastic")["status"]
        assert status.get("preemptions", 0) == 0
        assert status["phase"] == "Running"
        events = core.list_event_for_all_namespaces().items
        since = [e for e in events if (when := e.last_timestamp or e.event_time) and when.timestamp() >= came - 1]
        assert not [(e.reason, e.message) for e in since if e.reason in ("Reclaiming", "Preempted", "ScaledIn")]
        assert plain_running(), "they keep their GPUs"
        assert_check_clean(cluster.kubeconfig)
