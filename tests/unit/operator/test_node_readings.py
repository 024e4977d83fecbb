"""Malformed node readings and a replica on a loaned server, on the in-memory cluster (docs/reliability.md, "Node and
pod health"; docs/security.md, "Tested").

A node whose GPU count reads 0 allocatable and 0 capacity (a kubelet reset), ``8Gi`` or ``1k``, or whose GPU product
label is empty, is held as unhealthy: its workers are kept within the node grace, it is neither lent nor planned on,
it is reported, and it counts again once it reads well; past the grace it is lost like a NotReady node. Each case
runs twice: with the running operator's memory of the node's last good reading (the node stays in every plan with
it, unhealthy), and as an operator started while the node reads badly (nothing says what the node holds: it is in no
plan, and the jobs with workers there are left as they are).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from lyra.check.invariants import check
from lyra.operator.actions import DeletePod, Emit, SetNodeState
from lyra.operator.commit import Cluster
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.node_health import HealthMemory
from lyra.operator.readers import read_world

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job

GRACE_S = 30.0
CONFIG = OperatorConfig(lend_delay_s=10, reclaim_deadline_s=100, gang_timeout_s=60, node_grace_s=GRACE_S)

#: Each malformed reading, and the words the node's health (and its Event) gives for it.
READINGS = {
    "zeroed": "reads nvidia.com/gpu allocatable '0' and capacity '0': no whole number of GPUs",
    "8Gi": "reads nvidia.com/gpu allocatable '8Gi' and capacity '8Gi': no whole number of GPUs",
    "1k": "reads nvidia.com/gpu allocatable '1k' and capacity '1k': no whole number of GPUs",
    "no product": "has an empty nvidia.com/gpu.product label",
}


def misread(body: dict[str, Any], case: str) -> None:
    """What the kubelet or GPU feature discovery writes in each case."""
    if case == "no product":
        body["metadata"]["labels"]["nvidia.com/gpu.product"] = ""
        return
    value = "0" if case == "zeroed" else case
    body["status"]["allocatable"] = {"nvidia.com/gpu": value}
    body["status"]["capacity"] = {"nvidia.com/gpu": value}


def read_well(body: dict[str, Any], product: str, gpus: int = 8) -> None:
    body["metadata"]["labels"]["nvidia.com/gpu.product"] = product
    body["status"]["allocatable"] = {"nvidia.com/gpu": str(gpus)}
    body["status"]["capacity"] = {"nvidia.com/gpu": str(gpus)}


def settle(cluster: FakeCluster) -> None:
    cluster.settle(CONFIG)


def deletions(cluster: FakeCluster) -> list[str]:
    return [a.ref.key for a in decide(cluster.world(), CONFIG).actions if isinstance(a, DeletePod)]


def nodes_of(cluster: FakeCluster, job: str) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in cluster.workers(job))


def clean(cluster: FakeCluster) -> list[str]:
    """``lyra check``'s violations over the in-memory cluster (none expected)."""
    pods = [p for p in cluster.pods.values() if "lyra.dev/role" in p["metadata"]["labels"]]
    report = check(nodes=cluster.nodes.values(), pods=pods, jobs=cluster.jobs.values(), now=cluster.now)
    return [f"{v.invariant.value}: {v.name}: {v.message}" for v in report.violations]


# -- reading ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", READINGS)
def test_a_malformed_reading_is_held_with_the_last_good_one_and_dated_from_when_it_was_first_seen(case: str) -> None:
    body = node("a1", "training", A100)
    memory = HealthMemory()
    first = read_world(100.0, nodes=[body], pods=[], jobs=[], services=[], memory=memory)
    assert first.nodes[0].healthy
    misread(body, case)
    bad = read_world(110.0, nodes=[body], pods=[], jobs=[], services=[], memory=memory)
    [held] = bad.nodes
    assert (held.gpu_type, held.gpus) == (A100, 8), "the last good reading"
    assert held.unhealthy_since == 110.0
    assert READINGS[case] in held.health
    assert [(m.ref.name, m.held, m.since) for m in bad.misread] == [("a1", True, 110.0)]
    later = read_world(150.0, nodes=[body], pods=[], jobs=[], services=[], memory=memory)
    assert later.nodes[0].unhealthy_since == 110.0
    assert later.nodes[0].lost(150.0, 40.0)
    read_well(body, A100)
    well = read_world(160.0, nodes=[body], pods=[], jobs=[], services=[], memory=memory)
    assert well.nodes[0].healthy
    assert well.misread == ()


