"""Request bodies captured from the real kube-scheduler (v1.34, nodeCacheCapable), answered by the extender.

The fixtures in ``fixtures/`` were written by ``bash hack/capture-extender-fixtures.sh``: the local cluster's
default profile (4 A100 training nodes, 8 T4 inference nodes, inference-t4-6 and -7 loaned), an inference replica, a
base worker, two flexible workers filling the loaned nodes, then a high-priority flexible worker whose scheduling
made kube-scheduler call ``preempt``. ``nodes.json`` and ``pods.json`` are the cluster at the end of the capture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lyra.api.objects import Node, Pod
from lyra.extender.app import FixedView, create_app
from lyra.extender.view import build_view
from lyra.extender.wire import ExtenderPreemptionArgs

FIXTURES = Path(__file__).parent / "fixtures"
LOANED = {"inference-t4-6", "inference-t4-7"}


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def bodies(verb: str) -> list[str]:
    return sorted(path.name for path in FIXTURES.glob(f"{verb}-*.json"))


NODES = [Node.model_validate(item) for item in load("nodes.json")["items"]]
PODS = [Pod.model_validate(item) for item in load("pods.json")["items"]]


@pytest.fixture
def api() -> TestClient:
    return TestClient(create_app(FixedView(build_view(NODES, PODS))))


def test_the_capture_covers_every_verb() -> None:
    assert len(bodies("prioritize")) >= 1
    assert len(bodies("preempt")) >= 1


@pytest.mark.parametrize("name", bodies("prioritize"))
def test_captured_prioritize_bodies_get_a_score_per_node(api: TestClient, name: str) -> None:
    body = load(name)
    answer = api.post("/prioritize", json=body)
    assert answer.status_code == 200
    hosts = [host["Host"] for host in answer.json()]
    assert hosts == [name for name in body["NodeNames"] if name in hosts]  # request order, zeros left out
    assert all(1 <= host["Score"] <= 10 for host in answer.json())


def victims_view(role: str, body: dict[str, Any]) -> TestClient:
    """The cluster as it was when ``preempt`` was called: the proposed victims running with ``role``."""
    labels = {"lyra.dev/role": role} | ({"lyra.dev/job": "bert"} if role != "inference" else {})
    victims = [
        Pod.model_validate(
            {
                "metadata": {"name": f"victim-{index}", "namespace": "default", "uid": victim["UID"], "labels": labels},
                "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
                "status": {"phase": "Running"},
            }
        )
        for index, (node, meta) in enumerate(body["NodeNameToMetaVictims"].items())
        for victim in meta["Pods"]
    ]
    return TestClient(create_app(FixedView(build_view(NODES, victims))))


@pytest.mark.parametrize("name", bodies("preempt"))
def test_captured_preempt_bodies_let_flexible_workers_go_and_keep_inference(name: str) -> None:
    body = load(name)
    args = ExtenderPreemptionArgs.model_validate(body)
    assert args.NodeNameToMetaVictims
    proposed = set(args.NodeNameToMetaVictims)
    kept = victims_view("flexible", body).post("/preempt", json=body).json()["NodeNameToMetaVictims"]
    assert set(kept) == proposed & LOANED
    vetoed = victims_view("inference", body).post("/preempt", json=body).json()["NodeNameToMetaVictims"]
    assert vetoed == {}
