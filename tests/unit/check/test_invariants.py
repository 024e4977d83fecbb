"""`lyra check`'s invariants over plain objects: a clean cluster passes, and each invariant broken once (scenarios as
data: a change to the clean cluster and the one violation it must cause)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from lyra.api import names
from lyra.check.invariants import (
    DEFAULT_GANG_TIMEOUT_S,
    DEFAULT_RECLAIM_DEADLINE_S,
    Invariant,
    Limits,
    Report,
    check,
)
from lyra.core.model import LoanState

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NAMESPACE = "ml"
JOB_UID = "uid-train"
Objects = dict[str, list[dict[str, Any]]]


def at(seconds_ago: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(NOW - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, pool: str, state: str | None = None, *, gpus: int = 8, **annotations: str) -> dict[str, Any]:
    labels = {names.POOL_LABEL: pool, names.GPU_PRODUCT_LABEL: "Tesla-T4"}
    taints = []
    if state is not None:
        labels[names.STATE_LABEL] = state
        taints.append({"key": names.STATE_TAINT, "value": state, "effect": names.TAINT_EFFECT})
    return {
        "metadata": {"name": name, "labels": labels, "annotations": dict(annotations)},
        "spec": {"taints": taints},
        "status": {"allocatable": {names.GPU_RESOURCE: str(gpus)}},
    }


def worker(
    index: int, role: str, node_name: str, *, job: str = "train", uid: str = JOB_UID, phase: str = "Running"
) -> dict[str, Any]:
    owner = {"apiVersion": names.API_VERSION, "kind": names.TRAINING_JOB_KIND, "name": job, "uid": uid,
             "controller": True}  # fmt: skip
    return {
        "metadata": {
            "name": f"{job}-w{index}",
            "namespace": NAMESPACE,
            "labels": {names.ROLE_LABEL: role, names.JOB_LABEL: job},
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }


def replica(name: str, node_name: str) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "chat-7c9f", "uid": "uid-rs", "controller": True}
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {names.ROLE_LABEL: names.ROLE_INFERENCE, names.SERVICE_LABEL: "chat"},
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running"},
    }


def clean_cluster() -> Objects:
    """A training node, four inference nodes in each loan state, a replica and an elastic job of 2 base workers
    and 1 flexible on a loaned and a training node, running for an hour."""
    return {
        "nodes": [
            node("train-0", names.POOL_TRAINING),
            node("t4-serving", names.POOL_INFERENCE, LoanState.SERVING),
            node("t4-idle", names.POOL_INFERENCE, LoanState.IDLE, **{names.IDLE_SINCE_ANNOTATION: at(10)}),
            node("t4-loaned", names.POOL_INFERENCE, LoanState.LOANED),
            node(
                "t4-reclaiming",
                names.POOL_INFERENCE,
                LoanState.RECLAIMING,
                **{names.RECLAIM_STARTED_ANNOTATION: at(30)},
            ),
            node("t4-new", names.POOL_INFERENCE, gpus=0),  # no GPUs reported yet, nothing of Lyra's written
            node("cpu-0", "other"),
        ],
        "pods": [
            replica("chat-1", "t4-serving"),
            worker(0, names.ROLE_BASE, "t4-loaned"),
            worker(1, names.ROLE_BASE, "train-0"),
            worker(2, names.ROLE_FLEXIBLE, "t4-reclaiming"),
            # A worker of an earlier, failed run of the queued job: finished, it holds nothing.
            worker(0, names.ROLE_BASE, "t4-serving", job="waiting", uid="uid-waiting", phase="Failed"),
        ],
        "jobs": [
            {
                "metadata": {"name": "train", "namespace": NAMESPACE, "uid": JOB_UID, "creationTimestamp": at(4000)},
                "spec": {"minWorkers": 2, "maxWorkers": 4, "gpusPerWorker": 4},
                "status": {"phase": "Running", "startedAt": at(3600), "workers": {"current": 3, "target": 3}},
            },
            {
                "metadata": {"name": "waiting", "namespace": NAMESPACE, "uid": "uid-waiting"},
                "spec": {"minWorkers": 8, "maxWorkers": 8, "gpusPerWorker": 8},
                "status": {"phase": "Queued"},
            },
        ],
        "services": [
            {
                "metadata": {"name": "chat", "namespace": NAMESPACE, "uid": "uid-chat"},
                "spec": {"gpusPerReplica": 8, "disruptionBudget": {"maxUnavailable": 1}},
            },
            {"metadata": {"name": "plain", "namespace": NAMESPACE, "uid": "uid-plain"}, "spec": {"gpusPerReplica": 8}},
        ],
        "budgets": [
            {
                "metadata": {
                    "name": "chat",
                    "namespace": NAMESPACE,
                    "labels": {names.SERVICE_LABEL: "chat", names.ROLE_LABEL: names.ROLE_INFERENCE},
                    "ownerReferences": [
                        {
                            "apiVersion": names.API_VERSION,
                            "kind": names.INFERENCE_SERVICE_KIND,
                            "name": "chat",
                            "uid": "uid-chat",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "maxUnavailable": 1,
                    "selector": {"matchLabels": {names.ROLE_LABEL: names.ROLE_INFERENCE, names.SERVICE_LABEL: "chat"}},
                },
            },
            # An admin's own budget for a service that asks for none: not the operator's, not judged.
            {"metadata": {"name": "plain", "namespace": NAMESPACE}, "spec": {"minAvailable": 1}},
        ],
    }


def checked(objects: Objects, limits: Limits | None = None) -> Report:
    return check(
        nodes=objects["nodes"],
        pods=objects["pods"],
        jobs=objects["jobs"],
        services=objects["services"],
        budgets=objects["budgets"],
        now=NOW,
        limits=limits,
    )


def run(objects: Objects, limits: Limits | None = None) -> list[tuple[str, str, str]]:
    return [(v.invariant.value, v.kind, v.key) for v in checked(objects, limits).violations]


def test_a_clean_cluster_has_no_violation() -> None:
    objects = clean_cluster()
    report = checked(objects)
    assert report.clean, report.violations
    assert report.services == 2
    assert (report.nodes, report.pods, report.jobs) == (7, 5, 2)


def _named(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects[kind] if o["metadata"]["name"] == name)


def _set_state_label(objects: Objects, node_name: str, value: str) -> None:
    _named(objects, "nodes", node_name)["metadata"]["labels"][names.STATE_LABEL] = value


def _taints(objects: Objects, node_name: str) -> list[dict[str, Any]]:
    taints: list[dict[str, Any]] = _named(objects, "nodes", node_name)["spec"]["taints"]
    return taints


def _job_status(objects: Objects, job: str = "train") -> dict[str, Any]:
    status: dict[str, Any] = _named(objects, "jobs", job)["status"]
    return status


def _pod(objects: Objects, name: str) -> dict[str, Any]:
    return _named(objects, "pods", name)


def _strip(pod: dict[str, Any]) -> None:
    """``kubectl label pod ... lyra.dev/role- lyra.dev/job-``: what a tenant may do to its own pods."""
    pod["metadata"]["labels"] = {}


POD = "Pod"
NODE = "Node"
SERVICE = names.INFERENCE_SERVICE_KIND
JOB = names.TRAINING_JOB_KIND
W = f"{NAMESPACE}/train-w"

#: (what is changed, the change, the one violation it causes: invariant, kind, object).
SCENARIOS: list[tuple[str, Callable[[Objects], None], tuple[str, str, str]]] = [
    ("the state taint removed", lambda o: _taints(o, "t4-loaned").clear(), ("node-state", NODE, "t4-loaned")),
    ("the taint's value differs from the label", lambda o: _taints(o, "t4-idle")[0].update(value="serving"),
     ("node-state", NODE, "t4-idle")),
    ("the taint's effect is not NoSchedule", lambda o: _taints(o, "t4-idle")[0].update(effect="PreferNoSchedule"),
     ("node-state", NODE, "t4-idle")),
    ("two state taints", lambda o: _taints(o, "t4-idle").append(
        {"key": names.STATE_TAINT, "value": "idle", "effect": "NoExecute"}), ("node-state", NODE, "t4-idle")),
    ("a state label that is no loan state", lambda o: (_set_state_label(o, "t4-idle", "lent"),
     _taints(o, "t4-idle")[0].update(value="lent")), ("node-state", NODE, "t4-idle")),
    ("an inference node with GPUs and no state", lambda o: _named(o, "nodes", "t4-new")["status"].update(
        allocatable={names.GPU_RESOURCE: "8"}), ("node-state", NODE, "t4-new")),
    ("a replica on a loaned node", lambda o: _pod(o, "chat-1")["spec"].update(nodeName="t4-loaned"),
     ("inference-placement", POD, f"{NAMESPACE}/chat-1")),
    ("a replica on a training node", lambda o: _pod(o, "chat-1")["spec"].update(nodeName="train-0"),
     ("inference-placement", POD, f"{NAMESPACE}/chat-1")),
    ("a base worker on a serving node", lambda o: _pod(o, "train-w0")["spec"].update(nodeName="t4-serving"),
     ("training-placement", POD, f"{W}0")),
    ("a flexible worker on an idle node", lambda o: _pod(o, "train-w2")["spec"].update(nodeName="t4-idle"),
     ("training-placement", POD, f"{W}2")),
    ("a worker on a node outside the pools", lambda o: _pod(o, "train-w1")["spec"].update(nodeName="cpu-0"),
     ("training-placement", POD, f"{W}1")),
    ("a partial base gang past the gang timeout", lambda o: _pod(o, "train-w1")["status"].update(phase="Pending"),
     ("partial-gang", JOB, f"{NAMESPACE}/train")),
    ("more live workers than the target", lambda o: _job_status(o)["workers"].update(target=2),
     ("workers-over-limit", JOB, f"{NAMESPACE}/train")),
    ("more live workers than maxWorkers", lambda o: _named(o, "jobs", "train")["spec"].update(maxWorkers=2),
     ("workers-over-limit", JOB, f"{NAMESPACE}/train")),
    ("a job without a phase", lambda o: _named(o, "jobs", "waiting").pop("status"),
     ("job-accounted", JOB, f"{NAMESPACE}/waiting")),
    ("a worker owned by an earlier run of its job", lambda o: _pod(o, "train-w2")["metadata"]["ownerReferences"][0]
     .update(uid="uid-earlier"), ("job-accounted", POD, f"{W}2")),
    ("a worker of a job that does not exist", lambda o: _pod(o, "train-w2")["metadata"]["ownerReferences"][0]
     .update(name="gone", uid="uid-gone"), ("job-accounted", POD, f"{W}2")),
    ("a worker stripped of its labels", lambda o: _strip(_pod(o, "train-w2")), ("worker-labels", POD, f"{W}2")),
    ("a worker whose role label is removed", lambda o: _pod(o, "train-w2")["metadata"]["labels"].pop(
        names.ROLE_LABEL), ("worker-labels", POD, f"{W}2")),
    ("a worker labelled with another job", lambda o: _pod(o, "train-w1")["metadata"]["labels"].update(
        {names.JOB_LABEL: "waiting"}), ("worker-labels", POD, f"{W}1")),
    ("a node reclaiming past its deadline", lambda o: _named(o, "nodes", "t4-reclaiming")["metadata"].update(
        annotations={names.RECLAIM_STARTED_ANNOTATION: at(DEFAULT_RECLAIM_DEADLINE_S + 1)}),
     ("reclaim-deadline", NODE, "t4-reclaiming")),
    ("a node reclaiming without its start time", lambda o: _named(o, "nodes", "t4-reclaiming")["metadata"].update(
        annotations={}), ("reclaim-deadline", NODE, "t4-reclaiming")),
    ("a service's budget deleted", lambda o: o["budgets"].pop(0), ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a service's budget being deleted", lambda o: o["budgets"][0]["metadata"].update(deletionTimestamp=at(1)),
     ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a budget's maxUnavailable edited", lambda o: o["budgets"][0]["spec"].update(maxUnavailable=2),
     ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a budget as a percentage", lambda o: o["budgets"][0]["spec"].update(maxUnavailable="50%"),
     ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a budget with a minAvailable", lambda o: o["budgets"][0]["spec"].update(minAvailable=1),
     ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a budget selecting every replica", lambda o: o["budgets"][0]["spec"]["selector"]["matchLabels"].pop(
        names.SERVICE_LABEL), ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a budget narrowed by an expression", lambda o: o["budgets"][0]["spec"]["selector"].update(
        matchExpressions=[{"key": "tier", "operator": "Exists"}]), ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a budget owned by an earlier service", lambda o: o["budgets"][0]["metadata"]["ownerReferences"][0].update(
        uid="uid-earlier"), ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
    ("a budget left after the service stopped asking", lambda o: _named(o, "services", "chat")["spec"].pop(
        "disruptionBudget"), ("disruption-budget", SERVICE, f"{NAMESPACE}/chat")),
]  # fmt: skip


def test_a_service_being_deleted_and_a_budget_of_no_service_are_not_judged() -> None:
    objects = clean_cluster()
    _named(objects, "services", "chat")["metadata"]["deletionTimestamp"] = at(1)
    objects["budgets"].pop(0)
    objects["budgets"].append(copy.deepcopy(clean_cluster()["budgets"][0]) | {"metadata": {"name": "gone"}})
    assert run(objects) == []


def test_a_budget_violation_says_what_differs() -> None:
    objects = clean_cluster()
    objects["budgets"][0]["spec"].update(maxUnavailable=3, minAvailable=1)
    [violation] = checked(objects).violations
    assert violation.message == (
        "asks for maxUnavailable 1, and PodDisruptionBudget chat has maxUnavailable 3; has minAvailable 1"
    )


def test_a_budget_held_in_deletion_is_reported_with_what_holds_it() -> None:
    objects = clean_cluster()
    objects["budgets"][0]["metadata"].update(deletionTimestamp=at(1), finalizers=["example.com/hold"])
    [violation] = checked(objects).violations
    assert violation.message == (
        "asks for maxUnavailable 1, and PodDisruptionBudget chat is being deleted (finalizers: example.com/hold): "
        "the operator applies it once that one is gone"
    )


@pytest.mark.parametrize(("change", "expected"), [(s[1], s[2]) for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_each_broken_invariant_is_found_once(change: Callable[[Objects], None], expected: tuple[str, str, str]) -> None:
    objects = clean_cluster()
    change(objects)
    assert run(objects) == [expected]


def test_every_invariant_has_a_scenario() -> None:
    assert {s[2][0] for s in SCENARIOS} == {i.value for i in Invariant}


@pytest.mark.parametrize(
    ("started_ago", "timeout", "violated"),
    [(3600, DEFAULT_GANG_TIMEOUT_S, True), (30, DEFAULT_GANG_TIMEOUT_S, False), (3600, 7200, False)],
)
def test_a_partial_gang_is_a_violation_only_past_the_gang_timeout(
    started_ago: float, timeout: float, violated: bool
) -> None:
    objects = clean_cluster()
    _pod(objects, "train-w1")["status"]["phase"] = "Pending"
    _job_status(objects)["startedAt"] = at(started_ago)
    found = run(objects, Limits(gang_timeout_s=timeout))
    assert found == ([("partial-gang", JOB, f"{NAMESPACE}/train")] if violated else [])


def test_workers_completing_and_terminating_pods_are_not_violations() -> None:
    objects = clean_cluster()
    _pod(objects, "train-w1")["status"]["phase"] = "Succeeded"  # one base worker done: the job is completing
    _pod(objects, "train-w2")["metadata"]["deletionTimestamp"] = at(1)  # leaving: not live
    _job_status(objects)["workers"]["target"] = 1
    _pod(objects, "train-w2")["metadata"]["ownerReferences"][0].update(name="gone")  # a terminating orphan is going
    assert run(objects) == []


def test_a_tenants_pods_labelled_as_lyras_are_not_judged() -> None:
    objects = clean_cluster()
    tenant = {names.ROLE_LABEL: names.ROLE_BASE, names.JOB_LABEL: "nosuch"}
    objects["pods"] += [
        {"metadata": {"name": "mine", "namespace": "team", "labels": tenant}, "spec": {"nodeName": "t4-serving"},
         "status": {"phase": "Running"}},
        {"metadata": {"name": "fake-replica", "namespace": "team", "labels": {names.ROLE_LABEL: names.ROLE_INFERENCE}},
         "spec": {"nodeName": "t4-loaned"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "train-w9", "namespace": NAMESPACE, "labels": {names.ROLE_LABEL: names.ROLE_BASE,
         names.JOB_LABEL: "train"}}, "spec": {"nodeName": "train-0"}, "status": {"phase": "Running"}},
    ]  # fmt: skip
    report = check(nodes=objects["nodes"], pods=objects["pods"], jobs=objects["jobs"], now=NOW)
    assert report.clean, report.violations
    assert report.pods == 5, "judged: Lyra's pods (by owner) only"


def test_a_stripped_worker_on_a_serving_server_is_caught() -> None:
    objects = clean_cluster()
    _strip(_pod(objects, "train-w2"))
    _set_state_label(objects, "t4-reclaiming", "serving")  # a reclaim that reported itself complete
    _taints(objects, "t4-reclaiming")[0]["value"] = "serving"
    assert run(objects) == [("training-placement", POD, f"{W}2"), ("worker-labels", POD, f"{W}2")]
    assert "unlabelled worker on inference node t4-reclaiming, which is serving" in str(
        check(nodes=objects["nodes"], pods=objects["pods"], jobs=objects["jobs"], now=NOW).violations
    )


def test_a_terminating_worker_still_holds_its_node() -> None:
    objects = clean_cluster()
    _pod(objects, "train-w2")["metadata"]["deletionTimestamp"] = at(1)
    _set_state_label(objects, "t4-reclaiming", "serving")
    _taints(objects, "t4-reclaiming")[0]["value"] = "serving"
    assert run(objects) == [("training-placement", POD, f"{W}2")]


@pytest.mark.parametrize(
    "garbage",
    [
        {},
        {"metadata": "x", "spec": [], "status": 3},
        {"metadata": {"name": "n", "labels": {names.POOL_LABEL: names.POOL_INFERENCE}}, "spec": {"taints": "x"}},
        {"metadata": {"labels": {names.ROLE_LABEL: names.ROLE_BASE}, "ownerReferences": "x"}, "status": {}},
    ],
)
def test_malformed_objects_are_reported_or_ignored_never_a_crash(garbage: dict[str, Any]) -> None:
    objects = clean_cluster()
    for kind in ("nodes", "pods", "jobs"):
        objects[kind].append(copy.deepcopy(garbage))
    report = check(nodes=objects["nodes"], pods=objects["pods"], jobs=objects["jobs"], now=NOW)
    assert all(v.message for v in report.violations)


def test_the_default_limits_are_the_operators() -> None:
    from lyra.operator.config import OperatorConfig

    assert OperatorConfig().gang_timeout_s == DEFAULT_GANG_TIMEOUT_S
    assert OperatorConfig().reclaim_deadline_s == DEFAULT_RECLAIM_DEADLINE_S


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_limits_refuse_nonsense(bad: float) -> None:
    with pytest.raises(ValueError, match="finite number of seconds"):
        Limits(gang_timeout_s=bad)