def test_a_node_never_read_well_is_held_only_while_gpu_pods_run_on_it() -> None:
    zeroed = node("z", "training", A100)
    misread(zeroed, "zeroed")
    unlabelled = node("u", "training", A100)
    misread(unlabelled, "no product")
    empty = read_world(100.0, nodes=[zeroed, unlabelled], pods=[], jobs=[], services=[])
    assert empty.nodes == ()
    assert empty.misread == (), "no pods: a node whose device plugin or feature discovery has not reported yet"
    assert [(u.ref.name, u.reason) for u in empty.unreadable] == [
        ("u", "has an empty nvidia.com/gpu.product label (GPU feature discovery sets it)")
    ]
    pods = [
        {
            "metadata": {"name": f"gpu-{host}", "namespace": "other", "uid": host},
            "spec": {
                "nodeName": host,
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            },
            "status": {"phase": "Running"},
        }
        for host in ("z", "u")
    ]
    occupied = read_world(100.0, nodes=[zeroed, unlabelled], pods=pods, jobs=[], services=[])
    assert occupied.nodes == ()
    assert [(m.ref.name, m.held) for m in occupied.misread] == [("u", False), ("z", False)]
    assert occupied.unreadable == ()


# -- deciding ---------------------------------------------------------------------------------------------------


def running_on_two_nodes(*, remembered: bool) -> FakeCluster:
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])
    if remembered:
        cluster.memory = HealthMemory()
    cluster.add_job(training_job("elastic", 2, 16))
    settle(cluster)
    assert nodes_of(cluster, "elastic") == ["a0"] * 8 + ["a1"] * 8
    return cluster


@pytest.mark.parametrize("remembered", [True, False], ids=["last-reading", "restarted"])
@pytest.mark.parametrize("case", READINGS)
def test_a_misread_node_keeps_its_workers_within_the_grace_and_counts_again_once_it_reads_well(
    case: str, remembered: bool
) -> None:
    cluster = running_on_two_nodes(remembered=remembered)
    misread(cluster.nodes["a1"], case)
    if not remembered:
        cluster.memory = HealthMemory()  # an operator started now: it never read a1 well
    assert deletions(cluster) == [], "nothing deleted in the pass that first sees the reading"
    cluster.tick(GRACE_S - 5)
    settle(cluster)
    assert nodes_of(cluster, "elastic") == ["a0"] * 8 + ["a1"] * 8, "within the grace its workers stay"
    status = cluster.job_status("elastic")
    assert (status["phase"], status["scaleIns"], status["preemptions"]) == ("Running", 0, 0)
    read_well(cluster.nodes["a1"], A100)
    settle(cluster)
    world = cluster.world()
    assert all(n.healthy for n in world.nodes)
    assert world.misread == ()
    assert len(cluster.workers("elastic")) == 16
    assert clean(cluster) == []


@pytest.mark.parametrize("remembered", [True, False], ids=["last-reading", "restarted"])
@pytest.mark.parametrize("case", READINGS)
def test_past_the_grace_a_misread_node_is_lost_and_its_workers_go(case: str, remembered: bool) -> None:
    cluster = running_on_two_nodes(remembered=remembered)
    misread(cluster.nodes["a1"], case)
    if not remembered:
        cluster.memory = HealthMemory()
    settle(cluster)
    cluster.tick(GRACE_S + 1)
    decision = decide(cluster.world(), CONFIG)
    lost = [a for a in decision.actions if isinstance(a, DeletePod)]
    assert len(lost) == 8
    messages = [a.message for a in decision.actions if isinstance(a, Emit) and a.reason == "ScaledIn"]
    assert any("node a1 lost (" in m and READINGS[case] in m for m in messages), messages
    cluster.apply(decision)
    cluster.finish_terminations()
    settle(cluster)
    assert nodes_of(cluster, "elastic") == ["a0"] * 8
    assert cluster.job_status("elastic")["phase"] == "Running"


@pytest.mark.parametrize("case", READINGS)
def test_a_misread_node_takes_no_new_work_until_it_reads_well(case: str) -> None:
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])
    cluster.memory = HealthMemory()
    settle(cluster)
    misread(cluster.nodes["a1"], case)
    cluster.add_job(training_job("pair", 2, 2, gpusPerWorker=8))
    settle(cluster)
    assert cluster.job_status("pair")["phase"] == "Queued", "a1's GPUs are not counted as free"
    assert cluster.workers("pair") == []
    read_well(cluster.nodes["a1"], A100)
    settle(cluster)
    assert nodes_of(cluster, "pair") == ["a0", "a1"]


