"""The PodDisruptionBudget the operator keeps for an InferenceService that asks for one (``spec.disruptionBudget``,
docs/operations.md "Node maintenance") holds a drain back on a real control plane (kube-apiserver's Eviction API,
kube-controller-manager's disruption and ReplicaSet controllers, KWOK), the operator running as the ServiceAccount of
manifests/operator/rbac.yaml.

Two replicas, ``maxUnavailable: 1``: the operator applies the budget, over the replicas the service's
``status.selector`` names. Both servers cordoned as ``kubectl drain`` cordons them: the first eviction is accepted,
the second refused (429) while the first one's replacement cannot be placed; once the servers are uncordoned and the
replacement is ready, the second eviction goes through. The budget deleted by hand, then edited by hand, is put back
by the operator each time (the times printed with ``-s``), with an Event saying what it was. The service stops asking
while a finalizer holds the budget, and asks again for another ``maxUnavailable`` while the budget is being deleted:
the operator leaves the budget on its way out alone (a dry-run pass proposes nothing) and applies the new one once it
is gone (one Event each). The service stops asking: the budget is deleted, once (one Event).

The cluster is the module's own: two T4 inference servers of 8 GPUs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from lyra.api import names
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_service,
    custom,
    inference_service,
    lyra_check,
    profile_control_plane,
    service_account_kubeconfig,
    t4_servers_profile,
    wait_quiet,
)

pytestmark = pytest.mark.integration

PROFILE = t4_servers_profile("two-t4-servers", 2)


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from profile_control_plane(tmp_path_factory, PROFILE, "two T4 servers", "drain-budget")


def ready_replicas(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    """The service's replicas that run, are ready and are not being deleted, by name."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat").items
    return sorted(
        (
            p
            for p in pods
            if p.metadata.deletion_timestamp is None
            and p.status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ),
        key=lambda p: p.metadata.name,
    )


def service_selector(api: client.ApiClient, namespace: str) -> dict[str, str]:
    """``status.selector`` of the service (``kubectl get inferenceservice chat -o jsonpath='{.status.selector}'``),
    as the labels a budget matches."""
    service = custom(api).get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, "chat"
    )
    selector: str = (service.get("status") or {}).get("selector") or ""
    return dict(term.split("=", 1) for term in selector.split(",") if term)


def budget_allows(policy: client.PolicyV1Api, namespace: str, allowed: int, healthy: int) -> bool:
    try:
        status = policy.read_namespaced_pod_disruption_budget("chat", namespace).status
    except ApiException as error:
        if error.status == 404:  # not applied yet
            return False
        raise
    return (
        status is not None
        and status.observed_generation is not None
        and status.expected_pods == 2
        and status.current_healthy == healthy
        and status.disruptions_allowed == allowed
    )


def evict(core: client.CoreV1Api, namespace: str, pod: str) -> None:
    """What ``kubectl drain`` asks for each pod: an Eviction (the API server checks the pod's budgets)."""
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    core.create_namespaced_pod_eviction(pod, namespace, body)


def cordon(core: client.CoreV1Api, nodes: list[str], cordoned: bool) -> None:
    for node in nodes:
        core.patch_node(node, {"spec": {"unschedulable": cordoned}})


def budget_gone(policy: client.PolicyV1Api, namespace: str) -> bool:
    try:
        policy.read_namespaced_pod_disruption_budget("chat", namespace)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def budget_says(policy: client.PolicyV1Api, namespace: str, max_unavailable: int) -> bool:
    try:
        budget = policy.read_namespaced_pod_disruption_budget("chat", namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return budget.metadata.deletion_timestamp is None and budget.spec.max_unavailable == max_unavailable


def budget_events(core: client.CoreV1Api, namespace: str) -> Counter[str]:
    """The ``DisruptionBudget`` Events on the budget, by message (Events made within a second have no order)."""
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.kind=PodDisruptionBudget").items
    return Counter(e.message for e in events if e.reason == "DisruptionBudget")


#: A finalizer of the test's own, holding a deleted budget in place (as another controller's would).
HOLD = "example.com/held-by-test"


def ask_for(api: client.ApiClient, namespace: str, max_unavailable: int | None) -> None:
    """Set the service's ``spec.disruptionBudget`` (``None``: ask for none)."""
    wanted = None if max_unavailable is None else {"maxUnavailable": max_unavailable}
    custom(api).patch_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, "chat",
        {"spec": {"disruptionBudget": wanted}},
    )  # fmt: skip


