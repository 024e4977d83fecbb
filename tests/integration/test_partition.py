"""A partition between the operator and the API server, healed: the operator leads again and acts on what changed
while it could not see.

The operator (as its ServiceAccount) reaches the real kube-apiserver only through :mod:`tests.partition_proxy`, a
TCP relay. An elastic T4 job runs on the servers the operator lent; then the network is cut: every connection the
operator has (its Lease's, its watches', its writes') and every one it makes goes silent, open and carrying nothing.
Meanwhile the InferenceService is scaled up, so that lent servers are needed back. Once the operator's Lease has gone
unrenewed for twice its duration (its fence closed long ago), the network heals: new connections are carried again,
and the old ones stay silent for good, as connections a partition broke do.

The operator must renew its Lease again within ``RELEAD_S`` of the heal, leave the connections it kept while it did
not lead (its watches reopened, its idle write connections closed), and every new replica must run within
``SERVE_S`` of the heal, the servers called back from the training job (scaled in) that borrowed them.

Before the Lease's requests were bounded by the renew deadline, the renewal under way waited on its silent connection
for ever, and every pass waited for it: the operator never led again. With that bound alone, the replicas ran 141 s
after the heal: the watches' silence bound (90 s then, counted from before the partition) and then a write on a
pooled connection the partition had silenced (the writes' 60 s timeout) came first.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    DEADLINE_S,
    LEASE_S,
    OPERATOR_NAMESPACE,
    Operator,
    assert_check_clean,
    kubeconfig_through,
    lend_to_an_elastic_job,
    running_replicas,
    scale_service,
    service_account_kubeconfig,
    workers,
)
from tests.partition_proxy import partition_proxy

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(900)]

#: Replicas of 2 GPUs after the scale-up: 5 T4 servers' worth, where the service had 1 and lent 7 (the elastic job's
#: 4 workers on 4 of them): 3 idle lent servers and one of the job's come back, and the job is scaled in to 3.
WANTED = 20
#: The Lease renewed after the heal within: the attempt under way ends at its renew deadline (2.7 s), the next comes
#: a retry period later (0.5 s); the rest is margin for a loaded machine.
RELEAD_S = 30.0
#: Every replica running after the heal within: the Lease renewed, the watches reopened, a pass reclaims (the job's
#: worker leaves within its 1 s grace) and the replicas are scheduled. Short of the watches' own silence bound
#: (``WATCH_SILENCE_S``); that the reconnection did it, the operator's log says.
SERVE_S = 40.0


def lease(api: client.ApiClient) -> client.V1Lease:
    return client.CoordinationV1Api(api).read_namespaced_lease(names.OPERATOR_NAME, OPERATOR_NAMESPACE)


def renewed_after(api: client.ApiClient, moment: datetime, identity: str) -> bool:
    spec = lease(api).spec
    return identity in (spec.holder_identity or "") and spec.renew_time is not None and spec.renew_time > moment


def unrenewed_for(api: client.ApiClient, seconds: float) -> bool:
    renewed = lease(api).spec.renew_time
    return renewed is not None and (datetime.now(UTC) - renewed).total_seconds() > seconds


def test_after_a_partition_heals_the_operator_leads_again_and_acts_on_what_changed_meanwhile(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    with (
        populate.admin_api(cluster.kubeconfig) as api,
        temporary_namespace(api, "partition") as namespace,
        partition_proxy(cluster.state.api_server) as proxy,
    ):
        relayed = kubeconfig_through(
            service_account_kubeconfig(cluster, api, tmp_path), proxy.url, "kubeconfig-relayed"
        )
        operator = Operator(relayed, tmp_path / "operator.log")
        try:
            lend_to_an_elastic_job(api, namespace, operator)
            identity = f"-{operator.pid}-"
            wait_for(lambda: identity in (lease(api).spec.holder_identity or ""), DEADLINE_S, "the operator to lead")

            proxy.partition()
            scale_service(api, namespace, "chat", WANTED)
            wait_for(lambda: unrenewed_for(api, 2 * LEASE_S), DEADLINE_S, "the Lease unrenewed for two durations")
            assert running_replicas(api, namespace, "chat") < WANTED, "nothing can act while the network is cut"

            proxy.heal()
            healed, healed_at = time.monotonic(), datetime.now(UTC)
            wait_for(lambda: renewed_after(api, healed_at, identity), RELEAD_S, "the Lease renewed after the heal")
            releaded_s = time.monotonic() - healed
            wait_for(
                lambda: running_replicas(api, namespace, "chat") == WANTED,
                SERVE_S,
                f"{WANTED} replicas running after the heal",
            )
            served_s = time.monotonic() - healed
            print(
                f"connections silenced: {proxy.silenced}; after the heal: the Lease renewed in {releaded_s:.1f} s, "
                f"every replica running in {served_s:.1f} s"
            )
            assert proxy.silenced >= 3, "the Lease's, the watches' and the writes' connections were cut"
            after_the_loss = operator.log.read_text(errors="replace").partition("standing by (not renewed")[2]
            assert "leading: new connections for the writes, the watches reopened" in after_the_loss
            assert len(workers(api, namespace, "elastic")) == 3, "one lent server's worker scaled in"
            assert_check_clean(cluster.kubeconfig)
        except BaseException:
            print(f"--- {operator.log.name} ---\n{operator.tail(120)}")
            raise
        finally:
            operator.stop()
