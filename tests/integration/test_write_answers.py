"""The commit step reads kube-apiserver's answers straight off the socket (:mod:`lyra.operator.http_answers`): here the
real API server, over its TLS, answers a write whose object is large (chunked, as Go frames an answer past 2 KiB) and
a small refusal (``Content-Length``), on one kept-alive connection, and each is read whole.

And every write asks for the object's metadata alone (:data:`lyra.api.names.METADATA_ANSWER`): the real API server
answers each kind of request the commit step makes with a PartialObjectMetadata carrying what the commit step reads
(resourceVersion, uid, owners), and its refusals with a Status as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.waiting import wait_for
from lyra.operator.commit import _VERSION_UP_FRONT, _version_in
from lyra.operator.http_answers import read_answer
from lyra.operator.writes import ApiWrites

pytestmark = pytest.mark.integration


def test_large_and_small_answers_are_read_whole_on_one_connection(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str
) -> None:
    writes = ApiWrites(kube_api)
    try:
        note = "x" * 20_000  # the pod's answer spans several TLS records and chunks
        pod = {
            "metadata": {"name": "big", "annotations": {"lyra.dev/note": note}},
            "spec": {"nodeName": "nowhere", "containers": [{"name": "main", "image": "registry.invalid/app:1"}]},
        }
        made = json.loads(writes.create_namespaced_pod(namespace, pod).data)
        assert made["metadata"]["annotations"]["lyra.dev/note"] == note
        assert made["metadata"]["resourceVersion"]
        with pytest.raises(ApiException) as refused:
            writes.create_namespaced_pod(namespace, pod)  # the name is taken: a small Status
        assert refused.value.status == 409
        assert json.loads(refused.value.body or "{}")["reason"] == "AlreadyExists"
        assert (
            json.loads(writes.read_namespaced_pod("big", namespace).data)["metadata"]["uid"] == made["metadata"]["uid"]
        )
        assert len(writes.connections._idle) == 1  # every answer was framed whole: the connection served on

        # The framings themselves, as the API server chose them, on that connection.
        connection, _ = writes.connections.take()
        headers = writes._headers(None)
        assert connection.sock is not None
        connection.sock.sendall(
            f"GET /api/v1/namespaces/{namespace}/pods/big HTTP/1.1\r\n".encode() + headers + b"\r\n"
        )
        large = read_answer(connection.sock, "GET")
        connection.sock.sendall(
            f"GET /api/v1/namespaces/{namespace}/pods/none HTTP/1.1\r\n".encode() + headers + b"\r\n"
        )
        small = read_answer(connection.sock, "GET")
        writes.connections.give_back(connection)
        assert (large.status, large.headers.get("transfer-encoding"), large.will_close) == (200, "chunked", False)
        assert json.loads(large.data)["metadata"]["annotations"]["lyra.dev/note"] == note
        assert (small.status, "content-length" in small.headers) == (404, True)
        assert json.loads(small.data)["reason"] == "NotFound"
    finally:
        writes.close()


def test_each_write_the_commit_step_makes_is_answered_with_the_objects_metadata_alone(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    job = {
        "apiVersion": names.API_VERSION,
        "kind": names.TRAINING_JOB_KIND,
        "metadata": {"name": "meta"},
        "spec": {
            "minWorkers": 1,
            "maxWorkers": 2,
            "gpusPerWorker": 1,
            "expectedDuration": 600,
            "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}},
        },
    }
    owner = client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, job
    )
    reference = {
        "apiVersion": names.API_VERSION,
        "kind": names.TRAINING_JOB_KIND,
        "name": "meta",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    env = [{"name": f"VAR_{i}", "value": "v" * 40} for i in range(30)]  # a manifest the answer no longer repeats
    pod = {
        "metadata": {"name": "meta-w0", "labels": {"app": "meta"}, "ownerReferences": [reference]},
        "spec": {
            "nodeName": "nowhere",
            "containers": [{"name": "main", "image": "registry.invalid/app:1", "env": env}],
        },
    }
    deployment = {
        "metadata": {"name": "meta-serve"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {"metadata": {"labels": {"app": "serve"}}, "spec": pod["spec"]},
        },
    }
    event = {
        "metadata": {"name": "meta.1"},
        "involvedObject": {"kind": "Pod", "name": "meta-w0", "namespace": namespace},
        "reason": "Scaled",
        "message": "m",
        "type": "Normal",
    }

    def budget(max_unavailable: int, name: str = "meta-serve") -> dict[str, Any]:
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": "serve"}}},
        }

    node = core.list_node().items[0].metadata.name
    writes = ApiWrites(kube_api)
    try:
        answers = {
            "create pod": writes.create_namespaced_pod(namespace, pod),
            "patch pod": writes.patch_namespaced_pod("meta-w0", namespace, {"metadata": {"labels": {"b": "c"}}}),
            "read pod": writes.read_namespaced_pod("meta-w0", namespace),
            "patch node": writes.patch_node(node, {"metadata": {"labels": {"lyra.dev/probe": "meta"}}}),
            "create service": writes.create_namespaced_service(
                namespace, {"metadata": {"name": "meta"}, "spec": {"ports": [{"port": 80}]}}
            ),
            "create event": writes.create_namespaced_event(namespace, event),
            "create deployment": writes.create_namespaced_deployment(namespace, deployment),
            "patch deployment": writes.patch_namespaced_deployment("meta-serve", namespace, {"spec": {"replicas": 0}}),
            "patch status": writes.patch_namespaced_custom_object_status(
                names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, "meta", {"status": {"message": "m"}}
            ),
            "delete pod": writes.delete_namespaced_pod("meta-w0", namespace, grace_period_seconds=30),
            "apply budget": writes.apply_namespaced_pod_disruption_budget("meta-serve", namespace, budget(1)),
            "apply budget again": writes.apply_namespaced_pod_disruption_budget("meta-serve", namespace, budget(2)),
        }
        versions = {}
        for what, answer in answers.items():
            body = json.loads(answer.data)
            assert (body["kind"], body["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1"), what
            assert set(body) <= {"kind", "apiVersion", "metadata"}, what
            front = _VERSION_UP_FRONT.match(answer.data)  # the version read off the answer's front, not parsed
            assert front is not None, what
            assert front.group(1).decode() == body["metadata"]["resourceVersion"], what
            versions[what] = _version_in(answer)
        assert all(versions.values())
        # Applied twice: created, then brought to the second body (server-side apply); deleted, then gone (404).
        policy = client.PolicyV1Api(kube_api)
        assert policy.read_namespaced_pod_disruption_budget("meta-serve", namespace).spec.max_unavailable == 2
        assert int(versions["apply budget again"]) > int(versions["apply budget"])
        # A plain deletion is answered with a Status and no version (nothing the watch could be waited for by);
        # a foreground one, as the operator deletes, with the budget marked for deletion at a later version, which
        # the garbage collector then removes.
        writes.apply_namespaced_pod_disruption_budget("meta-plain", namespace, budget(1, "meta-plain"))
        plain = json.loads(writes.delete_namespaced_pod_disruption_budget("meta-plain", namespace).data)
        assert plain["kind"] == "Status", plain
        assert not plain.get("metadata", {}).get("resourceVersion"), plain
        foreground = writes.delete_namespaced_pod_disruption_budget(
            "meta-serve", namespace, body={"propagationPolicy": "Foreground"}
        )
        marked = json.loads(foreground.data)["metadata"]
        assert marked["deletionTimestamp"], marked
        assert "foregroundDeletion" in marked["finalizers"], marked
        assert int(_version_in(foreground)) > int(versions["apply budget again"])
        wait_for(lambda: not policy.list_namespaced_pod_disruption_budget(namespace).items, 30, "the budgets gone")
        with pytest.raises(ApiException) as deleted:
            writes.delete_namespaced_pod_disruption_budget("meta-serve", namespace)
        assert deleted.value.status == 404
        assert int(versions["patch pod"]) > int(versions["create pod"])
        read = json.loads(answers["read pod"].data)["metadata"]
        assert read["ownerReferences"] == [reference]  # what a 409 on a create is checked against
        assert read["uid"] == json.loads(answers["create pod"].data)["metadata"]["uid"]
        assert len(answers["create pod"].data) < len(
            json.dumps(core.api_client.sanitize_for_serialization(core.read_namespaced_pod("meta-w0", namespace)))
        )
        with pytest.raises(ApiException) as refused:
            writes.create_namespaced_pod(namespace, pod)
        assert json.loads(refused.value.body or "{}")["kind"] == "Status"
        with pytest.raises(ApiException) as gone:
            writes.patch_namespaced_pod("none", namespace, {"metadata": {"labels": {"b": "c"}}})
        assert (gone.value.status, json.loads(gone.value.body or "{}")["reason"]) == (404, "NotFound")
    finally:
        writes.close()
        core.patch_node(node, {"metadata": {"labels": {"lyra.dev/probe": None}}})
