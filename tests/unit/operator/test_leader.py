"""The leader Lease with client-go's semantics, on an in-memory Lease API and hand-driven clocks: expiry judged by
the candidate's own observation (never the holder's clock), the fence that closes a renew deadline after the last
renewal began (before any candidate may take over), conflicts on the Lease's resourceVersion, and the timing checks;
and each attempt bounded by its renew deadline, on the in-memory API and against a real socket that never answers.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from lyra.api import names
from lyra.apiserver_failures import describe_api_failure
from lyra.operator.leader import LeaderLease, LeaseTiming, lease_client
from tests.behaving_server import behaving_server, silent

TIMING = LeaseTiming(duration_s=15, renew_deadline_s=10, retry_period_s=2)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class LeaseApi:
    """One Lease, written only with the resourceVersion last read (as the API server does)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.down = False
        #: The timeout each request named (seconds left of its attempt's renew deadline).
        self.timeouts: list[float] = []

    def read_namespaced_lease(self, name: str, namespace: str, _request_timeout: float = 0) -> client.V1Lease:
        self.timeouts.append(_request_timeout)
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        return self._stored(name, namespace)

    def _stored(self, name: str, namespace: str) -> client.V1Lease:
        """The Lease as stored, as a read or a write returns it."""
        assert self.lease is not None
        spec = self.lease["spec"]
        return client.V1Lease(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, resource_version=str(self.version)),
            spec=client.V1LeaseSpec(
                holder_identity=spec.get("holderIdentity"),
                lease_duration_seconds=spec.get("leaseDurationSeconds"),
                acquire_time=_time(spec.get("acquireTime")),
                renew_time=_time(spec.get("renewTime")),
                lease_transitions=spec.get("leaseTransitions"),
            ),
        )

    def create_namespaced_lease(
        self, namespace: str, body: dict[str, Any], _request_timeout: float = 0
    ) -> client.V1Lease:
        self.timeouts.append(_request_timeout)
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")
        if self.lease is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        self.lease, self.version = {"spec": dict(body["spec"])}, self.version + 1
        return self._stored(names.OPERATOR_NAME, namespace)

    def replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any]) -> client.V1Lease:
        """A PUT, as the API server answers it for a Lease: it creates one when none exists, whatever resourceVersion
        the body carries (so the operator never renews with it)."""
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")
        if self.lease is not None and body["metadata"]["resourceVersion"] != str(self.version):
            raise ApiException(status=409, reason="Conflict")
        self.lease, self.version = {"spec": dict(body["spec"])}, self.version + 1
        return self._stored(name, namespace)

    def patch_namespaced_lease(
        self,
        name: str,
        namespace: str,
        body: dict[str, Any],
        _content_type: str | None = None,
        _request_timeout: float = 0,
    ) -> client.V1Lease:
        """A merge patch: 404 when there is no Lease, 409 when ``metadata.resourceVersion`` is not the current one,
        and a null removes its field."""
        assert _content_type == names.MERGE_PATCH
        self.timeouts.append(_request_timeout)
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        precondition = (body.get("metadata") or {}).get("resourceVersion")
        if precondition is not None and precondition != str(self.version):
            raise ApiException(status=409, reason="Conflict")
        merged = {**self.lease["spec"], **(body.get("spec") or {})}
        self.lease = {"spec": {key: value for key, value in merged.items() if value is not None}}
        self.version += 1
        return self._stored(name, namespace)

    # What an administrator does by hand (kubectl delete, edit, create): new resourceVersions, written by nobody's
    # LeaderLease.

    def delete(self) -> None:
        self.lease = None

    def edit(self, **spec: Any) -> None:
        assert self.lease is not None
        self.lease, self.version = {"spec": {**self.lease["spec"], **spec}}, self.version + 1

    def create_by_hand(self, **spec: Any) -> None:
        assert self.lease is None
        self.lease, self.version = {"spec": dict(spec)}, self.version + 1

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"].get("holderIdentity")


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def candidate(
    api: LeaseApi, name: str, clock: Clock, wall: Clock | None = None, timing: LeaseTiming = TIMING
) -> LeaderLease:
    return LeaderLease(
        client.ApiClient(), "lyra-system", identity=name, timing=timing, monotonic=clock, wall=wall or clock,
        coordination=api,  # type: ignore[arg-type]
    )  # fmt: skip


