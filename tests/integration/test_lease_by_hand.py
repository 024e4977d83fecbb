"""Two operators, and the leader Lease deleted or edited by hand, or timed in fractions of a second: never two writers.

Operator A leads, B stands by; then an administrator deletes the Lease, or edits it (the holder set to B's name, to
a stranger's or to none, the renew time, the lease duration), or, with ``--lease-duration 4.4 --renew-deadline 4.3``
(written 5 s in the Lease, an integer), deletes it or pauses the leader (SIGSTOP). One of the two leads again.

What the API server's audit log (``logs/audit.log``, every write with its user agent, which names the operator's
lease identity) must show, measured as ``test_split_brain`` measures it:

* every handover of the Lease from one operator to the other comes more than the old holder's renew deadline after
  the old holder's last accepted Lease write. That write was received after its renewal began, and the old holder's
  fence closes a renew deadline after that beginning: so the fences never overlapped, whatever either wrote.
* no write of the old holder (of any object) was accepted after the new holder's first Lease write;
* after a hand edit or deletion, no operator wrote the Lease (re-created or took it) before a lease duration had
  passed since the edit.

Before this was fixed, a standby re-created a deleted Lease (or took one that named it) at its next try, within a
retry period, while the old leader's fence stayed open until its own next renewal.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.waiting import wait_for
from tests.integration.test_split_brain import answered, audited_writes, by, identity_of, received
from tests.operator_support import DEADLINE_S, OPERATOR_NAMESPACE, Operator, lease_holder, service_account_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

AGENT = f"{names.OPERATOR_NAME}/"  # every operator write's user agent starts so; the administrator's does not


@dataclass(frozen=True)
class Timing:
    duration_s: float
    renew_deadline_s: float
    retry_period_s: float

    @property
    def flags(self) -> tuple[str, ...]:
        return (
            "--lease-duration", f"{self.duration_s:g}", "--renew-deadline", f"{self.renew_deadline_s:g}",
            "--retry-period", f"{self.retry_period_s:g}",
        )  # fmt: skip


WHOLE = Timing(4, 4 * 2 / 3, 4 * 2 / 15)  # the operators' defaults for --lease-duration 4
FRACTIONAL = Timing(4.4, 4.3, 0.5)

Action = Callable[[client.CoordinationV1Api, "Pair"], None]


@dataclass
class Pair:
    leader: Operator
    standby: Operator

    def identity(self, operator: Operator) -> str:
        """The operator's full lease identity, from its log (``... as <host>-<pid>-<hex>)``)."""
        pattern = re.compile(rf" as (\S+-{operator.pid}-[0-9a-f]+)\)$", re.MULTILINE)
        found = pattern.search(operator.log.read_text(errors="replace"))
        assert found, f"no identity in {operator.log.name}"
        return found.group(1)


def patch(**spec: Any) -> Action:
    def edit(leases: client.CoordinationV1Api, pair: Pair) -> None:
        values = {key: pair.identity(pair.standby) if value is STANDBY else value for key, value in spec.items()}
        leases.patch_namespaced_lease(names.OPERATOR_NAME, OPERATOR_NAMESPACE, {"spec": values})

    return edit


def delete(leases: client.CoordinationV1Api, pair: Pair) -> None:
    leases.delete_namespaced_lease(names.OPERATOR_NAME, OPERATOR_NAMESPACE)


STANDBY = object()  # stands for the standby's identity in a patch

CASES: dict[str, tuple[Timing, Action | None]] = {
    "deleted": (WHOLE, delete),
    "holder-the-standby": (WHOLE, patch(holderIdentity=STANDBY)),
    "holder-someone": (WHOLE, patch(holderIdentity="someone-else")),
    "no-holder": (WHOLE, patch(holderIdentity=None)),
    "renew-time": (WHOLE, patch(renewTime="2020-01-01T00:00:00.000000Z")),
    "duration-1": (WHOLE, patch(leaseDurationSeconds=1)),
    "fractional-deleted": (FRACTIONAL, delete),
    "fractional-paused": (FRACTIONAL, None),  # None: the leader is paused past its lease
}


