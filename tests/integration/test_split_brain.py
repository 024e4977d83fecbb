"""Two operators, one paused mid-reclaim past its lease: after the other takes over, the paused one writes nothing.

The local control plane audits every write (``logs/audit.log``) with the client's user agent, which names the
operator's lease identity (``lyra-operator/<version> (<host>-<pid>-<hex>)``). Operator A leads, B stands by. An
elastic T4 job grows on the servers A lends; the InferenceService is scaled up so that A reclaims them, and A is
stopped (SIGSTOP) as soon as the first server turns ``reclaiming``. B takes the lease over once A's record has been
unchanged for a lease duration, and finishes the reclaim. A is resumed (SIGCONT) with its pass half done: its fence
(the renew deadline passed long ago) stops it before its next write, and it stands by. The audit log then shows no
write by A accepted after B's first write of the lease (a request already past the fence when A was stopped goes
out on resume; node writes carry the node's resourceVersion and are refused, which the test counts), and
``lyra check`` finds the cluster consistent.

Repeated ``ROUNDS`` times (the pause lands at a different point of A's pass each time).
"""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

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
    create_job,
    custom,
    inference_service,
    lease_holder,
    node_states,
    running_replicas,
    scale_service,
    service_account_kubeconfig,
    workers,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

ROUNDS = 3
LEASE_S = 4  # renew deadline 2.7 s, retry period 0.5 s (client-go's proportions)
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def audited_writes(cluster: ControlPlane) -> list[dict[str, Any]]:
    writes = []
    for line in cluster.layout.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("verb") in WRITES and event.get("stage") == "ResponseComplete":
            writes.append(event)
    return writes


def received(event: dict[str, Any]) -> datetime:
    """When the API server received an audited request."""
    return _audit_time(event["requestReceivedTimestamp"])


def answered(event: dict[str, Any]) -> datetime:
    """When the API server answered an audited request (the time of its ``ResponseComplete`` stage)."""
    return _audit_time(event["stageTimestamp"])


def _audit_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def identity_of(operator: Operator) -> str:
    return f"-{operator.pid}-"


def by(operator_marker: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if operator_marker in e.get("userAgent", "")]


def service(replicas: int) -> dict[str, Any]:
    return inference_service("chat", replicas=replicas, gpus=8, max_replicas=8)


def pause_the_leader_mid_reclaim(
    cluster: ControlPlane, api: client.ApiClient, namespace: str, *, leader: Operator, standby: Operator, wanted: int
) -> int:
    """One round: grow, reclaim for ``wanted`` replicas, SIGSTOP the leader as the reclaim begins, let the standby
    take over and finish, SIGCONT the leader, and check the audit log: no write of the paused leader after the
    takeover was accepted. Returns how many it attempted (refused by the API server's resourceVersion check: a
    request already past the fence when the pause came)."""
    assert leader.process is not None
    wait_for(lambda: list(node_states(api).values()).count("loaned") == 6, DEADLINE_S, "six servers lent")
    wait_for(lambda: len(workers(api, namespace, "t4")) >= 17, DEADLINE_S, "the T4 job grown")
    scale_service(api, namespace, "chat", wanted)
    wait_for(
        lambda: "reclaiming" in node_states(api).values(),
        DEADLINE_S,
        "the leader to begin the reclaim",
        max_interval=0.05,
    )
    stood_by = leader.log.read_text(errors="replace").count("standing by")
    paused_at = datetime.now(UTC)
    leader.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: identity_of(standby) in lease_holder(api), DEADLINE_S, "the standby to take over")
        wait_for(lambda: running_replicas(api, namespace, "chat") == wanted, DEADLINE_S, "every replica running")
    finally:
        leader.process.send_signal(signal.SIGCONT)
    wait_for(
        lambda: leader.log.read_text(errors="replace").count("standing by") > stood_by,
        DEADLINE_S,
        "the resumed operator to stand by",
    )
    writes = audited_writes(cluster)
    takeover = min(
        received(e)
        for e in by(identity_of(standby), writes)
        if (e.get("objectRef") or {}).get("resource") == "leases" and received(e) >= paused_at
    )
    late = [e for e in by(identity_of(leader), writes) if received(e) >= takeover]
    assert by(identity_of(leader), writes), "the audit log must name the operator's writes"
    accepted = [e for e in late if (e.get("responseStatus") or {}).get("code", 0) < 400]
    assert not accepted, [(e["verb"], e["requestURI"], e["requestReceivedTimestamp"]) for e in accepted]
    return len(late)


def test_a_paused_leader_writes_nothing_after_the_takeover(cluster: ControlPlane, tmp_path: Path) -> None:
    with populate.admin_api(cluster.kubeconfig) as api, temporary_namespace(api, "split-brain") as namespace:
        kubeconfig = service_account_kubeconfig(cluster, api, tmp_path)
        custom(api).create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, service(2)
        )
        create_job(api, namespace, "t4", minWorkers=2, maxWorkers=40, gpusPerWorker=1, gpuTypes=[T4])
        operators = [Operator(kubeconfig, tmp_path / f"operator-{i}.log") for i in range(2)]
        operators[0].start()
        wait_for(lambda: identity_of(operators[0]) in lease_holder(api), DEADLINE_S, "the first operator to lead")
        operators[1].start()
        try:
            attempts = []
            for round_ in range(ROUNDS):
                leader, standby = operators
                wanted = 8 if round_ % 2 == 0 else 5
                attempts.append(
                    pause_the_leader_mid_reclaim(cluster, api, namespace, leader=leader, standby=standby, wanted=wanted)
                )
                scale_service(api, namespace, "chat", 2)
                operators.reverse()  # the standby leads now; the resumed one stands by
            print(f"writes a paused leader attempted after the takeover, per round (all refused): {attempts}")
            assert_check_clean(cluster.kubeconfig)
        except BaseException:
            for operator in operators:
                print(f"--- {operator.log.name} ---\n{operator.tail()}")
            raise
        finally:
            for operator in operators:
                operator.stop()