def leading(api: LeaseApi, name: str, clock: Clock, wall: Clock | None = None) -> LeaderLease:
    """A candidate that created the Lease: it watched the Lease's absence for a lease duration first."""
    lease = candidate(api, name, clock, wall)
    assert not lease.try_lead()
    clock.now += TIMING.duration_s
    assert lease.try_lead()
    return lease


def test_a_missing_lease_is_created_only_after_a_lease_duration_of_watching_it_missing() -> None:
    api, clock = LeaseApi(), Clock()
    first, second = candidate(api, "a", clock), candidate(api, "b", clock)
    assert not first.try_lead()
    clock.now += 1
    assert not second.try_lead()
    assert api.lease is None
    clock.now += 14.9
    assert not second.try_lead()
    assert first.try_lead()
    assert not second.try_lead()
    assert api.holder == "a"
    assert first.may_write()
    assert not second.may_write()


def test_a_candidate_takes_over_only_a_lease_duration_after_it_saw_the_last_renewal() -> None:
    api, clock = LeaseApi(), Clock()
    leading(api, "a", clock)
    standby = candidate(api, "b", clock)
    standby.try_lead()  # sees the record at t=1015
    clock.now += 14.9
    assert not standby.try_lead()
    clock.now += 0.2
    assert standby.try_lead()
    assert api.holder == "b"


def test_the_holders_clock_is_never_compared_with_the_candidates() -> None:
    """The leader's wall clock runs an hour behind: its renew times look stale, and it still keeps the lease."""
    api, clock = LeaseApi(), Clock()
    leader = leading(api, "a", clock, wall=Clock(clock.now - 3600))
    standby = candidate(api, "b", clock)
    for _ in range(20):
        assert not standby.try_lead()
        clock.now += 2
        assert leader.try_lead()
    assert api.holder == "a"


def test_the_fence_closes_a_renew_deadline_after_the_last_renewal_before_anyone_may_take_over() -> None:
    api, clock = LeaseApi(), Clock()
    leader, standby = leading(api, "a", clock), candidate(api, "b", clock)
    standby.try_lead()
    clock.now += 9.9
    assert leader.may_write()
    clock.now += 0.2  # paused: no renewal for more than the renew deadline
    assert not leader.may_write()
    assert not standby.try_lead(), "the standby may not take over yet"
    clock.now += 5
    assert standby.try_lead()
    assert not leader.try_lead(), "the old leader finds the lease taken and stands by"
    assert not leader.may_write()


def test_renewals_that_fail_past_the_renew_deadline_end_leadership() -> None:
    api, clock = LeaseApi(), Clock()
    leader = leading(api, "a", clock)
    api.down = True
    for _ in range(4):
        clock.now += 2
        assert leader.try_lead()  # still within the renew deadline
    clock.now += 2.1
    assert not leader.try_lead()
    assert leader.leading is False
    api.down = False
    assert leader.try_lead(), "its own record: it renews at once"


def test_two_candidates_racing_for_an_expired_lease_cannot_both_win() -> None:
    api, clock = LeaseApi(), Clock()
    leading(api, "gone", clock)
    first, second = candidate(api, "a", clock), candidate(api, "b", clock)
    first.try_lead()
    second.try_lead()
    clock.now += 16
    patch = api.patch_namespaced_lease

    def first_writes_in_between(
        name: str, namespace: str, body: dict[str, Any], _content_type: str | None = None, _request_timeout: float = 0
    ) -> client.V1Lease:
        if body["spec"]["holderIdentity"] == "b":
            api.patch_namespaced_lease = patch  # type: ignore[method-assign]
            assert first.try_lead()  # reads the version the second read, and writes first
        return patch(name, namespace, body, _content_type, _request_timeout)

    api.patch_namespaced_lease = first_writes_in_between  # type: ignore[method-assign]
    assert not second.try_lead()
    assert api.holder == "a"
    assert first.may_write()
    assert not second.may_write()


def test_release_closes_the_fence_and_leaves_no_holder_which_a_successor_takes_after_a_lease_duration() -> None:
    """A release is a record like any other (an administrator can write one by hand while the leader leads)."""
    api, clock = LeaseApi(), Clock()
    leader, standby = leading(api, "a", clock), candidate(api, "b", clock)
    standby.try_lead()
    leader.release()
    assert not leader.may_write()
    assert api.lease is not None
    assert api.holder is None
    assert not standby.try_lead()
    clock.now += 14.9
    assert not standby.try_lead()
    clock.now += 0.2
    assert standby.try_lead()


