"""The real kube-scheduler calls Lyra's extender (nodeCacheCapable) and pods land where Lyra's rules say.

One control plane with the default profile (4 training A100 nodes, 8 inference T4 nodes). The inference nodes carry
the state labels and taints the operator writes: two loaned, one reclaiming, the rest serving. The pods are made as
the operator makes them (:mod:`lyra.operator.manifests`). Through the real scheduler and the real extender: an
inference replica lands on a serving node; a flexible worker allocated T4s on a loaned node (never a reclaiming or
serving one); a base worker allocated A100s on a training node; a second worker of the same job on the node that
already hosts the first (the extender's packing, though emptier nodes are free); a worker no node can take never
reaches the extender's cache (the server leaves unbound pods out of its watch). With the extender stopped, the
rules still hold (they are the taints and node affinity, checked by kube-scheduler itself): a worker waits for
nothing and lands on a loaned node.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from kubernetes import client

from lyra.api import names
from lyra.core.model import LoanState
from lyra.extender.app import create_app
from lyra.extender.watch import WatchedView
from lyra.localcluster import populate
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import wait_for
from lyra.operator import manifests

pytestmark = pytest.mark.integration

LOANED = ("inference-t4-6", "inference-t4-7")
RECLAIMING = "inference-t4-5"
A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"
H100 = "NVIDIA-H100-80GB-HBM3"
TEMPLATE = {"spec": {"automountServiceAccountToken": False, "containers": [{"name": "main", "image": "x.invalid/a:1"}]}}


@contextmanager
def running_extender(api: client.ApiClient, port: int) -> Iterator[WatchedView]:
    source = WatchedView(api)
    source.start()
    server = uvicorn.Server(uvicorn.Config(create_app(source), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started and source.synced, 30, "the extender to start and sync")
        yield source
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        source.stop()


def set_state(core: client.CoreV1Api, node: str, state: LoanState) -> None:
    """What the operator writes on an inference node: the state label and the one state taint."""
    taints = manifests.state_taints((), state)
    core.patch_node(
        node,
        {
            "metadata": {"labels": {names.STATE_LABEL: state.value}},
            "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]},
        },
    )


def worker(namespace: str, job: str, index: int, role: str, *, gpus: int, gpu_type: str) -> Any:
    """A worker as the operator makes it, without the owner reference (no TrainingJob exists in this test)."""
    pod = manifests.worker_pod(
        namespace=namespace, job=job, job_uid="", index=index, role=role, template=TEMPLATE, gpus_per_worker=gpus,
        gpu_type=gpu_type, planned_node=None, grace_seconds=1, min_workers=1, max_workers=4,
    )  # fmt: skip
    del pod["metadata"]["ownerReferences"]
    return pod


def replica(namespace: str, name: str, gpus: int) -> Any:
    deployment = manifests.deployment(
        namespace=namespace, service="chat", service_uid="", replicas=1, template=TEMPLATE, gpus_per_replica=gpus,
        gpu_type=T4,
    )  # fmt: skip
    template = deployment["spec"]["template"]
    return {"metadata": {**template["metadata"], "name": name, "namespace": namespace}, "spec": template["spec"]}


def test_pods_land_where_lyras_rules_say(tmp_path: Path) -> None:
    port = allocate_ports(1)[0]
    with (
        session_control_plane(tmp_path / "cluster", extender_url=f"http://127.0.0.1:{port}") as control_plane,
        populate.admin_api(control_plane.kubeconfig) as api,
        temporary_namespace(api, "extender-placement") as namespace,
    ):
        core = client.CoreV1Api(api)
        for index in range(8):
            node = f"inference-t4-{index}"
            state = LoanState.LOANED if node in LOANED else LoanState.SERVING
            set_state(core, node, LoanState.RECLAIMING if node == RECLAIMING else state)

        def bound(name: str) -> str | None:
            node: str | None = core.read_namespaced_pod(name, namespace).spec.node_name
            return node

        with running_extender(api, port) as source:
            wait_for(
                lambda: source.current().nodes[RECLAIMING].state is LoanState.RECLAIMING,
                30,
                "the extender's view to see the node states",
            )
            core.create_namespaced_pod(namespace, replica(namespace, "chat-0", 2))
            core.create_namespaced_pod(
                namespace, worker(namespace, "bert", 0, names.ROLE_FLEXIBLE, gpus=2, gpu_type=T4)
            )
            core.create_namespaced_pod(namespace, worker(namespace, "gpt", 0, names.ROLE_BASE, gpus=4, gpu_type=A100))
            inference_node = wait_for(lambda: bound("chat-0"), 60, "the inference replica to be bound")
            flexible_node = wait_for(lambda: bound("bert-w0"), 60, "the flexible worker to be bound")
            base_node = wait_for(lambda: bound("gpt-w0"), 60, "the base worker to be bound")
            assert inference_node.startswith("inference-t4-")
            assert inference_node not in (*LOANED, RECLAIMING)
            assert flexible_node in LOANED
            assert base_node.startswith("training-a100-")

            # A worker no node can take (no H100 here) stays unbound: the server never sends it to the extender.
            core.create_namespaced_pod(namespace, worker(namespace, "t5", 0, names.ROLE_BASE, gpus=1, gpu_type=H100))

            # The job's next worker goes where the job already runs (packing), though other nodes are emptier.
            wait_for(lambda: source.current().job_nodes.get(f"{namespace}/gpt"), 30, "the view to see gpt's worker")
            core.create_namespaced_pod(namespace, worker(namespace, "gpt", 1, names.ROLE_BASE, gpus=2, gpu_type=A100))
            assert wait_for(lambda: bound("gpt-w1"), 60, "the second worker to be bound") == base_node
            pods = source.caches["pods"]
            wait_for(lambda: pods.get(f"{namespace}/gpt-w1"), 30, "the extender to see the second worker bound")
            assert bound("t5-w0") is None
            assert pods.get(f"{namespace}/t5-w0") is None, "an unbound pod reached the extender's cache"

        # Extender stopped: the rules are the taints and node affinity, so the pod is placed right without it.
        core.create_namespaced_pod(namespace, worker(namespace, "bert", 1, names.ROLE_FLEXIBLE, gpus=1, gpu_type=T4))
        assert wait_for(lambda: bound("bert-w1"), 60, "the worker to be bound without the extender") in LOANED
        core.create_namespaced_pod(namespace, replica(namespace, "chat-1", 1))
        assert wait_for(lambda: bound("chat-1"), 60, "the replica to be bound without the extender") not in (
            *LOANED,
            RECLAIMING,
        )
