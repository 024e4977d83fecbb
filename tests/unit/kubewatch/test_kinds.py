"""What the caches keep of an object is everything the operator reads: a World read from slimmed objects equals the
World read from the objects as the API server sends them, and non-GPU pods without Lyra's labels are not kept."""

from __future__ import annotations

import copy
import json
from typing import Any

from lyra.kubewatch.kinds import DEPLOYMENTS, DISRUPTION_BUDGETS, INFERENCE_SERVICES, NODES, PODS, TRAINING_JOBS
from lyra.operator.readers import read_world

STAMP = "2027-01-15T08:00:00Z"
NOW = 1_800_000_000.0


def kubelet_node(name: str, pool: str, state: str | None, *, ready: str = "True") -> dict[str, Any]:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "lyra.dev/pool": pool,
        "nvidia.com/gpu.product": "Tesla-T4",
        "nvidia.com/gpu.count": "8",
        "topology.kubernetes.io/zone": "eu-west-1a",
        **{f"feature.node.kubernetes.io/cpu-cpuid.F{i}": "true" for i in range(40)},
    }
    taints = [{"key": "lyra.dev/state", "value": state, "effect": "NoSchedule"}] if state else []
    if ready != "True":
        taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": STAMP})
    if state:
        labels["lyra.dev/state"] = state
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "41",
            "creationTimestamp": STAMP,
            "labels": labels,
            "annotations": {
                "lyra.dev/idle-since": STAMP,
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": f"aws:///{name}", "taints": taints},
        "status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "63", "memory": "250Gi", "nvidia.com/gpu": "7", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": STAMP,
                 "lastTransitionTime": STAMP, "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": ready, "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
                 "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "images": [{"names": [f"registry/image-{i}@sha256:{i:064d}"], "sizeBytes": 10**9} for i in range(30)],
            "nodeInfo": {"kubeletVersion": "v1.34.4", "osImage": "Ubuntu 24.04"},
        },
    }  # fmt: skip


def kubelet_pod(name: str, labels: dict[str, str], gpus: int, *, node: str = "t4-0") -> dict[str, Any]:
    resources = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": "77",
            "creationTimestamp": STAMP,
            "labels": {"app": "x", "pod-template-hash": "abc", **labels},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 2000 + "}"},
            "ownerReferences": [{"apiVersion": "lyra.dev/v1alpha1", "kind": "TrainingJob", "name": "job",
                                 "uid": "uid-job", "controller": True}],
            "managedFields": [{"manager": "lyra-operator", "operation": "Apply"}],
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "trainer:1", "resources": resources,
                            "env": [{"name": f"E{i}", "value": "v"} for i in range(20)],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "lyra.dev/state", "value": "loaned", "effect": "NoSchedule"}],
        },
        "status": {
            "phase": "Running",
            "startTime": STAMP,
            "podIP": "10.1.2.3",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": STAMP},
                           {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                            "lastTransitionTime": STAMP}],
            "containerStatuses": [{"name": "main", "ready": False, "restartCount": 3, "image": "trainer:1",
                                   "imageID": "sha256:" + "0" * 64, "containerID": "containerd://" + "1" * 64,
                                   "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}],
        },
    }  # fmt: skip


def job(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": "uid-job", "generation": 2, "resourceVersion": "5",
                     "creationTimestamp": STAMP, "managedFields": [{"manager": "kubectl"}]},
        "spec": {"minWorkers": 1, "maxWorkers": 2, "gpusPerWorker": 1, "expectedDuration": 600,
                 "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}},
        "status": {"phase": "Running", "queuedAt": STAMP, "startedAt": STAMP},
    }  # fmt: skip


def service(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "serve", "uid": f"uid-{name}", "generation": 1,
                     "resourceVersion": "6"},
        "spec": {"replicas": 2, "gpusPerReplica": 1, "minReplicas": 1, "maxReplicas": 4, "gpuType": "Tesla-T4",
                 "template": {"spec": {"containers": [{"name": "server", "image": "server:1"}]}}},
    }  # fmt: skip


def deployment(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "serve", "labels": {"lyra.dev/service": name}, "generation": 3,
                     "resourceVersion": "9",
                     "annotations": {"lyra.dev/template-hash": "0123456789abcdef",
                                     "deployment.kubernetes.io/revision": "2"}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "server"}]}}},
        "status": {"replicas": 2, "readyReplicas": 1, "observedGeneration": 3},
    }  # fmt: skip


def budget(name: str) -> dict[str, Any]:
    """A service's budget as the API server returns it while a finalizer of someone else holds it in deletion."""
    return {
        "metadata": {"name": name, "namespace": "serve", "uid": f"uid-pdb-{name}", "resourceVersion": "11",
                     "labels": {"lyra.dev/service": name}, "deletionTimestamp": STAMP,
                     "finalizers": ["foregroundDeletion", "backup.example.com/hold"],
                     "ownerReferences": [{"apiVersion": "lyra.dev/v1alpha1", "kind": "InferenceService", "name": name,
                                          "uid": f"uid-{name}", "controller": True}],
                     "managedFields": [{"manager": "lyra-operator"}]},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"lyra.dev/service": name}}},
        "status": {"currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1, "expectedPods": 2},
    }  # fmt: skip


