"""Malformed node readings and a replica on a just-lent server, on the local control plane with the real operator (as
its ServiceAccount; docs/reliability.md, "Node and pod health"; docs/security.md, "Tested").

Each test starts from one InferenceService of one 4-GPU replica on a serving T4 server and an elastic 4-GPU job of
13 workers on the seven other T4 servers, lent to it (six full, one with a single worker).

* **Malformed readings.** The status of two T4 nodes is written as a kubelet reset (``nvidia.com/gpu`` allocatable
  and capacity ``0``), a quantity that is no GPU count (``8Gi``, ``1k``), or GPU feature discovery's product label
  emptied: the serving server and a loaned server full of workers. While they read so (several passes, within the
  node grace), the loaned one keeps its workers (the same pods) and its loan, the serving one keeps its replica and
  is not replaced (no loaned server is reclaimed for it), and, once the service is scaled to 0, it is not lent; each
  is reported by a ``Misread`` Event and a log line every pass. Read well again, the idle server is lent.
* **A replica bound to a just-lent server.** The Deployment's pod template is given the ``nodeName`` of the lent
  server with room (a pod bound by name skips kube-scheduler, as a replica placed in the moment the server was lent
  does): the server is called back, its worker leaves, and it serves the replica; ``lyra check`` is clean.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_job,
    create_service,
    inference_service,
    job,
    node_states,
    running,
    running_replicas,
    scale_service,
    workers,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

#: Longer than any test holds a bad reading: every assertion here is within the grace.
NODE_GRACE_S = 120
#: Passes the operator must have made over a bad reading before the test judges what it did (one a second).
PASSES = 4
WORKERS = 13

#: What each case writes on a node, and the words the operator's log and Event use for it.
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "zeroed": (
        {"status": {"allocatable": {names.GPU_RESOURCE: "0"}, "capacity": {names.GPU_RESOURCE: "0"}}},
        "reads nvidia.com/gpu allocatable '0' and capacity '0'",
    ),
    "8Gi": (
        {"status": {"allocatable": {names.GPU_RESOURCE: "8Gi"}, "capacity": {names.GPU_RESOURCE: "8Gi"}}},
        "reads nvidia.com/gpu allocatable '8Gi' and capacity '8Gi'",
    ),
    "1k": (
        {"status": {"allocatable": {names.GPU_RESOURCE: "1k"}, "capacity": {names.GPU_RESOURCE: "1k"}}},
        "reads nvidia.com/gpu allocatable '1k' and capacity '1k'",
    ),
    "no product": (
        {"metadata": {"labels": {names.GPU_PRODUCT_LABEL: ""}}},
        "has an empty nvidia.com/gpu.product label",
    ),
}
WELL = {
    "status": {"allocatable": {names.GPU_RESOURCE: "8"}, "capacity": {names.GPU_RESOURCE: "8"}},
    "metadata": {"labels": {names.GPU_PRODUCT_LABEL: T4}},
}


@pytest.fixture
def operator(operator_kubeconfig: Path, tmp_path: Path) -> Iterator[Operator]:
    running_operator = Operator(
        operator_kubeconfig, tmp_path / "operator.log", options=("--node-grace", str(NODE_GRACE_S))
    )
    running_operator.start()
    try:
        yield running_operator
    except BaseException:
        print("--- operator ---\n" + running_operator.tail(150))
        raise
    finally:
        running_operator.stop()


def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def write(api: client.ApiClient, node: str, body: dict[str, Any]) -> None:
    """Write a node's labels and GPU quantities as the kubelet and GPU feature discovery would."""
    if "metadata" in body:
        core(api).patch_node(node, {"metadata": body["metadata"]})
    if "status" in body:
        core(api).patch_node_status(node, {"status": body["status"]})


def reads_well(api: client.ApiClient, node: str) -> bool:
    found = core(api).read_node(node)
    labels = found.metadata.labels or {}
    gpus = [
        (found.status.allocatable or {}).get(names.GPU_RESOURCE),
        (found.status.capacity or {}).get(names.GPU_RESOURCE),
    ]
    return labels.get(names.GPU_PRODUCT_LABEL) == T4 and gpus == ["8", "8"]


def replica_nodes(api: client.ApiClient, namespace: str) -> list[str]:
    pods = core(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat").items
    return sorted(p.spec.node_name for p in pods if p.metadata.deletion_timestamp is None and p.spec.node_name)


def worker_nodes(api: client.ApiClient, namespace: str) -> dict[str, list[str]]:
    """The workers' UIDs on each node."""
    on: dict[str, list[str]] = {}
    for pod in workers(api, namespace, "elastic"):
        on.setdefault(pod.spec.node_name or "", []).append(pod.metadata.uid)
    return on


def lent_and_running(api: client.ApiClient, namespace: str) -> tuple[str, dict[str, list[str]]]:
    """Set the scene (module docstring); the serving server and the workers on each lent server."""
    assert all(reads_well(api, n) for n in node_states(api)), "every T4 node reads well to begin with"
    create_service(api, namespace, inference_service("chat", replicas=1, gpus=4))
    wait_for(lambda: running_replicas(api, namespace, "chat") == 1, DEADLINE_S, "the replica running")
    create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=WORKERS, gpusPerWorker=4, gpuTypes=[T4])

    def scene() -> bool:
        states = node_states(api)
        serving = [n for n, s in states.items() if s == "serving"]
        return (
            running(api, namespace, "elastic", WORKERS)
            and sorted(states.values()) == ["loaned"] * 7 + ["serving"]
            and replica_nodes(api, namespace) == serving
        )

    wait_for(scene, DEADLINE_S * 2, "one serving server and the job on the seven lent ones")
    [serving] = replica_nodes(api, namespace)
    on = worker_nodes(api, namespace)
    assert serving not in on
    assert sorted(len(uids) for uids in on.values()) == [1, 2, 2, 2, 2, 2, 2]
    return serving, on