def test_a_lease_deleted_by_hand_closes_the_leaders_fence_at_its_next_renewal_and_is_recreated_a_duration_later() -> (
    None
):
    api, clock = LeaseApi(), Clock()
    leader, standby = leading(api, "a", clock), candidate(api, "b", clock)
    standby.try_lead()
    api.delete()
    clock.now += 1
    assert not standby.try_lead(), "a standby never creates a Lease it has just found missing"
    assert leader.may_write()  # it has not looked yet: its last renewal is 1 s old
    assert not leader.try_lead()
    assert not leader.may_write(), "the renewal found no Lease: the fence closed at once"
    assert api.lease is None, "nor does the old leader re-create it at once"
    clock.now += 14.9
    assert not standby.try_lead()
    assert not leader.try_lead()
    clock.now += 0.2
    assert standby.try_lead()
    assert not leader.try_lead()
    assert api.holder == "b"


@pytest.mark.parametrize("step", ["renewal", "release"])
def test_a_lease_deleted_between_the_leaders_read_and_its_write_stays_deleted(step: str) -> None:
    """``kubectl delete lease`` lands after the leader read the Lease and before it wrote it back. The write finds
    nothing and the fence closes at once; the Lease is not re-created (a PUT would have re-created it: the API
    server creates a Lease on update), so nobody writes it for a lease duration after the deletion."""
    api, clock = LeaseApi(), Clock()
    leader = leading(api, "a", clock)
    clock.now += 2
    read = api.read_namespaced_lease

    def deleted_once_read(name: str, namespace: str, _request_timeout: float = 0) -> client.V1Lease:
        found = read(name, namespace, _request_timeout)
        api.delete()
        return found

    api.read_namespaced_lease = deleted_once_read  # type: ignore[method-assign]
    if step == "renewal":
        assert not leader.try_lead()
    else:
        leader.release()
    api.read_namespaced_lease = read  # type: ignore[method-assign]
    assert not leader.may_write()
    assert api.lease is None, "the write re-created the deleted Lease"
    assert not leader.try_lead(), "it sees the Lease missing, like any candidate"
    clock.now += TIMING.duration_s - 0.1
    assert not leader.try_lead()
    assert api.lease is None
    clock.now += 0.2
    assert leader.try_lead(), "and creates it once it has seen it missing for a lease duration"


def test_a_standby_creates_a_deleted_lease_only_after_the_paused_leaders_fence_has_closed() -> None:
    """The leader renews and is paused; the Lease is deleted at once and the standby sees it missing at once: it
    may create the Lease only when the leader, which still counts its renewal as fresh, can no longer write."""
    api, clock = LeaseApi(), Clock()
    leader, standby = leading(api, "a", clock), candidate(api, "b", clock)
    standby.try_lead()
    clock.now += 2
    assert leader.try_lead()  # its last renewal, then it is paused
    api.delete()
    while not standby.try_lead():
        assert leader.may_write() or not standby.may_write()
        clock.now += 0.1
    assert not leader.may_write()
    assert clock.now - 1017 >= TIMING.duration_s


@pytest.mark.parametrize(
    "edit",
    [
        {"holderIdentity": "b"},  # the standby's own name
        {"holderIdentity": "someone"},
        {"holderIdentity": None},  # looks released
        {"renewTime": "2020-01-01T00:00:00.000000Z"},
        {"leaseDurationSeconds": 1},
        {"leaseDurationSeconds": 15},  # the same content: only the resourceVersion moved
    ],
    ids=["holder-the-standby", "holder-someone", "no-holder", "renew-time", "duration-1", "same-content"],
)
def test_a_lease_edited_by_hand_closes_the_fence_and_is_taken_only_a_lease_duration_after_the_edit(
    edit: dict[str, Any],
) -> None:
    api, clock = LeaseApi(), Clock()
    leader, standby = leading(api, "a", clock), candidate(api, "b", clock)
    standby.try_lead()
    clock.now += 1
    api.edit(**edit)
    edited = clock.now
    assert not standby.try_lead(), "the standby takes no Lease at once, not even one naming it"
    assert not leader.try_lead()
    assert not leader.may_write(), "the leader's renewal found a record it did not write: the fence closed at once"
    while not (standby.try_lead() or leader.try_lead()):
        assert clock.now - edited < TIMING.duration_s
        clock.now += 0.5
    assert clock.now - edited >= TIMING.duration_s
    assert leader.may_write() != standby.may_write()