def budget_condition(api: client.ApiClient, namespace: str) -> tuple[str, str, str] | None:
    """The service's ``DisruptionBudget`` condition: status, reason, message (``None``: it has none)."""
    service = custom(api).get_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, "chat"
    )
    found = [c for c in service.get("status", {}).get("conditions", []) if c["type"] == "DisruptionBudget"]
    return (found[0]["status"], found[0]["reason"], found[0]["message"]) if found else None


def service_warnings(core: client.CoreV1Api, namespace: str) -> Counter[str]:
    """The Warning Events ``DisruptionBudget`` on the service, by message."""
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.kind=InferenceService").items
    return Counter(e.message for e in events if e.reason == "DisruptionBudget" and e.type == "Warning")


def budget_deleting(policy: client.PolicyV1Api, namespace: str) -> bool:
    return policy.read_namespaced_pod_disruption_budget("chat", namespace).metadata.deletion_timestamp is not None


def release(policy: client.PolicyV1Api, namespace: str) -> None:
    """Take :data:`HOLD` off the budget, leaving any other finalizer (the garbage collector's own may still be there),
    at the version read: a write that lost a race with the garbage collector is read and tried again."""

    def released() -> bool:
        budget = policy.read_namespaced_pod_disruption_budget("chat", namespace)
        kept = [f for f in budget.metadata.finalizers or [] if f != HOLD]
        patch = [  # a JSON patch: a strategic merge would merge the list of finalizers, not replace it
            {"op": "test", "path": "/metadata/resourceVersion", "value": budget.metadata.resource_version},
            {"op": "replace", "path": "/metadata/finalizers", "value": kept},
        ]
        try:
            policy.patch_namespaced_pod_disruption_budget("chat", namespace, patch)
        except ApiException as error:
            if error.status in (404, 409, 422):  # gone already, or changed since the read (409, or 422: the test)
                return error.status == 404
            raise
        return True

    wait_for(released, DEADLINE_S, "the test's finalizer taken off the budget")