def slimmed(kind: Any, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [kind.slim(raw) for raw in objects if kind.keep(raw)]


def test_a_world_read_from_slimmed_objects_is_the_world_read_from_the_api_servers_objects() -> None:
    nodes = [kubelet_node("t4-0", "inference", "loaned"), kubelet_node("t4-1", "inference", "idle", ready="Unknown")]
    pods = [
        kubelet_pod("job-w0", {"lyra.dev/role": "base", "lyra.dev/job": "job"}, 1),
        kubelet_pod("job-w1", {"lyra.dev/role": "flexible", "lyra.dev/job": "job"}, 1, node="t4-1"),
        kubelet_pod("someone-elses-gpu-pod", {}, 2),
        kubelet_pod("web", {}, 0),
        kubelet_pod("preemptor", {}, 2, node=""),
    ]
    pods[-1]["status"].update(phase="Pending", nominatedNodeName="t4-1")  # kube-scheduler preempted there for it
    objects = {
        "nodes": nodes,
        "pods": pods,
        "jobs": [job("job")],
        "services": [service("svc")],
        "deployments": [deployment("svc")],
        "budgets": [budget("svc")],
    }
    kinds = {"nodes": NODES, "pods": PODS, "jobs": TRAINING_JOBS, "services": INFERENCE_SERVICES}
    kinds["deployments"], kinds["budgets"] = DEPLOYMENTS, DISRUPTION_BUDGETS
    slim = {name: slimmed(kinds[name], copy.deepcopy(items)) for name, items in objects.items()}
    assert read_world(NOW, **slim) == read_world(NOW, **objects)
    (found,) = (s.budget for s in read_world(NOW, **slim).services)
    assert found is not None
    assert found.finalizers == ("foregroundDeletion", "backup.example.com/hold")
    assert len(read_world(NOW, **slim).pods) == 4
    assert {p.ref.name: p.nominated for p in read_world(NOW, **slim).pods}["preemptor"] == "t4-1"
    assert len(json.dumps(slim)) < len(json.dumps(objects)) / 3


def test_a_deployment_keeps_its_template_hash_and_version_and_not_its_template() -> None:
    slim = DEPLOYMENTS.slim(deployment("svc"))
    assert slim["metadata"]["annotations"] == {"lyra.dev/template-hash": "0123456789abcdef"}
    assert slim["metadata"]["resourceVersion"] == "9"
    assert slim["spec"] == {"replicas": 2}
    (service_record,) = read_world(
        NOW, nodes=[], pods=[], jobs=[], services=[service("svc")], deployments=[slim]
    ).services
    assert (service_record.deployment_template_hash, service_record.deployment_version) == ("0123456789abcdef", "9")


def test_pods_are_kept_when_they_ask_for_gpus_or_carry_lyras_labels() -> None:
    assert PODS.keep(kubelet_pod("gpu", {}, 1))
    assert PODS.keep(kubelet_pod("replica", {"lyra.dev/role": "inference"}, 0))
    assert PODS.keep(kubelet_pod("worker", {"lyra.dev/job": "job"}, 0))
    assert not PODS.keep(kubelet_pod("web", {}, 0))
    init_only = kubelet_pod("init", {}, 0)
    init_only["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    assert PODS.keep(init_only)


def test_slimming_drops_managed_fields_images_and_foreign_annotations_and_keeps_health() -> None:
    node = NODES.slim(kubelet_node("t4-0", "inference", "idle", ready="False"))
    assert "managedFields" not in node["metadata"]
    assert node["metadata"]["annotations"] == {"lyra.dev/idle-since": STAMP}
    assert "images" not in node["status"]
    assert [c["type"] for c in node["status"]["conditions"]] == ["MemoryPressure", "Ready"]
    assert all("lastHeartbeatTime" not in c and "lastTransitionTime" in c for c in node["status"]["conditions"])
    assert [t["key"] for t in node["spec"]["taints"]] == ["lyra.dev/state", "node.kubernetes.io/unreachable"]
    pod = PODS.slim(kubelet_pod("w", {"lyra.dev/role": "base"}, 1))
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-job"
    assert "annotations" not in pod["metadata"]
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    assert "imageID" not in pod["status"]["containerStatuses"][0]
    assert "env" not in pod["spec"]["containers"][0]


def test_a_node_status_heartbeat_leaves_the_slimmed_node_unchanged() -> None:
    node = kubelet_node("t4-0", "inference", "idle")
    reported = copy.deepcopy(node)
    for condition in reported["status"]["conditions"]:
        condition["lastHeartbeatTime"] = "2026-11-24T12:00:00Z"
    assert node["status"]["conditions"] != reported["status"]["conditions"]
    assert NODES.slim(node) == NODES.slim(reported)
