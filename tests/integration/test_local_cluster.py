"""Smoke tests of the local control plane against the real binaries.

They check the promises later tests build on: the fake GPU nodes look like GPU feature discovery would label
them, the real kube-scheduler places GPU pods (or explains why not), KWOK runs them, and RBAC is enforced.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api.names import GPU_COUNT_LABEL, GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, GPU_RESOURCE, POOL_LABEL
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.profile import load_default_profile
from lyra.localcluster.state import read_state
from lyra.localcluster.testing import client_with_token
from lyra.localcluster.waiting import wait_for

pytestmark = pytest.mark.integration

A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"
POD_TIMEOUT = 60.0


def gpu_pod(name: str, gpus: int, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod asking for ``gpus`` nvidia.com/gpu; KWOK 'runs' it without pulling the image."""
    resources = {GPU_RESOURCE: str(gpus), "cpu": "1", "memory": "1Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": node_selector or {},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/trainer:1",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        },
    }


def condition(pod: Any, kind: str) -> Any | None:
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def test_every_fake_node_is_ready_with_its_gpus_and_labels(kube_api: client.ApiClient) -> None:
    profile = load_default_profile()
    expected = {node: group for group in profile.node_groups for node in group.node_names()}
    nodes = {node.metadata.name: node for node in client.CoreV1Api(kube_api).list_node().items}

    assert sorted(nodes) == sorted(expected)
    assert len(nodes) == 12
    for name, group in expected.items():
        node = nodes[name]
        assert group.gpu is not None
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.status == "True", f"{name} is not Ready: {ready.message}"
        assert node.status.capacity[GPU_RESOURCE] == str(group.gpu.count)
        assert node.status.allocatable[GPU_RESOURCE] == str(group.gpu.count)
        assert node.status.allocatable["cpu"] == group.cpu
        assert node.status.allocatable["pods"] == str(group.pods)
        labels = node.metadata.labels
        assert labels[POOL_LABEL] == group.pool
        assert labels[GPU_PRODUCT_LABEL] == group.gpu.product
        assert labels[GPU_COUNT_LABEL] == str(group.gpu.count)
        assert labels[GPU_MEMORY_LABEL] == str(group.gpu.memory_mib)
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    products = {node.metadata.labels[POOL_LABEL]: node.metadata.labels[GPU_PRODUCT_LABEL] for node in nodes.values()}
    assert products == {"training": A100, "inference": T4}


@dataclass(frozen=True)
class Placement:
    """A pod and where the real kube-scheduler must put it (``pool``) or why it must refuse (``reason``)."""

    id: str
    gpus: int
    node_selector: dict[str, str] = field(default_factory=dict)
    pool: str | None = None
    reason: str | None = None


PLACEMENTS = [
    Placement("two-gpus-anywhere", gpus=2, pool="any"),
    Placement("two-a100s", gpus=2, node_selector={GPU_PRODUCT_LABEL: A100}, pool="training"),
    Placement("a-whole-t4-node", gpus=8, node_selector={POOL_LABEL: "inference"}, pool="inference"),
]
REFUSALS = [
    Placement("more-gpus-than-any-node", gpus=9, reason=f"Insufficient {GPU_RESOURCE}"),
    Placement(
        "a-product-nobody-has",
        gpus=1,
        node_selector={GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"},
        reason="didn't match Pod's node affinity/selector",
    ),
]


@pytest.mark.parametrize("case", PLACEMENTS, ids=lambda case: case.id)
def test_scheduler_binds_gpu_pod_to_a_node_with_free_gpus_and_kwok_runs_it(
    kube_api: client.ApiClient, namespace: str, case: Placement
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, gpu_pod(case.id, case.gpus, case.node_selector))

    pod = wait_for(
        lambda: (p := core.read_namespaced_pod(case.id, namespace)).status.phase == "Running" and p,
        POD_TIMEOUT,
        f"pod {case.id} to be Running",
    )

    assert condition(pod, "PodScheduled").status == "True"
    node = core.read_node(pod.spec.node_name)
    if case.pool != "any":
        assert node.metadata.labels[POOL_LABEL] == case.pool
    on_node = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={pod.spec.node_name}").items
    requested = sum(
        int(container.resources.requests.get(GPU_RESOURCE, "0"))
        for other in on_node
        for container in other.spec.containers
    )
    assert case.gpus <= requested <= int(node.status.allocatable[GPU_RESOURCE])
    events = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={case.id},reason=Scheduled"
    ).items
    assert [event.reporting_component or event.source.component for event in events] == ["default-scheduler"]


@pytest.mark.parametrize("case", REFUSALS, ids=lambda case: case.id)
def test_scheduler_leaves_impossible_gpu_pod_pending_with_its_reason(
    kube_api: client.ApiClient, namespace: str, case: Placement
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, gpu_pod(case.id, case.gpus, case.node_selector))

    def refused() -> Any:
        pod = core.read_namespaced_pod(case.id, namespace)
        scheduled = condition(pod, "PodScheduled")
        return scheduled is not None and scheduled.status == "False" and pod

    pod = wait_for(refused, POD_TIMEOUT, f"the scheduler to refuse pod {case.id}")

    scheduled = condition(pod, "PodScheduled")
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name
    assert scheduled.reason == "Unschedulable"
    assert case.reason is not None
    assert case.reason in scheduled.message
    assert "0/12 nodes are available" in scheduled.message


