"""Isolation per object: a job, service or node the operator cannot decide about, or whose writes the API refuses,
is reported on itself and held back, and every other object's actions still go through in the same pass.

Deciding is tested on the in-memory cluster; applying through the real :class:`lyra.operator.commit.Cluster`, whose
API calls are replaced by :class:`FaultyCluster`: it applies each action to the in-memory cluster (by the fake's own
reading of it) unless a fault rule says the API refuses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.cli.status_commands import render
from lyra.operator import worker_pods as worker_pods_module
from lyra.operator.actions import (
    Action,
    ApplyDeployment,
    CreatePod,
    DeletePod,
    Emit,
    PatchStatus,
    SetNodeState,
)
from lyra.operator.changes import Changes
from lyra.operator.commit import Cluster, Outcome
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.isolation import FIRST_DELAY_S, Alone, Backoff, Undecidable
from lyra.operator.runner import Reconciler, RunOptions
from lyra.operator.world import ObjectRef, World

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, report_reclaim, training_job
from .test_decide import CONFIG as DECIDE_CONFIG
from .test_decide import SCENARIOS, Scenario, _shape, changed, settle

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=600)


def job_in(namespace: str, name: str, low: int, high: int, **spec: Any) -> dict[str, Any]:
    body = training_job(name, low, high, **spec)
    body["metadata"]["namespace"] = namespace
    return body


def status_of(cluster: FakeCluster, key: str) -> dict[str, Any]:
    store = cluster.jobs if key in cluster.jobs else cluster.services
    status: dict[str, Any] = store[key].get("status", {})
    return status


def condition(cluster: FakeCluster, key: str, kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status_of(cluster, key).get("conditions", []) if c["type"] == kind)
    return found


def pods_of(cluster: FakeCluster, owner: str) -> list[str]:
    return sorted(k for k, p in cluster.pods.items() if owner in p["metadata"]["labels"].values())


# -- deciding: one object's problem stays with it --------------------------------------------------------------------


def test_an_alone_block_undoes_a_failing_part_words_its_error_and_lets_an_interrupt_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    changes = Changes(0.0)
    ref = ObjectRef("TrainingJob", "ml", "j")
    changes.emit(ref, "Kept", "before the block")
    with Alone(changes, ref, "deciding the job's life") as failing:
        changes.emit(ref, "Undone", "inside the block")
        raise ValueError("bad value")
    assert [a.reason for a in changes.actions if isinstance(a, Emit)] == ["Kept"]
    assert failing.failure == Undecidable("deciding the job's life failed: ValueError: bad value")
    assert "TrainingJob ml/j: deciding the job's life failed" in caplog.text
    assert "Traceback" in caplog.text
    with Alone(changes, ref, "writing the status") as fine:
        changes.emit(ref, "Kept", "a part that does not raise")
    assert fine.failure is None
    assert len(changes.actions) == 2
    with pytest.raises(KeyboardInterrupt), Alone(changes, ref, "interrupted"):
        raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("template", "message"),
    [
        # stored under an older CRD (today's refuses it): the job cannot even be read
        ({"spec": {"containers": "x"}}, "spec.template.spec.containers: Input should be a valid list"),
        # accepted by the schema, refused by the operator before it builds a pod
        (
            {
                "spec": {
                    "containers": [
                        {"name": "main", "image": "trainer:1"},
                        {"name": "sidecar", "image": "s:1", "resources": {"limits": {"nvidia.com/gpu": 1}}},
                    ]
                }
            },
            "spec.template.spec.containers[1].resources.limits: nvidia.com/gpu is set by Lyra",
        ),
        (
            {"spec": {"containers": [{"name": "main", "image": "a:1"}, {"name": "main", "image": "b:1"}]}},
            "spec.template.spec.containers[1].name: the container name 'main' is used twice",
        ),
    ],
    ids=["not-a-list", "gpus-on-a-sidecar", "duplicate-container"],
)
def test_a_poison_job_fails_alone_and_the_good_job_starts_in_the_same_pass(
    template: dict[str, Any], message: str
) -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("good", 2, 2))
    cluster.add_job(training_job("poison", 1, 1, template=template))
    decision = decide(cluster.world(), CONFIG)
    assert [a.ref.name for a in decision.of(CreatePod) if isinstance(a, CreatePod)] == ["good-w0", "good-w1"]
    cluster.apply(decision)
    assert cluster.job_status("good")["phase"] == "Running"
    assert cluster.job_status("poison")["phase"] == "Failed"
    running = condition(cluster, "ml/poison", "Running")
    assert running["reason"] == "InvalidSpec"
    assert message in running["message"]
    assert any(e.reason == "InvalidSpec" and e.ref.name == "poison" and e.type == "Warning" for e in cluster.events)
    assert not pods_of(cluster, "poison")
    [row] = [line for line in render(cluster.world()).split("PROBLEM")[1].splitlines() if "ml/poison" in line]
    assert row.startswith("TrainingJob   ml/poison")
    assert "spec.template.spec.containers" in row, "lyra status lists it, with the field"


def test_a_job_whose_pods_raise_while_being_built_fails_alone_with_the_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever the schema and the checks miss (here a builder that raises for one job) stops that job only."""

    class Builder(worker_pods_module.manifests.WorkerPodBuilder):
        def pod(self, *, index: int, role: str, planned_node: str | None) -> dict[str, Any]:
            if self.job == "poison":
                raise TypeError("'str' object is not a mapping")
            return super().pod(index=index, role=role, planned_node=planned_node)

    monkeypatch.setattr(worker_pods_module.manifests, "WorkerPodBuilder", Builder)
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("good", 2, 2))
    cluster.add_job(training_job("poison", 1, 1))
    decision = decide(cluster.world(), CONFIG)
    assert {a.ref.name for a in decision.of(CreatePod)} == {"good-w0", "good-w1"}
    cluster.apply(decision)
    assert cluster.job_status("good")["phase"] == "Running"
    running = condition(cluster, "ml/poison", "Running")
    assert running["reason"] == "InvalidSpec"
    assert "the worker pods cannot be built: TypeError: 'str' object is not a mapping" in running["message"]
    assert "TrainingJob ml/poison: its worker pods cannot be built" in caplog.text  # logged, with the traceback
    again = decide(cluster.world(), CONFIG).actions
    assert not [a for a in again if isinstance(a, PatchStatus | Emit) and a.ref.name == "poison"], "said once"


