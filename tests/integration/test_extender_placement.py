"""The real kube-scheduler calls Lyra's extender (nodeCacheCapable) and pods land where Lyra's rules say.

One control plane with the default profile (4 training A100 nodes, 8 inference T4 nodes). Two inference nodes are
labelled loaned and one reclaiming, as the operator would. Then, through the real scheduler and the real extender:
an inference pod lands on a serving inference node; a flexible training worker allocated T4s lands on a loaned
node (never a reclaiming or serving one); a base worker allocated A100s on a training node; a second worker of the
same job on the node that already hosts the first (packing). With the extender stopped, a GPU pod waits unbound,
and is placed once the extender is back.
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

from lyra.extender.app import create_app
from lyra.extender.watch import WatchedView
from lyra.localcluster import populate
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import wait_for

pytestmark = pytest.mark.integration

LOANED = ("inference-t4-6", "inference-t4-7")
RECLAIMING = "inference-t4-5"
TRAINING_PRODUCT = "NVIDIA-A100-SXM4-80GB"
INFERENCE_PRODUCT = "Tesla-T4"


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


def gpu_pod(name: str, gpus: int, labels: dict[str, str], product: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/app:1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if product is not None:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def test_pods_land_where_lyras_rules_say(tmp_path: Path) -> None:
    port = allocate_ports(1)[0]
    with (
        session_control_plane(tmp_path / "cluster", extender_url=f"http://127.0.0.1:{port}") as control_plane,
        populate.admin_api(control_plane.kubeconfig) as api,
        temporary_namespace(api, "extender-placement") as namespace,
    ):
        core = client.CoreV1Api(api)
        for name in LOANED:
            core.patch_node(name, {"metadata": {"labels": {"lyra.dev/state": "loaned"}}})
        core.patch_node(RECLAIMING, {"metadata": {"labels": {"lyra.dev/state": "reclaiming"}}})

        def bound(name: str) -> str | None:
            node: str | None = core.read_namespaced_pod(name, namespace).spec.node_name
            return node

        with running_extender(api, port) as source:
            wait_for(
                lambda: (
                    source.current().nodes.get(RECLAIMING) is not None
                    and str(source.current().nodes[RECLAIMING].state) == "reclaiming"
                ),
                30,
                "the extender's view to see the node labels",
            )
            core.create_namespaced_pod(namespace, gpu_pod("chat-0", 2, {"lyra.dev/role": "inference"}))
            core.create_namespaced_pod(
                namespace,
                gpu_pod("bert-flex-0", 2, {"lyra.dev/role": "flexible", "lyra.dev/job": "bert"}, INFERENCE_PRODUCT),
            )
            core.create_namespaced_pod(
                namespace,
                gpu_pod("gpt-base-0", 4, {"lyra.dev/role": "base", "lyra.dev/job": "gpt"}, TRAINING_PRODUCT),
            )
            inference_node = wait_for(lambda: bound("chat-0"), 60, "the inference pod to be bound")
            flexible_node = wait_for(lambda: bound("bert-flex-0"), 60, "the flexible worker to be bound")
            base_node = wait_for(lambda: bound("gpt-base-0"), 60, "the base worker to be bound")
            assert inference_node.startswith("inference-t4-")
            assert inference_node not in (*LOANED, RECLAIMING)
            assert flexible_node in LOANED
            assert base_node.startswith("training-a100-")

            # The job's next worker goes where the job already runs (packing), though other nodes are emptier.
            wait_for(lambda: source.current().job_nodes.get(f"{namespace}/gpt"), 30, "the view to see gpt's worker")
            core.create_namespaced_pod(
                namespace,
                gpu_pod("gpt-base-1", 2, {"lyra.dev/role": "base", "lyra.dev/job": "gpt"}, TRAINING_PRODUCT),
            )
            assert wait_for(lambda: bound("gpt-base-1"), 60, "the second worker to be bound") == base_node

        # Extender stopped: a GPU pod waits (the extender is not ignorable) and lands once it is back.
        core.create_namespaced_pod(
            namespace,
            gpu_pod("bert-flex-1", 1, {"lyra.dev/role": "flexible", "lyra.dev/job": "bert"}, INFERENCE_PRODUCT),
        )
        events = client.CoreV1Api(api)

        def failed_to_schedule() -> bool:
            listed = events.list_namespaced_event(namespace, field_selector="involvedObject.name=bert-flex-1")
            return any(event.reason == "FailedScheduling" for event in listed.items)

        wait_for(failed_to_schedule, 60, "the scheduler to report that it could not reach the extender")
        assert bound("bert-flex-1") is None
        with running_extender(api, port):
            assert wait_for(lambda: bound("bert-flex-1"), 120, "the waiting pod to be bound") in LOANED
