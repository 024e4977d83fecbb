"""What a tenant can do with its own pods, at the operator's decide step (docs/security.md, "Pods are Lyra's by their
owner"): Lyra knows its pods by their controller's UID, never by labels a tenant may edit.

* A worker stripped of its labels is still its job's worker: its labels are written back, and a reclaim of the
  server it runs on takes it away like any worker; the server returns to inference only once it holds no GPU pod but
  inference replicas (a pod Lyra does not manage included, which the reclaim deletes).
* A tenant's own pod labelled as a worker (``lyra.dev/role=base lyra.dev/job=nosuch``, or naming a real job) is not
  one: not counted, not deleted, not relabelled.
* A worker that does not terminate (a finalizer) holds up only its own job: another namespace's job is admitted in
  the same pass, and the stuck pod's GPUs stay counted as held on its node.
* Plain GPU pods beside the replicas of serving servers cost their GPUs and nothing more: no reclaim, no preemption.
"""

from __future__ import annotations

import copy
from typing import Any

from lyra.api import names
from lyra.core.placement import PodRole
from lyra.operator.actions import DeletePod, SetPodRole
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.loans import FOREIGN_GRACE_S

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=60)


def settle(cluster: FakeCluster, *, passes: int = 12, before_each: Any = None) -> None:
    """Decide and apply until a pass changes nothing (``before_each`` runs before every pass: a tenant's edits)."""
    for _ in range(passes):
        if before_each is not None:
            before_each(cluster)
        decision = decide(cluster.world(), CONFIG)
        if decision.is_noop:
            return
        cluster.apply(decision)
        cluster.finish_terminations()
        cluster.tick(40)
    raise AssertionError(f"no fixed point after {passes} passes")


def owned_workers(cluster: FakeCluster, job: str) -> list[dict[str, Any]]:
    """The job's live workers by their controller reference (what Lyra goes by), whatever their labels."""
    uid = cluster.jobs[f"ml/{job}"]["metadata"]["uid"]
    return [
        p
        for p in cluster.pods.values()
        if any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences", []))
        and "deletionTimestamp" not in p["metadata"]
    ]


def strip(pod: dict[str, Any]) -> None:
    """``kubectl label pod ... lyra.dev/role- lyra.dev/job-``, as the pod's namespace may."""
    pod["metadata"]["labels"].pop(names.ROLE_LABEL, None)
    pod["metadata"]["labels"].pop(names.JOB_LABEL, None)


