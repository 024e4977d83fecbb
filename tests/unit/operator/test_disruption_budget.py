"""A PodDisruptionBudget per InferenceService that asks for one (``spec.disruptionBudget``): applied when the service
asks, brought to a new ``maxUnavailable``, deleted when it stops asking; put back when deleted or edited by hand (the
operator reads the budgets it keeps), a pass with nothing to change writes nothing; a budget the service does not own
is never deleted; and a budget the API refuses holds back neither the replicas nor the status.

Each expectation is worked out here from the replicas the in-memory cluster made (their labels), not from the code
that renders the budget."""

from __future__ import annotations

from typing import Any

from lyra.operator.actions import ApplyDisruptionBudget
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.runner import describe

from .fake_cluster import T4, FakeCluster, inference_service, node
from .test_decide import settle
from .test_isolation import Fault, FaultyCluster

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=60)


def servers() -> FakeCluster:
    return FakeCluster([node(f"t{i}", "inference", T4) for i in range(4)])


def with_budget(name: str, replicas: int, max_unavailable: int | None) -> dict[str, Any]:
    body = inference_service(name, replicas, 8, gpuType=T4)
    if max_unavailable is not None:
        body["spec"]["disruptionBudget"] = {"maxUnavailable": max_unavailable}
    return body


def selects(budget: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in budget["spec"]["selector"]["matchLabels"].items())


def test_a_service_that_asks_gets_a_budget_over_exactly_its_replicas_and_a_quiet_pass_writes_nothing() -> None:
    cluster = servers()
    cluster.add_service(with_budget("chat", 3, 1))
    cluster.add_service(with_budget("other", 1, None))
    settle(cluster, config=CONFIG)
    assert set(cluster.budgets) == {"serve/chat"}, "only the service that asks has one"
    budget = cluster.budgets["serve/chat"]
    assert budget["spec"]["maxUnavailable"] == 1
    replicas = {k: p["metadata"]["labels"] for k, p in cluster.pods.items()}
    assert sorted(k for k, labels in replicas.items() if selects(budget, labels)) == [
        "serve/chat-r0", "serve/chat-r1", "serve/chat-r2"
    ]  # fmt: skip
    assert [(o["kind"], o["name"], o["uid"], o["controller"]) for o in budget["metadata"]["ownerReferences"]] == [
        ("InferenceService", "chat", "uid-chat", True)
    ], "the garbage collector deletes it with the service"
    assert [e.message for e in cluster.events if e.reason == "DisruptionBudget"] == [
        "PodDisruptionBudget chat: none -> maxUnavailable 1"
    ]
    assert decide(cluster.world(), CONFIG).is_noop


def test_the_budget_follows_the_spec_and_goes_when_the_service_stops_asking() -> None:
    cluster = servers()
    cluster.add_service(with_budget("chat", 3, 1))
    settle(cluster, config=CONFIG)
    cluster.services["serve/chat"]["spec"]["disruptionBudget"] = {"maxUnavailable": 2}
    decision = decide(cluster.world(), CONFIG)
    applied = [a for a in decision.actions if isinstance(a, ApplyDisruptionBudget)]
    assert [(a.ref.kind, a.ref.key, a.max_unavailable) for a in applied] == [("PodDisruptionBudget", "serve/chat", "2")]
    assert "ApplyDisruptionBudget PodDisruptionBudget serve/chat maxUnavailable 2" in describe(decision)
    settle(cluster, config=CONFIG)
    assert cluster.budgets["serve/chat"]["spec"]["maxUnavailable"] == 2
    assert len(cluster.pods) == 3, "the replicas are untouched"
    del cluster.services["serve/chat"]["spec"]["disruptionBudget"]
    settle(cluster, config=CONFIG)
    assert cluster.budgets == {}
    assert [e.message for e in cluster.events if e.reason == "DisruptionBudget"][-1] == (
        "PodDisruptionBudget chat: maxUnavailable 2 -> none (deleted)"
    )


def budget_events(cluster: FakeCluster) -> list[str]:
    return [e.message for e in cluster.events if e.reason == "DisruptionBudget"]


def test_a_budget_deleted_by_hand_is_put_back_by_the_next_pass() -> None:
    cluster = servers()
    cluster.add_service(with_budget("chat", 2, 1))
    settle(cluster, config=CONFIG)
    del cluster.budgets["serve/chat"]
    again = [a for a in decide(cluster.world(), CONFIG).actions if isinstance(a, ApplyDisruptionBudget)]
    assert [a.max_unavailable for a in again] == ["1"]
    settle(cluster, config=CONFIG)
    assert cluster.budgets["serve/chat"]["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"lyra.dev/service": "chat", "lyra.dev/role": "inference"}},
    }
    assert budget_events(cluster)[-1] == "PodDisruptionBudget chat: none -> maxUnavailable 1"
    assert decide(cluster.world(), CONFIG).is_noop


