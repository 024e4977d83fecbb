"""Node objects for the fake GPU nodes that KWOK keeps alive.

There is no kubelet and no device plugin, so everything a real GPU node would report (capacity, allocatable,
GPU feature-discovery labels) is written straight into the Node object. KWOK then takes over the nodes carrying
its annotation: it sets their conditions, renews their leases and runs the pods bound to them.
"""

from __future__ import annotations

from typing import Any

from lyra.api.names import GPU_COUNT_LABEL, GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, GPU_RESOURCE, POOL_LABEL
from lyra.localcluster.profile import ClusterProfile, NodeGroup

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
KWOK_NODE_SELECTOR = f"{KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}"
#: KWOK leaves a pod with this annotation alone, as a kubelet that is gone would: it neither updates the pod's status
#: nor finishes its deletion (a test playing a dead kubelet sets it; removed, KWOK takes the pod back).
KUBELET_GONE_ANNOTATION = "localcluster.lyra.dev/kubelet-gone"
KUBELET_GONE_VALUE = "true"
KUBELET_GONE_SELECTOR = f"{KUBELET_GONE_ANNOTATION}={KUBELET_GONE_VALUE}"


def node_manifests(profile: ClusterProfile) -> list[dict[str, Any]]:
    """One v1 Node per node of the profile, in profile order."""
    return [node_manifest(group, node_name) for group in profile.node_groups for node_name in group.node_names()]


def node_manifest(group: NodeGroup, node_name: str) -> dict[str, Any]:
    # Labels and annotations follow KWOK's documented fake node (arch, os, role, `type: kwok`), plus the GPU
    # feature-discovery labels and Lyra's pool label that the scheduler extender and the operator read.
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        "type": "kwok",
        POOL_LABEL: group.pool,
    }
    resources: dict[str, str] = {"cpu": group.cpu, "memory": group.memory, "pods": str(group.pods)}
    if group.gpu is not None:
        labels[GPU_PRODUCT_LABEL] = group.gpu.product
        labels[GPU_COUNT_LABEL] = str(group.gpu.count)
        if group.gpu.memory_mib:
            labels[GPU_MEMORY_LABEL] = str(group.gpu.memory_mib)
        resources[GPU_RESOURCE] = str(group.gpu.count)
    labels.update(group.labels)
    spec: dict[str, Any] = {}
    if group.taints:
        spec["taints"] = [{"key": taint.key, "value": taint.value, "effect": taint.effect} for taint in group.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
            },
        },
        "spec": spec,
        "status": {
            "allocatable": dict(resources),
            "capacity": dict(resources),
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "kubeProxyVersion": "fake",
                "kubeletVersion": "fake",
                "machineID": "",
                "operatingSystem": "linux",
                "osImage": "",
                "systemUUID": "",
            },
            "phase": "Running",
        },
    }
