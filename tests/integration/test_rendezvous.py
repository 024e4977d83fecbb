"""The rendezvous wiring on a real control plane: the operator (as the ServiceAccount of
manifests/operator/rbac.yaml) gives a TrainingJob its headless Service, the API server accepts it and the workers'
``hostname``/``subdomain``, the endpoints controller publishes every worker under its host name (the records cluster
DNS serves, ready or not), and the Service goes with its job.
"""

from __future__ import annotations

from pathlib import Path

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
    Operator,
    create_job,
    custom,
    running,
    service_account_kubeconfig,
    workers,
)

pytestmark = pytest.mark.integration


def published_hostnames(api: client.ApiClient, namespace: str, service: str) -> set[str]:
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return {e.hostname for s in slices.items for e in s.endpoints or [] if e.hostname}


def service_gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_service(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


@pytest.mark.timeout(240)
def test_a_job_s_workers_get_stable_names_through_its_own_headless_service(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    kubeconfig = service_account_kubeconfig(cluster, api, tmp_path)
    operator = Operator(kubeconfig, tmp_path / "operator.log")
    core = client.CoreV1Api(api)
    with temporary_namespace(api, "rendezvous") as namespace:
        create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=3, gpusPerWorker=8, gpuTypes=[A100])
        operator.start()
        try:
            wait_for(lambda: running(api, namespace, "elastic", 3), DEADLINE_S, "3 workers running")
            service = core.read_namespaced_service("elastic", namespace)
            assert service.spec.cluster_ip == "None"
            assert service.spec.publish_not_ready_addresses is True
            (owner,) = service.metadata.owner_references
            tj = custom(api).get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, "elastic"
            )
            assert (owner.kind, owner.uid, owner.controller) == ("TrainingJob", tj["metadata"]["uid"], True)
            pods = workers(api, namespace, "elastic")
            assert {p.spec.subdomain for p in pods} == {"elastic"}
            endpoints = {e.value for p in pods for e in p.spec.containers[0].env if e.name == "PET_RDZV_ENDPOINT"}
            assert endpoints == {f"elastic-w0.elastic.{namespace}.svc:29400"}
            wanted = {p.spec.hostname for p in pods}
            assert wanted == {"elastic-w0", "elastic-w1", "elastic-w2"}
            wait_for(
                lambda: published_hostnames(api, namespace, "elastic") >= wanted,
                DEADLINE_S,
                "every worker's host name in the Service's EndpointSlices",
            )
            custom(api).delete_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, "elastic"
            )
            wait_for(lambda: service_gone(core, namespace, "elastic"), DEADLINE_S, "the Service to go with its job")
        except Exception:
            print(operator.tail())
            raise
        finally:
            operator.stop()
