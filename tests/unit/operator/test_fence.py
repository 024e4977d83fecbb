"""The commit step asks the leader's fence before every write: once it says no, the pass stops before the write
(LeadershipLostError), whatever the remaining actions."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from lyra.core.model import LoanState
from lyra.operator.actions import CreatePod, Decision, Emit, SetNodeState
from lyra.operator.commit import Cluster
from lyra.operator.leader import LeadershipLostError
from lyra.operator.world import ObjectRef


class Recorder:
    """Stands in for a Kubernetes API group: records each call's method name and answers nothing."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def __getattr__(self, method: str) -> Any:
        return lambda *args, **kwargs: self.calls.append(method)


DECISION = Decision(
    (
        SetNodeState("t0", LoanState.RECLAIMING, (), {}, "1", "reclaimed"),
        CreatePod(ObjectRef("Pod", "ns", "j-w0"), {"metadata": {"name": "j-w0"}}),
        Emit(ObjectRef("Node", "", "t0"), "Normal", "Reclaiming", "reclaimed"),
    )
)


def cluster_with(fence_answers: list[bool]) -> tuple[Cluster, list[str]]:
    calls: list[str] = []
    cluster = Cluster(client.ApiClient())
    cluster.core = Recorder(calls)  # type: ignore[assignment]
    cluster.fence = lambda: fence_answers.pop(0)
    return cluster, calls


def test_a_closed_fence_stops_the_pass_before_its_first_write() -> None:
    cluster, calls = cluster_with([False])
    with pytest.raises(LeadershipLostError, match="setting node t0 reclaiming"):
        cluster.apply(DECISION, 0.0)
    assert calls == []


def test_a_fence_that_closes_mid_pass_stops_before_the_next_write_events_included() -> None:
    cluster, calls = cluster_with([True, True, False])
    with pytest.raises(LeadershipLostError, match="posting Event Reclaiming"):
        cluster.apply(DECISION, 0.0)
    assert calls == ["patch_node", "create_namespaced_pod"]


def test_without_a_fence_every_action_is_written() -> None:
    calls: list[str] = []
    cluster = Cluster(client.ApiClient())
    cluster.core = Recorder(calls)  # type: ignore[assignment]
    assert cluster.apply(DECISION, 0.0).applied == 3
    assert calls == ["patch_node", "create_namespaced_pod", "create_namespaced_event"]


class Pool:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> str:
        self.sent.append(method)
        return "answer"


def test_the_connection_pool_sends_reads_always_and_writes_only_through_an_open_fence() -> None:
    cluster = Cluster(client.ApiClient())
    pool = Pool()
    cluster.api.rest_client.pool_manager = pool
    open_ = [True]
    cluster.fence = lambda: open_[0]
    fenced = cluster.api.rest_client.pool_manager
    assert fenced.request("PATCH", "/api/v1/nodes/t0") == "answer"
    open_[0] = False
    assert fenced.request("GET", "/api/v1/nodes") == "answer"
    with pytest.raises(LeadershipLostError, match="DELETE /api/v1/namespaces/ns/pods/p not sent"):
        fenced.request("DELETE", "/api/v1/namespaces/ns/pods/p")
    assert pool.sent == ["PATCH", "GET"]
    cluster.fence = None  # installed once: a new fence replaces the old one, no pool is wrapped twice
    assert cluster.api.rest_client.pool_manager.pool is pool
