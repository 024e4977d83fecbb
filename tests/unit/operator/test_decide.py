"""The operator's decisions on an in-memory cluster: loaning with hysteresis, reclaim by scale-in before preemption,
gangs, SJF admission, explained conditions, and convergence after a crash between any two actions (to a cluster
equivalent to the uninterrupted one: as many nodes in each state and replicas placed, no node left reclaiming,
every job either running whole or queued with no worker; which job a re-planned reclaim picks may differ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from lyra.operator.actions import CreatePod, DeletePod, Emit, PatchStatus, ReclaimWaitReport
from lyra.operator.decide import OperatorConfig, decide

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, report_reclaim, training_job

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=60)


def settle(cluster: FakeCluster, passes: int = 8, seconds: float = 40, config: OperatorConfig = CONFIG) -> int:
    """Decide and apply until a pass changes nothing; returns the passes it took. Terminations finish each pass."""
    for count in range(passes):
        decision = decide(cluster.world(), config)
        if decision.is_noop:
            return count
        cluster.apply(decision)
        cluster.finish_terminations()
        cluster.tick(seconds)
    raise AssertionError(f"no fixed point after {passes} passes")


def small_cluster() -> FakeCluster:
    return FakeCluster([node("a0", "training", A100)] + [node(f"t{i}", "inference", T4) for i in range(4)])


def test_idle_inference_nodes_are_lent_only_after_the_lend_delay() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 2))
    cluster.apply(decide(cluster.world(), CONFIG))
    # The one server the replicas need is kept serving before they exist, so they pack onto it (last in lending
    # order); the others are idle.
    assert [cluster.state(f"t{i}") for i in range(4)] == ["idle", "idle", "idle", "serving"]
    assert {p["spec"]["nodeName"] for p in cluster.pods.values()} == {"t3"}
    cluster.tick(10)
    cluster.apply(decide(cluster.world(), CONFIG))
    assert cluster.state("t0") == "idle", "10 s idle is not enough to lend"
    cluster.tick(30)
    cluster.apply(decide(cluster.world(), CONFIG))
    assert [cluster.state(f"t{i}") for i in range(4)] == ["loaned", "loaned", "loaned", "serving"]
    assert cluster.taint("t0") == [("lyra.dev/state", "loaned")]
    assert cluster.taint("t3") == [("lyra.dev/state", "serving")]


def test_an_elastic_job_grows_on_loaned_nodes_and_a_training_only_job_stays_off_them() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 1))
    cluster.add_job(training_job("elastic", 2, 24, gpuTypes=[T4]))
    cluster.add_job(training_job("a100-only", 2, 2, gpuTypes=[A100]))
    settle(cluster)
    elastic = cluster.workers("elastic")
    assert len(elastic) == 24
    assert {p["spec"]["nodeName"] for p in elastic} <= {"t0", "t1", "t2"}
    assert {p["spec"]["nodeName"] for p in cluster.workers("a100-only")} == {"a0"}
    status = cluster.job_status("elastic")
    assert status["phase"] == "Running"
    assert status["workers"] == {
        "current": 24,
        "target": 24,
        "base": 2,
        "flexible": 22,
    }
    assert sorted(p["metadata"]["labels"]["lyra.dev/role"] for p in elastic).count("base") == 2


def test_reclaim_scales_in_elastic_workers_before_preempting_and_returns_the_nodes() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("elastic", 2, 16, gpuTypes=[T4]))
    cluster.add_job(training_job("small", 1, 1, gpuTypes=[T4], duration=100))
    settle(cluster)
    cluster.services["serve/chat"]["spec"]["replicas"] = 20
    decision = decide(cluster.world(), CONFIG)
    reclaim = report_reclaim(decision)
    assert reclaim.preempted == ()
    assert len(reclaim.servers) == 2
    cluster.apply(decision)
    assert all(cluster.state(s) == "reclaiming" for s in reclaim.servers)
    assert ("lyra.dev/state", "reclaiming") in cluster.taint(reclaim.servers[0])
    settle(cluster)
    assert all(cluster.state(s) == "serving" for s in reclaim.servers)
    status = cluster.job_status("elastic")
    assert status["phase"] == "Running"
    assert status["preemptions"] == 0
    assert status["scaleIns"] > 0
    assert cluster.job_status("small")["phase"] == "Running"
    replicas = [p for p in cluster.pods.values() if p["metadata"]["labels"].get("lyra.dev/service") == "chat"]
    assert len(replicas) == 20
    assert all(p["spec"].get("nodeName") for p in replicas)
    reasons = {e.reason for e in cluster.events}
    assert {"Reclaiming", "ScaledIn", "Returned"} <= reasons


def test_a_reclaim_that_breaks_a_base_preempts_and_requeues_the_job() -> None:
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4)])
    cluster.add_job(training_job("gang", 2, 2, gpusPerWorker=8, gpuTypes=[T4]))
    settle(cluster)
    assert cluster.job_status("gang")["phase"] == "Running"
    cluster.add_service(inference_service("chat", 1))
    settle(cluster)
    status = cluster.job_status("gang")
    assert status["phase"] == "Queued"
    assert status["preemptions"] == 1
    assert any(e.reason == "Preempted" and "reclaimed for inference" in e.message for e in cluster.events)
    assert not cluster.workers("gang")


def test_base_demand_is_admitted_shortest_first_and_an_oversized_job_waits_with_a_reason() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("long", 6, 6, duration=5000))
    cluster.add_job(training_job("short", 6, 6, duration=50))
    cluster.add_job(training_job("huge", 9, 9, duration=10))
    settle(cluster)
    assert cluster.job_status("short")["phase"] == "Running"
    assert cluster.job_status("long")["phase"] == "Queued"
    huge = cluster.job_status("huge")
    assert huge["phase"] == "Queued"
    condition = next(c for c in huge["conditions"] if c["type"] == "Running")
    assert condition["status"] == "False"
    assert condition["reason"] == "TooLarge"
    assert "larger than the cluster: its base needs 9 workers of 1 GPU" in condition["message"]
    long = next(c for c in cluster.job_status("long")["conditions"] if c["type"] == "Running")
    assert long["reason"] == "Queued"
    assert "does not fit" in long["message"]


def test_a_gang_that_cannot_bind_is_rolled_back_whole() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("gang", 2, 2, gpusPerWorker=4))
    decision = decide(cluster.world(), CONFIG)
    cluster.apply(decision)
    for pod in cluster.pods.values():  # something else took the GPUs: nothing binds
        pod["spec"].pop("nodeName", None)
        pod["status"]["phase"] = "Pending"
    cluster.tick(CONFIG.gang_timeout_s + 1)
    decision = decide(cluster.world(), CONFIG)
    assert len(decision.of(DeletePod)) == 2
    assert not decision.of(CreatePod)
    cluster.apply(decision)
    status = cluster.job_status("gang")
    assert status["phase"] == "Queued"
    assert status["preemptions"] == 0
    assert any(c["reason"] == "GangTimeout" for c in status["conditions"])


def test_finished_workers_finish_the_job() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("ok", 2, 2))
    cluster.add_job(training_job("bad", 2, 2))
    settle(cluster)
    for pod in cluster.workers("ok"):
        pod["status"]["phase"] = "Succeeded"
    cluster.workers("bad")[0]["status"]["phase"] = "Failed"
    settle(cluster)
    assert cluster.job_status("ok")["phase"] == "Succeeded"
    assert cluster.job_status("bad")["phase"] == "Failed"
    assert not cluster.workers("bad"), "the failed job's other worker is stopped"


def test_a_stuck_reclaim_is_forced_at_the_deadline_and_says_so() -> None:
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4)])
    cluster.add_job(training_job("elastic", 1, 16, gpuTypes=[T4]))
    settle(cluster)
    cluster.add_service(inference_service("chat", 9))
    cluster.apply(decide(cluster.world(), CONFIG))  # the reclaim starts; the workers ignore SIGTERM
    cluster.tick(CONFIG.reclaim_deadline_s + 1)
    decision = decide(cluster.world(), CONFIG)
    forced = [a for a in decision.of(DeletePod) if isinstance(a, DeletePod) and a.grace_seconds == 0]
    assert forced
    assert any(isinstance(e, Emit) and e.reason == "ReclaimForced" and e.type == "Warning" for e in decision.actions)


@dataclass
class Scenario:
    name: str
    nodes: list[dict[str, Any]]
    jobs: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
    change: Callable[[FakeCluster], None] = lambda _cluster: None


SCENARIOS = [
    Scenario(
        "loan-and-grow",
        [node("a0", "training", A100)] + [node(f"t{i}", "inference", T4) for i in range(3)],
        [training_job("e", 2, 20, gpuTypes=[T4]), training_job("a", 1, 4)],
        [inference_service("chat", 3)],
    ),
    Scenario(
        "reclaim-under-load",
        [node(f"t{i}", "inference", T4) for i in range(4)],
        [training_job("e", 1, 24, gpuTypes=[T4]), training_job("g", 2, 2, gpusPerWorker=4, gpuTypes=[T4])],
        [inference_service("chat", 1)],
        lambda c: c.services["serve/chat"]["spec"].update(replicas=20),
    ),
    Scenario(
        "service-edit",  # a new image and GPU type: the Deployment's template is written, its replicas move
        [node(f"t{i}", "inference", T4) for i in range(2)] + [node(f"a{i}", "inference", A100) for i in range(2)],
        [training_job("e", 1, 16, gpuTypes=[A100])],
        [inference_service("chat", 2, gpus=4, gpuType=T4)],
        lambda c: c.services["serve/chat"]["spec"].update(
            gpuType=A100, template={"spec": {"containers": [{"name": "server", "image": "server:2"}]}}
        ),
    ),
]


def changed(scenario: Scenario) -> FakeCluster:
    """The scenario's cluster settled, then changed (not yet decided on)."""
    cluster = FakeCluster(scenario.nodes)
    for job in scenario.jobs:
        cluster.add_job(job)
    for service in scenario.services:
        cluster.add_service(service)
    settle(cluster)
    scenario.change(cluster)
    return cluster


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_applying_a_decision_then_deciding_again_does_nothing(scenario: Scenario) -> None:
    cluster = changed(scenario)
    settle(cluster)
    assert decide(cluster.world(), CONFIG).is_noop


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_a_crash_between_any_two_actions_converges_to_an_equivalent_cluster(scenario: Scenario) -> None:
    def build() -> FakeCluster:
        return changed(scenario)

    reference = build()
    settle(reference)
    expected = _shape(reference)
    first = decide(build().world(), CONFIG)
    for cut in range(len(first.actions) + 1):
        cluster = build()
        cluster.apply(decide(cluster.world(), CONFIG), limit=cut)  # the operator dies after `cut` actions
        cluster.tick(40)
        settle(cluster)
        where = f"cut after {cut} of {len(first.actions)} actions"
        assert _shape(cluster) == expected, where
        for job in scenario.jobs:
            name, spec = job["metadata"]["name"], job["spec"]
            status = cluster.job_status(name)
            workers = len(cluster.workers(name, live=False))
            assert workers <= spec["maxWorkers"], where
            if status["phase"] == "Running":
                assert spec["minWorkers"] <= workers == status["workers"]["current"] == status["workers"]["target"]
            else:
                assert status["phase"] == "Queued"
                assert workers == 0, where
        assert not any(cluster.state(n) == "reclaiming" for n in cluster.nodes)