def test_a_service_whose_replicas_cannot_be_built_gets_no_deployment_and_says_why() -> None:
    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(2)])
    sidecar = {"name": "proxy", "image": "p:1", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    template = {"spec": {"containers": [{"name": "server", "image": "s:1"}], "initContainers": [sidecar]}}
    cluster.add_service(inference_service("bad", 2, template=template))
    cluster.add_service(inference_service("chat", 2))
    cluster.apply(decide(cluster.world(), CONFIG))
    assert set(cluster.deployments) == {"serve/chat"}
    ready = condition(cluster, "serve/bad", "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.template.spec.initContainers[0].resources.requests: nvidia.com/gpu is set by Lyra" in ready["message"]
    assert "gpusPerReplica" in ready["message"]
    assert status_of(cluster, "serve/bad")["serversNeeded"] == 0


def test_a_node_beyond_the_cores_bounds_is_left_out_and_the_others_are_planned() -> None:
    cluster = FakeCluster([node("a0", "training", A100), node("sliced", "training", A100, gpus=2048)])
    cluster.add_job(training_job("good", 2, 2))
    world = cluster.world()
    assert [n.name for n in world.nodes] == ["a0"]
    [left_out] = world.unreadable
    assert left_out.ref.name == "sliced"
    assert "reports 2048 allocatable nvidia.com/gpu, more than the 1024" in left_out.reason
    cluster.apply(decide(world, CONFIG))
    assert cluster.job_status("good")["phase"] == "Running"
    assert {p["spec"]["nodeName"] for p in cluster.pods.values()} == {"a0"}


# -- committing: one object's refused write stays with it ------------------------------------------------------------


@dataclass
class Fault:
    """The API refuses actions that ``matches`` with ``status``/``reason`` (as a kube-apiserver Status body)."""

    matches: Callable[[Action], bool]
    status: int
    reason: str
    message: str


@dataclass
class FaultyCluster(Cluster):
    """The operator's commit step, with the API replaced by the in-memory cluster and fault rules."""

    fake: FakeCluster = field(default_factory=lambda: FakeCluster([]))
    faults: list[Fault] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(client.ApiClient(), Backoff())

    def _apply(self, action: Action, now: float) -> None:
        name = f"{type(action).__name__} {action.node if isinstance(action, SetNodeState) else action.ref.key}"
        self.tried.append(name)
        for fault in self.faults:
            if fault.matches(action):
                body = json.dumps({"kind": "Status", "reason": fault.reason, "message": fault.message})
                error = ApiException(status=fault.status, reason=fault.reason)
                error.body = body
                raise error
        self.fake._apply(action)  # an Event lands in fake.events

    def _event(self, action: Emit, now: float) -> None:
        self.fake.events.append(action)

    def run(self, config: OperatorConfig = CONFIG) -> Outcome:
        """One pass as the runner makes it: observe, decide with the failures remembered, apply, and the scheduler
        and kubelets of the fake act."""
        decision = decide(self.fake.world(), config, self.backoff.failures())
        outcome = self.apply(decision, self.fake.now)
        self.fake.schedule()
        return outcome


def creating_pods_in(namespace: str) -> Callable[[Action], bool]:
    return lambda a: isinstance(a, CreatePod) and a.ref.namespace == namespace


QUOTA = Fault(
    creating_pods_in("quota"),
    403,
    "Forbidden",
    'pods "q-w0" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, used: '
    "requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=0",
)


@pytest.mark.parametrize(
    "fault",
    [
        QUOTA,
        Fault(
            creating_pods_in("quota"),
            422,
            "Invalid",
            'admission webhook "policy.example.com" denied the request: images must come from registry.example.com',
        ),
        Fault(creating_pods_in("quota"), 500, "InternalError", "etcdserver: request timed out"),
    ],
    ids=["403-quota", "422-webhook", "500"],
)
def test_a_refused_pod_is_reported_on_its_job_and_the_other_jobs_pods_are_created_in_the_same_pass(
    fault: Fault,
) -> None:
    fake = FakeCluster([node("a0", "training", A100)])
    fake.jobs["quota/q"] = job_in("quota", "q", 2, 2)
    fake.add_job(training_job("good", 2, 2))
    cluster = FaultyCluster(fake=fake, faults=[fault])
    outcome = cluster.run()
    assert pods_of(fake, "good") == ["ml/good-w0", "ml/good-w1"]
    assert not pods_of(fake, "q")
    assert outcome.failed == 1, "one failure per object: the job's second pod is skipped, not tried"
    assert outcome.skipped >= 1
    assert "CreatePod quota/q-w1" not in cluster.tried
    [failure] = outcome.failures
    assert failure.subject.key == "quota/q"
    assert failure.reason == fault.reason
    event = next(e for e in fake.events if e.reason == "ApplyFailed")
    assert event.ref.key == "quota/q"
    assert event.ref.uid == "uid-q", "an Event kubectl describe finds"
    assert event.type == "Warning"
    assert f"creating pod quota/q-w0 failed: {fault.status} {fault.reason}: {fault.message}" in event.message
    # The next pass writes the reason into the job's status (status writes are not held back by a pod's failure).
    fake.tick(1)
    cluster.run()
    applied = condition(fake, "quota/q", "Applied")
    assert applied["status"] == "False"
    assert applied["reason"] == fault.reason
    assert fault.message in applied["message"]
    first_delay = "1 s" if fault.status >= 500 else "10 s"  # a server error is retried sooner
    assert f"retrying in {first_delay} (attempt 1)" in applied["message"]
    assert condition(fake, "ml/good", "Running")["reason"] == "Started"
    assert not [c for c in fake.jobs["ml/good"]["status"]["conditions"] if c["type"] == "Applied"]
    problems = render(fake.world()).split("PROBLEM")[1]
    assert f"TrainingJob   quota/q   {fault.reason}" in problems, "lyra status lists it"
    assert "ml/good" not in problems


def test_a_failing_object_is_retried_with_exponential_backoff_while_the_others_proceed() -> None:
    fake = FakeCluster([node("a0", "training", A100)])
    fake.jobs["quota/q"] = job_in("quota", "q", 1, 1)
    cluster = FaultyCluster(fake=fake, faults=[QUOTA])
    attempts_at: list[float] = []
    started = fake.now
    for _ in range(80):  # 80 s, a pass every second
        if fake.now - started == 20:
            fake.add_job(training_job("late", 1, 1))  # arrives while q is held back
        before = cluster.tried.count("CreatePod quota/q-w0")
        cluster.run()
        if cluster.tried.count("CreatePod quota/q-w0") > before:
            attempts_at.append(fake.now - started)
        if fake.now - started == 20:
            assert pods_of(fake, "late") == ["ml/late-w0"], "started in the pass it arrived in"
        fake.tick(1)
    assert attempts_at == [0, 10, 30, 70], "10 s, then 20 s, then 40 s between tries"
    assert fake.job_status("late")["phase"] == "Running"
    assert "attempt 4" in condition(fake, "quota/q", "Applied")["message"]
    assert [e.reason for e in fake.events].count("ApplyFailed") == 4, "one Event per refused try, not per pass"
    # The quota is raised: the next try goes through, and the status says so.
    cluster.faults.clear()
    for _ in range(160):
        cluster.run()
        fake.tick(1)
        if pods_of(fake, "q"):
            break
    assert pods_of(fake, "q") == ["quota/q-w0"]
    cluster.run()
    applied = condition(fake, "quota/q", "Applied")
    assert applied["status"] == "True"
    assert cluster.backoff.failures() == {}


def test_backoff_is_capped() -> None:
    backoff = Backoff()
    action = CreatePod(
        ref=ObjectRef("Pod", "quota", "q-w0"),
        manifest={},
        owner=ObjectRef("TrainingJob", "quota", "q"),
    )
    delays = []
    now = 0.0
    for _ in range(12):
        failure = backoff.record(action, "Forbidden", "403", now)
        delays.append(failure.retry_at - now)
        now = failure.retry_at
    assert delays[:3] == [FIRST_DELAY_S, 2 * FIRST_DELAY_S, 4 * FIRST_DELAY_S]
    assert max(delays) == delays[-1] == 300


def test_a_server_error_is_retried_sooner_than_a_refusal() -> None:
    """A 500 says nothing about the object (etcd timed out): 1 s, doubling, at most 30 s; a refusal after it goes
    back to the refusal's schedule, continuing the count."""
    backoff = Backoff()
    action = PatchStatus(ObjectRef("TrainingJob", "ml", "t4"), {}, ("workers",))
    delays = []
    now = 0.0
    for _ in range(7):
        failure = backoff.record(action, "InternalError", "500", now, transient=True)
        delays.append(failure.retry_at - now)
        now = failure.retry_at
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    refused = backoff.record(action, "Forbidden", "403", now)
    assert refused.retry_at - now == 300, "the eighth failure in a row, on the refusal's schedule (capped)"


def test_a_refused_status_holds_back_that_jobs_pods_only() -> None:
    """A job's intent is written before its pods change: if the status write fails, its pods are not created."""
    fake = FakeCluster([node("a0", "training", A100)])
    fake.add_job(training_job("broken-status", 2, 2))
    fake.add_job(training_job("good", 2, 2))
    status_500 = Fault(
        lambda a: isinstance(a, PatchStatus) and a.ref.name == "broken-status", 500, "InternalError", "boom"
    )
    cluster = FaultyCluster(fake=fake, faults=[status_500])
    outcome = cluster.run()
    assert not pods_of(fake, "broken-status")
    assert pods_of(fake, "good") == ["ml/good-w0", "ml/good-w1"]
    assert outcome.failed == 1
    assert not any(e.reason == "Started" and e.ref.name == "broken-status" for e in fake.events), (
        "no Event about what did not happen"
    )
    fake.tick(0.5)  # a server error is retried after 1 s
    first = len(cluster.tried)
    outcome = cluster.run()
    assert "PatchStatus ml/broken-status" not in cluster.tried[first:], "a failed status holds the whole object back"
    assert outcome.held >= 1
    assert not pods_of(fake, "broken-status")


class ObservedFaultyCluster(FaultyCluster):
    """:class:`FaultyCluster` read as the running operator reads its cluster, for :class:`Reconciler`'s passes."""

    def observe(self, now: float) -> World:
        return self.fake.world()


def test_a_status_write_that_fails_then_finds_nothing_to_write_ends_its_backoff_and_the_status_clears() -> None:
    """The running operator's passes, not the test harness's: a job's status write fails with the same message as a
    failure its status already reports, so the decision at its retry equals what the server holds and has no action.
    That pass still ends the backoff (before, a pass with no action committed nothing and the job reported the
    failure until another of its writes came due: tests/integration/test_api_faults.py timed out on it), and the next
    pass comes at once and clears the condition."""
    fake = FakeCluster([node("a0", "training", A100)])
    fake.add_job(training_job("j", 1, 1))
    refusing = [True]
    status_500 = Fault(
        lambda a: refusing[0] and isinstance(a, PatchStatus) and a.ref.name == "j", 500, "InternalError", "boom"
    )
    cluster = ObservedFaultyCluster(fake=fake, faults=[status_500])
    reconciler = Reconciler(cluster, RunOptions(config=CONFIG, resync_s=3600), clock=lambda: fake.now)

    def applied() -> dict[str, Any]:
        return condition(fake, "ml/j", "Applied")

    reconciler.pass_once()  # the job's first status write fails: retried in 1 s
    failed = cluster.backoff.failures()["TrainingJob/ml/j"]
    assert reconciler.next_pass_in() == pytest.approx(1.0), "the retry is due before the resync"
    fake.tick(1)
    refusing[0] = False
    reconciler.pass_once()  # the status is written, saying the write failed; the backoff is over
    assert (applied()["status"], applied()["message"]) == ("False", failed.message)
    assert cluster.backoff.failures() == {}
    assert reconciler.next_pass_in() == 0
    refusing[0] = True
    reconciler.pass_once()  # clearing the condition fails with the same message
    assert cluster.backoff.failures()["TrainingJob/ml/j"].message == failed.message
    fake.tick(1)
    refusing[0] = False
    decision = reconciler.pass_once()
    assert decision.actions == (), "the status the decision wants is the one the server holds"
    assert cluster.backoff.failures() == {}, "the retry time came and nothing failed: the backoff is over"
    assert reconciler.next_pass_in() == 0, "the status stops reporting the failure: the next pass comes at once"
    reconciler.pass_once()
    assert applied()["status"] == "True"
    assert reconciler.next_pass_in() == 3600


def test_a_node_whose_state_cannot_be_written_keeps_its_pods_and_the_other_nodes_go_on() -> None:
    """A node is tainted reclaiming before its workers are deleted: a refused taint keeps that node's workers."""
    nodes = [node(f"t{i}", "inference", T4) for i in range(3)]
    fake = FakeCluster(nodes)
    fake.add_job(training_job("elastic", 1, 24, gpuTypes=[T4]))
    cluster = FaultyCluster(fake=fake)
    for _ in range(6):
        cluster.run()
        fake.finish_terminations()
        fake.tick(40)
    assert {p["spec"]["nodeName"] for p in fake.pods.values()} == {"t0", "t1", "t2"}
    fake.add_service(inference_service("chat", 16))  # needs two servers back
    decision = decide(fake.world(), CONFIG)
    reclaimed = report_reclaim(decision).servers
    assert len(reclaimed) == 2
    stuck = reclaimed[0]
    cluster.faults.append(
        Fault(lambda a: isinstance(a, SetNodeState) and a.node == stuck, 500, "InternalError", "etcd unavailable")
    )
    outcome = cluster.apply(decision, fake.now)
    assert fake.state(stuck) == "loaned", "its state was refused"
    assert fake.state(reclaimed[1]) == "reclaiming"
    deletions = [a for a in decision.of(DeletePod) if isinstance(a, DeletePod)]
    on_stuck = [a.ref.key for a in deletions if a.node == stuck]
    assert on_stuck
    assert all(key in fake.pods and "deletionTimestamp" not in fake.pods[key]["metadata"] for key in on_stuck), (
        "workers stay on a node that is not reclaiming"
    )
    assert outcome.failed == 1
    assert outcome.skipped >= len(on_stuck)
    assert any(isinstance(a, ApplyDeployment) for a in decision.actions)
    assert "serve/chat" in fake.deployments, "the service's Deployment still went through"
    assert any(e.reason == "ApplyFailed" and e.ref.kind == "Node" and e.ref.name == stuck for e in fake.events)


def test_a_queued_job_whose_pods_are_refused_is_not_given_gpus_until_its_retry() -> None:
    """The quota job is shorter, so it would be admitted first every time; held back, it leaves the GPUs to the job
    behind it instead of taking them for pods the API refuses."""
    fake = FakeCluster([node("a0", "training", A100)])
    fake.jobs["quota/q"] = job_in("quota", "q", 1, 1, duration=60, gpusPerWorker=8)
    fake.add_job(training_job("next", 1, 1, duration=6000, gpusPerWorker=8))
    cluster = FaultyCluster(fake=fake, faults=[QUOTA])
    config = OperatorConfig(gang_timeout_s=30)
    started = fake.now
    cluster.run(config)
    assert status_of(fake, "quota/q")["phase"] == "Running", "shortest first"
    while fake.now - started < 45:
        fake.tick(1)
        cluster.run(config)
    assert status_of(fake, "quota/q")["phase"] == "Queued", "its gang timed out"
    assert cluster.backoff.failures()["TrainingJob/quota/q"].retry_at > fake.now
    assert fake.job_status("next")["phase"] == "Running"
    assert pods_of(fake, "next") == ["ml/next-w0"]


def test_a_node_left_out_gets_an_event_at_most_every_ten_minutes(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeCluster([node("a0", "training", A100), node("sliced", "training", A100, gpus=2048)])
    cluster = FaultyCluster(fake=fake)
    for _ in range(3):  # three passes within a minute
        cluster.report_left_out(fake.world(), fake.now)
        fake.tick(20)
    left_out = [e for e in fake.events if e.reason == "LeftOut"]
    assert len(left_out) == 1
    assert left_out[0].ref.name == "sliced"
    assert left_out[0].type == "Warning"
    assert caplog.text.count("skipped Node sliced: reports 2048 allocatable nvidia.com/gpu") == 3, "logged every pass"
    fake.tick(600)
    cluster.report_left_out(fake.world(), fake.now)
    assert [e.reason for e in fake.events].count("LeftOut") == 2


def test_a_refused_deployment_is_reported_on_its_service_and_the_other_service_is_deployed() -> None:
    fake = FakeCluster([node(f"t{i}", "inference", T4) for i in range(4)])
    fake.add_service(inference_service("denied", 2))
    fake.add_service(inference_service("chat", 2))
    webhook = Fault(
        lambda a: isinstance(a, ApplyDeployment) and a.ref.name == "denied",
        422,
        "Invalid",
        'admission webhook "images.example.com" denied the request: unsigned image server:1',
    )
    cluster = FaultyCluster(fake=fake, faults=[webhook])
    outcome = cluster.run()
    assert set(fake.deployments) == {"serve/chat"}
    assert outcome.failed == 1
    fake.tick(1)
    cluster.run()
    applied = condition(fake, "serve/denied", "Applied")
    assert (applied["status"], applied["reason"]) == ("False", "Invalid")
    assert "creating Deployment serve/denied failed: 422 Invalid: admission webhook" in applied["message"]
    assert condition(fake, "serve/chat", "Ready")["status"] == "True"


def test_a_refused_template_write_is_reported_on_its_service_and_the_other_services_template_is_written() -> None:
    fake = FakeCluster([node(f"t{i}", "inference", T4) for i in range(4)])
    for name in ("denied", "chat"):
        fake.add_service(inference_service(name, 2))
    cluster = FaultyCluster(fake=fake)
    cluster.run()
    for name in ("denied", "chat"):  # both get a new image
        fake.services[f"serve/{name}"]["spec"]["template"]["spec"]["containers"][0]["image"] = "server:2"
    cluster.faults.append(
        Fault(
            lambda a: isinstance(a, ApplyDeployment) and a.roll and a.ref.name == "denied",
            422,
            "Invalid",
            'admission webhook "images.example.com" denied the request: unsigned image server:2',
        )
    )
    outcome = cluster.run()
    assert outcome.failed == 1
    image = "spec", "template", "spec", "containers"
    assert _dig(fake.deployments["serve/chat"], image)[0]["image"] == "server:2"
    assert _dig(fake.deployments["serve/denied"], image)[0]["image"] == "server:1"
    fake.tick(1)
    cluster.run()
    applied = condition(fake, "serve/denied", "Applied")
    assert (applied["status"], applied["reason"]) == ("False", "Invalid")
    assert "writing the pod template of Deployment serve/denied failed: 422 Invalid" in applied["message"]
    chat = status_of(fake, "serve/chat").get("conditions", [])
    assert not [c for c in chat if c["type"] == "Applied" and c["status"] == "False"], "chat's writes went through"


def test_a_template_write_over_a_deployment_changed_since_the_pass_read_it_is_deferred_not_counted_done() -> None:
    fake = FakeCluster([node("t0", "inference", T4)])
    fake.add_service(inference_service("chat", 1))
    cluster = FaultyCluster(fake=fake)
    cluster.run()
    fake.services["serve/chat"]["spec"]["template"]["spec"]["containers"][0]["image"] = "server:2"
    conflict = Fault(lambda a: isinstance(a, ApplyDeployment), 409, "Conflict", "the object has been modified")
    cluster.faults.append(conflict)
    decision = decide(fake.world(), CONFIG)
    outcome = cluster.apply(decision, fake.now)
    writes = [r for a, r in zip(decision.actions, outcome.results, strict=True) if isinstance(a, ApplyDeployment)]
    assert writes == ["deferred"]
    assert outcome.failed == 0, "a conflict is no refusal: the next pass reads the Deployment afresh"
    cluster.faults.remove(conflict)
    cluster.run()
    assert fake.deployments["serve/chat"]["spec"]["template"]["spec"]["containers"][0]["image"] == "server:2"


def _dig(body: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        body = body[key]
    return body


def fresh(scenario: Scenario) -> FakeCluster:
    """The scenario's objects, not yet decided on: the first pass labels, taints, starts and deploys everything."""
    cluster = FakeCluster(scenario.nodes)
    for job in scenario.jobs:
        cluster.add_job(job)
    for service in scenario.services:
        cluster.add_service(service)
    return cluster


REFUSAL_CASES = [("first-pass", SCENARIOS[0], fresh), ("reclaim", SCENARIOS[1], changed)]


@pytest.mark.parametrize(("scenario", "build"), [c[1:] for c in REFUSAL_CASES], ids=[c[0] for c in REFUSAL_CASES])
def test_a_refusal_of_any_one_action_converges_to_an_equivalent_cluster(
    scenario: Scenario, build: Callable[[Scenario], FakeCluster]
) -> None:
    """Like a crash after any prefix (test_decide), but object by object: whichever one action the API refuses,
    the rest of the pass goes on, and once the API accepts again the cluster ends as the undisturbed one does."""
    reference = build(scenario)
    settle(reference)
    expected = _shape(reference)
    count = len(decide(build(scenario).world(), DECIDE_CONFIG).actions)
    assert count >= 10  # 12 on the first pass, 25 in the reclaim
    for index in range(count):
        fake = build(scenario)
        decision = decide(fake.world(), DECIDE_CONFIG)
        refused = decision.actions[index]
        cluster = FaultyCluster(fake=fake, faults=[Fault(lambda a, r=refused: a is r, 500, "InternalError", "no")])
        cluster.apply(decision, fake.now)
        fake.schedule()
        cluster.faults.clear()
        for _ in range(12):
            fake.finish_terminations()
            fake.tick(40)  # longer than the first backoff: the refused object is retried on the next pass
            if cluster.run(DECIDE_CONFIG).applied == 0 and decide(fake.world(), DECIDE_CONFIG).is_noop:
                break
        where = f"refused action {index} of {count}: {refused}"
        assert _shape(fake) == expected, where
        for job in scenario.jobs:
            name, spec = job["metadata"]["name"], job["spec"]
            status = fake.job_status(name)
            workers = len(fake.workers(name, live=False))
            assert workers <= spec["maxWorkers"], where
            if status["phase"] == "Running":
                assert spec["minWorkers"] <= workers == status["workers"]["current"], where
            else:
                assert (status["phase"], workers) == ("Queued", 0), where
        assert not any(fake.state(n) == "reclaiming" for n in fake.nodes), where