@pytest.mark.parametrize("case", READINGS)
def test_a_misread_idle_inference_server_is_not_lent_and_a_loaned_one_keeps_its_workers(case: str) -> None:
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4), node("t2", "inference", T4)])
    cluster.memory = HealthMemory()
    cluster.add_service(inference_service("chat", 1))
    cluster.add_job(training_job("elastic", 1, 8, gpuTypes=[T4]))
    settle(cluster)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    states = {n: cluster.state(n) for n in cluster.nodes}
    assert sorted(states.values()) == ["loaned", "loaned", "serving"]
    serving = next(n for n, s in states.items() if s == "serving")
    loaned = sorted(n for n, s in states.items() if s == "loaned")
    on_loaned = nodes_of(cluster, "elastic")
    assert set(on_loaned) <= set(loaned)
    # one loaned server reads badly: kept loaned, with its workers, within the grace; its state is not rewritten
    broken = on_loaned[0]
    misread(cluster.nodes[broken], case)
    decision = decide(cluster.world(), CONFIG)
    assert not [a for a in decision.actions if isinstance(a, SetNodeState) and a.node == broken]
    assert not [a for a in decision.actions if isinstance(a, DeletePod)]
    cluster.tick(GRACE_S - 5)
    settle(cluster)
    assert cluster.state(broken) == "loaned"
    assert nodes_of(cluster, "elastic") == on_loaned
    read_well(cluster.nodes[broken], T4)
    settle(cluster)
    # the job is scaled in by hand (its workers leave) and the server idles: a misread idle server is never lent
    assert cluster.state(serving) == "serving"
    cluster.services["serve/chat"]["spec"]["replicas"] = 0
    cluster.jobs["ml/elastic"]["spec"]["maxWorkers"] = 1
    spare = node("t3", "inference", T4)
    cluster.nodes["t3"] = spare
    settle(cluster)
    misread(cluster.nodes["t3"], case)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    assert cluster.state("t3") != "loaned", "not lent while it reads badly"
    read_well(cluster.nodes["t3"], T4)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    assert cluster.state("t3") == "loaned", "lent once it reads well"


class RecordingCluster(Cluster):
    def __init__(self) -> None:
        super().__init__(client.ApiClient())
        self.events: list[Emit] = []

    def _event(self, action: Emit, now: float) -> None:
        self.events.append(action)


def test_a_misread_node_is_reported_by_an_event_at_most_every_ten_minutes_and_a_log_line_each_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.memory = HealthMemory()
    cluster.world()
    misread(cluster.nodes["a0"], "8Gi")
    committer = RecordingCluster()
    for _ in range(3):
        committer.report_left_out(cluster.world(), cluster.now)
        cluster.tick(20)
    assert [(e.reason, e.type, e.ref.name) for e in committer.events] == [("Misread", "Warning", "a0")]
    assert READINGS["8Gi"] in committer.events[0].message
    assert "held as unhealthy since" in committer.events[0].message
    assert caplog.text.count("node a0 reads nvidia.com/gpu allocatable '8Gi'") == 3


# -- a replica on a server in the moment it was lent ---------------------------------------------------------------


def test_a_replica_bound_to_a_server_as_it_was_lent_calls_the_server_back_to_serving() -> None:
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4), node("t2", "inference", T4)])
    cluster.add_service(inference_service("chat", 1))
    cluster.add_job(training_job("elastic", 1, 16, gpuTypes=[T4]))
    settle(cluster)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    loaned = sorted(n for n in cluster.nodes if cluster.state(n) == "loaned")
    assert len(loaned) == 2
    assert set(nodes_of(cluster, "elastic")) == set(loaned)
    # the scheduler binds a second replica (the Deployment's, scaled a moment before) to a server just lent
    [replica] = [p for p in cluster.pods.values() if p["metadata"]["labels"].get("lyra.dev/service") == "chat"]
    racer = copy.deepcopy(replica)
    racer["metadata"].update(name="chat-r1", uid="replica-chat-r1")
    racer["spec"]["nodeName"] = loaned[0]
    cluster.pods["serve/chat-r1"] = racer
    cluster.made_from["serve/chat-r1"] = copy.deepcopy(cluster.made_from["serve/chat-r0"])
    cluster.services["serve/chat"]["spec"]["replicas"] = 2
    assert clean(cluster) == [f"inference-placement: chat-r1: inference replica on inference node {loaned[0]}, "
                              "which is loaned"]  # fmt: skip
    decision = decide(cluster.world(), CONFIG)
    called_back = [a for a in decision.actions if isinstance(a, SetNodeState) and a.node == loaned[0]]
    assert [a.state.value for a in called_back] == ["reclaiming"]
    assert "runs inference replicas" in called_back[0].reason
    cluster.apply(decision)
    cluster.finish_terminations()
    settle(cluster)
    assert cluster.state(loaned[0]) == "serving"
    assert loaned[0] not in nodes_of(cluster, "elastic"), "its training work has left"
    assert cluster.pods["serve/chat-r1"]["spec"]["nodeName"] == loaned[0]
    assert cluster.state(loaned[1]) == "loaned", "the other loan stands"
    assert cluster.job_status("elastic")["phase"] == "Running"
    assert clean(cluster) == []
