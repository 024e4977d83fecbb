"""One active operator, fenced: a coordination.k8s.io Lease with client-go's leader-election semantics.

Three durations (:class:`LeaseTiming`), as Kubernetes' own controllers use them:

* **lease duration**: a candidate takes the Lease over once the Lease's record (holder, renew time, resourceVersion)
  has not changed for this long *as the candidate observed it on its own monotonic clock*. The holder's renew
  time is written for humans and never compared with the local clock, so skewed clocks cannot shorten a lease.
* **renew deadline**: the leader renews every retry period, in its own loop (not only when a pass starts); if it has
  not renewed successfully for this long it stops leading. :meth:`LeaderLease.may_write` is the fence: true only
  while the last successful renewal *began* less than a renew deadline ago, so a leader paused (a long pass, a GC
  pause, SIGSTOP) never writes after a successor could have taken over. The committer asks it before every write.
* **retry period**: how often the leader renews and a candidate tries.

Because the renew deadline is shorter than the lease duration, the old leader's fence closes (renew deadline after
its last renewal began) before any candidate may take over (a lease duration after it *observed* that renewal,
which is later). Every write to the Lease is conditional on the resourceVersion read, so two candidates racing for
it cannot both win. On a clean stop the holder releases it, so a successor takes over at once.

The operator's reconcile loop is its own (no framework's peering can pause it), hence a Lease here.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger("lyra.operator")

#: client-go's defaults (15 s, 10 s, 2 s) as fractions of the lease duration.
RENEW_DEADLINE_FRACTION = 2 / 3
RETRY_PERIOD_FRACTION = 2 / 15
#: client-go's JitterFactor: the renew deadline must leave room for more than one retry period.
JITTER = 1.2


class LeadershipLostError(RuntimeError):
    """Raised instead of a write once :meth:`LeaderLease.may_write` is false: the pass stops where it is."""


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

    def problem(self) -> str | None:
        """Why these durations cannot fence a leader (client-go's own checks), or ``None``."""
        if self.retry_period_s <= 0:
            return "the retry period must be > 0 s"
        if self.duration_s <= self.renew_deadline_s:
            return (
                f"the lease duration ({self.duration_s:g} s) must be longer than the renew deadline "
                f"({self.renew_deadline_s:g} s)"
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
        self._observed: tuple[object, ...] | None = None  # the Lease record last seen
        self._observed_at = 0.0  # monotonic time it was first seen
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
        """One attempt to create, renew or take over the Lease (client-go's tryAcquireOrRenew); returns
        :meth:`may_write` afterwards. An API error other than a lost race is logged and counts as a failed renewal;
        an unreachable API server raises (after leadership is given up if the renew deadline has passed)."""
        with self._attempt:
            return self._try_lead()

    def _try_lead(self) -> bool:
        started = self.monotonic()
        try:
            self._try(started)
        except ApiException as error:
            if error.status == 409:
                self._lost("another operator won the lease")
            else:
                log.warning("could not renew the lease: %s %s", error.status, error.reason)
        finally:
            if self.leading and not self.may_write():
                self._lost(f"not renewed for {self.timing.renew_deadline_s:g} s")
        return self.may_write()

    def _try(self, started: float) -> None:
        lease = self._read()
        if lease is None:
            self._create()
            self._won(started, "created the lease")
            return
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity")
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"), lease["metadata"]["resourceVersion"])
        if record != self._observed:
            self._observed, self._observed_at = record, started
        duration = float(spec.get("leaseDurationSeconds") or self.timing.duration_s)
        if holder and holder != self.identity and started - self._observed_at < duration:
            self._lost(f"{holder} leads")
            return
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        now = self.wall()
        # Times go back in the API's own format (the client reads them as datetimes, which drop zero microseconds).
        acquired = _stamp(_seconds(spec.get("acquireTime")) or now) if holder == self.identity else _stamp(now)
        body = {
            "metadata": {"name": names.OPERATOR_NAME, "resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.timing.duration_s),
                "acquireTime": acquired,
                "renewTime": _stamp(now),
                "leaseTransitions": transitions,
            },
        }
        self.coordination.replace_namespaced_lease(names.OPERATOR_NAME, self.namespace, cast(Any, body))
        self._won(started, "renewed" if holder == self.identity else f"took over from {holder or 'nobody'}")

    def release(self) -> None:
        """Give the Lease up (on a clean stop), so that a successor leads at once."""
        if self.leading is not True:
            return
        self.leading = False  # no write after this point, whatever happens below
        try:
            lease = self._read()
            if lease is None or lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            spec = lease.get("spec", {})
            body = {
                "metadata": {"name": names.OPERATOR_NAME, "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": {  # no holder: the next operator takes it at once
                    "leaseDurationSeconds": int(spec.get("leaseDurationSeconds") or round(self.timing.duration_s)),
                    "leaseTransitions": int(spec.get("leaseTransitions") or 0),
                },
            }
            self.coordination.replace_namespaced_lease(names.OPERATOR_NAME, self.namespace, cast(Any, body))
            log.info("released the lease")
        except ApiException as error:
            log.warning("could not release the lease: %s", error.reason)

    def _read(self) -> dict[str, Any] | None:
        try:
            lease = self.coordination.read_namespaced_lease(names.OPERATOR_NAME, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        found: dict[str, Any] = self.api.sanitize_for_serialization(lease)  # type: ignore[no-untyped-call]
        return found

    def _create(self) -> None:
        now = self.wall()
        body = {
            "metadata": {"name": names.OPERATOR_NAME, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.timing.duration_s),
                "acquireTime": _stamp(now),
                "renewTime": _stamp(now),
                "leaseTransitions": 0,
            },
        }
        self.coordination.create_namespaced_lease(self.namespace, cast(Any, body))

    def _won(self, started: float, why: str) -> None:
        self._renewed_at = started
        if self.leading is not True:
            log.info("leading (%s as %s)", why, self.identity)
        self.leading = True

    def _lost(self, why: str) -> None:
        if self.leading is not False:
            log.info("standing by (%s as %s)", why, self.identity)
        self.leading = False
