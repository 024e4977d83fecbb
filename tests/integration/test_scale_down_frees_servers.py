"""A scale-down of an InferenceService frees whole servers on a real control plane (kube-apiserver, kube-scheduler
without the extender, kube-controller-manager's ReplicaSet controller, KWOK): the operator (as the ServiceAccount of
manifests/operator/rbac.yaml) writes ``controller.kubernetes.io/pod-deletion-cost`` on every replica
(:func:`lyra.operator.services.replica_deletion_costs`), and the ReplicaSet controller deletes by it. Left alone it
takes replicas from the servers holding the most, so three full servers scaled from 24 replicas to 8 would keep
about 3, 3 and 2 each and none could be lent; with the costs the servers Lyra lends first are emptied whole, the
remaining replicas stay on one server, and the two freed servers are lent.

The cluster is the module's own: four T4 inference servers of 8 GPUs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from kubernetes import client

from lyra.api import names
from lyra.core.ordering import lend_order
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from lyra.operator.services import replica_deletion_costs
from tests.operator_support import (
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_service,
    inference_service,
    node_states,
    profile_control_plane,
    scale_service,
    service_account_kubeconfig,
    t4_servers_profile,
    wait_quiet,
)

pytestmark = pytest.mark.integration

PROFILE = t4_servers_profile("four-t4-servers", 4)


@pytest.fixture(scope="module")
def four_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from profile_control_plane(tmp_path_factory, PROFILE, "four T4 servers", "scale-down")


class Server(NamedTuple):
    name: str
    gpus: int


def replicas(api: client.ApiClient, namespace: str) -> list[client.V1Pod]:
    """The service's replicas that are not being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def all_replicas(api: client.ApiClient, namespace: str) -> list[client.V1Pod]:
    return list(
        client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat").items
    )


def per_server(pods: list[client.V1Pod]) -> Counter[str]:
    return Counter(p.spec.node_name for p in pods)


def costed(api: client.ApiClient, namespace: str, count: int, ranks: dict[str, int]) -> bool:
    """``count`` replicas run, none is leaving, and each carries the cost the rule gives its server."""
    pods = all_replicas(api, namespace)
    if len(pods) != count or any(
        p.metadata.deletion_timestamp is not None or p.status.phase != "Running" or not p.spec.node_name for p in pods
    ):
        return False
    costs = replica_deletion_costs(per_server(pods), ranks)
    return all(
        (p.metadata.annotations or {}).get(names.POD_DELETION_COST_ANNOTATION) == str(costs[p.spec.node_name])
        for p in pods
    )


def emptied_first(before: Counter[str], ranks: dict[str, int], deleted: int) -> Counter[str]:
    """Where the replicas are after ``deleted`` of them go in the order of their costs (lowest first)."""
    costs = replica_deletion_costs(before, ranks)
    after = Counter(before)
    for server in sorted(before, key=costs.__getitem__):
        taken = min(after[server], deleted)
        after[server] -= taken
        deleted -= taken
    return +after


@pytest.mark.timeout(300)  # its own control plane starts first
def test_a_scale_down_deletes_the_replicas_of_the_servers_lent_first_and_frees_them_whole(
    four_servers: ControlPlane, tmp_path: Path
) -> None:
    with populate.admin_api(four_servers.kubeconfig) as api, temporary_namespace(api, "scale-down") as namespace:
        nodes = client.CoreV1Api(api).list_node(label_selector=f"{names.POOL_LABEL}={names.POOL_INFERENCE}").items
        ranks = {s.name: rank for rank, s in enumerate(lend_order(Server(n.metadata.name, 8) for n in nodes))}
        kubeconfig = service_account_kubeconfig(four_servers, api, tmp_path)
        operator = Operator(kubeconfig, tmp_path / "operator.log")
        create_service(api, namespace, inference_service("chat", replicas=24, gpus=1, gpu_type=T4))
        operator.start()
        try:
            wait_for(lambda: costed(api, namespace, 24, ranks), DEADLINE_S, "24 replicas running, each with its cost")
            before = per_server(replicas(api, namespace))
            print(f"replicas per server before the scale-down: {dict(sorted(before.items()))}")
            expected = emptied_first(before, ranks, 16)
            scale_service(api, namespace, "chat", 8)
            scaled = time.monotonic()
            wait_for(lambda: len(all_replicas(api, namespace)) == 8, DEADLINE_S, "16 replicas deleted")
            after = per_server(replicas(api, namespace))
            print(f"after, {time.monotonic() - scaled:.1f} s later: {dict(sorted(after.items()))}")
            assert after == expected, "the ReplicaSet controller deleted the replicas with the lowest costs first"
            freed = sorted(set(before) - set(after))
            assert len(after) == 1, f"the 8 replicas fill one server: {after}"
            assert len(freed) >= 2, f"whole servers freed: {freed}"
            wait_for(
                lambda: all(node_states(api)[n] == "loaned" for n in freed),
                DEADLINE_S,
                f"the freed servers {freed} lent",
            )
            assert [s for s, state in node_states(api).items() if state == "serving"] == list(after)
            wait_for(lambda: costed(api, namespace, 8, ranks), DEADLINE_S, "the 8 replicas' costs brought up to date")
            wait_quiet(operator, DEADLINE_S)
            assert_check_clean(kubeconfig)
            assert "Forbidden" not in operator.log.read_text(), "the RBAC of manifests/operator is not enough"
        except BaseException:
            print(f"--- {operator.log.name} ---\n" + operator.tail())
            raise
        finally:
            operator.stop()
