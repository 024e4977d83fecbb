"""The operator's watch caches: the objects a pass reads, kept current by list-and-watch (:mod:`lyra.kubewatch`),
so that no pass lists the cluster.

Six caches: pool nodes, pods (only those that ask for GPUs or carry Lyra's labels are kept), TrainingJobs,
InferenceServices, and Lyra's Deployments and PodDisruptionBudgets. The runner starts them, makes no pass before every
one has listed once (``/readyz`` says so meanwhile), and wakes its loop on every change they see.

**Reading one's own writes.** A pass may start before the watch has delivered the previous pass's writes; deciding
on such a view would, for example, create a pod again or write a status over one it has already replaced. So every
write the commit makes records the resourceVersion the API server answered it with, per cache (:meth:`wrote`), and
a pass reads only after each cache has seen at least that version (:meth:`catch_up`): the write's own event carries
it. resourceVersions are etcd revisions, which grow with every write, so a cache that has seen a later event has
seen the write too. A cache that has not seen it within :data:`CATCH_UP_S` reopens its watch from the last version
it saw (:meth:`~lyra.kubewatch.WatchCache.resume`; logged, :data:`RESUME_MESSAGE`): the server sends again every event
after that version, the write's among them, so a stream that stalled is replaced and nothing is listed (``410 Gone``
there makes the cache list, as always). If even that does not bring the write back in time, the pass fails and the
next one tries again. Writes whose event no cache receives (Events, a job's headless Service) record nothing.

Why not read the written objects again instead (a GET each): the object would enter the cache ahead of its watch,
whose version would not move, so every later pass would wait for the same write again; the watch's older events about
that object, still to come, would put older states back (and a deleted object back) unless the cache kept per-object
versions and tombstones; and a stalled stream would stay stalled, every other object's changes with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kubernetes import client

from lyra.api import names
from lyra.api.convert import node_gpu_type, node_pool
from lyra.core.model import Pool
from lyra.kubewatch import ApiSource, Source, WatchCache, list_all
from lyra.kubewatch.cache import key_of, reached
from lyra.kubewatch.kinds import (
    DEPLOYMENTS,
    DISRUPTION_BUDGETS,
    INFERENCE_SERVICES,
    NODES,
    PODS,
    TRAINING_JOBS,
    JsonObject,
    Kind,
)

#: How long a pass waits for a cache to see its previous writes before the cache reopens its watch.
CATCH_UP_S = 5.0

log = logging.getLogger("lyra.operator")

#: The log line of a cache reopening its watch because the watch did not bring a write back in time.
RESUME_MESSAGE = "%s cache: the watch did not bring the write at %s back within %.0f s; reopening it"

#: The kinds a pass reads, by the name of ``read_world``'s argument.
KINDS: Mapping[str, Kind] = {
    "nodes": NODES,
    "pods": PODS,
    "jobs": TRAINING_JOBS,
    "services": INFERENCE_SERVICES,
    "deployments": DEPLOYMENTS,
    "budgets": DISRUPTION_BUDGETS,
}
_BY_RESOURCE_KIND = {
    "Node": "nodes",
    "Pod": "pods",
    names.TRAINING_JOB_KIND: "jobs",
    names.INFERENCE_SERVICE_KIND: "services",
    "Deployment": "deployments",
    names.DISRUPTION_BUDGET_KIND: "budgets",
}


#: The watch layers ``lyra operator --watch-layer`` chooses from: these caches, or kopf's indexes
#: (:mod:`lyra.operator.kopf_caches`); the pass is the same on either.
WATCH_LAYERS = ("kubewatch", "kopf")


class WatchCounts(Protocol):
    """What a watch layer counts per kind, for ``lyra_watch_*_total``."""

    lists: int
    errors: int
    events: int


class PassCaches(Protocol):
    """What a pass and the runner read of a watch layer (:class:`ClusterCaches`, or
    :class:`lyra.operator.kopf_caches.KopfCaches`)."""

    on_change: Callable[[], None] | None

    @property
    def caches(self) -> Mapping[str, WatchCounts]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def synced(self) -> bool: ...

    def wait_synced(self, timeout_s: float) -> bool: ...

    def wrote(self, kind: str, version: str) -> None: ...

    def catch_up(self) -> None: ...

    def reconnect(self) -> bool: ...

    def node_kinds(self) -> set[tuple[str, Pool]]: ...

    def versions(self) -> dict[str, dict[str, str]]: ...

    def snapshot(self) -> dict[str, list[JsonObject]]: ...


class StaleCacheError(RuntimeError):
    """A cache did not reach the version of a write the operator made, even after reopening its watch."""


def cache_of(kind: str) -> str | None:
    """The cache (``read_world``'s argument) that receives writes to objects of ``kind`` (``None``: no cache)."""
    return _BY_RESOURCE_KIND.get(kind)


def list_once(api: client.ApiClient) -> dict[str, list[JsonObject]]:
    """Every kind a pass reads, listed once (paginated, slimmed): for one-shot commands, which keep no cache."""
    return {name: list_all(ApiSource(api, kind), kind)[0] for name, kind in KINDS.items()}


class ClusterCaches:
    """The six caches a pass reads, and the versions of the operator's own writes they must reach first."""

    def __init__(
        self,
        sources: Mapping[str, Source],
        *,
        on_change: Callable[[], None] | None = None,
        catch_up_s: float = CATCH_UP_S,
    ) -> None:
        self.on_change = on_change
        self.catch_up_s = catch_up_s
        self.caches = {
            name: WatchCache(KINDS[name], source, on_change=self._changed) for name, source in sources.items()
        }
        self._written: dict[str, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def on_api(cls, api: client.ApiClient, **options: Any) -> ClusterCaches:
        return cls({name: ApiSource(api, kind) for name, kind in KINDS.items()}, **options)

    def _changed(self, _key: str, _object: JsonObject | None) -> None:
        if self.on_change is not None:
            self.on_change()

    def start(self) -> None:
        for cache in self.caches.values():
            cache.start()

    def stop(self) -> None:
        for cache in self.caches.values():
            cache.stop(timeout_s=0)  # all of them asked first, then waited for together
        for cache in self.caches.values():
            cache.stop(timeout_s=1.0)

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self.caches.values())

    def wait_synced(self, timeout_s: float) -> bool:
        return all(cache.wait_synced(timeout_s) for cache in self.caches.values())

    def wrote(self, kind: str, version: str) -> None:
        """The operator wrote an object of ``kind`` (``Node``, ``Pod``, ...) and the API answered with ``version``."""
        name = cache_of(kind)
        if name is None or not version:
            return
        with self._lock:
            if reached(self._written.get(name, ""), version):
                return
            self._written[name] = version

    def catch_up(self) -> None:
        """Wait until every cache has seen the operator's writes (see the module docstring)."""
        with self._lock:
            written = dict(self._written)
        for name, version in sorted(written.items()):
            cache = self.caches[name]
            if cache.wait_for(version, self.catch_up_s):
                continue
            log.info(RESUME_MESSAGE, cache.kind.name, version, self.catch_up_s)
            cache.resume()
            if not cache.wait_for(version, self.catch_up_s):
                raise StaleCacheError(
                    f"the {cache.kind.name} cache is at version {cache.version or 'none'}, before the operator's "
                    f"write at {version}, even after reopening its watch"
                )

    def reconnect(self) -> bool:
        """Reopen every watch from the last version its cache saw, without listing: the streams open now may be
        connections a partition left open, carrying nothing (see :meth:`lyra.operator.commit.Cluster.reconnect`).
        ``True``: they were reopened."""
        for cache in self.caches.values():
            cache.resume()
        return True

    def node_kinds(self) -> set[tuple[str, Pool]]:
        """The (GPU type, pool) of every cached node in one of Lyra's pools: what a standby knows without a pass."""
        kinds: set[tuple[str, Pool]] = set()
        for node in self.caches["nodes"].snapshot():
            labels = (node.get("metadata") or {}).get("labels") or {}
            pool = node_pool(labels)
            if pool is not None:
                kinds.add((node_gpu_type(labels), pool))
        return kinds

    def versions(self) -> dict[str, dict[str, str]]:
        """Each kind's cached objects as key -> resourceVersion (the operator's ``/debug/caches``)."""
        return {
            name: {key_of(o): str(o["metadata"].get("resourceVersion") or "") for o in cache.snapshot()}
            for name, cache in self.caches.items()
        }

    def snapshot(self) -> dict[str, list[JsonObject]]:
        """Each kind's objects now, by ``read_world``'s argument names."""
        return {name: cache.snapshot() for name, cache in self.caches.items()}