def test_a_longer_duration_written_by_hand_is_waited_up_to_a_day() -> None:
    api, clock = LeaseApi(), Clock()
    leader, standby = leading(api, "a", clock), candidate(api, "b", clock)
    api.edit(leaseDurationSeconds=60)
    assert not leader.try_lead()
    assert not standby.try_lead()
    clock.now += 59.9
    assert not standby.try_lead()
    clock.now += 0.2
    assert standby.try_lead()
    api.edit(leaseDurationSeconds=10**9)
    assert not standby.try_lead()
    clock.now += 86_399
    assert not standby.try_lead()
    clock.now += 2
    assert standby.try_lead()


def test_a_lease_created_by_hand_is_watched_for_a_lease_duration_whatever_it_names() -> None:
    api, clock = LeaseApi(), Clock()
    api.create_by_hand(holderIdentity="b", leaseDurationSeconds=1)
    standby = candidate(api, "b", clock)
    assert not standby.try_lead()
    clock.now += 14.9
    assert not standby.try_lead()
    clock.now += 0.2
    assert standby.try_lead()


def test_a_fractional_duration_is_written_rounded_up_and_waited_in_full() -> None:
    """``--lease-duration 4.4 --renew-deadline 4.3``: the Lease says 5 s, a standby waits 5 s (4.4 s if its own
    duration were the longer), and the leader's fence closes at 4.3 s."""
    timing = LeaseTiming(4.4, 4.3, 0.5)
    assert timing.problem() is None
    api, clock = LeaseApi(), Clock()
    leader, standby = candidate(api, "a", clock, timing=timing), candidate(api, "b", clock, timing=timing)
    leader.try_lead()
    clock.now += 4.5
    assert leader.try_lead()
    assert api.lease is not None
    assert api.lease["spec"]["leaseDurationSeconds"] == 5
    standby.try_lead()
    renewed = clock.now
    clock.now += 4.29
    assert leader.may_write()
    clock.now += 0.02
    assert not leader.may_write()
    clock.now = renewed + 4.9
    assert not standby.try_lead(), "the Lease says 5 s: 4.4 s is not enough"
    clock.now = renewed + 5.01
    assert standby.try_lead()


@pytest.mark.parametrize(
    ("timing", "says"),
    [
        (LeaseTiming(10, 10, 2), "shorter than the lease duration"),
        (LeaseTiming(4.4, 4.395, 0.5), "by at least 0.2% of it"),
        (LeaseTiming(15, 2, 2), "1.2 x the retry period"),
        (LeaseTiming(15, 10, 0), "retry period must be a number of seconds > 0"),
        (LeaseTiming(0, 0, 0), "lease duration must be a number of seconds > 0"),
        (LeaseTiming(15, -1, 2), "renew deadline must be a number of seconds > 0"),
        (LeaseTiming(float("inf"), 10, 2), "lease duration must be a number of seconds > 0 (got inf)"),
        (LeaseTiming(15, float("nan"), 2), "renew deadline must be a number of seconds > 0 (got nan)"),
        (LeaseTiming(100_000, 10, 2), "at most 86400 s"),
    ],
)
def test_timings_that_cannot_fence_a_leader_are_refused(timing: LeaseTiming, says: str) -> None:
    problem = timing.problem()
    assert problem is not None
    assert says in problem


def test_the_default_proportions_are_client_gos() -> None:
    assert LeaseTiming.from_duration(15) == LeaseTiming(15, 10, 2)
    assert LeaseTiming.from_duration(15).problem() is None
    assert LeaseTiming.from_duration(4).problem() is None


def test_once_waits_for_a_missing_lease_a_duration_then_leads() -> None:
    api, clock = LeaseApi(), Clock()
    lease = candidate(api, "a", clock)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    assert lease.try_lead_within(TIMING.written_duration_s + TIMING.retry_period_s, sleep)
    assert TIMING.duration_s <= sum(slept) <= TIMING.duration_s + TIMING.retry_period_s
    assert max(slept) == TIMING.retry_period_s

    def sleep_while_the_leader_renews(seconds: float) -> None:
        sleep(seconds)
        assert lease.try_lead()

    assert not candidate(api, "b", clock).try_lead_within(17, sleep_while_the_leader_renews), "--once stands by"
    assert api.holder == "a"