def budget_writes(cluster: FakeCluster) -> list[str]:
    return [a.max_unavailable for a in decide(cluster.world(), CONFIG).actions if isinstance(a, ApplyDisruptionBudget)]


def budget_condition(cluster: FakeCluster, key: str = "serve/chat") -> tuple[str, str, str] | None:
    """The service's ``DisruptionBudget`` condition as stored: status, reason, message (``None``: it has none)."""
    found = [
        c for c in cluster.services[key].get("status", {}).get("conditions", []) if c["type"] == "DisruptionBudget"
    ]
    assert len(found) <= 1, found
    return (found[0]["status"], found[0]["reason"], found[0]["message"]) if found else None


def warnings_on_the_service(cluster: FakeCluster) -> list[str]:
    return [e.message for e in cluster.events if e.ref.kind == "InferenceService" and e.type == "Warning"]


def test_the_condition_says_whether_the_budget_asked_for_is_in_place_and_goes_when_none_is_asked() -> None:
    cluster = servers()
    cluster.add_service(with_budget("chat", 3, 1))
    cluster.add_service(with_budget("other", 1, None))
    decide_once(cluster)
    assert budget_condition(cluster) == (
        "False", "BudgetApplying", "PodDisruptionBudget chat is missing: the operator applies maxUnavailable 1"
    )  # fmt: skip
    settle(cluster, config=CONFIG)
    assert budget_condition(cluster) == ("True", "BudgetInPlace", "PodDisruptionBudget chat: maxUnavailable 1")
    assert budget_condition(cluster, "serve/other") is None, "a service that asks for none carries no such condition"
    cluster.budgets["serve/chat"]["spec"]["maxUnavailable"] = 3  # kubectl edit
    decide_once(cluster)
    assert budget_condition(cluster) == (
        "False",
        "BudgetApplying",
        "PodDisruptionBudget chat has maxUnavailable 3: the operator applies maxUnavailable 1",
    )
    settle(cluster, config=CONFIG)
    assert budget_condition(cluster) == ("True", "BudgetInPlace", "PodDisruptionBudget chat: maxUnavailable 1")
    del cluster.services["serve/chat"]["spec"]["disruptionBudget"]
    settle(cluster, config=CONFIG)
    assert budget_condition(cluster) is None
    assert warnings_on_the_service(cluster) == []
    assert decide(cluster.world(), CONFIG).is_noop


def decide_once(cluster: FakeCluster) -> None:
    """One pass, its writes applied."""
    cluster.apply(decide(cluster.world(), CONFIG))


