"""The leader Lease with client-go's semantics, on an in-memory Lease API and hand-driven clocks: expiry judged by
the candidate's own observation (never the holder's clock), the fence that closes a renew deadline after the last
renewal began (before any candidate may take over), conflicts on the Lease's resourceVersion, and the timing checks.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.operator.leader import LeaderLease, LeaseTiming

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

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
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

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any]) -> None:
        if self.lease is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        self.lease, self.version = {"spec": dict(body["spec"])}, self.version + 1

    def replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise ApiException(status=409, reason="Conflict")
        self.lease, self.version = {"spec": dict(body["spec"])}, self.version + 1

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"].get("holderIdentity")


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def candidate(api: LeaseApi, name: str, clock: Clock, wall: Clock | None = None) -> LeaderLease:
    return LeaderLease(
        client.ApiClient(), "lyra-system", identity=name, timing=TIMING, monotonic=clock, wall=wall or clock,
        coordination=api,  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_first_candidate_creates_the_lease_and_the_second_stands_by() -> None:
    api, clock = LeaseApi(), Clock()
    first, second = candidate(api, "a", clock), candidate(api, "b", clock)
    assert first.try_lead()
    assert not second.try_lead()
    assert api.holder == "a"
    assert first.may_write()
    assert not second.may_write()


def test_a_candidate_takes_over_only_a_lease_duration_after_it_saw_the_last_renewal() -> None:
    api, clock = LeaseApi(), Clock()
    leader, standby = candidate(api, "a", clock), candidate(api, "b", clock)
    leader.try_lead()
    standby.try_lead()  # sees the record at t=1000
    clock.now += 14.9
    assert not standby.try_lead()
    clock.now += 0.2
    assert standby.try_lead()
    assert api.holder == "b"


def test_the_holders_clock_is_never_compared_with_the_candidates() -> None:
    """The leader's wall clock runs an hour behind: its renew times look stale, and it still keeps the lease."""
    api, clock = LeaseApi(), Clock()
    leader = candidate(api, "a", clock, wall=Clock(clock.now - 3600))
    standby = candidate(api, "b", clock)
    leader.try_lead()
    for _ in range(20):
        assert not standby.try_lead()
        clock.now += 2
        assert leader.try_lead()
    assert api.holder == "a"


def test_the_fence_closes_a_renew_deadline_after_the_last_renewal_before_anyone_may_take_over() -> None:
    api, clock = LeaseApi(), Clock()
    leader, standby = candidate(api, "a", clock), candidate(api, "b", clock)
    leader.try_lead()
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
    leader = candidate(api, "a", clock)
    leader.try_lead()
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
    candidate(api, "gone", clock).try_lead()
    first, second = candidate(api, "a", clock), candidate(api, "b", clock)
    first.try_lead()
    second.try_lead()
    clock.now += 16
    replace = api.replace_namespaced_lease

    def first_writes_in_between(name: str, namespace: str, body: dict[str, Any]) -> None:
        if body["spec"]["holderIdentity"] == "b":
            api.replace_namespaced_lease = replace  # type: ignore[method-assign]
            assert first.try_lead()  # reads the version the second read, and writes first
        replace(name, namespace, body)

    api.replace_namespaced_lease = first_writes_in_between  # type: ignore[method-assign]
    assert not second.try_lead()
    assert api.holder == "a"
    assert first.may_write()
    assert not second.may_write()


def test_release_hands_the_lease_over_at_once_and_closes_the_fence() -> None:
    api, clock = LeaseApi(), Clock()
    leader, standby = candidate(api, "a", clock), candidate(api, "b", clock)
    leader.try_lead()
    standby.try_lead()
    leader.release()
    assert not leader.may_write()
    assert standby.try_lead()


@pytest.mark.parametrize(
    ("timing", "says"),
    [
        (LeaseTiming(10, 10, 2), "longer than the renew deadline"),
        (LeaseTiming(15, 2, 2), "1.2 x the retry period"),
        (LeaseTiming(15, 10, 0), "retry period must be > 0"),
    ],
)
def test_timings_that_cannot_fence_a_leader_are_refused(timing: LeaseTiming, says: str) -> None:
    problem = timing.problem()
    assert problem is not None
    assert says in problem


def test_the_default_proportions_are_client_gos() -> None:
    assert LeaseTiming.from_duration(15) == LeaseTiming(15, 10, 2)
    assert LeaseTiming.from_duration(15).problem() is None


class RacingLeaseApi(LeaseApi):
    """Every read waits until two attempts have read (a barrier), so two unserialised attempts would both write over
    the same resourceVersion; serialised, the second waits for the first, and its barrier times out harmlessly."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=0.5)

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        self.barrier.reset()
        return super().read_namespaced_lease(name, namespace)


def test_two_attempts_of_one_operator_at_once_never_lose_to_itself() -> None:
    """The renewal loop and a pass may try at the same moment: one waits for the other, and neither reads its own
    write's 409 as another operator's win."""
    api = RacingLeaseApi()
    clock = Clock()
    lease = candidate(api, "a", clock)
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
