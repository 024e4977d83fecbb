"""One active operator, fenced: a coordination.k8s.io Lease with client-go's leader-election semantics, made safe
against a Lease deleted or edited by hand.

Three durations (:class:`LeaseTiming`), as Kubernetes' own controllers use them:

* **lease duration**: a candidate takes the Lease over once the Lease's record (holder, renew time, duration,
  resourceVersion) has not changed for this long *as the candidate observed it on its own monotonic clock*, the
  moment of observation being when its read returned. The holder's renew time is written for humans and never
  compared with the local clock, so skewed clocks cannot shorten a lease. The Lease's ``leaseDurationSeconds`` is an
  integer: the leader writes its duration rounded *up*, and a candidate waits the longer of its own duration and the
  one written (a duration lowered by hand, or an operator configured shorter, never shortens the wait).
* **renew deadline**: the leader renews every retry period, in its own loop (not only when a pass starts); if it has
  not renewed successfully for this long it stops leading. :meth:`LeaderLease.may_write` is the fence: true only
  while the last successful renewal *began* less than a renew deadline ago, so a leader paused (a long pass, a GC
  pause, SIGSTOP) never writes after a successor could have taken over. The committer asks it before every write.
* **retry period**: how often the leader renews and a candidate tries.

A leader's renewal began before its write reached the API server, and a candidate's observation ends after its read
of that write returned; the renew deadline is shorter than the lease duration (by a clock-rate allowance,
:data:`CLOCK_ALLOWANCE`), so the old leader's fence closes before any candidate may take over.

**Only a record this operator wrote is its own.** The leader remembers the resourceVersion its last write produced.
A renewal that finds anything else (no Lease, another holder, its own name under another resourceVersion: a Lease
deleted, edited or created by hand) closes the fence at once, and the operator becomes a candidate like any other:
it takes the Lease (re-creates it, or takes it over) only once it has observed that record, or the Lease's absence,
unchanged for a lease duration. A candidate treats every record the same way, a released Lease (no holder), a Lease
that names it, or no Lease at all included: whatever happened before it looked, a leader it cannot see had its last
renewal before that, and its fence closes within a renew deadline of it. So no moment has two writers, whatever is
done to the Lease by hand; the cost is that a takeover (after a clean stop, a deletion or an edit) takes a lease
duration. Every write to the Lease is conditional on the resourceVersion read (or a create), so two candidates
racing for it cannot both win; a renewal is a merge patch with the resourceVersion read as its precondition, never a
PUT (which the API server answers, for a Lease deleted since the read, by creating it anew).

**An attempt ends within a renew deadline.** Each request of an attempt (the read, then the create or the renewal)
waits at most what is left of a renew deadline from the attempt's start, and a read that timed out is not sent again
(:func:`lease_client`): a renewal answered later could not open the fence anyway, as the fence counts from the
attempt's start. Without the bound, an attempt against an API server that accepted the connection and never
answered (hung, or a connection a network partition left open) waited for ever, and with it the Lease's loop and
every pass that asked for the Lease: the operator stood by for good, long after the server answered again.

The operator's reconcile loop is its own (no framework's peering can pause it), hence a Lease here.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.apiserver_failures import describe_api_failure
from lyra.apiserver_requests import no_read_retries

log = logging.getLogger("lyra.operator")

#: client-go's defaults (15 s, 10 s, 2 s) as fractions of the lease duration.
RENEW_DEADLINE_FRACTION = 2 / 3
RETRY_PERIOD_FRACTION = 2 / 15
#: client-go's JitterFactor: the renew deadline must leave room for more than one retry period.
JITTER = 1.2
#: The renew deadline is measured on the leader's clock, the lease duration on a candidate's: the deadline must be
#: shorter than the duration by this fraction of it, twice the 0.05% NTP lets a clock's rate stray, for each clock.
CLOCK_ALLOWANCE = 0.002
#: The longest lease duration (the ``seconds`` argument's bound): a longer ``leaseDurationSeconds`` written by hand
#: is waited only this long.
MAX_DURATION_S = 86_400

#: The record of a Lease that does not exist, as a candidate observes it.
_ABSENT: tuple[object, ...] = ("absent",)


class LeadershipLostError(RuntimeError):
    """Raised instead of a write once :meth:`LeaderLease.may_write` is false: the pass stops where it is."""


class LeaseAttemptLateError(TimeoutError):
    """An attempt on the Lease reached its renew deadline before its write was sent: the write could not count."""


def lease_client(configuration: client.Configuration) -> client.ApiClient:
    """The Lease's own client on the API server ``configuration`` names: a read that timed out is not sent again (the
    next attempt, a retry period later, asks afresh)."""
    api = client.ApiClient(configuration)
    no_read_retries(api)
    return api


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    @classmethod
    def from_duration(
        cls, duration_s: float, renew_deadline_s: float | None = None, retry_period_s: float | None = None
    ) -> LeaseTiming:
        """The timing for ``duration_s``, the other two in client-go's proportions unless given."""
        return cls(
            duration_s,
            renew_deadline_s if renew_deadline_s is not None else duration_s * RENEW_DEADLINE_FRACTION,
            retry_period_s if retry_period_s is not None else duration_s * RETRY_PERIOD_FRACTION,
        )

    @property
    def written_duration_s(self) -> int:
        """The lease duration as the Lease holds it (an integer): rounded up, so a candidate never waits less."""
        return math.ceil(self.duration_s)

    def problem(self) -> str | None:
        """Why these durations cannot fence a leader, or ``None``: each positive and finite, the lease duration at
        most a day, the renew deadline shorter than the lease duration (by the clock allowance) and longer than 1.2 x
        the retry period (client-go's own checks)."""
        for what, value in (
            ("lease duration", self.duration_s),
            ("renew deadline", self.renew_deadline_s),
            ("retry period", self.retry_period_s),
        ):
            if not math.isfinite(value) or value <= 0:
                return f"the {what} must be a number of seconds > 0 (got {value:g})"
        if self.duration_s > MAX_DURATION_S:
            return f"the lease duration must be at most {MAX_DURATION_S} s (got {self.duration_s:g})"
        if self.renew_deadline_s >= self.duration_s * (1 - CLOCK_ALLOWANCE):
            return (
                f"the renew deadline ({self.renew_deadline_s:g} s) must be shorter than the lease duration "
                f"({self.duration_s:g} s) by at least {CLOCK_ALLOWANCE:.1%} of it, so that the leader stops writing "
                "before a standby, timing the lease on its own clock, may take over"
            )
        if self.renew_deadline_s <= JITTER * self.retry_period_s:
            return (
                f"the renew deadline ({self.renew_deadline_s:g} s) must be longer than {JITTER:g} x the retry period "
                f"({self.retry_period_s:g} s)"
            )
        return None


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _version_of(written: object) -> str | None:
    """The resourceVersion of a Lease the API server returned from a write (``None`` if it returned none)."""
    metadata = getattr(written, "metadata", None)
    version = getattr(metadata, "resource_version", None)
    return str(version) if version else None


