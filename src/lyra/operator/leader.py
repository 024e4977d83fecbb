"""One active operator: a coordination.k8s.io Lease, as Kubernetes' own controllers elect their leader.

Each pass first holds the Lease (creating it, renewing it, or taking it over once its holder has not renewed it
for ``duration_s``); an operator that does not hold it stands by and writes nothing. Every write to the Lease is
conditional on the resourceVersion it read, so two operators racing for it cannot both win. On a clean stop the
holder releases it, so a successor takes over at once rather than after the lease expires.

kopf's own peering pauses kopf's handlers, not a reconcile loop of our own, hence a Lease here.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names

log = logging.getLogger("lyra.operator")


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
        self, api: client.ApiClient, namespace: str, *, identity: str | None = None, duration_s: float = 15.0
    ) -> None:
        self.api = api
        self.coordination = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.duration_s = duration_s
        self.leading: bool | None = None  # unknown until the first try

    def hold(self, now: float) -> bool:
        """Create, renew or take over the Lease; True if this operator leads now."""
        try:
            lease = self._read()
            if lease is None:
                self._create(now)
                return self._became(True, "created the lease")
            spec = lease.get("spec", {})
            holder = spec.get("holderIdentity")
            renewed = _seconds(spec.get("renewTime")) or 0.0
            duration = float(spec.get("leaseDurationSeconds") or self.duration_s)
            if holder and holder != self.identity and now - renewed < duration:
                return self._became(False, f"{holder} leads")
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
            # Times go back in the API's own format (the client reads them as datetimes, which drop zero microseconds).
            acquired = _stamp(_seconds(spec.get("acquireTime")) or now) if holder == self.identity else _stamp(now)
            body = {
                "metadata": {"name": names.OPERATOR_NAME, "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": round(self.duration_s),
                    "acquireTime": acquired,
                    "renewTime": _stamp(now),
                    "leaseTransitions": transitions,
                },
            }
            self.coordination.replace_namespaced_lease(names.OPERATOR_NAME, self.namespace, cast(Any, body))
            return self._became(True, "renewed" if holder == self.identity else f"took over from {holder or 'nobody'}")
        except ApiException as error:
            if error.status == 409:
                return self._became(False, "another operator won the lease")
            raise

    def release(self) -> None:
        """Give the Lease up (on a clean stop), so that a successor leads at once."""
        if self.leading is not True:
            return
        try:
            lease = self._read()
            if lease is None or lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            spec = lease.get("spec", {})
            body = {
                "metadata": {"name": names.OPERATOR_NAME, "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": {  # no holder: the next operator takes it at once
                    "leaseDurationSeconds": int(spec.get("leaseDurationSeconds") or round(self.duration_s)),
                    "leaseTransitions": int(spec.get("leaseTransitions") or 0),
                },
            }
            self.coordination.replace_namespaced_lease(names.OPERATOR_NAME, self.namespace, cast(Any, body))
            log.info("released the lease")
        except ApiException as error:
            log.warning("could not release the lease: %s", error.reason)
        self.leading = False

    def _read(self) -> dict[str, Any] | None:
        try:
            lease = self.coordination.read_namespaced_lease(names.OPERATOR_NAME, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        found: dict[str, Any] = self.api.sanitize_for_serialization(lease)  # type: ignore[no-untyped-call]
        return found

    def _create(self, now: float) -> None:
        body = {
            "metadata": {"name": names.OPERATOR_NAME, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.duration_s),
                "acquireTime": _stamp(now),
                "renewTime": _stamp(now),
                "leaseTransitions": 0,
            },
        }
        self.coordination.create_namespaced_lease(self.namespace, cast(Any, body))

    def _became(self, leading: bool, why: str) -> bool:
        if leading != self.leading:
            log.info("%s (%s as %s)", "leading" if leading else "standing by", why, self.identity)
        self.leading = leading
        return leading
