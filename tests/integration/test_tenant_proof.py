"""Tenant-proof, for real (issue 25): on a local control plane, with the operator running as its ServiceAccount, a
tenant's objects that Lyra cannot run stop nobody but themselves.

* The API server refuses them at create, naming what is wrong: a TrainingJob or InferenceService name of 64
  characters (the CRDs' root rule), sizing of ``1e300`` requests per second at ``1e-300`` per replica (the CRD's
  bounds), a job template whose required podAntiAffinity selects pods of every namespace (``namespaceSelector: {}``,
  topology ``kubernetes.io/os``: the issue's case, which kept another namespace's pods Pending with 31 of 32 GPUs
  free).
* Stored before those rules (the test loosens the CRDs, creates them, and restores the CRDs), the operator refuses
  each alone (``InvalidSpec``; no pod, no Deployment, no GPU, no reclaim) and no pass fails: another namespace's
  31-GPU job starts on the same servers and inference servers lent to it stay lent.
* ``lyra check`` is clean at the end.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    custom,
    inference_service,
    job,
    node_states,
    running,
    service_account_kubeconfig,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LONG_NAME = "a" * 64
EXTREME_SIZING = {"requestsPerSecond": 1e300, "requestsPerSecondPerReplica": 1e-300}
#: The issue's template: its pods repel every pod of every namespace on every node of the same OS.
REPELLING_TEMPLATE = {
    "spec": {
        "containers": [{"name": "trainer", "image": "registry.invalid/trainer:1"}],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {}, "namespaceSelector": {}, "topologyKey": "kubernetes.io/os"}
                ]
            }
        },
    }
}
SMALL_JOB = {"minWorkers": 1, "maxWorkers": 1, "gpusPerWorker": 1, "gpuTypes": [A100]}
CRDS = {
    names.TRAINING_JOB_KIND: names.TRAINING_JOB_PLURAL,
    names.INFERENCE_SERVICE_KIND: names.INFERENCE_SERVICE_PLURAL,
}


def refusal(create: Callable[[], None]) -> str:
    """The API server's message refusing what ``create`` sends (422)."""
    with pytest.raises(ApiException) as refused:
        create()
    assert refused.value.status == 422, refused.value.body
    message: str = json.loads(refused.value.body)["message"]
    return message


def status_condition(api: client.ApiClient, plural: str, namespace: str, name: str, kind: str) -> dict[str, Any]:
    found = custom(api).get_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, name)
    conditions = found.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def test_the_api_server_refuses_what_lyra_cannot_run(cluster: ControlPlane, api: client.ApiClient) -> None:
    with temporary_namespace(api, "refused") as namespace:
        for kind in (names.TRAINING_JOB_KIND, names.INFERENCE_SERVICE_KIND):
            body = _body(kind, LONG_NAME)
            message = refusal(lambda b=body, k=kind: _create(api, namespace, k, b))
            assert "the name may have at most 63 characters" in message, message
            _create(api, namespace, kind, _body(kind, "a" * 63))  # the longest name accepted
        message = refusal(lambda: create_job(api, namespace, "repel", template=REPELLING_TEMPLATE, **SMALL_JOB))
        assert "spec.template.spec.affinity.podAntiAffinity: Forbidden: affinity.podAntiAffinity terms select pods" in (
            message
        ), message
        huge = inference_service("huge", replicas=1, gpus=1)
        huge["spec"]["sizing"] = EXTREME_SIZING
        message = refusal(lambda: create_service(api, namespace, huge))
        assert "spec.sizing.requestsPerSecond: Invalid value" in message, message
        assert "spec.sizing.requestsPerSecondPerReplica: Invalid value" in message, message