class LeaderLease:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        *,
        identity: str | None = None,
        timing: LeaseTiming | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        coordination: client.CoordinationV1Api | None = None,
    ) -> None:
        self.api = api
        self.coordination = coordination or client.CoordinationV1Api(api)
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.timing = timing or LeaseTiming()
        self.monotonic = monotonic
        self.wall = wall
        self.leading: bool | None = None  # unknown until the first try
        self._renewed_at: float | None = None  # monotonic start of the last successful create or renewal
        self._written: str | None = None  # the resourceVersion this operator's last write of the Lease produced
        self._observed: tuple[object, ...] | None = None  # the Lease record last seen (_ABSENT: no Lease)
        self._observed_at = 0.0  # monotonic time it was first seen (when the read returned)
        #: Called (in the attempt's thread) each time this operator begins to lead: after a start, a takeover, or a
        #: loss of the Lease.
        self.on_lead: Callable[[], None] | None = None
        #: One attempt at a time: the renewal loop and a pass that finds the fence closed may both try at once, and
        #: the loser of that race with itself read its own 409 as another operator's win (and stood by for a moment).
        self._attempt = threading.Lock()

    def may_write(self) -> bool:
        """The fence: this operator leads, and its last renewal began less than a renew deadline ago."""
        renewed = self._renewed_at
        return (
            self.leading is True and renewed is not None and self.monotonic() - renewed < self.timing.renew_deadline_s
        )

    def try_lead(self) -> bool:
        """One attempt to renew, create or take over the Lease (client-go's tryAcquireOrRenew, with the rules
        above); returns :meth:`may_write` afterwards. An API error other than a lost race is logged and counts as a
        failed renewal, as is an attempt that reached its renew deadline before its write; an unreachable API server,
        or one that did not answer within the renew deadline, raises (after leadership is given up if the renew
        deadline has passed)."""
        with self._attempt:
            return self._try_lead()

    def try_lead_within(self, seconds: float, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Try every retry period until this operator leads or ``seconds`` have passed (``lyra operator --once``:
        a Lease nobody renews is taken only after a lease duration of watching it)."""
        until = self.monotonic() + seconds
        while not self.try_lead():
            left = until - self.monotonic()
            if left <= 0:
                return False
            sleep(min(self.timing.retry_period_s, left))
        return True

    def _try_lead(self) -> bool:
        started = self.monotonic()
        try:
            self._try(started)
        except ApiException as error:
            if error.status == 409:
                self._lost("another operator won the lease")
            elif error.status == 404:  # deleted between the read and the write
                self._lost("the lease was deleted")
            else:
                log.warning("could not renew the lease: %s %s", error.status, error.reason)
        except LeaseAttemptLateError as error:
            log.warning("could not renew the lease: %s", error)
        finally:
            if self.leading and not self.may_write():
                self._lost(f"not renewed for {self.timing.renew_deadline_s:g} s")
        return self.may_write()

    def _try(self, started: float) -> None:
        lease = self._read(started)
        read_at = self.monotonic()
        if lease is None:
            record: tuple[object, ...] = _ABSENT
            spec: dict[str, Any] = {}
            version = None
        else:
            spec = lease.get("spec") or {}
            version = lease["metadata"]["resourceVersion"]
            record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"), version)
        holder = spec.get("holderIdentity")
        if lease is not None and holder == self.identity and version == self._written:
            self._renew(started, lease, spec)
            return
        if self.leading:  # the fence closes now: a Lease this operator did not write is not its own
            self._lost(self._foreign(lease, holder))
        if record != self._observed:
            self._observed, self._observed_at = record, read_at
        wait = self._wait_for(spec)
        if read_at - self._observed_at < wait:
            if holder and holder != self.identity:
                self._lost(f"{holder} leads")
            else:
                self._lost(f"{self._unheld(lease, holder)}: taking it once unchanged for {wait:g} s")
            return
        if lease is None:
            self._written = _version_of(self._create(started))
            self._won(started, "created the lease")
        else:
            self._renew(started, lease, spec)

    def _wait_for(self, spec: dict[str, Any]) -> float:
        """How long a candidate watches a record before taking it: its own lease duration, or the one written if
        longer (at most :data:`MAX_DURATION_S`)."""
        written = spec.get("leaseDurationSeconds")
        written_s = float(written) if isinstance(written, int | float) and math.isfinite(written) else 0.0
        return max(self.timing.duration_s, min(written_s, MAX_DURATION_S))

    def _foreign(self, lease: dict[str, Any] | None, holder: object) -> str:
        if lease is None:
            return "the lease was deleted"
        if holder != self.identity:
            return f"the lease names {holder or 'no holder'}"
        return f"the lease was written by someone else (resourceVersion {lease['metadata']['resourceVersion']})"

    @staticmethod
    def _unheld(lease: dict[str, Any] | None, holder: object) -> str:
        if lease is None:
            return "no lease"
        return "the lease names this operator but was not written by it" if holder else "the lease has no holder"

    def _renew(self, started: float, lease: dict[str, Any], spec: dict[str, Any]) -> None:
        holder = spec.get("holderIdentity")
        own = holder == self.identity and lease["metadata"]["resourceVersion"] == self._written
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if own else 1)
        now = self.wall()
        # Times go back in the API's own format (the client reads them as datetimes, which drop zero microseconds).
        acquired = _stamp(_seconds(spec.get("acquireTime")) or now) if own else _stamp(now)
        body = {
            "metadata": {"name": names.OPERATOR_NAME, "resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.timing.written_duration_s,
                "acquireTime": acquired,
                "renewTime": _stamp(now),
                "leaseTransitions": transitions,
            },
        }
        written = self._write(body, started)
        self._written = _version_of(written)
        self._won(started, "renewed" if own else f"took over from {holder or 'nobody'}")

    def release(self) -> None:
        """Give the Lease up (on a clean stop): no holder, so that nobody reads it as a live leader's. A successor
        still watches it for a lease duration before taking it (a release can be forged by hand)."""
        if self.leading is not True:
            return
        self.leading = False  # no write after this point, whatever happens below
        started = self.monotonic()
        try:
            lease = self._read(started)
            if lease is None:
                return
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity or lease["metadata"]["resourceVersion"] != self._written:
                return  # not its own record any more
            body = {
                "metadata": {"name": names.OPERATOR_NAME, "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": {"holderIdentity": None, "acquireTime": None, "renewTime": None},
            }
            self._write(body, started)
            log.info("released the lease")
        except ApiException as error:
            if error.status in (404, 409):
                log.info("did not release the lease: it was deleted or changed after it was read (%s)", error.reason)
            else:
                log.warning("could not release the lease: %s", error.reason)
        except LeaseAttemptLateError as error:
            log.warning("could not release the lease: %s", error)
        except Exception as error:  # unreachable, or no answer within the renew deadline: a successor waits it out
            log.warning("could not release the lease: %s", describe_api_failure(error, self.api.configuration.host))

    def _write(self, body: dict[str, Any], started: float) -> object:
        """Write ``body`` over the Lease as read: a merge patch whose ``metadata.resourceVersion`` is the precondition
        (409 if the Lease changed since, 404 if it was deleted). Never a PUT: the API server creates a Lease on
        update when none exists, so a renewal whose read came just before a deletion by hand would re-create it."""
        return self.coordination.patch_namespaced_lease(
            names.OPERATOR_NAME,
            self.namespace,
            cast(Any, body),
            _content_type=names.MERGE_PATCH,
            _request_timeout=self._time_left(started),
        )

    def _time_left(self, started: float) -> float:
        """Seconds left of the renew deadline of the attempt that began at ``started``, the longest its next request
        may wait; :class:`LeaseAttemptLateError` if none are."""
        left = started + self.timing.renew_deadline_s - self.monotonic()
        if left <= 0:
            raise LeaseAttemptLateError(
                f"the attempt on the lease took longer than the renew deadline ({self.timing.renew_deadline_s:g} s)"
            )
        return left

    def _read(self, started: float) -> dict[str, Any] | None:
        try:
            lease = self.coordination.read_namespaced_lease(
                names.OPERATOR_NAME, self.namespace, _request_timeout=self._time_left(started)
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        found: dict[str, Any] = self.api.sanitize_for_serialization(lease)  # type: ignore[no-untyped-call]
        return found

    def _create(self, started: float) -> object:
        now = self.wall()
        body = {
            "metadata": {"name": names.OPERATOR_NAME, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.timing.written_duration_s,
                "acquireTime": _stamp(now),
                "renewTime": _stamp(now),
                "leaseTransitions": 0,
            },
        }
        return self.coordination.create_namespaced_lease(
            self.namespace, cast(Any, body), _request_timeout=self._time_left(started)
        )

    def _won(self, started: float, why: str) -> None:
        self._renewed_at = started
        self._observed = None  # whatever is found next, not written by this operator, is watched from then on
        if self.leading is not True:
            log.info("leading (%s as %s)", why, self.identity)
            if self.on_lead is not None:
                self.on_lead()
        self.leading = True

    def _lost(self, why: str) -> None:
        if self.leading is not False:
            log.info("standing by (%s as %s)", why, self.identity)
        self.leading = False
