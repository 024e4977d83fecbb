"""`lyra check` against a real cluster (its own local control plane: kube-apiserver, kube-scheduler without the
extender, kube-controller-manager, KWOK GPU nodes) run by the real operator as its ServiceAccount.

The operator lends the idle T4 servers and runs an elastic job on them beside an inference service: the check is
clean, while the operator runs and once it is stopped. Then, with the operator stopped, a loaned node's state taint
is removed by hand: the check exits 3 and names that node and that invariant only. Restarted, the operator puts the
taint back and the check is clean again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.api import names
from lyra.cli.exit_codes import EXIT_VIOLATIONS
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_job,
    create_service,
    inference_service,
    lyra_check,
    node_states,
    running,
    service_account_kubeconfig,
    workers,
)

# Starts the operator twice and runs `lyra check` five times, each a new process: minutes on a busy 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_check_is_clean_on_a_lending_cluster_and_finds_a_removed_taint_and_budget(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    operator = Operator(service_account_kubeconfig(cluster, api, tmp_path), tmp_path / "operator.log")
    with temporary_namespace(api, "check") as namespace:
        try:
            _story(api, cluster.kubeconfig, namespace, operator)
        except BaseException:
            print(f"--- {operator.log.name} ---\n" + operator.tail())
            raise
        finally:
            operator.stop()


def _story(api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator) -> None:
    service = inference_service("chat", replicas=2, gpus=2, min_replicas=1, max_replicas=8)
    service["spec"]["disruptionBudget"] = {"maxUnavailable": 1}
    create_service(api, namespace, service)
    create_job(api, namespace, "elastic", minWorkers=2, maxWorkers=4, gpusPerWorker=8, gpuTypes=[T4])
    operator.start()

    def replicas_ready() -> bool:
        deployment = client.AppsV1Api(api).read_namespaced_deployment("chat", namespace)
        return (deployment.status.ready_replicas or 0) == 2

    wait_for(lambda: running(api, namespace, "elastic", 4), DEADLINE_S, "the elastic job at 4 workers")
    wait_for(replicas_ready, DEADLINE_S, "2 inference replicas ready", retry_on=(client.ApiException,))
    states = node_states(api)
    assert list(states.values()).count("loaned") >= 4, states
    report = assert_check_clean(kubeconfig)
    assert report["checked"]["trainingJobs"] == 1
    assert report["checked"]["pods"] == 6  # 4 workers and 2 replicas

    operator.stop()
    assert_check_clean(kubeconfig)
    lent = workers(api, namespace, "elastic")[0].spec.node_name
    node = client.CoreV1Api(api).read_node(lent)
    kept = [t for t in node.spec.taints or [] if t.key != names.STATE_TAINT]
    client.CoreV1Api(api).patch_node(lent, {"spec": {"taints": [_taint(t) for t in kept]}})
    client.PolicyV1Api(api).delete_namespaced_pod_disruption_budget("chat", namespace)
    code, report = lyra_check(kubeconfig)
    assert code == EXIT_VIOLATIONS
    assert not report["clean"]
    assert [(v["invariant"], v["kind"], v["name"]) for v in report["violations"]] == [
        ("disruption-budget", names.INFERENCE_SERVICE_KIND, "chat"),
        ("node-state", "Node", lent),
    ]
    assert "no lyra.dev/state taint" in report["violations"][1]["message"]
    human = subprocess.run(
        [sys.executable, "-m", "lyra", "check", "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert human.returncode == EXIT_VIOLATIONS
    counted = report["checked"]
    assert human.stdout.splitlines() == [
        f"2 violations ({counted['nodes']} nodes, 6 Lyra pods, 1 TrainingJob, {counted['inferenceServices']} "
        "InferenceService" + ("" if counted["inferenceServices"] == 1 else "s") + " checked):",
        f"  disruption-budget  InferenceService {namespace}/chat: asks for maxUnavailable 1, and there is no "
        "PodDisruptionBudget chat",
        f"  node-state         Node {lent}: no lyra.dev/state taint (the label says 'loaned')",
    ]

    operator.start()  # the operator puts the taint back (the label says loaned) and the budget

    def tainted() -> bool:
        taints = client.CoreV1Api(api).read_node(lent).spec.taints or []
        return any(t.key == names.STATE_TAINT and t.value == "loaned" for t in taints)

    wait_for(tainted, DEADLINE_S, "the operator to restore the state taint")
    assert_check_clean(kubeconfig)


def _taint(taint: client.V1Taint) -> dict[str, Any]:
    return {k: v for k, v in {"key": taint.key, "value": taint.value, "effect": taint.effect}.items() if v is not None}