class RacingLeaseApi(LeaseApi):
    """Every read waits until two attempts have read (a barrier), so two unserialised attempts would both write over
    the same resourceVersion; serialised, the second waits for the first, and its barrier times out harmlessly."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=0.5)

    def read_namespaced_lease(self, name: str, namespace: str, _request_timeout: float = 0) -> client.V1Lease:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        self.barrier.reset()
        return super().read_namespaced_lease(name, namespace, _request_timeout)


def test_two_attempts_of_one_operator_at_once_never_lose_to_itself() -> None:
    """The renewal loop and a pass may try at the same moment: one waits for the other, and neither reads its own
    write's 409 as another operator's win."""
    api = RacingLeaseApi()
    clock = Clock()
    lease = candidate(api, "a", clock)
    assert not lease.try_lead()
    clock.now += TIMING.duration_s
    assert lease.try_lead()
    results: list[bool] = []
    attempts = [threading.Thread(target=lambda: results.append(lease.try_lead())) for _ in range(2)]
    for attempt in attempts:
        attempt.start()
    for attempt in attempts:
        attempt.join(timeout=10)
    assert results == [True, True]
    assert api.holder == "a"
    assert api.version == 3, "created, then renewed twice, one after the other"


#: Three operators configured differently (client-go's proportions of 15 s and of 4 s, and a fractional duration):
#: whoever leads, whatever the others wait must outlast its fence.
MIXED = {
    "a": TIMING,
    "b": LeaseTiming(4.4, 4.3, 0.5),
    "c": LeaseTiming.from_duration(4),
}
HAND_EDITS: list[dict[str, Any]] = [{"holderIdentity": name} for name in ("a", "b", "c", "someone", None)] + [
    {"renewTime": "2020-01-01T00:00:00.000000Z"},
    {"leaseDurationSeconds": 1},
    {"leaseDurationSeconds": 30},
]
EVENTS = st.one_of(
    st.tuples(st.just("tick"), st.floats(0, 6)),
    st.tuples(st.just("try"), st.sampled_from(sorted(MIXED))),
    st.tuples(st.just("release"), st.sampled_from(sorted(MIXED))),
    st.tuples(st.just("delete"), st.none()),
    st.tuples(st.just("edit"), st.sampled_from(range(len(HAND_EDITS)))),
    st.tuples(st.just("create"), st.sampled_from(["a", "b", "someone", None])),
    st.tuples(st.just("down"), st.booleans()),
)


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(st.lists(EVENTS, min_size=1, max_size=120))
def test_never_two_writers_whatever_is_done_to_the_lease_by_hand(events: list[tuple[str, Any]]) -> None:
    """Operators try (or are paused: they do not), time passes, the API server goes down, and the Lease is deleted,
    edited and created by hand: after every step, at most one fence is open."""
    api, clock = LeaseApi(), Clock()
    operators = {name: candidate(api, name, clock, timing=timing) for name, timing in MIXED.items()}
    for kind, value in events:
        if kind == "tick":
            clock.now += value
        elif kind == "try":
            operators[value].try_lead()
        elif kind == "release":
            operators[value].release()
        elif kind == "delete":
            api.delete()
        elif kind == "edit" and api.lease is not None:
            api.edit(**HAND_EDITS[value])
        elif kind == "create" and api.lease is None:
            api.create_by_hand(holderIdentity=value, leaseDurationSeconds=1, renewTime="2020-01-01T00:00:00.000000Z")
        elif kind == "down":
            api.down = value
        open_fences = [name for name, operator in operators.items() if operator.may_write()]
        assert len(open_fences) <= 1, (open_fences, kind, value)


class SlowLeaseApi(LeaseApi):
    """Every read of the Lease takes ``read_s`` of the clock's time."""

    def __init__(self, clock: Clock, read_s: float) -> None:
        super().__init__()
        self.clock, self.read_s = clock, read_s

    def read_namespaced_lease(self, name: str, namespace: str, _request_timeout: float = 0) -> client.V1Lease:
        found = super().read_namespaced_lease(name, namespace, _request_timeout)
        self.clock.now += self.read_s
        return found


def test_each_request_of_an_attempt_waits_at_most_what_is_left_of_its_renew_deadline() -> None:
    """A read that took 3 s leaves the renewal 7 s of the 10 s renew deadline (a renewal answered later could not
    open the fence, which counts from the attempt's start)."""
    clock = Clock()
    api = SlowLeaseApi(clock, read_s=0.0)
    leader = leading(api, "a", clock)
    api.read_s = 3.0
    api.timeouts.clear()
    assert leader.try_lead()
    assert api.timeouts == [TIMING.renew_deadline_s, TIMING.renew_deadline_s - 3.0]