def test_a_budget_being_deleted_is_left_until_it_is_gone_then_the_one_asked_for_is_applied_once() -> None:
    """The operator deletes a budget in the foreground: it stays, marked, until the garbage collector removes it.
    A service that asks again meanwhile (or whose budget an admin deletes in the foreground) gets no write to the
    budget on its way out, pass after pass; once it is gone, one apply and one Event."""
    for stopped_asking in (True, False):
        cluster = servers()
        cluster.add_service(with_budget("chat", 3, 1))
        settle(cluster, config=CONFIG)
        if stopped_asking:
            del cluster.services["serve/chat"]["spec"]["disruptionBudget"]
            assert budget_writes(cluster) == [""], "the operator deletes the one the service owns"
        # As the API server answers a foreground deletion: the budget stays, with a deletionTimestamp.
        cluster.budgets["serve/chat"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        cluster.services["serve/chat"]["spec"]["disruptionBudget"] = {"maxUnavailable": 2}
        cluster.budgets["serve/chat"]["metadata"]["finalizers"] = ["foregroundDeletion"]
        said = len(budget_events(cluster))
        for _ in range(3):
            assert budget_writes(cluster) == [], stopped_asking
            settle(cluster, config=CONFIG)
            cluster.tick(1)
        assert cluster.budgets["serve/chat"]["spec"]["maxUnavailable"] == 1, "untouched on its way out"
        assert len(budget_events(cluster)) == said, "no Event says a change that did not happen"
        assert budget_condition(cluster) == (
            "False",
            "BudgetBeingDeleted",
            "PodDisruptionBudget chat is being deleted: the operator applies maxUnavailable 2 once it is gone",
        ), "the garbage collector's own finalizer holds it for a moment only: no Warning"
        assert warnings_on_the_service(cluster) == []
        del cluster.budgets["serve/chat"]  # the garbage collector removes it
        assert budget_writes(cluster) == ["2"]
        settle(cluster, config=CONFIG)
        assert cluster.budgets["serve/chat"]["spec"]["maxUnavailable"] == 2
        assert budget_events(cluster)[said:] == ["PodDisruptionBudget chat: none -> maxUnavailable 2"], stopped_asking
        assert budget_condition(cluster) == ("True", "BudgetInPlace", "PodDisruptionBudget chat: maxUnavailable 2")
        assert decide(cluster.world(), CONFIG).is_noop


def test_a_budget_held_in_deletion_by_a_finalizer_of_someone_else_is_named_with_one_warning() -> None:
    """A finalizer the garbage collector does not remove (a backup tool's, a policy engine's) holds the budget for as
    long as its owner keeps it, and meanwhile no budget protects the replicas: the condition names the finalizer, one
    Warning Event on the service says so (not one per pass, nor again after a restart, which reads the condition),
    another when what holds it changes; once it is gone, the one asked for is applied."""
    cluster = servers()
    cluster.add_service(with_budget("chat", 3, 1))
    settle(cluster, config=CONFIG)
    held = cluster.budgets["serve/chat"]["metadata"]
    held["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # kubectl delete pdb chat, with a finalizer on it
    held["finalizers"] = ["foregroundDeletion", "backup.example.com/hold"]
    message = (
        "PodDisruptionBudget chat is being deleted, held by finalizers the garbage collector does not remove "
        "(backup.example.com/hold): the operator applies maxUnavailable 1 once it is gone"
    )
    for _ in range(3):
        settle(cluster, config=CONFIG)
        cluster.tick(30)
    assert budget_condition(cluster) == ("False", "BudgetBeingDeleted", message)
    assert warnings_on_the_service(cluster) == [message]
    held["finalizers"] = ["backup.example.com/hold", "audit.example.com/keep"]
    settle(cluster, config=CONFIG)
    assert warnings_on_the_service(cluster)[1:] == [
        "PodDisruptionBudget chat is being deleted, held by finalizers the garbage collector does not remove "
        "(backup.example.com/hold, audit.example.com/keep): the operator applies maxUnavailable 1 once it is gone"
    ]
    assert budget_writes(cluster) == [], "nothing is written to a budget on its way out"
    del cluster.budgets["serve/chat"]  # the finalizers' owners let go; the garbage collector removes it
    settle(cluster, config=CONFIG)
    assert cluster.budgets["serve/chat"]["spec"]["maxUnavailable"] == 1
    assert budget_condition(cluster) == ("True", "BudgetInPlace", "PodDisruptionBudget chat: maxUnavailable 1")
    assert len(warnings_on_the_service(cluster)) == 2
    assert decide(cluster.world(), CONFIG).is_noop


def test_a_budget_edited_by_hand_is_brought_back_and_the_event_says_what_it_was() -> None:
    """Each edit a tenant or an admin can make with ``kubectl edit``: another ``maxUnavailable``, a percentage, a
    selector that takes in other pods, the owner reference dropped. The next pass applies the budget again."""
    edits: list[tuple[dict[str, Any], str]] = [
        ({"maxUnavailable": 3}, "maxUnavailable 3"),
        ({"maxUnavailable": "50%"}, "maxUnavailable 50%"),
        ({"selector": {"matchLabels": {"lyra.dev/role": "inference"}}}, "maxUnavailable 1 (another selector)"),
        (
            {"selector": {"matchLabels": {"lyra.dev/service": "chat", "lyra.dev/role": "inference"},
                          "matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
            "maxUnavailable 1 (another selector)",
        ),
        ({"metadata": {"ownerReferences": []}}, "maxUnavailable 1 (not owned by the service)"),
    ]  # fmt: skip
    for edit, shown in edits:
        cluster = servers()
        cluster.add_service(with_budget("chat", 2, 1))
        settle(cluster, config=CONFIG)
        before = dict(cluster.budgets["serve/chat"]["spec"])
        budget = cluster.budgets["serve/chat"]
        if "metadata" in edit:
            budget["metadata"].update(edit["metadata"])
        else:
            budget["spec"].update(edit)
        settle(cluster, config=CONFIG)
        assert cluster.budgets["serve/chat"]["spec"] == before, edit
        assert [o["uid"] for o in cluster.budgets["serve/chat"]["metadata"]["ownerReferences"]] == ["uid-chat"]
        assert budget_events(cluster)[-1] == f"PodDisruptionBudget chat: {shown} -> maxUnavailable 1", edit
        assert decide(cluster.world(), CONFIG).is_noop, edit


def test_a_budget_the_service_does_not_own_is_left_alone_when_it_asks_for_none() -> None:
    """A budget an admin wrote with the service's name and label, before the field existed or for a service that
    asks for none, is the admin's: the operator deletes only a budget the service owns."""
    cluster = servers()
    cluster.add_service(with_budget("chat", 2, None))
    settle(cluster, config=CONFIG)
    cluster.budgets["serve/chat"] = {
        "metadata": {"name": "chat", "namespace": "serve", "labels": {"lyra.dev/service": "chat"}},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"lyra.dev/service": "chat"}}},
    }
    assert decide(cluster.world(), CONFIG).is_noop
    settle(cluster, config=CONFIG)
    assert cluster.budgets["serve/chat"]["spec"]["minAvailable"] == 1
    assert budget_events(cluster) == []


def test_a_refused_budget_holds_back_neither_the_replicas_nor_the_status_and_is_retried() -> None:
    """An install whose operator may not write budgets (403): the service is deployed and Ready all the same, the
    refusal is reported on the budget, and the budget is applied once the API takes it."""
    fake = servers()
    fake.add_service(with_budget("chat", 2, 1))
    forbidden = Fault(
        lambda a: isinstance(a, ApplyDisruptionBudget),
        403,
        "Forbidden",
        'poddisruptionbudgets.policy "chat" is forbidden: User "system:serviceaccount:lyra-system:lyra-operator" '
        "cannot patch resource",
    )
    cluster = FaultyCluster(fake=fake, faults=[forbidden])
    for _ in range(4):
        cluster.run(CONFIG)
        fake.tick(1)
    assert fake.deployments["serve/chat"]["spec"]["replicas"] == 2
    ready = next(c for c in fake.services["serve/chat"]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert fake.budgets == {}
    refusals = [e for e in fake.events if e.reason == "ApplyFailed"]
    assert refusals
    assert {(e.ref.kind, e.ref.key) for e in refusals} == {("PodDisruptionBudget", "serve/chat")}
    assert "applying PodDisruptionBudget serve/chat failed: 403 Forbidden" in refusals[0].message
    assert not [e for e in fake.events if e.reason == "DisruptionBudget"], "no Event says a change that did not happen"
    cluster.faults.clear()
    fake.tick(600)  # past the longest backoff
    for _ in range(3):
        cluster.run(CONFIG)
        fake.tick(1)
    assert fake.budgets["serve/chat"]["spec"]["maxUnavailable"] == 1
    said = [(e.ref.kind, e.ref.key) for e in fake.events if e.reason == "DisruptionBudget"]
    assert said == [("PodDisruptionBudget", "serve/chat")], "once, on the budget, when it is applied"


def test_a_budget_that_would_refuse_every_eviction_is_refused_with_the_field_named() -> None:
    """``maxUnavailable: 0`` would let a tenant hold a node's drain back for good: the service is stopped alone
    (InvalidSpec naming the field), gets no Deployment and no budget, and the other service is served."""
    cluster = servers()
    cluster.add_service(with_budget("chat", 2, 0))
    cluster.add_service(with_budget("other", 1, 1))
    settle(cluster, config=CONFIG)
    assert set(cluster.budgets) == {"serve/other"}
    assert "serve/chat" not in cluster.deployments
    problems = [e.message for e in cluster.events if e.ref.name == "chat" and e.type == "Warning"]
    assert any("disruptionBudget.maxUnavailable" in m for m in problems), problems


def test_a_budget_whose_namespace_is_going_away_waits_for_the_next_pass_without_backoff() -> None:
    """An apply answered 404 (the namespace is being deleted) is no failure of the budget's own: no Warning, no
    backoff, and the next pass applies it again."""
    fake = servers()
    fake.add_service(with_budget("chat", 2, 1))
    gone = Fault(lambda a: isinstance(a, ApplyDisruptionBudget), 404, "NotFound", 'namespaces "serve" not found')
    cluster = FaultyCluster(fake=fake, faults=[gone])
    outcome = cluster.run(CONFIG)
    assert outcome.failed == 0
    assert not [e for e in fake.events if e.reason == "ApplyFailed"]
    cluster.faults.clear()
    fake.tick(1)
    cluster.run(CONFIG)
    assert fake.budgets["serve/chat"]["spec"]["maxUnavailable"] == 1
