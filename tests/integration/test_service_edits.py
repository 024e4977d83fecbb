"""An InferenceService's edits reach its Deployment on a real control plane (kube-apiserver, kube-scheduler without
the extender, kube-controller-manager's Deployment controller, KWOK): with the operator running (as the ServiceAccount
of manifests/operator/rbac.yaml), a new image and a new gpuType are written into the Deployment's pod template, whole
(an environment variable the service dropped is gone, not merged back by name), and the Deployment rolls the replicas
onto servers of the new type. A shadow pass then proposes nothing, and ``lyra check`` is clean.

The cluster is the module's own and small: two inference servers of T4 and two of A100, 8 GPUs each.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    A100,
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_service,
    custom,
    inference_service,
    profile_control_plane,
    service_account_kubeconfig,
    wait_quiet,
)

pytestmark = pytest.mark.integration

PROFILE = f"""
name: two-inference-types
nodeGroups:
  - {{name: serve-t4, pool: inference, count: 2, gpu: {{product: {T4}, count: 8}}, cpu: "96", memory: 384Gi, pods: 110}}
  - {{name: serve-a100, pool: inference, count: 2, gpu: {{product: {A100}, count: 8}}, cpu: "96", memory: 1360Gi,
     pods: 110}}
"""
IMAGE_1 = "registry.invalid/server:1"
IMAGE_2 = "registry.invalid/server:2"


@pytest.fixture(scope="module")
def two_types(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from profile_control_plane(tmp_path_factory, PROFILE, "two inference types", "service-edits")


def replicas(api: client.ApiClient, namespace: str) -> list[client.V1Pod]:
    """The service's replicas that are not being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def product_of(api: client.ApiClient, node: str) -> str:
    return str((client.CoreV1Api(api).read_node(node).metadata.labels or {}).get(names.GPU_PRODUCT_LABEL, ""))


def rolled_onto(api: client.ApiClient, namespace: str, image: str, product: str) -> bool:
    """Both replicas run the image on servers of the product, and none of another template is left."""
    found = client.AppsV1Api(api).list_namespaced_deployment(namespace, field_selector="metadata.name=chat").items
    if not found:
        return False  # not made yet
    status = found[0].status
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat").items
    return (
        (status.updated_replicas, status.ready_replicas, status.replicas) == (2, 2, 2)
        and len(pods) == 2
        and all(
            p.metadata.deletion_timestamp is None
            and p.status.phase == "Running"
            and p.spec.containers[0].image == image
            and product_of(api, p.spec.node_name) == product
            for p in pods
        )
    )


@pytest.mark.timeout(300)  # its own control plane starts first
def test_a_new_image_and_gpu_type_roll_the_deployment_onto_servers_of_the_new_type(
    two_types: ControlPlane, tmp_path: Path
) -> None:
    with populate.admin_api(two_types.kubeconfig) as api, temporary_namespace(api, "service-edits") as namespace:
        kubeconfig = service_account_kubeconfig(two_types, api, tmp_path)
        operator = Operator(kubeconfig, tmp_path / "operator.log")
        service: dict[str, Any] = inference_service("chat", replicas=2, gpus=8, gpu_type=T4)
        service["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "OLD", "value": "1"}]
        create_service(api, namespace, service)
        operator.start()
        try:
            wait_for(lambda: rolled_onto(api, namespace, IMAGE_1, T4), DEADLINE_S, "2 replicas on the T4 servers")
            first = client.AppsV1Api(api).read_namespaced_deployment("chat", namespace)
            hashed = first.metadata.annotations[names.TEMPLATE_HASH_ANNOTATION]
            edit = {"gpuType": A100, "template": {"spec": {"containers": [{"name": "server", "image": IMAGE_2}]}}}
            custom(api).patch_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, "chat", {"spec": edit}
            )
            edited = time.monotonic()
            wait_for(lambda: rolled_onto(api, namespace, IMAGE_2, A100), DEADLINE_S, "2 new replicas on the A100s")
            print(f"both replicas rolled onto the A100 servers {time.monotonic() - edited:.1f} s after the edit")
            deployment = client.AppsV1Api(api).read_namespaced_deployment("chat", namespace)
            assert deployment.metadata.annotations[names.TEMPLATE_HASH_ANNOTATION] != hashed
            (container,) = deployment.spec.template.spec.containers
            assert (container.image, container.env) == (IMAGE_2, None), "the template is replaced whole"
            assert deployment.spec.replicas == 2
            events = client.CoreV1Api(api).list_namespaced_event(namespace).items
            assert "TemplateChanged" in {e.reason for e in events if e.involved_object.name == "chat"}
            wait_quiet(operator, DEADLINE_S)
            assert len(replicas(api, namespace)) == 2
            assert_check_clean(kubeconfig)
            assert "Forbidden" not in operator.log.read_text(), "the RBAC of manifests/operator is not enough"
        except BaseException:
            print(f"--- {operator.log.name} ---\n" + operator.tail())
            raise
        finally:
            operator.stop()
