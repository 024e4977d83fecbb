"""Keeps the extender's view current from list-and-watch caches of pool nodes and pods (:mod:`lyra.kubewatch`).

Each cache calls back once per change, from its own thread, and the change goes straight into the
:class:`~lyra.extender.view.LiveView`: a node or pod is parsed once, when its event arrives, and only its own entries
change (no rebuild of the view). A third thread recomputes the loaned nodes' reclaim ranks when an event has touched
them, at most every ``rank_interval_s`` and within :data:`RANK_CPU_SHARE` of a core. The source reports ``synced``
once both caches have listed and the ranks have been computed once; until then ``/readyz`` says so and
``prioritize`` scores nothing.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from pydantic import ValidationError

from lyra.api import names
from lyra.api.convert import pod_facts
from lyra.api.objects import Node, Pod
from lyra.extender.view import ClusterView, LiveView
from lyra.kubewatch import ApiSource, Source, WatchCache
from lyra.kubewatch.kinds import BOUND_PODS, NODES, JsonObject, section
from lyra.osthreads import name_os_thread

log = logging.getLogger("lyra.extender")

RANK_INTERVAL_S = 0.2
#: The share of one core the reclaim ranks may take: after a refresh that took ``t`` seconds of CPU the next one
#: waits at least ``t / RANK_CPU_SHARE``. At 5,000 nodes with 1,000 loaned a refresh takes 5-10 ms of CPU, and
#: while pods keep landing on loaned nodes every refresh is due: at a twentieth of a core the rank thread took
#: 0.35-0.47 s of the extender's 1.3-1.6 s over 1,000 pods in the scheduling benchmark, second only to answering
#: kube-scheduler. A rank a few tenths of a second old only shifts which loaned node a worker prefers.
RANK_CPU_SHARE = 0.02
SYNC_POLL_S = 0.05


def _facts_signature(raw: JsonObject) -> tuple[object, ...]:
    """Everything of a kept pod that :func:`~lyra.api.convert.pod_facts` reads: its UID and labels, its spec (the
    cache keeps its node, selector, scheduler and containers' resources) and whether its phase is a finished one
    (the only thing of the phase it reads: a bound pod that starts, ``Pending`` to ``Running``, holds what it held).
    Two events with equal signatures give equal facts, so the second need not be parsed."""
    metadata = section(raw, "metadata")
    finished = section(raw, "status").get("phase") in names.FINISHED_POD_PHASES
    return (metadata.get("uid"), metadata.get("labels"), raw.get("spec"), finished)


def rank_wait_s(interval_s: float, spent_s: float) -> float:
    """How long the rank thread waits after a refresh that took ``spent_s`` of CPU (0: none was due)."""
    return max(interval_s, spent_s / RANK_CPU_SHARE)


class WatchedView:
    """A :class:`~lyra.extender.app.ViewSource` fed by watches of the API server (or, in tests, of any
    :class:`~lyra.kubewatch.Source`: ``sources`` by kind, ``"nodes"`` and ``"pods"``)."""

    def __init__(
        self,
        api: client.ApiClient | None = None,
        *,
        sources: Mapping[str, Source] | None = None,
        rank_interval_s: float = RANK_INTERVAL_S,
    ) -> None:
        if sources is None:
            if api is None:
                raise ValueError("WatchedView needs an API client or sources")
            sources = {"nodes": ApiSource(api, NODES), "pods": ApiSource(api, BOUND_PODS)}
        self.live = LiveView()
        self.caches = {
            "nodes": WatchCache(NODES, sources["nodes"], on_change=self._node_changed),
            "pods": WatchCache(BOUND_PODS, sources["pods"], on_change=self._pod_changed),
        }
        self._rank_interval_s = rank_interval_s
        self._ranked = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rank_refreshes = 0
        #: Per pod, the parts of its last event that :func:`~lyra.api.convert.pod_facts` reads.
        self._pod_signatures: dict[str, tuple[object, ...]] = {}
        self.pods_parsed = 0

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self.caches.values()) and self._ranked.is_set()

    def current(self) -> ClusterView:
        return self.live.view

    def start(self) -> None:
        for cache in self.caches.values():
            cache.start()
        self._thread = threading.Thread(target=self._rank_loop, name="extender-ranks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        for cache in self.caches.values():
            cache.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def wait_synced(self, timeout_s: float) -> bool:
        return all(cache.wait_synced(timeout_s) for cache in self.caches.values()) and self._ranked.wait(timeout_s)

    @staticmethod
    def _parse(model: type[Node] | type[Pod], raw: JsonObject) -> Any:
        try:
            return model.model_validate(raw)
        except ValidationError as error:
            log.warning("ignoring a %s the extender cannot read: %s", model.__name__, error.errors()[:1])
            return None

    def _node_changed(self, key: str, raw: JsonObject | None) -> None:
        self.live.set_node(key, self._parse(Node, raw) if raw is not None else None)

    def _pod_changed(self, key: str, raw: JsonObject | None) -> None:
        """A pod event: parsed only when what the view keeps of a pod may have moved. While pods land, most pod
        events are their status moving (scheduled, started, ready). A pod not bound to a node holds nothing (the API
        server leaves such pods out of the watch, :data:`~lyra.kubewatch.kinds.BOUND_PODS`; a source without that
        selector may still send them)."""
        if raw is None:
            self._pod_signatures.pop(key, None)
            self.live.set_pod(key, None)
            return
        signature = _facts_signature(raw)
        if self._pod_signatures.get(key) == signature:
            return
        self._pod_signatures[key] = signature
        if not section(raw, "spec").get("nodeName"):
            self.live.set_pod(key, None)
            return
        pod = self._parse(Pod, raw)
        self.pods_parsed += 1
        self.live.set_pod(key, pod_facts(pod) if pod is not None else None)

    def _rank_loop(self) -> None:
        name_os_thread()
        synced: Callable[[], bool] = lambda: all(cache.synced for cache in self.caches.values())  # noqa: E731
        while not self._stop.is_set() and not synced():
            self._stop.wait(SYNC_POLL_S)
        while not self._stop.is_set():
            spent = 0.0
            if self.live.ranks_stale or not self._ranked.is_set():
                started = time.thread_time()
                self.live.refresh_ranks()
                spent = time.thread_time() - started
                self.rank_refreshes += 1
                self._ranked.set()
            # Keep the cyclic collector off the long-lived entries: scanning them made every hundredth request
            # about 5x slower. Entries replaced later are freed by reference counting, frozen or not.
            gc.freeze()
            self._stop.wait(rank_wait_s(self._rank_interval_s, spent))