def _shape(cluster: FakeCluster) -> dict[str, Any]:
    return {
        "states": sorted(str(cluster.state(n)) for n in cluster.nodes),
        "replicas": sum(1 for p in cluster.pods.values() if p["metadata"]["labels"].get("lyra.dev/service")),
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        # refused by today's CRD, but an object stored before it may still say so: unreadable
        ({"speeds": {A100: 0}}, "the spec cannot be read: spec.speeds"),
        # accepted by every schema (an empty key cannot be refused), refused by the core: cannot run
        ({"speeds": {"": 1.0}}, "the spec cannot be run"),
    ],
    ids=["unreadable", "refused-by-the-core"],
)
def test_a_job_with_a_bad_spec_fails_alone_and_says_why_once(spec: dict[str, Any], message: str) -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("ok", 1, 1))
    cluster.jobs["ml/broken"] = training_job("broken", 1, 1)
    cluster.jobs["ml/broken"]["spec"].update(spec)
    settle(cluster)
    assert cluster.job_status("ok")["phase"] == "Running"
    status = cluster.job_status("broken")
    assert status["phase"] == "Failed"
    condition = next(c for c in status["conditions"] if c["type"] == "Running")
    assert condition["reason"] == "InvalidSpec"
    assert message in condition["message"]
    assert [e.reason for e in cluster.events].count("InvalidSpec") == 1, "said once"