def test_rbac_refuses_a_service_account_without_rights_until_it_is_granted(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token

    with client_with_token(local_cluster, token) as as_nobody:
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(as_nobody).list_namespaced_pod(namespace)
        assert refused.value.status == 403
        assert f"system:serviceaccount:{namespace}:nobody" in refused.value.body

        # The same token works once RBAC allows it: the 403 came from authorization, not a broken token.
        rbac = client.RbacAuthorizationV1Api(kube_api)
        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "nobody-reads-pods"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}],
            },
        )
        pods = wait_for(
            lambda: client.CoreV1Api(as_nobody).list_namespaced_pod(namespace),
            30,
            "the new RoleBinding to take effect",
            retry_on=(ApiException,),
        )
        assert pods.items == []


def test_an_unknown_token_is_not_authenticated(local_cluster: ControlPlane) -> None:
    with client_with_token(local_cluster, "not-a-token") as stranger, pytest.raises(ApiException) as refused:
        client.CoreV1Api(stranger).list_namespaced_pod("default")
    assert refused.value.status == 401


CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.smoke.lyra.dev
spec:
  group: smoke.lyra.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


@pytest.mark.timeout(300)
def test_cli_up_status_down_lifecycle(tmp_path: Path) -> None:
    """`lyra cluster up` starts a second, independent cluster; `down` leaves none of its processes alive."""
    state_dir = tmp_path / "state"
    crd_dir = tmp_path / "crds"
    crd_dir.mkdir()
    (crd_dir / "widgets.yaml").write_text(CRD)
    where = ["--name", "cli-smoke", "--state-dir", str(state_dir)]

    def lyra(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lyra", "cluster", *arguments],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            env={key: value for key, value in os.environ.items() if key != "KUBECONFIG"},
        )

    up = lyra("up", *where, "--no-extender", "--crd-dir", str(crd_dir))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        kubeconfig = state_dir / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout
        assert "is up in" in up.stdout

        status = lyra("status", *where)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "12/12 Ready" in status.stdout

        nodes = lyra("kubectl", *where, "--", "get", "nodes", "-l", "lyra.dev/pool=inference", "-o", "name")
        assert nodes.returncode == 0, nodes.stderr
        assert len(nodes.stdout.split()) == 8

        again = lyra("up", *where, "--no-extender")
        assert again.returncode == 0
        assert "already running" in again.stdout

        from lyra.localcluster import populate
        from lyra.localcluster.state import read_state

        with populate.admin_api(kubeconfig) as api_client:
            crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition("widgets.smoke.lyra.dev")
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
        state = read_state(state_dir)
        assert state is not None
        pids = [record.pid for record in state.processes]
        assert len(pids) == 5
    finally:
        down = lyra("down", *where)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not state_dir.exists()
    alive = [pid for pid in pids if _runs(pid)]
    assert alive == []
    assert lyra("status", *where).returncode == 1


def _runs(pid: int) -> bool:
    """Whether any thread of ``pid`` has not ended (its first thread may be a zombie while others still exit)."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return False
    for thread in threads:
        try:
            state = (thread / "stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            continue
        if state not in ("Z", "X"):
            return True
    return False


@pytest.mark.timeout(300)
def test_cli_up_stopped_by_sigterm_while_starting_leaves_nothing_running(tmp_path: Path) -> None:
    """`timeout 5 lyra cluster up`: SIGTERM while the control plane starts ended Python at once, and etcd, the API
    server, the controller manager, the scheduler and KWOK kept running (`lyra cluster status`: only partly
    running). Stopped as by Ctrl-C now: what it started is stopped, exit 143, its logs kept for `down`."""
    state_dir = tmp_path / "state"
    where = ["--name", "cli-stopped", "--state-dir", str(state_dir)]
    environment = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}

    def lyra(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lyra", "cluster", *arguments, *where], capture_output=True, text=True,
            timeout=120, check=False, env=environment,
        )  # fmt: skip

    try:
        with subprocess.Popen(
            [sys.executable, "-m", "lyra", "cluster", "up", *where, "--no-extender"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=environment,
        ) as up:  # fmt: skip
            try:
                assert up.stdout is not None
                assert up.stderr is not None
                for line in up.stdout:  # read up to the API server's start
                    if "kube-apiserver ready" in line:
                        break
                assert up.poll() is None, up.stderr.read()
                state = read_state(state_dir)
                assert state is not None
                pids = [record.pid for record in state.processes]
                assert len(pids) >= 2, "etcd and the API server were started"
                assert all(_runs(pid) for pid in pids), "etcd and the API server run"
                up.send_signal(signal.SIGTERM)
                code = up.wait(timeout=120)
                errors = up.stderr.read()
            finally:
                if up.poll() is None:
                    up.kill()
        assert code == 128 + signal.SIGTERM, errors
        assert "interrupted (SIGTERM) while the cluster started; everything it started is stopped" in errors
        assert "Traceback" not in errors
        final = read_state(state_dir)
        assert final is not None
        assert [record.pid for record in final.processes if _runs(record.pid)] == []
        status = lyra("status")
        assert "nothing of it runs any more" in status.stdout + status.stderr
    finally:
        down = lyra("down")  # whatever happened above: no process of it outlives the test
    assert down.returncode == 0, down.stdout + down.stderr
    assert not state_dir.exists()
