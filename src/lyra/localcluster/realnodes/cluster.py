"""What the control plane does for ``--real-nodes N``: the plan, the API server's extra settings, the commands of
the network and node processes, the readiness test of a real node, and the removal of what they leave.

Addresses (all inside the cluster's network namespace): node *i* is 10.201.0.(10+i) and its pods get 10.244.i.0/24
behind the bridge ``lyrabr<i>`` (gateway .1); the ``kubernetes`` Service is 10.96.0.1:443.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from lyra.api.names import GPU_COUNT_LABEL, GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, GPU_RESOURCE, POOL_LABEL
from lyra.imagespec import oci
from lyra.localcluster.credentials import SERVICE_IP, User
from lyra.localcluster.profile import NodeGroup
from lyra.localcluster.realnodes import cgroups
from lyra.localcluster.realnodes.network import SERVICE_PORT, namespace_path
from lyra.localcluster.realnodes.nodeconfig import SANDBOX_IMAGE, ImageArchive

NETWORK_PROCESS = "cluster-network"
NODE_PROCESS_PREFIX = "realnode-"
#: Where real nodes get their images: ``make image`` / ``lyra image build`` write them here.
DEFAULT_IMAGES_DIR = Path("dist/images")
REAL_NODE_LABEL = "localcluster.lyra.dev/real-node"


class RealNodesError(RuntimeError):
    """Real nodes cannot be started as asked; the message says what to do."""


@dataclass(frozen=True)
class PlannedNode:
    index: int
    name: str
    group: NodeGroup
    token: str

    @property
    def node_ip(self) -> str:
        return f"10.201.0.{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def gateway(self) -> str:
        return f"10.244.{self.index}.1"

    @property
    def bridge(self) -> str:
        return f"lyrabr{self.index}"

    @property
    def user(self) -> User:
        # The Node authorizer's identity of a kubelet: system:node:<name> in system:nodes.
        return User(f"system:node:{self.name}", ("system:nodes",), self.token)

    @property
    def gpu_count(self) -> int:
        return self.group.gpu.count if self.group.gpu is not None else 0

    def labels(self) -> dict[str, str]:
        labels = {POOL_LABEL: self.group.pool, REAL_NODE_LABEL: "true", **self.group.labels}
        if self.group.gpu is not None:
            labels[GPU_PRODUCT_LABEL] = self.group.gpu.product
            labels[GPU_COUNT_LABEL] = str(self.group.gpu.count)
            if self.group.gpu.memory_mib:
                labels[GPU_MEMORY_LABEL] = str(self.group.gpu.memory_mib)
        return labels


def plan(groups: list[tuple[str, NodeGroup]]) -> list[PlannedNode]:
    return [
        PlannedNode(index=index, name=name, group=group, token=secrets.token_urlsafe(32))
        for index, (name, group) in enumerate(groups)
    ]


def cgroup_parent(cluster_name: str, state_dir: Path) -> str:
    """The cluster's subtree in every cgroup hierarchy: unique per state directory, found again by ``down``."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]
    return f"lyra/{cluster_name}-{digest}"


def api_server_url() -> str:
    """How kubelets and pods reach the API server: the ``kubernetes`` Service address, relayed to loopback."""
    return f"https://{SERVICE_IP}:{SERVICE_PORT}"


def image_archives(directory: Path) -> tuple[ImageArchive, ...]:
    """The OCI archives of ``lyra image build`` in ``directory``; the pause image must be among them (every pod's
    sandbox runs it)."""
    archives = []
    for path in sorted(directory.glob("*.oci.tar")):
        index, _manifest, _config = oci.read_archive(path)
        reference = str(index["manifests"][0].get("annotations", {}).get(oci.CONTAINERD_NAME, ""))
        if reference:
            archives.append((path, reference))
    if not any(reference == SANDBOX_IMAGE for _path, reference in archives):
        raise RealNodesError(
            f"no {SANDBOX_IMAGE} archive in {directory}: real nodes need the locally built images; run `make image` "
            "(or `lyra image build`) first, or pass --images-dir"
        )
    return tuple(ImageArchive(path, reference.rpartition(":")[0]) for path, reference in archives)


def image_references(images: tuple[ImageArchive, ...]) -> list[str]:
    references = []
    for image in images:
        index, _manifest, _config = oci.read_archive(image.path)
        references.append(str(index["manifests"][0]["annotations"][oci.CONTAINERD_NAME]))
    return references


def network_command(config_path: Path) -> list[str]:
    return [sys.executable, "-m", "lyra.localcluster.realnodes.network", str(config_path)]


def node_command(network_pid: int, spec_path: Path) -> list[str]:
    """The node's runner, inside the cluster's network namespace and a private mount namespace of its own (host
    mounts propagate in, none of the node's propagate out)."""
    return [
        "nsenter",
        f"--net={namespace_path(network_pid)}",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "slave",
        "--",
        sys.executable,
        "-m",
        "lyra.localcluster.realnodes.node",
        str(spec_path),
    ]


def node_ready(api_client: client.ApiClient, node: PlannedNode, references: list[str]) -> bool:
    """Ready, its GPUs allocatable (from the device plugin) and every imported image listed in its status."""
    try:
        found = client.CoreV1Api(api_client).read_node(node.name)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return False
        raise
    status: Any = found.status
    conditions = {condition.type: condition.status for condition in status.conditions or []}
    if conditions.get("Ready") != "True":
        return False
    if node.gpu_count and (status.allocatable or {}).get(GPU_RESOURCE) != str(node.gpu_count):
        return False
    listed = {name for image in status.images or [] for name in image.names or []}
    return all(reference in listed for reference in references)


def remove_leftovers(cluster_name: str, state_dir: Path) -> list[str]:
    """Kill whatever the nodes left in their cgroups (shims, containers) and remove the cgroups; return what could
    not be removed."""
    return cgroups.remove(cgroup_parent(cluster_name, state_dir))