def test_a_job_whose_workers_break_its_edited_spec_does_not_stop_a_reclaim() -> None:
    cluster = FakeCluster([node("a0", "training", A100), node("t0", "inference", T4), node("t1", "inference", T4)])
    cluster.add_job(training_job("elastic", 1, 16, gpuTypes=[T4]))
    settle(cluster)
    assert cluster.job_status("elastic")["gpuType"] == T4
    cluster.jobs["ml/elastic"]["spec"]["gpuTypes"] = [A100]  # edited while its workers run on T4s
    cluster.add_service(inference_service("chat", 9))  # needs both T4 servers back
    decision = decide(cluster.world(), CONFIG)
    assert "ml/elastic" in decision.report.left_out
    settle(cluster)
    assert cluster.state("t0") == "serving"
    assert cluster.state("t1") == "serving"


def test_a_job_whose_workers_are_exiting_is_neither_resized_nor_restarted() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("ending", 2, 6, duration=6000))
    settle(cluster)
    cluster.add_job(training_job("next", 1, 8, duration=60))
    first, *others = cluster.workers("ending")
    first["status"]["phase"] = "Succeeded"  # the others have not exited yet
    decision = decide(cluster.world(), CONFIG)
    assert not [a for a in decision.of(CreatePod) if "ending" in a.ref.name]
    assert not decision.of(DeletePod)
    assert not any(isinstance(e, Emit) and e.ref.name == "ending" for e in decision.actions)
    for pod in others:
        pod["status"]["phase"] = "Succeeded"
    settle(cluster)
    assert cluster.job_status("ending")["phase"] == "Succeeded"


