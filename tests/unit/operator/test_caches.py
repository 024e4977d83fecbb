"""The operator reads its watch caches, never lists in a pass, and reads only once the caches have seen its own
last writes (reopening the watch, never listing, when it does not bring them in time)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from lyra.core.model import Pool
from lyra.localcluster.waiting import wait_for
from lyra.operator.caches import KINDS, ClusterCaches, StaleCacheError
from lyra.operator.commit import Cluster
from tests.unit.kubewatch.fake_server import FakeServer
from tests.unit.kubewatch.test_kinds import kubelet_node, kubelet_pod

NOW = 1_800_000_000.0
TIMEOUT_S = 10.0


@pytest.fixture
def servers() -> dict[str, FakeServer]:
    made = {name: FakeServer() for name in KINDS}
    made["nodes"].put(kubelet_node("t4-0", "inference", "idle"))
    made["pods"].put(kubelet_pod("gpu-pod", {}, 1))
    made["pods"].put(kubelet_pod("web", {}, 0))
    return made


@pytest.fixture
def caches(servers: dict[str, FakeServer]) -> Iterator[ClusterCaches]:
    made = ClusterCaches(dict(servers), catch_up_s=0.2)
    made.start()
    assert made.wait_synced(TIMEOUT_S)
    yield made
    made.stop()


def test_a_pass_reads_the_caches_and_lists_nothing(servers: dict[str, FakeServer], caches: ClusterCaches) -> None:
    pages = {name: server.pages for name, server in servers.items()}
    world = Cluster(client.ApiClient(), caches=caches).observe(NOW)
    assert [n.name for n in world.nodes] == ["t4-0"]
    assert [p.ref.name for p in world.pods] == ["gpu-pod"]
    assert {name: server.pages for name, server in servers.items()} == pages


def test_a_pass_waits_for_its_own_write_to_come_back(servers: dict[str, FakeServer], caches: ClusterCaches) -> None:
    version = servers["pods"].put(kubelet_pod("new-worker", {"lyra.dev/role": "base"}, 1))
    caches.wrote("Pod", version)
    world = Cluster(client.ApiClient(), caches=caches).observe(NOW)
    assert "new-worker" in [p.ref.name for p in world.pods]
    assert caches.caches["pods"].lists == 1  # the watch brought it: no list


def test_a_cache_whose_watch_does_not_bring_the_write_reopens_it_and_lists_nothing(
    servers: dict[str, FakeServer], caches: ClusterCaches
) -> None:
    servers["nodes"].stall_streams()  # the nodes watch hangs
    version = servers["nodes"].put(kubelet_node("t4-1", "inference", "serving"))
    caches.wrote("Node", version)
    world = Cluster(client.ApiClient(), caches=caches).observe(NOW)  # a new watch brings it
    assert [n.name for n in world.nodes] == ["t4-0", "t4-1"]
    assert caches.caches["nodes"].lists == 1
    assert len(servers["nodes"].watches) == 2


def test_a_pass_refuses_to_read_a_cache_that_never_reaches_its_write(
    servers: dict[str, FakeServer], caches: ClusterCaches
) -> None:
    servers["jobs"].refusing = 500  # the watch is down, lists would work: the cache does not list
    caches.wrote("TrainingJob", "1000")
    with pytest.raises(StaleCacheError, match=r"trainingjobs cache .* even after reopening its watch"):
        caches.catch_up()
    assert caches.caches["jobs"].lists == 1


def test_the_caches_say_each_objects_key_and_version(servers: dict[str, FakeServer], caches: ClusterCaches) -> None:
    version = servers["pods"].put(kubelet_pod("new-worker", {"lyra.dev/role": "base"}, 1))
    assert caches.caches["pods"].wait_for(version, TIMEOUT_S)
    held = caches.versions()
    assert set(held) == set(KINDS)
    assert held["nodes"] == {"t4-0": servers["nodes"].objects["t4-0"]["metadata"]["resourceVersion"]}
    assert sorted(held["pods"]) == sorted(k for k in servers["pods"].objects if "web" not in k)  # not a GPU pod
    assert held["pods"][next(k for k in held["pods"] if k.endswith("new-worker"))] == version


def test_writes_no_cache_receives_are_not_waited_for(caches: ClusterCaches) -> None:
    caches.wrote("Event", "1000")
    caches.wrote("Service", "1000")
    caches.catch_up()


def test_a_standby_knows_the_gpu_types_of_its_cached_nodes(servers: dict[str, FakeServer]) -> None:
    servers["nodes"].put(kubelet_node("t4-training-0", "training", None))
    outside = kubelet_node("cpu-0", "inference", None)
    del outside["metadata"]["labels"]["lyra.dev/pool"]
    servers["nodes"].put(outside)
    made = ClusterCaches(dict(servers), catch_up_s=0.2)
    made.start()
    try:
        assert made.wait_synced(TIMEOUT_S)
        assert made.node_kinds() == {("Tesla-T4", Pool.INFERENCE), ("Tesla-T4", Pool.TRAINING)}
    finally:
        made.stop()


class IdleConnection:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_reconnecting_reopens_every_watch_from_where_it_was_and_closes_the_idle_write_connections(
    servers: dict[str, FakeServer], caches: ClusterCaches
) -> None:
    """What a leader does when it leads again after losing the Lease (a partition may have left its connections
    open and silent): every stalled watch brings what changed meanwhile, nothing is listed, and the next write opens
    a new connection."""
    for server in servers.values():
        server.stall_streams()
    version = servers["nodes"].put(kubelet_node("t4-1", "inference", "serving"))
    cluster = Cluster(client.ApiClient(), caches=caches)
    idle = IdleConnection()
    cluster.writes.connections.give_back(idle)  # type: ignore[arg-type]
    cluster.reconnect()
    assert caches.caches["nodes"].wait_for(version, TIMEOUT_S)
    assert idle.closed
    wait_for(lambda: all(len(server.watches) == 2 for server in servers.values()), TIMEOUT_S, "every watch reopened")
    assert {name: len(server.watches) for name, server in servers.items()} == dict.fromkeys(servers, 2)
    assert {name: cache.lists for name, cache in caches.caches.items()} == dict.fromkeys(servers, 1)
