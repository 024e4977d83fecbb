"""The generated CRDs on the real API server: valid objects are stored with their defaults, CEL rules refuse bad
ones with the message that says what to fix, the scale subresource drives replicas, printer columns show.

``lyra cluster up`` (and the session fixture) installs ``manifests/crds`` when the control plane starts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.waiting import wait_for

pytestmark = pytest.mark.integration


def training_job(name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "minWorkers": 2,
        "maxWorkers": 4,
        "gpusPerWorker": 1,
        "expectedDuration": 600,
        "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}},
    }
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.TRAINING_JOB_KIND,
        "metadata": {"name": name},
        "spec": body | spec,
    }


def inference_service(name: str, **spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "server", "image": "server:1"}]}}
    body = {"replicas": 2, "gpusPerReplica": 1, "minReplicas": 1, "maxReplicas": 4, "template": template}
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.INFERENCE_SERVICE_KIND,
        "metadata": {"name": name},
        "spec": body | spec,
    }


def refusal(create: Any) -> str:
    with pytest.raises(ApiException) as raised:
        create()
    assert raised.value.status == 422
    message: str = json.loads(raised.value.body)["message"]
    return message


def test_training_jobs_are_validated_by_the_api_server(kube_api: client.ApiClient, namespace: str) -> None:
    objects = client.CustomObjectsApi(kube_api)

    def create(body: dict[str, Any]) -> Any:
        return objects.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, body
        )

    stored = create(training_job("bert"))
    assert stored["spec"]["preemption"] == {"gracePeriodSeconds": 60}  # defaults from the models
    assert stored["spec"]["mixGpuTypes"] is False
    assert "minWorkers must be <= maxWorkers" in refusal(lambda: create(training_job("bad", minWorkers=5)))
    assert "gpusPerWorker" in refusal(lambda: create(training_job("zero", gpusPerWorker=0)))
    assert "maxWorkers" in refusal(lambda: create(training_job("huge", maxWorkers=10**9)))
    change = {"spec": {"gpusPerWorker": 2}}
    message = refusal(
        lambda: objects.patch_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, "bert", change
        )
    )
    assert "gpusPerWorker is immutable" in message


def test_inference_services_scale_and_validate(
    kube_api: client.ApiClient, namespace: str, local_cluster: ControlPlane, tmp_path: Path
) -> None:
    objects = client.CustomObjectsApi(kube_api)
    group, version, plural = names.GROUP, names.VERSION, names.INFERENCE_SERVICE_PLURAL
    objects.create_namespaced_custom_object(group, version, namespace, plural, inference_service("chat"))
    message = refusal(
        lambda: objects.create_namespaced_custom_object(
            group, version, namespace, plural, inference_service("over", replicas=9)
        )
    )
    assert "replicas must be within minReplicas and maxReplicas" in message
    objects.patch_namespaced_custom_object_scale(group, version, namespace, plural, "chat", {"spec": {"replicas": 3}})
    assert objects.get_namespaced_custom_object(group, version, namespace, plural, "chat")["spec"]["replicas"] == 3

    # Discovery can lag behind Established; kubectl resolves the category from it (and caches what it saw), so
    # wait until discovery lists both kinds and give kubectl a fresh cache.
    def discovered() -> bool:
        listed = client.CustomObjectsApi(kube_api).get_api_resources(names.GROUP, names.VERSION).resources
        return {names.TRAINING_JOB_PLURAL, names.INFERENCE_SERVICE_PLURAL} <= {r.name for r in listed}

    wait_for(discovered, 30, "discovery to list both Lyra resources")
    kubectl = [
        str(local_cluster.binaries.kubectl), "--kubeconfig", str(local_cluster.kubeconfig), "-n", namespace,
        "--cache-dir", str(tmp_path / "kube-cache"),
    ]  # fmt: skip
    listed = subprocess.run(
        [*kubectl, "get", names.INFERENCE_SERVICE_SHORT], capture_output=True, text=True, check=True
    )
    assert listed.stdout.split("\n")[0].split() == ["NAME", "REPLICAS", "READY", "SERVERS", "AGE"]
    assert listed.stdout.split("\n")[1].split()[:2] == ["chat", "3"]
    everything = subprocess.run([*kubectl, "get", names.CATEGORY], capture_output=True, text=True, check=True)
    assert "inferenceservice.lyra.dev/chat" in everything.stdout
