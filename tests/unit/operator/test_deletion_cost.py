"""Which replicas a scale-down deletes: the operator writes ``controller.kubernetes.io/pod-deletion-cost`` on each
inference replica (:func:`lyra.operator.services.replica_deletion_costs`), so that the ReplicaSet controller empties
the servers holding the fewest of the service's replicas first, and among equals the one Lyra lends first."""

from __future__ import annotations

from typing import Any

import pytest

from lyra.kubewatch.kinds import PODS
from lyra.operator.actions import ApplyDeployment, SetDeletionCost
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.services import replica_deletion_costs

from .fake_cluster import A100, T4, FakeCluster, inference_service, node

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=60)
COST = "controller.kubernetes.io/pod-deletion-cost"


@pytest.mark.parametrize(
    ("replicas_on", "lend_rank", "costs"),
    [
        # count x 4 servers + rank: the fewest replicas first, then the server lent first
        ({"t0": 3, "t1": 1, "t2": 1}, {"t0": 0, "t1": 1, "t2": 2, "t3": 3}, {"t0": 12, "t1": 5, "t2": 6}),
        # as many replicas everywhere: the lend order alone
        ({"t3": 2, "t0": 2}, {"t0": 0, "t1": 1, "t2": 2, "t3": 3}, {"t0": 8, "t3": 11}),
        # a server outside the lend order (not an inference server) ranks after every one, by name
        ({"x": 1, "w": 1, "t0": 1}, {"t0": 0}, {"t0": 3, "w": 4, "x": 5}),
        ({}, {"t0": 0}, {}),
    ],
)
def test_the_rule_orders_servers_by_their_replicas_then_by_the_lend_order(
    replicas_on: dict[str, int], lend_rank: dict[str, int], costs: dict[str, int]
) -> None:
    assert replica_deletion_costs(replicas_on, lend_rank) == costs


def test_fewer_replicas_always_cost_less_whatever_the_rank_and_no_two_servers_cost_the_same() -> None:
    ranks = {f"n{i}": i for i in range(6)}
    for counts in [(1, 2, 3, 4, 5, 6), (6, 5, 4, 3, 2, 1), (2, 2, 1, 1, 8, 8)]:
        costs = replica_deletion_costs(dict(zip(ranks, counts, strict=True)), ranks)
        assert len(set(costs.values())) == len(costs)
        by_cost = sorted(costs, key=costs.__getitem__)
        assert by_cost == sorted(ranks, key=lambda n: (counts[ranks[n]], ranks[n]))


def spread_cluster() -> FakeCluster:
    """Five 1-GPU replicas of ``chat`` on four T4 servers: r0 on t1, r1 on t2, r2-r4 on t0 (the spread a
    ReplicaSet leaves), so the replicas the fake would delete by name (the highest) are the ones on t0."""
    cluster = FakeCluster([node("a0", "training", A100)] + [node(f"t{i}", "inference", T4) for i in range(4)])
    cluster.add_service(inference_service("chat", 5))
    cluster.apply(decide(cluster.world(), CONFIG))
    where = {"chat-r0": "t1", "chat-r1": "t2", "chat-r2": "t0", "chat-r3": "t0", "chat-r4": "t0"}
    for name, server in where.items():
        pod = cluster.pods[f"serve/{name}"]
        pod["spec"]["nodeName"] = server
        pod["status"]["phase"] = "Running"
        pod["metadata"].pop("annotations", None)
    return cluster


def costs_written(actions: tuple[Any, ...]) -> dict[str, int]:
    return {a.ref.name: a.cost for a in actions if isinstance(a, SetDeletionCost)}


def test_each_bound_replica_gets_its_servers_cost_once_and_a_scale_down_frees_whole_servers() -> None:
    cluster = spread_cluster()
    decision = decide(cluster.world(), CONFIG)
    assert costs_written(decision.actions) == {
        "chat-r0": 5,  # 1 replica on t1 (rank 1): 1 x 4 + 1
        "chat-r1": 6,  # 1 replica on t2 (rank 2)
        "chat-r2": 12,  # 3 replicas on t0 (rank 0): 3 x 4 + 0
        "chat-r3": 12,
        "chat-r4": 12,
    }
    assert all(a.owner is not None and a.owner.name == "chat" for a in decision.of(SetDeletionCost))
    cluster.apply(decision)
    assert {p.ref.name: p.deletion_cost for p in cluster.world().pods} == {
        "chat-r0": "5", "chat-r1": "6", "chat-r2": "12", "chat-r3": "12", "chat-r4": "12"
    }  # fmt: skip
    assert not decide(cluster.world(), CONFIG).of(SetDeletionCost), "a cost the pod carries is not written again"

    cluster.services["serve/chat"]["spec"]["replicas"] = 3
    scale_down = decide(cluster.world(), CONFIG)
    assert [a.manifest["spec"]["replicas"] for a in scale_down.of(ApplyDeployment)] == [3]
    cluster.apply(scale_down)
    left = {p["spec"]["nodeName"] for p in cluster.pods.values() if p["metadata"]["name"].startswith("chat-")}
    assert left == {"t0"}, "the servers holding one replica each are emptied, the one holding three keeps them"


def test_a_replicas_cost_follows_its_server_and_unbound_or_terminating_replicas_get_none() -> None:
    cluster = spread_cluster()
    cluster.apply(decide(cluster.world(), CONFIG))
    cluster.pods["serve/chat-r0"]["spec"]["nodeName"] = "t2"  # t2 now holds two, t1 none
    cluster.pods["serve/chat-r2"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    unbound = cluster.pods["serve/chat-r3"]
    unbound["spec"].pop("nodeName")
    unbound["status"]["phase"] = "Pending"
    decision = decide(cluster.world(), CONFIG)
    # t2: 2 x 4 + 2 = 10 for both of its replicas; t0 keeps r4 alone (1 x 4 + 0) once r2 is leaving
    assert costs_written(decision.actions) == {"chat-r0": 10, "chat-r1": 10, "chat-r4": 4}


def test_the_watch_cache_keeps_the_deletion_cost_among_foreign_annotations() -> None:
    pod = {
        "metadata": {
            "name": "chat-r0",
            "namespace": "serve",
            "uid": "u",
            "labels": {"lyra.dev/role": "inference", "lyra.dev/service": "chat"},
            "annotations": {COST: "12", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {"containers": [{"name": "s", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    assert PODS.slim(pod)["metadata"]["annotations"] == {COST: "12"}


@pytest.mark.parametrize("edited", ["-2147483648", "0", "5 ", "not a number", ""])
def test_a_cost_a_tenant_edited_on_a_replica_is_written_back(edited: str) -> None:
    cluster = spread_cluster()
    cluster.apply(decide(cluster.world(), CONFIG))
    cluster.pods["serve/chat-r0"]["metadata"]["annotations"][COST] = edited
    decision = decide(cluster.world(), CONFIG)
    assert costs_written(decision.actions) == {"chat-r0": 5}
    cluster.apply(decision)
    assert not decide(cluster.world(), CONFIG).actions
