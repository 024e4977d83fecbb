"""Node and pod health, and ownership by UID, on the in-memory cluster: each rule of docs/reliability.md ("Node and pod
health", "Ownership by UID") against the decisions it must change, with the node conditions, taints, pod statuses
and owner references written as the kubelet, the node-lifecycle controller and the API server write them."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.core.placement import PodRole
from lyra.operator.actions import CreatePod, Decision, DeletePod
from lyra.operator.commit import APPLIED, DEFERRED, Cluster, Outcome
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.node_health import HealthMemory
from lyra.operator.readers import read_world
from lyra.operator.timestamps import format_time
from lyra.operator.world import ObjectRef

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job

GRACE_S = 30.0
CONFIG = OperatorConfig(lend_delay_s=10, reclaim_deadline_s=100, gang_timeout_s=60, node_grace_s=GRACE_S)


def settle(
    cluster: FakeCluster, config: OperatorConfig = CONFIG, *, passes: int = 10, dead: frozenset[str] = frozenset()
) -> None:
    """Decide and apply until nothing changes; pods leave every node but the ``dead`` ones (no kubelet confirms)."""
    for _ in range(passes):
        decision = decide(cluster.world(), config)
        if decision.is_noop:
            return
        cluster.apply(decision)
        cluster.finish_terminations(except_on=dead)
        cluster.tick(1)
    raise AssertionError(f"no fixed point after {passes} passes")


def kill_kubelet(cluster: FakeCluster, name: str, *, since: float) -> None:
    """What the node-lifecycle controller writes when a kubelet stops reporting."""
    body = cluster.nodes[name]
    body["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "lastTransitionTime": format_time(since)}
    ]
    body["spec"].setdefault("taints", []).extend(
        [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": format_time(since)},
        ]
    )


def revive(cluster: FakeCluster, name: str) -> None:
    body = cluster.nodes[name]
    body["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": format_time(cluster.now)}]
    body["spec"]["taints"] = [t for t in body["spec"].get("taints", []) if not t["key"].startswith("node.kubernetes")]


def nodes_of(cluster: FakeCluster, job: str) -> set[str]:
    return {p["spec"]["nodeName"] for p in cluster.workers(job)}


def reason_message(cluster: FakeCluster, job: str) -> str:
    return next(c["message"] for c in cluster.job_status(job)["conditions"] if c["type"] == "Running")


def reason_of(cluster: FakeCluster, job: str) -> str:
    return next(c["reason"] for c in cluster.job_status(job)["conditions"] if c["type"] == "Running")


# -- reading health -------------------------------------------------------------------------------------------------


def test_ready_conditions_taints_and_gpu_dips_are_read_with_since_when() -> None:
    unknown = node("u", "training", A100)
    unknown["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    tainted = node("n", "training", A100)
    tainted["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    dated = node("t", "training", A100)
    dated["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}]
    dated["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
    ]
    dipped = node("d", "training", A100)
    dipped["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    dipped["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    ready = node("r", "training", A100)
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    memory = HealthMemory()
    first = read_world(
        100.0, nodes=[unknown, tainted, dated, dipped, ready], pods=[], jobs=[], services=[], memory=memory
    )
    by_name = {n.name: n for n in first.nodes}
    assert by_name["r"].healthy
    assert by_name["r"].unhealthy_since is None
    assert by_name["u"].unhealthy_since == 1767225600.0
    assert "Ready=Unknown (NodeStatusUnknown)" in by_name["u"].health
    assert by_name["n"].unhealthy_since == 100.0, "tainted with no recorded time: since first seen"
    assert by_name["t"].unhealthy_since == 1767225600.0, "a NoExecute taint is dated by its timeAdded"
    assert by_name["d"].gpus == 8, "a dip keeps the node at its capacity"
    assert by_name["d"].unhealthy_since == 100.0
    later = read_world(150.0, nodes=[dipped], pods=[], jobs=[], services=[], memory=memory)
    assert later.nodes[0].unhealthy_since == 100.0, "the dip is dated from when it was first seen"
    assert later.nodes[0].lost(150.0, 50.0)
    assert not later.nodes[0].lost(149.0, 50.0)
    dipped["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    read_world(160.0, nodes=[dipped], pods=[], jobs=[], services=[], memory=memory)
    dipped["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    again = read_world(170.0, nodes=[dipped], pods=[], jobs=[], services=[], memory=memory)
    assert again.nodes[0].unhealthy_since == 170.0, "a dip that ended is forgotten"


def test_pod_disruptions_and_stuck_containers_are_read() -> None:
    def pod(name: str, phase: str, **status: Any) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "namespace": "ml",
                "uid": name,
                "labels": {"lyra.dev/role": "base", "lyra.dev/job": "j"},
            },
            "spec": {"nodeName": "a0", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            "status": {"phase": phase, **status},
        }

    pods = [
        pod("evicted", "Failed", reason="Evicted", message="The node was low on resource: memory."),
        pod(
            "shutdown",
            "Failed",
            reason="Terminated",
            message="Pod was terminated in response to imminent node shutdown.",
        ),
        pod(
            "target",
            "Running",
            conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}],
        ),
        pod("crashed", "Failed", reason="Error"),
        pod(
            "pulling",
            "Pending",
            containerStatuses=[{"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
        ),
        pod(
            "crashloop",
            "Running",
            containerStatuses=[{"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
        ),
    ]
    read = {p.ref.name: p for p in read_world(0.0, nodes=[], pods=pods, jobs=[], services=[]).pods}
    assert read["evicted"].disruption == "Evicted"
    assert read["shutdown"].disruption == "Terminated"
    assert read["target"].disruption == "DeletionByTaintManager"
    assert read["crashed"].disruption == ""
    assert read["pulling"].stuck == "ImagePullBackOff"
    assert not read["pulling"].started
    assert read["crashloop"].stuck == ""
    assert read["crashloop"].started


# -- never planned onto an unhealthy node, with hysteresis ---------------------------------------------------------


def two_training_nodes() -> FakeCluster:
    return FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])


def test_a_node_that_stops_reporting_takes_no_new_workers_but_keeps_its_own_during_the_grace() -> None:
    cluster = two_training_nodes()
    cluster.add_job(training_job("elastic", 2, 16))
    settle(cluster)
    assert nodes_of(cluster, "elastic") == {"a0", "a1"}
    assert len(cluster.workers("elastic")) == 16
    kill_kubelet(cluster, "a1", since=cluster.now)
    cluster.tick(GRACE_S - 5)
    settle(cluster, dead=frozenset({"a1"}))
    assert len(cluster.workers("elastic")) == 16, "a blip shorter than the grace scales nothing in"
    assert cluster.job_status("elastic")["scaleIns"] == 0
    for pod in cluster.workers("elastic"):
        if pod["spec"]["nodeName"] == "a1":
            pod["status"]["phase"] = "Failed"  # make room: the allocator would refill a1 if it were plannable
            pod["status"]["reason"] = "Evicted"
    settle(cluster, dead=frozenset({"a1"}))
    assert nodes_of(cluster, "elastic") == {"a0"}, "no new worker on the node that stopped reporting"
    assert cluster.job_status("elastic")["phase"] == "Running"


def test_past_the_grace_a_lost_node_takes_its_workers_the_job_is_requeued_not_failed_and_restarts_elsewhere() -> None:
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100), node("a2", "training", A100)])
    cluster.add_job(training_job("gang", 2, 2, gpusPerWorker=8))
    cluster.add_job(training_job("filler", 1, 1, gpusPerWorker=8, duration=5000))
    settle(cluster)
    dead = next(iter(nodes_of(cluster, "gang")))
    kill_kubelet(cluster, dead, since=cluster.now)
    cluster.tick(GRACE_S + 1)
    decision = decide(cluster.world(), CONFIG)
    cluster.apply(decision)
    status = cluster.job_status("gang")
    assert status["phase"] == "Queued"
    assert status["preemptions"] == 1
    assert decision.report.preempted == {"ml/gang": "node_lost"}
    assert reason_of(cluster, "gang") == "Preempted"
    assert (
        f"node {dead} lost (Ready=Unknown (NodeStatusUnknown)" in cluster.job_status("gang")["conditions"][0]["message"]
    )


def test_a_terminating_pod_on_an_unreachable_node_does_not_hold_up_admission_elsewhere() -> None:
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])
    cluster.add_job(training_job("small", 1, 1, gpusPerWorker=8))
    settle(cluster)
    (host,) = nodes_of(cluster, "small")
    kill_kubelet(cluster, host, since=cluster.now)
    cluster.tick(GRACE_S + 1)
    settle(cluster, dead=frozenset({host}))
    assert cluster.job_status("small")["phase"] == "Running", "re-queued, then started on the other node"
    assert nodes_of(cluster, "small") == ({"a0", "a1"} - {host})
    stuck = [p for p in cluster.pods.values() if "deletionTimestamp" in p["metadata"]]
    assert [p["spec"]["nodeName"] for p in stuck] == [host], "its old worker stays terminating on the dead node"
    cluster.add_job(training_job("late", 1, 1, gpusPerWorker=4, duration=10))
    cluster.nodes["a2"] = node("a2", "training", A100)
    settle(cluster, dead=frozenset({host}))
    assert cluster.job_status("late")["phase"] == "Running", "admission goes on beside the stuck pod"


def test_an_idle_inference_server_that_stops_reporting_is_not_lent() -> None:
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4)])
    cluster.add_service(inference_service("chat", 0))
    kill_kubelet(cluster, "t1", since=cluster.now)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster, dead=frozenset({"t1"}))
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster, dead=frozenset({"t1"}))
    assert cluster.state("t0") == "loaned"
    assert cluster.state("t1") != "loaned"
    revive(cluster, "t1")
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    assert cluster.state("t1") == "loaned", "lent once it reports again"


def test_a_lost_serving_node_is_replaced_by_reclaiming_a_loaned_one() -> None:
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4), node("t2", "inference", T4)])
    cluster.add_service(inference_service("chat", 1))
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    serving = [n for n in cluster.nodes if cluster.state(n) == "serving"]
    assert len(serving) == 1
    assert sorted(cluster.state(n) for n in cluster.nodes) == ["loaned", "loaned", "serving"]
    kill_kubelet(cluster, serving[0], since=cluster.now)
    cluster.tick(GRACE_S - 5)
    settle(cluster, dead=frozenset(serving))
    assert sorted(cluster.state(n) for n in cluster.nodes) == ["loaned", "loaned", "serving"], "not during the grace"
    cluster.tick(10)
    settle(cluster, dead=frozenset(serving))
    others = [n for n in cluster.nodes if n != serving[0]]
    assert "serving" in {cluster.state(n) for n in others}, "a loaned server came back to serve in its place"


# -- cordoned nodes (kubectl cordon, drain) ---------------------------------------------------------------------------


def cordon(cluster: FakeCluster, name: str, cordoned: bool = True) -> None:
    """What ``kubectl cordon`` (``uncordon``) writes."""
    cluster.nodes[name]["spec"]["unschedulable"] = cordoned


def pending(cluster: FakeCluster) -> list[str]:
    """Pods no node was found for."""
    return sorted(p["metadata"]["name"] for p in cluster.pods.values() if not p["spec"].get("nodeName"))


def drain(cluster: FakeCluster, name: str) -> None:
    """What ``kubectl drain`` does: the node cordoned, and each pod on it evicted (the Eviction API writes the
    ``DisruptionTarget`` condition and deletes the pod with its grace)."""
    cordon(cluster, name)
    for pod in cluster.pods.values():
        if pod["spec"].get("nodeName") == name:
            evict(cluster, pod)


def evict(cluster: FakeCluster, pod: dict[str, Any]) -> None:
    """The Eviction API on one pod: the ``DisruptionTarget`` condition, and the pod deleted with its grace."""
    pod["metadata"]["deletionTimestamp"] = format_time(cluster.now)
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]


def test_a_cordoned_training_node_keeps_its_workers_and_takes_no_new_ones() -> None:
    cluster = two_training_nodes()
    cluster.add_job(training_job("elastic", 2, 16))
    settle(cluster)
    assert nodes_of(cluster, "elastic") == {"a0", "a1"}
    cordon(cluster, "a1")
    settle(cluster)
    assert len(cluster.workers("elastic")) == 16, "a cordon evicts nothing"
    assert cluster.job_status("elastic")["scaleIns"] == 0
    cordon(cluster, "a1", cordoned=False)
    settle(cluster)
    assert len(cluster.workers("elastic")) == 16


def test_a_drained_node_scales_its_jobs_in_once_and_no_worker_is_made_for_it() -> None:
    cluster = two_training_nodes()
    cluster.add_job(training_job("elastic", 2, 16))
    settle(cluster)
    assert {
        p["spec"]["nodeName"] for p in cluster.workers("elastic") if p["metadata"]["labels"]["lyra.dev/role"] == "base"
    } == {"a0"}
    drain(cluster, "a1")
    for _ in range(3):  # the evicted workers take their grace to leave: counted once, replaced by nothing
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.tick(1)
    status = cluster.job_status("elastic")
    assert status["phase"] == "Running"
    assert status["scaleIns"] == 8
    assert status["preemptions"] == 0
    assert status["workers"]["target"] == 8
    assert pending(cluster) == [], "no worker made for the drained node's GPUs"
    cluster.finish_terminations()  # their grace is over
    settle(cluster)
    assert nodes_of(cluster, "elastic") == {"a0"}
    assert pending(cluster) == []
    assert cluster.job_status("elastic")["scaleIns"] == 8
    cordon(cluster, "a1", cordoned=False)
    settle(cluster)
    assert nodes_of(cluster, "elastic") == {"a0", "a1"}, "uncordoned, it takes work again"


def test_a_drain_that_takes_a_base_worker_requeues_the_job_without_failing_it() -> None:
    cluster = two_training_nodes()
    cluster.add_job(training_job("gang", 2, 2, gpusPerWorker=8))
    settle(cluster)
    assert nodes_of(cluster, "gang") == {"a0", "a1"}
    drain(cluster, "a1")
    decision = decide(cluster.world(), CONFIG)
    assert decision.report.preempted == {"ml/gang": "disruption"}
    cluster.apply(decision)
    status = cluster.job_status("gang")
    assert status["phase"] == "Queued"
    assert "1 worker gone from node a1, which takes no new work (cordoned)" in reason_message(cluster, "gang")
    cluster.finish_terminations()
    settle(cluster)
    status = cluster.job_status("gang")
    assert status["phase"] == "Queued"
    assert status["preemptions"] == 1
    assert cluster.workers("gang") == [], "it waits, queued, with no pod that could not be placed"
    cordon(cluster, "a1", cordoned=False)
    settle(cluster)
    assert cluster.job_status("gang")["phase"] == "Running"


def test_workers_that_exit_0_on_the_sigterm_of_a_drain_are_lost_not_completed() -> None:
    """Seen on real nodes: ``kubectl drain`` evicted a job's two workers (base and flexible) on one server. A pass saw
    the base one evicted and scaled the job in; the next saw the base one ``Succeeded`` (it checkpointed on SIGTERM
    and exited 0) and the other terminating, no live worker left, and took the job for completed. Only a worker that
    finishes by itself completes its job: one that ends while being deleted, or after a disruption, is lost to it."""
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("gang", 1, 2, gpusPerWorker=4))
    settle(cluster)
    workers = {p["metadata"]["labels"]["lyra.dev/role"]: p for p in cluster.workers("gang")}
    assert sorted(workers) == ["base", "flexible"]
    cordon(cluster, "a0")
    evict(cluster, workers["base"])
    cluster.apply(decide(cluster.world(), CONFIG))
    assert cluster.job_status("gang")["scaleIns"] == 1, "the flexible worker goes on as the base"
    evict(cluster, workers["flexible"])
    workers["base"]["status"]["phase"] = "Succeeded"  # checkpointed and exited 0 inside its grace
    decision = decide(cluster.world(), CONFIG)
    assert decision.report.preempted == {"ml/gang": "disruption"}
    cluster.apply(decision)
    status = cluster.job_status("gang")
    assert (status["phase"], status["preemptions"]) == ("Queued", 1), status
    workers["flexible"]["status"]["phase"] = "Succeeded"
    cluster.finish_terminations()
    settle(cluster)
    assert cluster.job_status("gang")["phase"] == "Queued", "it waits for the cordoned server, with no pod"
    assert cluster.workers("gang") == []
    cordon(cluster, "a0", cordoned=False)
    settle(cluster)
    assert cluster.job_status("gang")["phase"] == "Running"


def test_workers_gone_from_a_cordoned_node_before_a_pass_saw_them_leave_are_not_replaced() -> None:
    # A worker that exits at once on SIGTERM is gone before a pass sees it evicted.
    cluster = two_training_nodes()
    cluster.add_job(training_job("elastic", 2, 16))
    settle(cluster)
    cordon(cluster, "a1")
    for pod in cluster.workers("elastic"):
        if pod["spec"]["nodeName"] == "a1":
            del cluster.pods[f"ml/{pod['metadata']['name']}"]
    decision = decide(cluster.world(), CONFIG)
    assert not [a for a in decision.actions if isinstance(a, CreatePod)], "no replacement for the cordoned node"
    cluster.apply(decision)
    status = cluster.job_status("elastic")
    assert status["scaleIns"] == 8
    assert status["workers"]["target"] == 8
    settle(cluster)
    assert pending(cluster) == []
    assert nodes_of(cluster, "elastic") == {"a0"}


def test_a_worker_deleted_by_hand_on_an_open_node_is_still_replaced_and_a_stale_plan_loses_nothing() -> None:
    cluster = two_training_nodes()
    cluster.add_job(training_job("elastic", 2, 16))
    settle(cluster)
    status = cluster.job_status("elastic")
    # A plan that names other nodes than where the scheduler bound the workers, as many in all: nothing is lost.
    status["placements"] = {"a0": 6, "a1": 10}
    cordon(cluster, "a1")
    cluster.apply(decide(cluster.world(), CONFIG))
    assert cluster.job_status("elastic")["scaleIns"] == 0
    cordon(cluster, "a1", cordoned=False)
    settle(cluster)
    victim = next(p for p in cluster.workers("elastic") if p["spec"]["nodeName"] == "a0")
    del cluster.pods[f"ml/{victim['metadata']['name']}"]
    settle(cluster)
    assert len(cluster.workers("elastic")) == 16, "replaced"
    assert cluster.job_status("elastic")["scaleIns"] == 0


def test_a_worker_preempted_by_the_scheduler_scales_its_job_in_once() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("elastic", 1, 2, gpusPerWorker=4))
    settle(cluster)
    pod = cluster.pods["ml/elastic-w1"]
    pod["metadata"]["deletionTimestamp"] = format_time(cluster.now)
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    for _ in range(3):  # it takes its grace to leave
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.tick(1)
    status = cluster.job_status("elastic")
    assert status["phase"] == "Running"
    assert status["scaleIns"] == 1
    assert status["workers"]["target"] == 1
    assert [p["metadata"]["name"] for p in cluster.workers("elastic")] == ["elastic-w0"], "no replacement meanwhile"


def test_a_gang_that_needs_a_cordoned_node_waits_queued_and_makes_no_pod() -> None:
    cluster = two_training_nodes()
    cordon(cluster, "a1")
    cluster.add_job(training_job("gang", 2, 2, gpusPerWorker=8))
    settle(cluster)
    assert cluster.job_status("gang")["phase"] == "Queued"
    assert cluster.workers("gang") == [], "a gang that cannot start whole makes no pod"
    cordon(cluster, "a1", cordoned=False)
    settle(cluster)
    assert cluster.job_status("gang")["phase"] == "Running"
    assert nodes_of(cluster, "gang") == {"a0", "a1"}


def test_a_cordoned_idle_inference_server_is_not_lent_and_is_no_room_for_replicas() -> None:
    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(3)])
    cluster.add_service(inference_service("chat", 1, gpus=8))
    settle(cluster)
    (serving,) = [n for n in cluster.nodes if cluster.state(n) == "serving"]
    spare, cordoned = sorted(set(cluster.nodes) - {serving})
    cordon(cluster, cordoned)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    assert cluster.state(spare) == "loaned"
    assert cluster.state(cordoned) == "idle", "a cordoned server is not lent"
    cluster.services["serve/chat"]["spec"]["replicas"] = 2
    settle(cluster)
    assert cluster.state(spare) == "serving", "the lent server is called back: the cordoned one is no room"
    assert pending(cluster) == []
    assert len([p for p in cluster.pods.values() if p["metadata"]["labels"].get("lyra.dev/service") == "chat"]) == 2


def test_a_cordoned_loaned_server_stays_lent_and_another_is_reclaimed_in_its_place() -> None:
    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(3)])
    cluster.add_service(inference_service("chat", 1, gpus=8))
    cluster.add_job(training_job("elastic", 1, 2, gpusPerWorker=8, gpuTypes=[T4]))
    settle(cluster)
    cluster.tick(CONFIG.lend_delay_s + 1)
    settle(cluster)
    loaned = sorted(n for n in cluster.nodes if cluster.state(n) == "loaned")
    assert len(loaned) == 2
    assert nodes_of(cluster, "elastic") == set(loaned)
    cordon(cluster, loaned[0])
    cluster.services["serve/chat"]["spec"]["replicas"] = 2
    settle(cluster)
    assert cluster.state(loaned[0]) == "loaned", "reclaiming a cordoned server would give inference nothing"
    assert cluster.state(loaned[1]) == "serving"
    assert nodes_of(cluster, "elastic") == {loaned[0]}, "its worker stays where it runs"
    assert pending(cluster) == []


def test_an_allocatable_dip_must_last_the_grace_before_the_node_and_its_workers_go() -> None:
    cluster = two_training_nodes()
    cluster.add_job(training_job("elastic", 2, 16))
    settle(cluster)
    memory = HealthMemory()
    cluster.memory = memory
    cluster.nodes["a1"]["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    cluster.nodes["a1"]["status"]["allocatable"] = {"nvidia.com/gpu": "0"}  # the device plugin restarts
    settle(cluster)
    cluster.tick(GRACE_S - 5)
    settle(cluster)
    assert len(cluster.workers("elastic")) == 16, "a short dip scales nothing in"
    cluster.nodes["a1"]["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    settle(cluster)
    cluster.nodes["a1"]["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    settle(cluster)
    cluster.tick(GRACE_S - 5)
    settle(cluster)
    assert len(cluster.workers("elastic")) == 16, "the dip's clock restarted when the GPUs came back"
    cluster.tick(10)
    settle(cluster)
    status = cluster.job_status("elastic")
    assert nodes_of(cluster, "elastic") == {"a0"}
    assert len(cluster.workers("elastic")) == 8
    assert status["phase"] == "Running"
    assert status["scaleIns"] == 8


def test_a_deleted_node_takes_its_workers_at_once() -> None:
    cluster = two_training_nodes()
    cluster.add_job(training_job("elastic", 2, 16))
    cluster.add_job(training_job("gang", 2, 2, gpusPerWorker=8, duration=10))
    settle(cluster)
    del cluster.nodes["a1"]
    decision = decide(cluster.world(), CONFIG)
    assert any(isinstance(a, DeletePod) for a in decision.actions)
    settle(cluster)
    assert nodes_of(cluster, "elastic") == {"a0"}
    assert cluster.job_status("elastic")["phase"] == "Running"
    assert cluster.job_status("gang")["phase"] in ("Queued", "Running")


# -- start timeout ------------------------------------------------------------------------------------------------


def test_a_job_whose_workers_never_pull_their_image_is_requeued_after_the_start_timeout() -> None:
    config = OperatorConfig(gang_timeout_s=60, start_timeout_s=120)
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("pull", 2, 4))
    cluster.apply(decide(cluster.world(), config))
    for pod in cluster.workers("pull"):
        pod["status"]["phase"] = "Pending"
        pod["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]
    cluster.tick(110)
    assert not decide(cluster.world(), config).of(DeletePod), "not before the start timeout"
    cluster.tick(20)
    decision = decide(cluster.world(), config)
    assert len(decision.of(DeletePod)) == 4
    cluster.apply(decision)
    status = cluster.job_status("pull")
    assert status["phase"] == "Queued"
    assert status["preemptions"] == 0
    assert reason_of(cluster, "pull") == "StartTimeout"
    assert "pull-w0 ImagePullBackOff" in status["conditions"][0]["message"]


def test_a_flexible_worker_that_never_starts_is_dropped_and_the_job_keeps_running() -> None:
    config = OperatorConfig(gang_timeout_s=60, start_timeout_s=120)
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("mixed", 2, 3))
    cluster.apply(decide(cluster.world(), config))
    stuck = cluster.pods["ml/mixed-w2"]
    stuck["metadata"]["creationTimestamp"] = format_time(cluster.now)
    stuck["status"]["phase"] = "Pending"
    stuck["status"]["containerStatuses"] = [
        {"name": "main", "state": {"waiting": {"reason": "CreateContainerConfigError"}}}
    ]
    cluster.tick(121)
    decision = decide(cluster.world(), config)
    assert [a.ref.name for a in decision.of(DeletePod) if isinstance(a, DeletePod)] == ["mixed-w2"]
    cluster.apply(decision)
    assert cluster.job_status("mixed")["phase"] == "Running"


# -- disruptions are preemptions ----------------------------------------------------------------------------------


def test_a_worker_evicted_by_the_kubelet_requeues_its_job_and_counts_a_preemption() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("gang", 2, 2))
    settle(cluster)
    evicted = cluster.pods["ml/gang-w0"]
    evicted["status"].update(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    decision = decide(cluster.world(), CONFIG)
    cluster.apply(decision)
    status = cluster.job_status("gang")
    assert status["phase"] == "Queued", "a disruption is no failure of the job"
    assert status["preemptions"] == 1
    assert decision.report.preempted == {"ml/gang": "disruption"}
    assert "worker gang-w0 disrupted (Evicted)" in status["conditions"][0]["message"]
    assert "ml/gang-w0" not in cluster.pods, "the evicted pod's object is removed"
    cluster.finish_terminations()
    settle(cluster)
    assert cluster.job_status("gang")["phase"] == "Running"


def test_a_disrupted_flexible_worker_scales_the_job_in() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("elastic", 1, 2, gpusPerWorker=4))
    settle(cluster)
    pod = cluster.pods["ml/elastic-w1"]
    pod["status"]["phase"] = "Failed"
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]
    cluster.apply(decide(cluster.world(), CONFIG))
    status = cluster.job_status("elastic")
    assert status["phase"] == "Running"
    assert status["preemptions"] == 0
    assert status["scaleIns"] == 1


def test_a_worker_that_fails_on_its_own_still_fails_the_job() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("gang", 2, 2))
    settle(cluster)
    cluster.pods["ml/gang-w0"]["status"].update(phase="Failed", reason="Error")
    cluster.apply(decide(cluster.world(), CONFIG))
    assert cluster.job_status("gang")["phase"] == "Failed"


# -- ownership by UID ---------------------------------------------------------------------------------------------


def recreate(cluster: FakeCluster, name: str, uid: str) -> None:
    """``kubectl delete`` then ``kubectl apply`` of a job, faster than the garbage collector."""
    body = cluster.jobs[f"ml/{name}"]
    body["metadata"]["uid"] = uid
    body.pop("status", None)


def test_a_job_recreated_under_its_name_ignores_and_deletes_the_old_runs_pods() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("again", 2, 2, gpusPerWorker=2))
    settle(cluster)
    old = {key: pod["metadata"]["uid"] for key, pod in cluster.pods.items()}
    cluster.pods["ml/again-w0"]["status"]["phase"] = "Failed"  # the old run failed
    recreate(cluster, "again", "uid-again-2")
    world = cluster.world()
    assert {p.ref.key for p in world.stale} == set(old)
    assert world.pods_of("ml/again") == ()
    decision = decide(world, CONFIG)
    deletions = [a for a in decision.of(DeletePod) if isinstance(a, DeletePod)]
    assert {(a.ref.key, a.ref.uid) for a in deletions} == set(old.items()), "deleted by UID, as read"
    cluster.apply(decision)
    assert cluster.job_status("again")["phase"] == "Queued", "the old run's failed pod does not fail the new run"
    assert list(cluster.pods) == ["ml/again-w1"], "the old run's running worker is terminating (its grace)"
    decision = decide(cluster.world(), CONFIG)
    created = [a.ref.name for a in decision.of(CreatePod) if isinstance(a, CreatePod)]
    assert created == ["again-w0", "again-w2"], "a name still held by the old run's pod is not reused"
    cluster.apply(decision)
    assert cluster.job_status("again")["phase"] == "Running"
    cluster.finish_terminations()
    settle(cluster)
    assert cluster.job_status("again")["phase"] == "Running"
    assert all(p["metadata"]["ownerReferences"][0]["uid"] == "uid-again-2" for p in cluster.workers("again"))


def test_a_deployment_of_an_earlier_service_of_the_same_name_is_not_the_services() -> None:
    cluster = FakeCluster([node("t0", "inference", T4)])
    cluster.add_service(inference_service("chat", 1))
    settle(cluster)
    assert cluster.world().services[0].deployment_replicas == 1
    cluster.services["serve/chat"]["metadata"]["uid"] = "uid-chat-2"
    assert cluster.world().services[0].deployment_replicas is None


class PodApiWithNamesake:
    """The pod calls :class:`lyra.operator.commit.Cluster` makes, answering a create with 409 because a pod of that
    name exists, owned by ``owner_uid``; deletions are recorded with their preconditions."""

    def __init__(self, owner_uid: str) -> None:
        self.owner_uid = owner_uid
        self.deleted: list[tuple[str, str | None]] = []

    def create_namespaced_pod(self, namespace: str, body: Any, **_: Any) -> Any:
        raise ApiException(status=409, reason="Conflict")

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> Any:
        owner = {"apiVersion": "lyra.dev/v1alpha1", "kind": "TrainingJob", "uid": self.owner_uid, "controller": True}
        body = {"metadata": {"name": name, "namespace": namespace, "uid": "old-pod", "ownerReferences": [owner]}}
        return SimpleNamespace(data=json.dumps(body).encode())

    def delete_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.deleted.append((f"{namespace}/{name}", (body.get("preconditions") or {}).get("uid")))


def create_worker(owner_uid: str) -> tuple[Outcome, PodApiWithNamesake]:
    cluster = Cluster(client.ApiClient())
    api = PodApiWithNamesake(owner_uid)
    cluster.core = cast(Any, api)
    job = ObjectRef("TrainingJob", "ml", "again", "uid-new")
    action = CreatePod(ObjectRef("Pod", "ml", "again-w0"), {"metadata": {"name": "again-w0"}}, job)
    return cluster.apply(Decision((action,)), 0.0), api


def test_a_409_on_creating_a_pod_whose_namesake_is_an_earlier_runs_deletes_it_and_is_not_success() -> None:
    outcome, api = create_worker("uid-old")
    assert outcome.results == (DEFERRED,)
    assert outcome.applied == 0
    assert api.deleted == [("ml/again-w0", "old-pod")], "deleted with its UID as precondition"


def test_a_409_on_creating_a_pod_that_is_already_this_runs_is_success() -> None:
    outcome, api = create_worker("uid-new")
    assert outcome.results == (APPLIED,)
    assert api.deleted == []


def test_a_worker_orphaned_by_its_jobs_deletion_is_not_the_new_runs() -> None:
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])
    cluster.add_job(training_job("again", 1, 1, gpusPerWorker=8))
    settle(cluster)
    for pod in cluster.pods.values():
        del pod["metadata"]["ownerReferences"]  # deleted with propagationPolicy Orphan: the reference is removed
    recreate(cluster, "again", "uid-again-2")
    world = cluster.world()
    assert world.stale == (), "an orphan is no worker of Lyra's (its labels are no proof): it is not deleted"
    assert world.pods_of("ml/again") == ()
    assert [p.role for p in world.pods] == [PodRole.UNMANAGED], "it holds its GPUs, as any GPU pod Lyra does not manage"
    settle(cluster)
    new = [
        p for p in cluster.workers("again") if p["metadata"].get("ownerReferences", [{}])[0].get("uid") == "uid-again-2"
    ]
    assert [p["metadata"]["name"] for p in new] == ["again-w1"], "the orphan's name is not reused"
    assert new[0]["spec"]["nodeName"] == "a1", "the orphan's GPUs are held"


def test_a_job_being_deleted_is_left_to_the_garbage_collector() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("going", 2, 2))
    settle(cluster)
    cluster.jobs["ml/going"]["metadata"]["deletionTimestamp"] = format_time(cluster.now)
    for pod in cluster.pods.values():
        del pod["metadata"]["ownerReferences"]  # propagationPolicy Orphan: the references go before the job
    cluster.pods.pop("ml/going-w1")
    world = cluster.world()
    assert world.stale == (), "its pods are no earlier run's"
    assert decide(world, CONFIG).is_noop, "no worker deleted, none created, no status written"