def test_objects_stored_before_the_rules_stop_only_themselves(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    operator = Operator(service_account_kubeconfig(cluster, api, tmp_path), tmp_path / "operator.log")
    with temporary_namespace(api, "tenant") as tenant, temporary_namespace(api, "neighbour") as neighbour:
        try:
            _stored_before_the_rules(api, operator, tenant, neighbour)
            assert_check_clean(cluster.kubeconfig)
        except BaseException:
            print("--- operator ---\n" + operator.tail(120))
            raise
        finally:
            operator.stop()


def _stored_before_the_rules(api: client.ApiClient, operator: Operator, tenant: str, neighbour: str) -> None:
    huge = inference_service("huge", replicas=1, gpus=1)
    huge["spec"]["sizing"] = EXTREME_SIZING
    with loosened_crds(api):
        create_service(api, tenant, huge)
        create_service(api, tenant, inference_service(LONG_NAME, replicas=4, gpus=8, max_replicas=8))
        create_job(api, tenant, LONG_NAME, minWorkers=1, maxWorkers=32, gpusPerWorker=1, gpuTypes=[A100], priority=1)
        create_job(api, tenant, "repel", template=REPELLING_TEMPLATE, **SMALL_JOB)
    # Another namespace: 31 of the 32 A100 GPUs, and an elastic T4 job that borrows the idle inference servers.
    create_job(api, neighbour, "big", minWorkers=31, maxWorkers=31, gpusPerWorker=1, gpuTypes=[A100])
    create_job(api, neighbour, "borrower", minWorkers=1, maxWorkers=64, gpusPerWorker=1, gpuTypes=[T4])
    operator.start()

    wait_for(lambda: running(api, neighbour, "big", 31), DEADLINE_S, "the neighbour's 31 workers running")
    # Every inference server is lent: none is kept from training for the services that cannot run.
    wait_for(lambda: set(node_states(api).values()) == {"loaned"}, DEADLINE_S, "every inference server lent")

    for name in (LONG_NAME, "repel"):
        found = wait_for(
            lambda n=name: _invalid(api, names.TRAINING_JOB_PLURAL, tenant, n, "Running"),
            DEADLINE_S,
            f"TrainingJob {name[:8]}... refused",
        )
        assert job(api, tenant, name)["status"]["phase"] == "Failed"
        assert not client.CoreV1Api(api).list_namespaced_pod(tenant).items, "no pod"
        expected = "metadata.name: the name may have" if name == LONG_NAME else "spec.template.spec.affinity.podAnti"
        assert expected in found["message"], found
    for name, expected in (("huge", "spec.sizing.requestsPerSecond"), (LONG_NAME, "metadata.name: the name may")):
        found = wait_for(
            lambda n=name: _invalid(api, names.INFERENCE_SERVICE_PLURAL, tenant, n, "Ready"),
            DEADLINE_S,
            f"InferenceService {name[:8]}... refused",
        )
        assert expected in found["message"], found
    assert not client.AppsV1Api(api).list_namespaced_deployment(tenant).items, "no Deployment"
    assert not client.CoreV1Api(api).list_namespaced_pod(tenant).items, "no pod of the tenant's"
    states = node_states(api)
    assert set(states.values()) == {"loaned"}, f"nothing reclaimed for a service that cannot run: {states}"
    assert running(api, neighbour, "big", 31), "the neighbour still runs"
    log = operator.log.read_text()
    assert "pass failed" not in log, "no pass failed"


def _invalid(api: client.ApiClient, plural: str, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    found = status_condition(api, plural, namespace, name, kind)
    return found if found.get("reason") == "InvalidSpec" else None


@contextmanager
def loosened_crds(api: client.ApiClient) -> Iterator[None]:
    """Both CRDs without the rules and bounds that refuse the objects created inside (as an older Lyra's CRDs were),
    and restored after: the API server keeps what it stored meanwhile."""
    extensions = client.ApiextensionsV1Api(api)

    def read(name: str) -> dict[str, Any]:  # as JSON: every field kept, whatever the client's models know
        response = extensions.read_custom_resource_definition(name, _preload_content=False)
        crd: dict[str, Any] = json.loads(response.data)
        return crd

    originals = {plural: read(f"{plural}.{names.GROUP}") for plural in CRDS.values()}
    for crd in originals.values():
        loose = copy.deepcopy(crd)
        schema = loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        schema.pop("x-kubernetes-validations")
        spec = schema["properties"]["spec"]
        pod_spec = spec["properties"]["template"]["properties"]["spec"]
        pod_spec["x-kubernetes-validations"] = [
            r for r in pod_spec["x-kubernetes-validations"] if "podAntiAffinity" not in r["fieldPath"]
        ]
        for bounded in spec["properties"].get("sizing", {}).get("properties", {}).values():
            bounded.pop("minimum", None)
            bounded.pop("maximum", None)
        extensions.replace_custom_resource_definition(loose["metadata"]["name"], loose)
    # Each CRD is served anew on its own: wait until both are loose (and, after, both strict again).
    wait_for(lambda: all(_accepts(api, kind) for kind in CRDS), DEADLINE_S, "the loosened CRDs in force")
    try:
        yield
    finally:
        for crd in originals.values():
            name = crd["metadata"]["name"]
            crd["metadata"]["resourceVersion"] = read(name)["metadata"]["resourceVersion"]
            extensions.replace_custom_resource_definition(name, crd)
        wait_for(lambda: not any(_accepts(api, kind) for kind in CRDS), DEADLINE_S, "the CRDs' rules in force again")


def _accepts(api: client.ApiClient, kind: str) -> bool:
    """Whether the API server accepts (dry run) an object of ``kind`` in ``default`` that only the rules refuse: a
    name of 64 characters and, for an InferenceService, sizing out of its bounds."""
    body = _body(kind, LONG_NAME)
    if kind == names.INFERENCE_SERVICE_KIND:
        body["spec"]["sizing"] = EXTREME_SIZING
    try:
        custom(api).create_namespaced_custom_object(
            names.GROUP, names.VERSION, "default", CRDS[kind], body, dry_run="All"
        )
    except ApiException as error:
        if error.status == 422:
            return False
        raise
    return True


def _body(kind: str, name: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "main", "image": "registry.invalid/main:1"}]}}
    if kind == names.TRAINING_JOB_KIND:
        spec: dict[str, Any] = {"minWorkers": 1, "maxWorkers": 1, "gpusPerWorker": 1, "expectedDuration": 600}
    else:
        spec = {"replicas": 0, "gpusPerReplica": 1, "maxReplicas": 1}
    return {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": {**spec, "template": template},
    }


def _create(api: client.ApiClient, namespace: str, kind: str, body: dict[str, Any]) -> None:
    custom(api).create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, CRDS[kind], body)
