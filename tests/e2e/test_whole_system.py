"""Lyra whole: the real kube-scheduler calling Lyra's extender, the operator and the workload emulator, on a local
control plane with 4 training A100 servers and 8 inference T4 servers, running the manifests of examples/.

The operator keeps the one server the first two replicas need serving before they exist, so they pack onto it
and the seven other T4 servers are lent; the T4-only elastic job grows to 12 workers there. When the service scales to
20 replicas, inference needs 3 servers: the missing ones are reclaimed by scaling that job in, never by
preemption, and the 20 replicas are packed onto exactly those 3 serving servers. The job then finishes at its
workers' pace.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.e2e.system_support import Child, System
from tests.operator_support import (
    DEADLINE_S,
    REPOSITORY,
    Operator,
    assert_check_clean,
    custom,
    job,
    labels_of,
    node_states,
    running,
    workers,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]  # the story runs a job to its end (about 70 s)


def ready_replicas(api: client.ApiClient, namespace: str) -> int:
    try:
        deployment = client.AppsV1Api(api).read_namespaced_deployment("chat", namespace)
    except ApiException as error:
        if error.status == 404:
            return 0  # the operator has not made it yet
        raise
    return int(deployment.status.ready_replicas or 0)


def test_the_examples_run_lent_reclaimed_and_finished(system: System) -> None:
    api, logs = system.api, system.logs
    operator = Operator(system.operator_kubeconfig, logs / "operator.log")
    with temporary_namespace(api, "whole-system") as namespace, ExitStack() as running_parts:
        emulator = Child(
            logs / "emulate.log", "emulate", "--kubeconfig", str(system.cluster.kubeconfig), "--interval", "0.5"
        )
        running_parts.callback(emulator.stop)
        running_parts.callback(operator.stop)
        try:
            _story(api, namespace, operator)
        except BaseException:
            system.print_logs()
            raise


def _story(api: client.ApiClient, namespace: str, operator: Operator) -> None:
    plurals = {
        names.TRAINING_JOB_KIND: names.TRAINING_JOB_PLURAL,
        names.INFERENCE_SERVICE_KIND: names.INFERENCE_SERVICE_PLURAL,
    }
    for path in sorted((REPOSITORY / "examples").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        custom(api).create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plurals[body["kind"]], body)
    operator.start()

    # Lent: every T4 server without a replica is lent, and lora grows there (2 workers of 4 GPUs per server).
    wait_for(lambda: ready_replicas(api, namespace) == 2, DEADLINE_S, "2 replicas ready")

    def lent() -> bool:
        states = list(node_states(api).values())
        return states.count("loaned") == 7 and states.count("serving") == 1

    wait_for(lent, DEADLINE_S, "seven T4 servers lent, one serving")
    wait_for(lambda: running(api, namespace, "lora", 12), DEADLINE_S, "lora at 12 workers on lent servers")
    for pod in workers(api, namespace, "lora"):
        assert labels_of(api, pod.spec.node_name).get(names.STATE_LABEL) == "loaned"
    for name in ("resnet", "bert-elastic"):
        wait_for(lambda name=name: job(api, namespace, name).get("status", {}).get("phase") == "Running",
                 DEADLINE_S, f"{name} running")  # fmt: skip

    # Reclaimed: 20 replicas of 1 GPU need 3 servers; two come back, lora is scaled in, not preempted.
    custom(api).patch_namespaced_custom_object_scale(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, "chat", {"spec": {"replicas": 20}}
    )
    wait_for(lambda: ready_replicas(api, namespace) == 20, DEADLINE_S, "20 replicas ready")
    states = node_states(api)
    assert list(states.values()).count("serving") == 3, states
    assert "reclaiming" not in states.values()
    lora = job(api, namespace, "lora")["status"]
    assert lora["preemptions"] == 0
    assert lora["scaleIns"] >= 2
    replicas = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat")
    assert {states[p.spec.node_name] for p in replicas.items} == {"serving"}

    # Finished: lora's work is done at its workers' pace; its workers exited 0 and hold no GPU.
    wait_for(lambda: job(api, namespace, "lora").get("status", {}).get("phase") == "Succeeded", 150, "lora to finish")
    assert {p.status.phase for p in workers(api, namespace, "lora")} == {"Succeeded"}
    assert_check_clean(operator.kubeconfig)
