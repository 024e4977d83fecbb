"""kube-scheduler of the local cluster really calls the scheduler extender, and only for GPU pods.

A stub extender (a few lines of HTTP on 127.0.0.1) stands in for Lyra's: it scores one of two identical empty nodes
(the only two the GPU pod's node affinity allows) highest. The real scheduler must send it the GPU pod (and not the
CPU-only pod, because of managedResources) and follow its answer: equal in-tree scores leave the extender's score to
decide. The extender has no filter verb (docs/architecture.md, "Where a pod lands"), so none is called.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.localcluster import populate
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import wait_for

pytestmark = pytest.mark.integration

CHOSEN_NODE = "inference-t4-3"
ALLOWED_NODES = (CHOSEN_NODE, "inference-t4-5")  # with a single feasible node, prioritize would be skipped


@dataclass
class StubExtender:
    """Records (verb, pod) calls; prioritize scores CHOSEN_NODE highest."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    def answer(self, verb: str, request: dict[str, Any]) -> object:
        pod = request["Pod"]["metadata"]["name"]
        self.calls.append((verb, pod))
        assert request.get("Nodes") is None, "nodeCacheCapable: the scheduler sends names only"
        names = request["NodeNames"]
        if verb == "preempt":
            return {"NodeNameToMetaVictims": request.get("NodeNameToMetaVictims") or {}}
        return [{"Host": name, "Score": 10 if name == CHOSEN_NODE else 0} for name in names]


@pytest.fixture
def stub_extender() -> Iterator[tuple[StubExtender, str]]:
    stub = StubExtender()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reply = json.dumps(stub.answer(self.path.rsplit("/", 1)[-1], body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: object) -> None:  # keep the test output clean
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def pod(name: str, resources: dict[str, str]) -> dict[str, Any]:
    allowed = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(ALLOWED_NODES)}
    return {
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [allowed]}]
                    }
                }
            },
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/app:1",
                    "resources": {"limits": resources, "requests": resources},
                }
            ],
        },
    }


def test_gpu_pods_go_through_the_extender_and_follow_its_answer(
    tmp_path: Path, stub_extender: tuple[StubExtender, str]
) -> None:
    stub, url = stub_extender
    with (
        session_control_plane(tmp_path / "cluster", extender_url=url) as control_plane,
        populate.admin_api(control_plane.kubeconfig) as api_client,
        temporary_namespace(api_client, "extender") as namespace,
    ):
        core = client.CoreV1Api(api_client)
        core.create_namespaced_pod(namespace, pod("gpu", {"nvidia.com/gpu": "1", "cpu": "1"}))
        core.create_namespaced_pod(namespace, pod("cpu-only", {"cpu": "1"}))

        def bound(name: str) -> str | None:
            node_name: str | None = core.read_namespaced_pod(name, namespace).spec.node_name
            return node_name

        assert wait_for(lambda: bound("gpu"), 60, "the GPU pod to be bound") == CHOSEN_NODE
        wait_for(lambda: bound("cpu-only"), 60, "the CPU-only pod to be bound")

    assert ("prioritize", "gpu") in stub.calls
    assert not [call for call in stub.calls if call[0] == "filter"]
    assert [call for call in stub.calls if call[1] == "cpu-only"] == []
