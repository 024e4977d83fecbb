"""kube-scheduler preempting a worker for a pod of a higher priority Lyra does not manage (another team's GPU pod).

kube-scheduler deletes the victim (its ``DisruptionTarget`` condition says ``PreemptionByScheduler``) and names the
node in the preemptor's ``status.nominatedNodeName``; the preemptor binds there once the victim is gone, and until then
no pod of a lower priority is placed on the GPUs it waits for. The job is scaled in (it keeps its base), and no worker
is made for those GPUs, whether the operator sees the victim still running its grace, already exited (``Failed`` on
exit 143, ``Succeeded`` when the worker exits 0 on the SIGTERM) or only once it is gone. The GPUs are the job's again
when the preemptor leaves.
"""

from __future__ import annotations

from typing import Any

import pytest

from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.timestamps import format_time

from .fake_cluster import A100, FakeCluster, node, training_job

CONFIG = OperatorConfig(lend_delay_s=10, reclaim_deadline_s=100, gang_timeout_s=60)
PREEMPTOR = "other/urgent"


def settle(cluster: FakeCluster) -> None:
    cluster.settle(CONFIG)


def urgent_pod(nominated: str, gpus: int) -> dict[str, Any]:
    """A pending GPU pod of another team, of a higher priority, that kube-scheduler has nominated to ``nominated``."""
    return {
        "metadata": {"name": "urgent", "namespace": "other", "uid": "uid-urgent", "labels": {"app": "theirs"}},
        "spec": {
            "priority": 1_000_000,
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
        "status": {"phase": "Pending", "nominatedNodeName": nominated},
    }


def preempt(cluster: FakeCluster, victim: dict[str, Any], ended: str) -> None:
    """kube-scheduler's preemption of ``victim``: the condition, the deletion with its grace, and the preemptor
    nominated to its node; ``ended``: what the victim's container has done meanwhile (still running its grace, exited
    143, exited 0)."""
    victim["metadata"]["deletionTimestamp"] = format_time(cluster.now)
    victim["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    victim["status"]["phase"] = ended
    cluster.pods[PREEMPTOR] = urgent_pod(victim["spec"]["nodeName"], 4)


def bind_preemptor(cluster: FakeCluster) -> None:
    """What kube-scheduler does once the victim is gone: the preemptor bound to its nominated node."""
    pod = cluster.pods[PREEMPTOR]
    pod["spec"]["nodeName"] = pod["status"].pop("nominatedNodeName")
    pod["status"]["phase"] = "Running"


def four_workers() -> tuple[FakeCluster, dict[str, Any]]:
    """An elastic job of four 4-GPU workers on two 8-GPU nodes, and the worker kube-scheduler picks as its victim."""
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])
    cluster.add_job(training_job("elastic", 1, 4, gpusPerWorker=4))
    settle(cluster)
    assert len(cluster.workers("elastic")) == 4
    victim = max(
        (p for p in cluster.workers("elastic") if p["spec"]["nodeName"] == "a1"), key=lambda p: p["metadata"]["name"]
    )
    return cluster, victim


def worker_names(cluster: FakeCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.workers("elastic", live=False)}


@pytest.mark.parametrize("ended", ["Running", "Failed", "Succeeded"])
def test_a_worker_preempted_for_a_pod_of_higher_priority_scales_its_job_in_and_is_not_replaced(ended: str) -> None:
    cluster, victim = four_workers()
    before = worker_names(cluster)
    preempt(cluster, victim, ended)
    for _ in range(3):  # the kubelet still tearing the victim down
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.tick(1)
        assert worker_names(cluster) <= before, "no worker is made for the GPUs the preemptor waits for"
    status = cluster.job_status("elastic")
    assert (status["phase"], status["scaleIns"], status["preemptions"]) == ("Running", 1, 0)
    assert status["workers"]["target"] == 3
    del cluster.pods[f"ml/{victim['metadata']['name']}"]
    cluster.apply(decide(cluster.world(), CONFIG))  # gone, the preemptor not bound yet
    assert worker_names(cluster) <= before - {victim["metadata"]["name"]}
    bind_preemptor(cluster)
    settle(cluster)
    assert len(cluster.workers("elastic")) == 3
    assert all(p["spec"].get("nodeName") for p in cluster.workers("elastic")), "no worker waits unplaced"
    del cluster.pods[PREEMPTOR]
    settle(cluster)
    assert len(cluster.workers("elastic")) == 4, "its GPUs are the job's again once the preemptor leaves"
    assert cluster.job_status("elastic")["preemptions"] == 0


def test_a_worker_gone_before_a_pass_saw_its_preemption_is_not_replaced_on_the_preemptors_gpus() -> None:
    cluster, victim = four_workers()
    preempt(cluster, victim, "Failed")
    del cluster.pods[f"ml/{victim['metadata']['name']}"]  # its grace and removal fell between two passes
    for _ in range(3):
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.tick(1)
        pending = [p["metadata"]["name"] for p in cluster.workers("elastic") if not p["spec"].get("nodeName")]
        assert pending == [], "a worker made for the GPUs the preemptor is nominated to"
    assert cluster.job_status("elastic")["workers"]["target"] == 3
    bind_preemptor(cluster)
    settle(cluster)
    assert len(cluster.workers("elastic")) == 3
    assert cluster.job_status("elastic")["phase"] == "Running"


def test_a_worker_deleted_by_hand_is_still_replaced() -> None:
    """Without a nominated pod the GPUs are free: the job gets its worker back (the other side of the rule)."""
    cluster, victim = four_workers()
    del cluster.pods[f"ml/{victim['metadata']['name']}"]
    settle(cluster)
    assert len(cluster.workers("elastic")) == 4
    assert cluster.job_status("elastic")["scaleIns"] == 0


def test_a_victim_that_exited_0_does_not_hold_its_job_up_while_its_object_lingers() -> None:
    """A worker that exits 0 on the SIGTERM of its preemption has completed nothing: while its object lingers (a
    finalizer here), its job is still resized and its pods converged; once the preemptor gives up, the job grows back
    onto the GPUs."""
    cluster, victim = four_workers()
    preempt(cluster, victim, "Succeeded")
    victim["metadata"]["finalizers"] = ["example.com/keep"]
    settle(cluster)
    assert cluster.job_status("elastic")["workers"]["target"] == 3
    del cluster.pods[PREEMPTOR]
    settle(cluster)
    status = cluster.job_status("elastic")
    assert (status["phase"], status["workers"]["target"], len(cluster.workers("elastic"))) == ("Running", 4, 4)
