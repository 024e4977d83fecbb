"""The operator's writes are conditional on what its pass read, and the real API server holds them to it: a status
written over a TrainingJob that changed since the pass read it, or a delete of a pod that was re-created under the
same name, or a Deployment's pod template written over a Deployment that changed since, is refused (409) and
deferred to the next pass, which reads afresh; the same writes on what was read go through. (A fenced leader whose
request was already on its way when it was paused is stopped this way too.)"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.waiting import wait_for
from lyra.operator import manifests
from lyra.operator.actions import ApplyDeployment, Decision, DeletePod, PatchStatus
from lyra.operator.commit import APPLIED, DEFERRED, Cluster
from lyra.operator.readers import read_world
from lyra.operator.world import ObjectRef
from tests.operator_support import create_job, custom, job

pytestmark = pytest.mark.integration


def world_with(api: client.ApiClient, namespace: str, name: str) -> Any:
    return read_world(time.time(), nodes=[], pods=[], jobs=[job(api, namespace, name)], services=[])


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "main", "image": "registry.invalid/app:1"}]},
    }


def test_status_writes_and_deletes_are_conditional_on_what_the_pass_read(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str
) -> None:
    cluster = Cluster(kube_api)
    create_job(kube_api, namespace, "j", minWorkers=1, maxWorkers=1, gpusPerWorker=1)
    stale = world_with(kube_api, namespace, "j")
    ref = stale.jobs[0].ref
    custom(kube_api).patch_namespaced_custom_object(  # someone edits the job after the pass read it
        names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, "j", {"spec": {"priority": 5}}
    )
    write = Decision((PatchStatus(ref, {"phase": "Queued", "preemptions": 7}),))
    assert cluster.apply(write, time.time(), stale).results == (DEFERRED,)
    assert job(kube_api, namespace, "j").get("status", {}).get("preemptions") != 7
    fresh = world_with(kube_api, namespace, "j")
    assert cluster.apply(write, time.time(), fresh).results == (APPLIED,)
    assert job(kube_api, namespace, "j")["status"]["preemptions"] == 7

    core = client.CoreV1Api(kube_api)
    first = core.create_namespaced_pod(namespace, cast(Any, pod("w0")))
    core.delete_namespaced_pod("w0", namespace, grace_period_seconds=0)
    wait_for(lambda: not core.list_namespaced_pod(namespace, field_selector="metadata.name=w0").items, 30, "w0 gone")
    second = core.create_namespaced_pod(namespace, cast(Any, pod("w0")))
    old = Decision((DeletePod(ObjectRef("Pod", namespace, "w0", first.metadata.uid), 0, "Preempted"),))
    assert cluster.apply(old, time.time()).results == (DEFERRED,)
    assert core.read_namespaced_pod("w0", namespace).metadata.uid == second.metadata.uid
    current = Decision((DeletePod(ObjectRef("Pod", namespace, "w0", second.metadata.uid), 0, "Preempted"),))
    assert cluster.apply(current, time.time()).results == (APPLIED,)


def test_a_deployments_template_is_written_over_what_the_pass_read(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str
) -> None:
    """A Deployment changed since the pass read it (here, relabelled) keeps its template: the write is deferred."""
    cluster = Cluster(kube_api)
    apps = client.AppsV1Api(kube_api)
    ref = ObjectRef(names.INFERENCE_SERVICE_KIND, namespace, "chat", "uid-chat")

    def rendered(image: str) -> dict[str, Any]:
        template = {"spec": {"containers": [{"name": "server", "image": image}]}}
        made = manifests.deployment(
            namespace=namespace, service="chat", service_uid="", replicas=0, template=template,
            gpus_per_replica=1, gpu_type="Tesla-T4",
        )  # fmt: skip
        made["metadata"].pop("ownerReferences")  # no InferenceService owns it here
        return made

    def settled() -> str:
        """The Deployment's resourceVersion once its controller has written its status (it writes nothing more)."""
        deployment = apps.read_namespaced_deployment("chat", namespace)
        done = deployment.status.observed_generation == deployment.metadata.generation
        return str(deployment.metadata.resource_version) if done else ""

    apps.create_namespaced_deployment(namespace, cast(Any, rendered("registry.invalid/server:1")))
    read = wait_for(settled, 30, "the Deployment controller to write the Deployment's status")
    edit = {"metadata": {"labels": {"edited": "by-hand"}}}  # after the pass read it
    apps.patch_namespaced_deployment("chat", namespace, edit)
    write = ApplyDeployment(ref, rendered("registry.invalid/server:2"), create=False, roll=True, resource_version=read)
    assert cluster.apply(Decision((write,)), time.time()).results == (DEFERRED,)
    assert apps.read_namespaced_deployment("chat", namespace).spec.template.spec.containers[0].image.endswith(":1")
    fresh = wait_for(settled, 30, "the Deployment settled")
    again = ApplyDeployment(ref, write.manifest, create=False, roll=True, resource_version=fresh)
    assert cluster.apply(Decision((again,)), time.time()).results == (APPLIED,)
    written = apps.read_namespaced_deployment("chat", namespace)
    assert written.spec.template.spec.containers[0].image.endswith(":2")
    hashed = written.metadata.annotations[names.TEMPLATE_HASH_ANNOTATION]
    assert hashed == manifests.recorded_template_hash(write.manifest)