@pytest.fixture(scope="module")
def admin(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    with populate.admin_api(cluster.kubeconfig) as api:
        yield api


@pytest.fixture(scope="module")
def kubeconfig(cluster: ControlPlane, admin: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return service_account_kubeconfig(cluster, admin, tmp_path_factory.mktemp("operator-account"))


def lease_writes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accepted writes of the Lease, in the order the API server received them."""
    found = [
        e
        for e in events
        if (e.get("objectRef") or {}).get("resource") == "leases"
        and (e.get("objectRef") or {}).get("name") == names.OPERATOR_NAME
        and (e.get("responseStatus") or {}).get("code", 0) < 400
    ]
    return sorted(found, key=received)


def leads_again(
    cluster: ControlPlane, admin: client.ApiClient, operators: tuple[Operator, ...], since: datetime, *, by_hand: bool
) -> bool:
    """The Lease names one of ``operators``, and one of them wrote it after ``since`` (after the hand-made write
    that came after ``since``, if ``by_hand``)."""
    holder = lease_holder(admin)
    if not any(identity_of(operator) in holder for operator in operators):
        return False
    writes = [e for e in lease_writes(audited_writes(cluster)) if received(e) >= since]
    if by_hand:
        hand = [e for e in writes if AGENT not in e.get("userAgent", "")]
        if not hand:
            return False
        writes = [e for e in writes if received(e) > received(hand[0])]
    if not by_hand:
        writes = by(identity_of(operators[1]), writes)  # the standby's takeover
    return any(AGENT in e.get("userAgent", "") for e in writes)


def stood_by(operator: Operator) -> int:
    return operator.log.read_text(errors="replace").count("standing by")


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_writer_whatever_is_done_to_the_lease(
    case: str, cluster: ControlPlane, admin: client.ApiClient, kubeconfig: Path, tmp_path: Path
) -> None:
    timing, action = CASES[case]
    leases = client.CoordinationV1Api(admin)
    a, b = (Operator(kubeconfig, tmp_path / f"operator-{i}.log", options=timing.flags) for i in "ab")
    began = datetime.now().astimezone()
    a.start()
    markers = [identity_of(a)]  # what names each operator in the audit log (taken while they run)
    try:
        wait_for(lambda: identity_of(a) in lease_holder(admin), DEADLINE_S, "the first operator to lead")
        b.start()
        markers.append(identity_of(b))
        wait_for(lambda: stood_by(b), DEADLINE_S, "the second operator to stand by")
        pair = Pair(leader=a, standby=b)
        acted = datetime.now().astimezone()
        paused = action is None
        if action is not None:
            action(leases, pair)
        else:
            assert a.process is not None
            a.process.send_signal(signal.SIGSTOP)
        try:
            # Someone leads again: the Lease names an operator, and an operator wrote it after the edit (the pause).
            wait_for(lambda: leads_again(cluster, admin, (a, b), acted, by_hand=not paused), DEADLINE_S, "a leader")
        finally:
            if paused:
                assert a.process is not None
                a.process.send_signal(signal.SIGCONT)
        leads_now = a if identity_of(a) in lease_holder(admin) else b
        count = len(by(identity_of(leads_now), lease_writes(audited_writes(cluster))))
        wait_for(
            lambda: len(by(identity_of(leads_now), lease_writes(audited_writes(cluster)))) >= count + 3,
            DEADLINE_S,
            "three renewals by the new leader",
        )
        if paused:
            wait_for(lambda: stood_by(a) >= 2, DEADLINE_S, "the resumed operator to stand by")
    except BaseException:
        for operator in (a, b):
            print(f"--- {operator.log.name} ---\n{operator.tail()}")
        raise
    finally:
        for operator in (a, b):
            operator.stop()

    events = [e for e in audited_writes(cluster) if received(e) >= began]
    ours = dict.fromkeys(markers, timing.renew_deadline_s)
    writes = lease_writes(events)
    by_hand = [e for e in writes if AGENT not in e.get("userAgent", "")]
    handovers = []
    previous: tuple[str, datetime] | None = None
    for event in writes:
        writer = next((marker for marker in ours if marker in event.get("userAgent", "")), None)
        if writer is None:
            continue
        if previous is not None and previous[0] != writer:
            gap = (received(event) - previous[1]).total_seconds()
            handovers.append(gap)
            assert gap > ours[previous[0]], f"{case}: a handover {gap:.2f} s after the old holder's last renewal"
            late = [e for e in by(previous[0], events) if received(e) >= received(event)]
            accepted = [e for e in late if (e.get("responseStatus") or {}).get("code", 0) < 400]
            assert not accepted, [(e["verb"], e["requestURI"], e["requestReceivedTimestamp"]) for e in accepted]
        previous = (writer, received(event))
    if action is not None:
        assert len(by_hand) == 1, by_hand
        edited = received(by_hand[0])
        # Writes received while the edit was being served are concurrent with it: the API server may commit either
        # first (CI saw an operator's renewal received 2 ms after the edit and accepted, committed before it; one
        # committed after would have carried a stale resourceVersion and got 409). Only writes received once the
        # edit was answered come after it for certain.
        after = [e for e in writes if received(e) > answered(by_hand[0]) and AGENT in e.get("userAgent", "")]
        first = (received(after[0]) - edited).total_seconds()
        assert first >= timing.duration_s, f"{case}: the Lease was written {first:.2f} s after the edit"
        print(f"{case}: first operator write of the Lease {first:.2f} s after the edit; handovers {handovers}")
    else:
        assert handovers, "the standby never took over"
        print(f"{case}: handovers {[f'{gap:.2f}' for gap in handovers]} s after the last renewal")