def test_an_attempt_past_its_renew_deadline_before_its_write_sends_none_and_the_next_renews(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A read that took the whole renew deadline: the renewal is not sent (it could not count), the fence is closed,
    the Lease is as it was, and the next attempt renews it (the record is still this operator's own)."""
    clock = Clock()
    api = SlowLeaseApi(clock, read_s=0.0)
    leader = leading(api, "a", clock)
    version = api.version
    api.read_s = TIMING.renew_deadline_s
    with caplog.at_level(logging.WARNING, logger="lyra.operator"):
        assert not leader.try_lead()
    assert api.version == version, "no write was sent"
    assert "could not renew the lease: the attempt on the lease took longer than the renew deadline (10 s)" in (
        caplog.text
    )
    api.read_s = 0.0
    assert leader.try_lead()
    assert api.version == version + 1


#: A renew deadline short enough for a test to wait it out on a real socket.
SHORT = LeaseTiming(duration_s=1.0, renew_deadline_s=0.6, retry_period_s=0.2)


def silent_lease(url: str) -> LeaderLease:
    configuration = client.Configuration()
    configuration.host = url
    return LeaderLease(lease_client(configuration), "lyra-system", identity="a", timing=SHORT)


def test_an_api_server_that_never_answers_ends_an_attempt_at_its_renew_deadline_with_one_request() -> None:
    """A server that accepts the connection and never answers (hung, or a connection a partition left open): the
    attempt raises once the renew deadline has passed, having sent its read once (urllib3 would have sent a GET
    that timed out three more times); before the bound it waited for ever, and with it the Lease's loop and every
    pass that asked for the Lease."""
    accepted: list[socket.socket] = []
    with behaving_server(silent, accepted) as url:
        lease = silent_lease(url)
        started = time.monotonic()
        with pytest.raises(MaxRetryError) as raised:
            lease.try_lead()
        waited = time.monotonic() - started
    assert (
        describe_api_failure(raised.value, url)
        == f"cannot reach the API server at {url}: timed out waiting for an answer"
    )
    assert waited >= SHORT.renew_deadline_s * 0.9
    assert len(accepted) == 1, "the read that timed out was sent again"
    assert not lease.may_write()


def test_a_release_against_an_api_server_that_never_answers_ends_at_the_renew_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopping (SIGTERM) releases the Lease: against a silent server the release gives up at the renew deadline
    and says so, and the operator stops (a successor waits the lease out); before, the stop waited for ever."""
    api, clock = LeaseApi(), Clock()
    leader = leading(api, "a", clock)
    accepted: list[socket.socket] = []
    with behaving_server(silent, accepted) as url:
        configuration = client.Configuration()
        configuration.host = url
        leader.api = lease_client(configuration)
        leader.coordination = client.CoordinationV1Api(leader.api)
        leader.timing = SHORT
        leader.monotonic = time.monotonic
        with caplog.at_level(logging.WARNING, logger="lyra.operator"):
            leader.release()
    assert f"could not release the lease: cannot reach the API server at {url}: timed out waiting for an answer" in (
        caplog.text
    )
    assert len(accepted) == 1
    assert not leader.may_write()


def test_each_start_of_leading_calls_on_lead_once_and_a_renewal_does_not() -> None:
    """The first win, and a win after the Lease was lost (renewals failing past the renew deadline: the API server
    down, or a partition), each call the hook once, so that the operator leaves the connections it kept while it did
    not lead; its renewals do not."""
    api, clock = LeaseApi(), Clock()
    leader = candidate(api, "a", clock)
    began: list[float] = []
    leader.on_lead = lambda: began.append(clock.now)
    assert not leader.try_lead()
    clock.now += TIMING.duration_s
    assert leader.try_lead(), "the first win"
    first = clock.now
    clock.now += TIMING.retry_period_s
    assert leader.try_lead(), "a renewal"
    assert began == [first]
    api.down = True
    clock.now += TIMING.renew_deadline_s
    assert not leader.try_lead()
    api.down = False
    assert leader.try_lead(), "its own record, renewed"
    assert began == [first, clock.now]
    clock.now += TIMING.retry_period_s
    assert leader.try_lead()
    assert began == [first, clock.now - TIMING.retry_period_s]