def plain_gpu_pod(name: str, namespace: str, node_name: str, gpus: int, **labels: str) -> dict[str, Any]:
    """A pod Lyra did not make (no controller, or its own), bound and running, tolerating every taint."""
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": dict(labels)},
        "spec": {
            "nodeName": node_name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "resources": {"limits": {names.GPU_RESOURCE: str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def lent_cluster() -> FakeCluster:
    """Four T4 inference servers: one serves a replica of 8 GPUs, three are lent to an elastic job of 1-GPU workers."""
    cluster = FakeCluster([node("a0", "training", A100)] + [node(f"t{i}", "inference", T4) for i in range(4)])
    cluster.add_service(inference_service("chat", 1, gpus=8))
    cluster.add_job(training_job("elastic", 1, 24, gpuTypes=[T4]))
    settle(cluster)
    assert sorted(cluster.state(f"t{i}") or "" for i in range(4)) == ["loaned", "loaned", "loaned", "serving"]
    assert len(owned_workers(cluster, "elastic")) == 24
    return cluster


def lent_servers(cluster: FakeCluster) -> list[str]:
    return sorted(n for n in cluster.nodes if cluster.state(n) == "loaned")


def test_a_stripped_worker_is_still_its_jobs_and_gets_its_labels_back() -> None:
    cluster = lent_cluster()
    server = lent_servers(cluster)[0]
    stripped = [p for p in owned_workers(cluster, "elastic") if p["spec"]["nodeName"] == server]
    for pod in stripped:
        strip(pod)
    world = cluster.world()
    assert {p.role for p in world.pods_of("ml/elastic")} <= {PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE}
    assert len([p for p in world.pods_of("ml/elastic") if p.is_live]) == 24, "none is lost, none is doubled"
    decision = decide(world, CONFIG)
    relabelled = {a.ref.name for a in decision.of(SetPodRole)}
    assert relabelled == {p["metadata"]["name"] for p in stripped}
    assert not decision.of(DeletePod), "a worker without labels is not deleted for it"
    cluster.apply(decision)
    assert all(p["metadata"]["labels"][names.JOB_LABEL] == "elastic" for p in stripped)
    assert decide(cluster.world(), CONFIG).is_noop


def test_a_reclaim_takes_stripped_workers_away_and_returns_the_server_only_once_they_are_gone() -> None:
    cluster = lent_cluster()
    cluster.services["serve/chat"]["spec"]["replicas"] = 4  # every lent server is needed back

    def tenant_strips_its_workers(cluster: FakeCluster) -> None:
        for pod in cluster.pods.values():
            if pod["metadata"]["namespace"] == "ml":
                strip(pod)  # before every pass: the operator's relabelling never sticks

    tenant_strips_its_workers(cluster)
    decision = decide(cluster.world(), CONFIG)
    reclaimed = [a for a in decision.actions if getattr(a, "state", None) is not None and a.state.value == "reclaiming"]
    assert len(reclaimed) == 3
    leaving = {a.ref.name for a in decision.of(DeletePod)}
    assert len(leaving) == 24, "every worker on the reclaimed servers leaves (all of the job's: it is preempted)"
    cluster.apply(decision)
    # The workers are terminating (their grace); the servers hold them: not returned yet.
    still = decide(cluster.world(), CONFIG)
    assert not [a for a in still.actions if getattr(a, "state", None) is not None and a.state.value == "serving"]
    cluster.finish_terminations()
    settle(cluster, before_each=tenant_strips_its_workers)
    assert [cluster.state(f"t{i}") for i in range(4)] == ["serving"] * 4, cluster.pods.keys()
    on_servers = [p for p in cluster.pods.values() if p["spec"].get("nodeName", "").startswith("t")]
    assert len(on_servers) == 4
    assert all(p["metadata"]["labels"].get(names.ROLE_LABEL) == "inference" for p in on_servers)
    assert all(p["status"]["phase"] == "Running" for p in on_servers), "every replica runs"


def test_a_pod_lyra_does_not_manage_on_a_lent_server_leaves_with_the_reclaim() -> None:
    cluster = lent_cluster()
    server = lent_servers(cluster)[0]
    cluster.pods["other/squatter"] = plain_gpu_pod("squatter", "other", server, 0 + 1)
    cluster.services["serve/chat"]["spec"]["replicas"] = 4
    decision = decide(cluster.world(), CONFIG)
    (delete,) = [a for a in decision.of(DeletePod) if a.ref.name == "squatter"]
    assert delete.grace_seconds == FOREIGN_GRACE_S
    cluster.pods["other/squatter"]["metadata"]["finalizers"] = ["example.com/hold"]  # it will not go by itself
    cluster.apply(decision)
    for _ in range(4):
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.finish_terminations()
        cluster.tick(10)
    assert cluster.state(server) == "reclaiming", "not done while a GPU pod that is not inference holds it"
    assert all(cluster.state(n) == "serving" for n in ("t0", "t1", "t2", "t3") if n != server)
    cluster.pods["other/squatter"]["metadata"]["finalizers"] = []
    cluster.finish_terminations()
    settle(cluster)
    assert cluster.state(server) == "serving"
    assert "other/squatter" not in cluster.pods


def test_a_tenants_pod_labelled_as_a_worker_is_not_one() -> None:
    cluster = lent_cluster()
    worker = copy.deepcopy(owned_workers(cluster, "elastic")[0])
    worker["metadata"]["ownerReferences"] = []  # no controller: the tenant made it
    labels = worker["metadata"]["labels"]
    cluster.pods["ml/fake-w30"] = {**worker, "metadata": {**worker["metadata"], "name": "fake-w30", "uid": "u-30"}}
    nosuch = plain_gpu_pod("nosuch", "ml", "a0", 1, **{names.ROLE_LABEL: "base", names.JOB_LABEL: "nosuch"})
    cluster.pods["ml/nosuch"] = nosuch
    world = cluster.world()
    assert labels[names.JOB_LABEL] == "elastic"
    assert {p.ref.name: p.role for p in world.pods if p.ref.name in ("fake-w30", "nosuch")} == {
        "fake-w30": PodRole.UNMANAGED,
        "nosuch": PodRole.UNMANAGED,
    }
    assert len(world.pods_of("ml/elastic")) == 24
    assert world.stale == ()
    assert decide(world, CONFIG).is_noop, "neither deleted nor relabelled nor counted"


def test_a_worker_that_does_not_terminate_holds_up_only_its_own_job() -> None:
    cluster = FakeCluster([node(f"a{i}", "training", A100) for i in range(3)])
    cluster.add_job(training_job("stuck", 1, 1, gpusPerWorker=8, gpuTypes=[A100]))
    settle(cluster)
    (pod,) = owned_workers(cluster, "stuck")
    held_node = pod["spec"]["nodeName"]
    pod["metadata"]["finalizers"] = ["example.com/hold"]  # the tenant's own finalizer, then its own delete
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    other = training_job("other", 2, 2, gpusPerWorker=8, gpuTypes=[A100])
    other["metadata"]["namespace"] = "team-b"
    cluster.jobs["team-b/other"] = other
    settle(cluster)
    assert other["status"]["phase"] == "Running", "another namespace's job is admitted beside the stuck pod"
    team_b = [p for p in cluster.pods.values() if p["metadata"]["namespace"] == "team-b"]
    assert len(team_b) == 2
    assert held_node not in {p["spec"]["nodeName"] for p in team_b}, "the stuck pod's GPUs are held on its node"
    assert cluster.pods[f"ml/{pod['metadata']['name']}"] is pod, "still there, terminating"
    # Its own job (which lost its base) waits for it, re-queued: not restarted while its old worker holds on.
    assert cluster.job_status("stuck")["phase"] == "Queued"
    assert owned_workers(cluster, "stuck") == []
    pod["metadata"]["finalizers"] = []
    cluster.finish_terminations()
    settle(cluster)
    assert cluster.job_status("stuck")["phase"] == "Running", "once it is gone, the job starts again where it was"
    assert [p["spec"]["nodeName"] for p in owned_workers(cluster, "stuck")] == [held_node]


def test_plain_gpu_pods_beside_replicas_on_serving_servers_cause_no_reclaim() -> None:
    cluster = FakeCluster([node("a0", "training", A100)] + [node(f"t{i}", "inference", T4) for i in range(4)])
    cluster.add_service(inference_service("chat", 2, gpus=6))  # one replica per server: 2 GPUs left on each
    cluster.add_job(training_job("elastic", 1, 16, gpuTypes=[T4]))
    settle(cluster)
    serving = sorted(n for n in cluster.nodes if cluster.state(n) == "serving")
    assert len(serving) == 2
    assert len(lent_servers(cluster)) == 2
    before = {p["metadata"]["name"] for p in owned_workers(cluster, "elastic")}
    assert len(before) == 16
    for index, server in enumerate(serving):
        cluster.pods[f"other/plain-{index}"] = plain_gpu_pod(f"plain-{index}", "other", server, 2)
    decision = decide(cluster.world(), CONFIG)
    assert decision.report.loans[T4].reclaim is None, decision.report.as_json()
    assert not decision.of(DeletePod)
    settle(cluster)
    assert len(lent_servers(cluster)) == 2, "no reclaim"
    assert {p["metadata"]["name"] for p in owned_workers(cluster, "elastic")} == before, "no worker preempted"
    assert cluster.job_status("elastic")["preemptions"] == 0
    assert [cluster.state(n) for n in serving] == ["serving", "serving"]
    assert {"other/plain-0", "other/plain-1"} <= cluster.pods.keys(), "they keep their GPUs"