@pytest.mark.timeout(300)  # its own control plane starts first
def test_the_services_budget_holds_a_drain_back(two_servers: ControlPlane, tmp_path: Path) -> None:
    with populate.admin_api(two_servers.kubeconfig) as api, temporary_namespace(api, "drain-budget") as namespace:
        core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
        nodes = sorted(n.metadata.name for n in core.list_node().items)
        kubeconfig = service_account_kubeconfig(two_servers, api, tmp_path)
        operator = Operator(kubeconfig, tmp_path / "operator.log")
        service = inference_service("chat", replicas=2, gpus=1, gpu_type=T4)
        service["spec"]["disruptionBudget"] = {"maxUnavailable": 1}
        create_service(api, namespace, service)
        operator.start()
        try:
            wait_for(lambda: len(ready_replicas(core, namespace)) == 2, DEADLINE_S, "2 replicas ready")
            wait_for(lambda: service_selector(api, namespace), DEADLINE_S, "the service's status.selector")
            labels = service_selector(api, namespace)
            assert labels == {names.SERVICE_LABEL: "chat", names.ROLE_LABEL: names.ROLE_INFERENCE}
            wait_for(lambda: budget_allows(policy, namespace, 1, 2), DEADLINE_S, "the budget allowing 1 of 2")
            budget = policy.read_namespaced_pod_disruption_budget("chat", namespace)
            assert budget.spec.selector.match_labels == labels, "the replicas the service's status.selector names"
            assert [(o.kind, o.name) for o in budget.metadata.owner_references] == [("InferenceService", "chat")]
            cordon(core, nodes, True)  # `kubectl drain` cordons first; here every server, so no replacement lands
            first, second = (p.metadata.name for p in ready_replicas(core, namespace))
            evict(core, namespace, first)
            with pytest.raises(ApiException) as refused:
                evict(core, namespace, second)
            assert refused.value.status == 429, refused.value
            assert "disruption budget" in str(refused.value.body)
            assert len(ready_replicas(core, namespace)) == 1, "the second replica still serves"
            cordon(core, nodes, False)
            wait_for(lambda: budget_allows(policy, namespace, 1, 2), DEADLINE_S, "the replacement ready")
            evict(core, namespace, second)
            wait_for(lambda: len(ready_replicas(core, namespace)) == 2, DEADLINE_S, "both replicas back")
            # Deleted by hand, then edited by hand (as `kubectl delete pdb` and `kubectl edit pdb` do): put back.
            policy.delete_namespaced_pod_disruption_budget("chat", namespace)
            started = time.monotonic()
            wait_for(lambda: budget_says(policy, namespace, 1), DEADLINE_S, "the deleted budget put back")
            print(f"\nbudget deleted by hand: back in {time.monotonic() - started:.2f} s")
            policy.patch_namespaced_pod_disruption_budget("chat", namespace, {"spec": {"maxUnavailable": 2}})
            started = time.monotonic()
            wait_for(lambda: budget_says(policy, namespace, 1), DEADLINE_S, "the edited budget brought back")
            print(f"budget edited by hand: brought back in {time.monotonic() - started:.2f} s")
            applied = {  # the first apply, the budget put back, and brought back
                "PodDisruptionBudget chat: none -> maxUnavailable 1": 2,
                "PodDisruptionBudget chat: maxUnavailable 2 -> maxUnavailable 1": 1,
            }
            wait_for(lambda: budget_events(core, namespace) == applied, DEADLINE_S, "the Events saying what it was")
            in_place = ("True", "BudgetInPlace", "PodDisruptionBudget chat: maxUnavailable 1")
            wait_for(lambda: budget_condition(api, namespace) == in_place, DEADLINE_S, "the service saying so")
            # The service stops asking while a finalizer holds the budget: the operator's deletion leaves it, marked,
            # until the finalizer goes. Asked for again meanwhile, the operator proposes nothing for the budget on its
            # way out, and applies the new one, once, after it is gone.
            policy.patch_namespaced_pod_disruption_budget("chat", namespace, {"metadata": {"finalizers": [HOLD]}})
            ask_for(api, namespace, None)
            wait_for(lambda: budget_deleting(policy, namespace), DEADLINE_S, "the operator deleting the budget")
            ask_for(api, namespace, 2)
            wait_quiet(operator, DEADLINE_S)
            held = policy.read_namespaced_pod_disruption_budget("chat", namespace)
            assert held.metadata.deletion_timestamp is not None, "still held by the finalizer"
            assert held.spec.max_unavailable == 1, "nothing written to the budget on its way out"
            code, report = lyra_check(kubeconfig)
            assert code != 0
            assert [v["message"] for v in report["violations"]] == [
                f"asks for maxUnavailable 2, and PodDisruptionBudget chat is being deleted (finalizers: {HOLD}): "
                "the operator applies it once that one is gone"
            ]
            deleted = {"PodDisruptionBudget chat: maxUnavailable 1 -> none (deleted)": 1}
            assert budget_events(core, namespace) == {**applied, **deleted}
            holding = (
                "PodDisruptionBudget chat is being deleted, held by finalizers the garbage collector does not remove "
                f"({HOLD}): the operator applies maxUnavailable 2 once it is gone"
            )
            assert budget_condition(api, namespace) == ("False", "BudgetBeingDeleted", holding)
            wait_for(
                lambda: service_warnings(core, namespace) == {holding: 1}, DEADLINE_S, "one Warning on the service"
            )
            release(policy, namespace)
            wait_for(lambda: budget_says(policy, namespace, 2), DEADLINE_S, "the budget asked for again, applied")
            in_place = ("True", "BudgetInPlace", "PodDisruptionBudget chat: maxUnavailable 2")
            wait_for(lambda: budget_condition(api, namespace) == in_place, DEADLINE_S, "the service saying so")
            again = {"PodDisruptionBudget chat: none -> maxUnavailable 2": 1}
            wait_for(
                lambda: budget_events(core, namespace) == {**applied, **deleted, **again},
                DEADLINE_S,
                "one Event for the budget applied again",
            )
            ask_for(api, namespace, None)
            wait_for(lambda: budget_gone(policy, namespace), DEADLINE_S, "the budget deleted")
            wait_quiet(operator, DEADLINE_S)
            said = budget_events(core, namespace)
            deleted = {"PodDisruptionBudget chat: maxUnavailable 1 -> none (deleted)": 1,
                       "PodDisruptionBudget chat: maxUnavailable 2 -> none (deleted)": 1}  # fmt: skip
            assert said == {**applied, **deleted, **again}, said
            assert budget_condition(api, namespace) is None, "a service that asks for none carries no such condition"
            assert service_warnings(core, namespace) == {holding: 1}, "one Warning however many passes it was held"
            assert_check_clean(kubeconfig)
            assert "Forbidden" not in operator.log.read_text(), "the RBAC of manifests/operator is not enough"
        except BaseException:
            print(f"--- {operator.log.name} ---\n" + operator.tail())
            raise
        finally:
            cordon(core, nodes, False)
            operator.stop()
