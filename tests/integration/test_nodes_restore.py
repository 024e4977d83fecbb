"""`lyra nodes restore` on the local control plane: after the operator lent servers and ran training on them and was
then stopped (as `helm uninstall` stops it), the restore refuses while an operator leads and while training runs on
lent servers, says what it would do in a dry run without changing anything, then drains and leaves no node with a
key under ``lyra.dev/``; a GPU pod that is not Lyra's then schedules on a server that was lent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    DEADLINE_S,
    OPERATOR_NAMESPACE,
    Operator,
    lend_to_an_elastic_job,
    lyra_node_fields,
    workers,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def restore(cluster: ControlPlane, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "lyra", "nodes", "restore", "--kubeconfig", str(cluster.kubeconfig),
        "--lease-namespace", OPERATOR_NAMESPACE, *flags,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def lyra_keys(api: client.ApiClient) -> dict[str, list[str]]:
    """Every key under lyra.dev/ on every node (labels, annotations, taints)."""
    found: dict[str, list[str]] = {}
    for name, (labels, notes, taints) in lyra_node_fields(api).items():
        keys = [*(labels or {}), *(notes or {}), *(taint["key"] for taint in taints)]
        lyra = sorted(key for key in keys if key.startswith(f"{names.GROUP}/"))
        if lyra:
            found[name] = lyra
    return found


def test_restore_refuses_while_unsafe_then_drains_and_leaves_no_lyra_key(
    cluster: ControlPlane, api: client.ApiClient, operator_kubeconfig: Path, tmp_path: Path
) -> None:
    operator = Operator(operator_kubeconfig, tmp_path / "operator.log")
    with temporary_namespace(api, "restore") as namespace:
        try:
            lent = lend_to_an_elastic_job(api, namespace, operator)

            leading = restore(cluster, "--dry-run")
            assert leading.returncode == 1
            assert "an operator still leads" in leading.stderr
            operator.stop()  # as helm uninstall does: the operator releases its Lease on SIGTERM

            blocked = restore(cluster)
            assert blocked.returncode == 1
            assert "training pods run on lent inference servers" in blocked.stderr
            assert "--drain" in blocked.stderr

            before = lyra_node_fields(api)
            dry = restore(cluster, "--dry-run", "--drain", "--pool-labels")
            assert dry.returncode == 0, dry.stderr
            assert "would drain 4 training pods" in dry.stdout
            assert all(
                f"would {node}: remove label {names.STATE_LABEL}, label {names.POOL_LABEL}" in dry.stdout
                for node in lent
            )
            assert lyra_node_fields(api) == before, "a dry run changed a node"

            done = restore(cluster, "--drain", "--pool-labels")
            assert done.returncode == 0, done.stderr
            assert "restored" in done.stdout
            assert lyra_keys(api) == {}
            assert [p.metadata.name for p in workers(api, namespace, "elastic")] == []

            again = restore(cluster, "--pool-labels")
            assert again.returncode == 0, again.stderr
            assert "nothing to restore" in again.stdout

            a_plain_gpu_pod_runs_on(api, namespace, lent[0])
        except BaseException:
            print("--- operator ---\n" + operator.tail())
            raise
        finally:
            operator.stop()


def a_plain_gpu_pod_runs_on(api: client.ApiClient, namespace: str, node: str) -> None:
    """A GPU pod that tolerates none of Lyra's taints schedules on a server Lyra had lent."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain-inference"},
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": "registry.invalid/server:1",
                    "resources": {"limits": {names.GPU_RESOURCE: "8"}},
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": names.HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            },
        },
    }
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod)

    def running_there() -> bool:
        found = core.read_namespaced_pod("plain-inference", namespace)
        return found.spec.node_name == node and found.status.phase == "Running"

    wait_for(running_there, DEADLINE_S, f"a plain GPU pod running on {node}")
