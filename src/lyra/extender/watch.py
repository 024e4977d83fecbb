"""Keeps the extender's view current from list-and-watch streams of nodes and pods.

Two threads (nodes, pods) list once, then watch from the list's resourceVersion, and relist when the server says
the version is too old (410) or the stream breaks (with a capped exponential backoff). Every event updates a
dictionary of objects and marks the view stale; a third thread rebuilds the view when it is stale, at most every
``rebuild_interval_s``, and swaps it in with one assignment. Requests only ever read the last complete view.
The source reports ``synced`` once both lists have completed.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from lyra.api.convert import PodFacts, pod_facts
from lyra.api.objects import Node, Pod
from lyra.extender.view import ClusterView, view_of

log = logging.getLogger("lyra.extender")

_WATCH_TIMEOUT_S = 300
_MAX_BACKOFF_S = 30.0


class _RawWatch(watch.Watch):
    """A watch that yields events as parsed JSON (``raw_object``) without building the client's model objects."""

    def get_return_type(self, func: Any) -> None:
        return None


class WatchedView:
    """A :class:`~lyra.extender.app.ViewSource` fed by watches of the API server."""

    def __init__(self, api: client.ApiClient, *, rebuild_interval_s: float = 0.2) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._nodes: dict[str, Node] = {}
        #: Pods as the facts the view needs (parsed once per event); pods that hold nothing are not kept.
        self._pods: dict[str, PodFacts] = {}
        self._lock = threading.Lock()
        self._stale = threading.Event()
        self._stop = threading.Event()
        self._listed = {"nodes": threading.Event(), "pods": threading.Event()}
        self._view = ClusterView()
        self._rebuild_interval_s = rebuild_interval_s
        self._threads: list[threading.Thread] = []
        self.rebuilds = 0

    @property
    def synced(self) -> bool:
        return all(event.is_set() for event in self._listed.values()) and self.rebuilds > 0

    def current(self) -> ClusterView:
        return self._view

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._follow, args=("nodes", self._core.list_node, Node), daemon=True),
            threading.Thread(
                target=self._follow, args=("pods", self._core.list_pod_for_all_namespaces, Pod), daemon=True
            ),
            threading.Thread(target=self._rebuild_loop, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._stale.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def wait_synced(self, timeout_s: float) -> bool:
        return all(event.wait(timeout_s) for event in self._listed.values())

    def _store(self, kind: str) -> dict[str, Any]:
        return self._nodes if kind == "nodes" else self._pods

    @staticmethod
    def _parse(model: type[Node] | type[Pod], raw: Any) -> Node | PodFacts | None:
        try:
            parsed = model.model_validate(raw)
        except ValidationError as error:
            log.warning("ignoring a %s the extender cannot read: %s", model.__name__, error.errors()[:1])
            return None
        return pod_facts(parsed) if isinstance(parsed, Pod) else parsed

    @staticmethod
    def _key(raw: Any) -> str:
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        if not isinstance(meta, dict):
            return ""
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"

    def _follow(self, kind: str, lister: Callable[..., Any], model: type[Node] | type[Pod]) -> None:
        """List, then watch from the list's version, on raw JSON: the client's model objects cost more than the
        decision they feed (measured: about 1 ms per pod event)."""
        backoff = 0.5
        store = self._store(kind)
        while not self._stop.is_set():
            try:
                response = lister(_preload_content=False)
                listing = json.loads(response.data)
                fresh = {}
                for raw in listing.get("items") or []:
                    parsed = self._parse(model, raw)
                    if parsed is not None:
                        fresh[self._key(raw)] = parsed
                with self._lock:
                    store.clear()
                    store.update(fresh)
                self._stale.set()
                self._listed[kind].set()
                version = (listing.get("metadata") or {}).get("resourceVersion")
                stream = _RawWatch()  # type: ignore[no-untyped-call]
                events = stream.stream(lister, resource_version=version, timeout_seconds=_WATCH_TIMEOUT_S)  # type: ignore[no-untyped-call]
                for event in events:
                    if self._stop.is_set():
                        stream.stop()  # type: ignore[no-untyped-call]
                        return
                    if event.get("type") == "ERROR":
                        break  # relist (for example 410 Gone: the version is too old)
                    raw = event.get("raw_object")
                    key = self._key(raw)
                    if not key:
                        continue
                    with self._lock:
                        parsed = None if event["type"] == "DELETED" else self._parse(model, raw)
                        if parsed is None:
                            store.pop(key, None)
                        else:
                            store[key] = parsed
                    self._stale.set()
                backoff = 0.5
            except ApiException as error:
                log.warning("%s watch: API error %s, relisting in %.1f s", kind, error.status, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
            except Exception as error:  # the watch must survive any network failure
                log.warning("%s watch: %s, relisting in %.1f s", kind, error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _rebuild_loop(self) -> None:
        while not self._stop.is_set():
            self._stale.wait()
            if self._stop.is_set():
                return
            self._stale.clear()
            with self._lock:
                nodes = list(self._nodes.values())
                pods = list(self._pods.values())
            self._view = view_of(nodes, pods)
            # Keep the cyclic collector off the long-lived objects (the view and the stores): scanning them made
            # every hundredth request ~5x slower. A replaced view is freed by reference counting, frozen or not.
            gc.freeze()
            self.rebuilds += 1
            self._stop.wait(self._rebuild_interval_s)