def passes_over(operator: Operator, node: str, why: str) -> int:
    """How many passes logged ``node`` as held for ``why``."""
    text = operator.log.read_text(errors="replace") if operator.log.exists() else ""
    return sum(1 for line in text.splitlines() if f"node {node} {why}" in line and "held as unhealthy" in line)


def misread_events(api: client.ApiClient, node: str, why: str) -> list[str]:
    events = core(api).list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    return [e.message for e in events if e.reason == "Misread" and why in (e.message or "")]


@pytest.mark.parametrize("case", CASES)
def test_a_misread_node_keeps_its_work_lends_nothing_and_recovers(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator, case: str
) -> None:
    body, why = CASES[case]
    with temporary_namespace(api, f"readings-{case.replace(' ', '-')}") as namespace:
        serving, on = lent_and_running(api, namespace)
        full = sorted(n for n, uids in on.items() if len(uids) == 2)[0]
        before = node_states(api)
        broken = [serving, full]
        try:
            for node in broken:
                write(api, node, body)
            wait_for(
                lambda: all(passes_over(operator, node, why) >= PASSES for node in broken),
                DEADLINE_S,
                f"{PASSES} passes over each bad reading",
            )
            for node in broken:
                assert misread_events(api, node, why), f"a Misread Event on {node}"
            assert node_states(api) == before, "nothing lent, nothing reclaimed for the serving server"
            assert sorted(worker_nodes(api, namespace)[full]) == sorted(on[full]), "the same workers on the lent server"
            assert replica_nodes(api, namespace) == [serving]
            status = job(api, namespace, "elastic")["status"]
            assert (status["phase"], status.get("scaleIns", 0), status.get("preemptions", 0)) == ("Running", 0, 0)

            scale_service(api, namespace, "chat", 0)  # the serving server empties: it would be lent if it read well
            wait_for(lambda: replica_nodes(api, namespace) == [], DEADLINE_S, "the replica gone")
            seen = passes_over(operator, serving, why)
            emptied = time.monotonic()
            wait_for(
                lambda: passes_over(operator, serving, why) >= seen + PASSES + 2,
                DEADLINE_S,
                "passes over the empty server longer than the lend delay",
            )
            held_s = time.monotonic() - emptied
            assert node_states(api)[serving] in ("serving", "idle"), "not lent while it reads badly"
            assert sorted(worker_nodes(api, namespace)[full]) == sorted(on[full])
        finally:
            for node in broken:
                write(api, node, WELL)
        recovered = time.monotonic()
        wait_for(lambda: node_states(api)[serving] == "loaned", DEADLINE_S, "the server lent once it reads well")
        lent_s = time.monotonic() - recovered
        assert sorted(worker_nodes(api, namespace)[full]) == sorted(on[full])
        status = job(api, namespace, "elastic")["status"]
        assert (status["phase"], status.get("scaleIns", 0), status.get("preemptions", 0)) == ("Running", 0, 0)
        print(
            f"{case}: workers kept and nothing lent over {held_s:.1f} s of passes on an empty misread server; "
            f"lent {lent_s:.1f} s after it read well"
        )
        assert_check_clean(cluster.kubeconfig)


def test_a_replica_bound_to_a_just_lent_server_calls_it_back_to_serving(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator
) -> None:
    with temporary_namespace(api, "readings-race") as namespace:
        serving, on = lent_and_running(api, namespace)
        [roomy] = [n for n, uids in on.items() if len(uids) == 1]
        apps = client.AppsV1Api(api)
        [deployment] = apps.list_namespaced_deployment(namespace).items
        bound = time.monotonic()
        apps.patch_namespaced_deployment(
            deployment.metadata.name, namespace, {"spec": {"template": {"spec": {"nodeName": roomy}}}}
        )

        def serves_there() -> bool:
            states = node_states(api)
            return (
                replica_nodes(api, namespace) == [roomy]
                and states[roomy] == "serving"
                and roomy not in worker_nodes(api, namespace)
                and states[serving] == "loaned"
            )

        wait_for(serves_there, DEADLINE_S, f"{roomy} serving its replica, its worker gone")
        took_s = time.monotonic() - bound
        events = core(api).list_namespaced_event("default", field_selector=f"involvedObject.name={roomy}").items
        assert any(e.reason == "Reclaiming" and "runs inference replicas" in (e.message or "") for e in events)
        status = job(api, namespace, "elastic")["status"]
        assert status["phase"] == "Running"
        assert status.get("preemptions", 0) == 0
        print(f"replica on a lent server: the server served it {took_s:.1f} s after the Deployment named it")
        assert_check_clean(cluster.kubeconfig)