def test_flexible_workers_that_cannot_bind_are_given_up_not_recreated() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("elastic", 2, 8))
    settle(cluster)
    unbound = cluster.workers("elastic")[-2:]
    for pod in unbound:  # something else took their GPUs: they wait, unbound, since long before the timeout
        pod["spec"].pop("nodeName")
        pod["status"]["phase"] = "Pending"
        pod["metadata"]["creationTimestamp"] = "1970-01-01T00:00:00Z"
    cluster.tick(CONFIG.gang_timeout_s + 1)
    decision = decide(cluster.world(), CONFIG)
    assert len(decision.of(DeletePod)) == 2
    assert not decision.of(CreatePod)
    status = next(a for a in decision.of(PatchStatus) if isinstance(a, PatchStatus) and a.ref.name == "elastic")
    assert status.status["workers"]["target"] == 6


def test_a_reclaim_is_timed_from_its_start_until_every_replica_runs() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("elastic", 2, 16, gpuTypes=[T4]))
    settle(cluster)
    cluster.services["serve/chat"]["spec"]["replicas"] = 20
    began = cluster.now
    cluster.apply(decide(cluster.world(), CONFIG))
    record = cluster.services["serve/chat"]["status"]["reclaim"]
    assert record["gpuType"] == T4
    assert record["startedAt"].endswith("Z")
    assert "." in record["startedAt"]  # to the millisecond
    waits: list[ReclaimWaitReport] = []
    for _ in range(8):
        cluster.finish_terminations()
        cluster.tick(3)
        decision = decide(cluster.world(), CONFIG)
        waits += decision.report.reclaim_waits
        cluster.apply(decision)
    assert "reclaim" not in cluster.services["serve/chat"]["status"]
    assert len(waits) == 1
    assert waits[0].service == "serve/chat"
    assert 0 < waits[0].seconds <= cluster.now - began
    served = [e for e in cluster.events if e.reason == "ReclaimServed"]
    assert len(served) == 1
    assert served[0].message.startswith("20 of 20 replicas running")


def test_a_reclaim_record_lost_in_a_crash_starts_from_the_nodes_annotation() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("elastic", 2, 16, gpuTypes=[T4]))
    settle(cluster)
    cluster.services["serve/chat"]["spec"]["replicas"] = 20
    decision = decide(cluster.world(), CONFIG)
    first_status = next(i for i, a in enumerate(decision.actions) if isinstance(a, PatchStatus))
    cluster.apply(decision, limit=first_status)  # the nodes are reclaiming; the crash loses every status write
    annotation = cluster.nodes[report_reclaim(decision).servers[0]]["metadata"]["annotations"]
    cluster.tick(5)
    cluster.apply(decide(cluster.world(), CONFIG))
    started = cluster.services["serve/chat"]["status"]["reclaim"]["startedAt"]
    assert started.startswith(annotation["lyra.dev/reclaim-started"].rstrip("Z"))


def foreign_gpu_pod(name: str, node_name: str, gpus: int) -> dict[str, Any]:
    """A GPU pod Lyra does not manage (another team's serving stack), bound and running."""
    return {
        "metadata": {"name": name, "namespace": "other", "uid": f"uid-{name}", "labels": {"app": "theirs"}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_server_running_gpu_pods_lyra_does_not_manage_is_neither_lent_nor_counted_as_room_for_replicas() -> None:
    cluster = small_cluster()
    for index, server in enumerate(("t0", "t1")):
        pod = foreign_gpu_pod(f"theirs-{index}", server, 8)
        cluster.pods[f"other/theirs-{index}"] = pod
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("elastic", 1, 24, gpuTypes=[T4]))
    cluster.add_job(training_job("a100", 2, 2, gpuTypes=[A100]))
    settle(cluster)
    assert cluster.job_status("a100")["phase"] == "Running", "training is planned beside the servers left out"
    assert cluster.job_status("elastic")["phase"] == "Running"
    assert {w["spec"]["nodeName"] for w in cluster.workers("elastic")} <= {"t2", "t3"}
    assert cluster.state("t0") != "loaned", "their GPUs are not Lyra's to lend"
    assert cluster.state("t1") != "loaned", "their GPUs are not Lyra's to lend"
    replicas = [p for p in cluster.pods.values() if p["metadata"]["labels"].get("lyra.dev/role") == "inference"]
    assert len(replicas) == 2
    hosts = {p["spec"].get("nodeName") for p in replicas}
    assert hosts <= {"t2", "t3"}, "replicas only where Lyra has room"
    assert all(cluster.state(host) == "serving" for host in hosts)
