"""The operator's watch caches on kopf (``lyra operator --watch-layer kopf``): kopf's indexes are the caches.

The same six kinds as :mod:`lyra.operator.caches` (:data:`~lyra.operator.caches.KINDS`, with their server-side
label selectors, their client-side ``keep`` and their ``slim``), watched by kopf in a thread of its own, with its own
event loop, embedded (``kopf.operator`` with a stop flag): one ``@kopf.index`` per kind keeps each kept object,
slimmed, under its ``namespace/name``; one ``@kopf.on.event`` per kind counts the events, follows the highest
resourceVersion the kind has delivered (what :meth:`KopfCaches.catch_up` waits for, as the kubewatch caches do) and
wakes the pass on a deletion (an index handler is not called for one). The index handler wakes the pass when an
object's kept fields change (a node's status heartbeat, once slimmed, changes nothing and wakes nothing). The pass is
the same pass, on the same snapshot (:meth:`KopfCaches.snapshot`, taken on kopf's loop, so consistent).

kopf's peering is off (``standalone``: Lyra's fenced Lease, :mod:`lyra.operator.leader`, says who writes), its resource
scanning is off (it would watch CRDs and namespaces), it posts no Events, and its login is the operator's own kubeconfig
(:func:`connection_info`). What kopf does not offer, and this layer therefore does not do: count its LISTs
(``lyra_watch_lists_total`` stays at zero; the API server's audit log counts them), reopen one watch on demand (the
kubewatch caches' ``resume``: a pass that does not see its write within the catch-up time fails, and the next one tries
again; an operator that begins to lead does not reopen them, and waits for kopf's own inactivity timeout of 70 s to end
a stream a partition left silent), and say when its lists are done before any object's event arrives (kopf's own
readiness is internal): the layer is synced once every kind's listing is over, which kopf tells by calling the event
handlers (it holds them until every index is filled), so an operator on a cluster with no object of any kind stays not
ready.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._core.engines.indexing import OperatorIndexers  # kopf passes indexes to handlers; an embedder holds them
from kubernetes import client

from lyra.api import names
from lyra.api.convert import node_gpu_type, node_pool
from lyra.core.model import Pool
from lyra.kubewatch.cache import key_of, reached
from lyra.kubewatch.kinds import JsonObject, Kind
from lyra.operator.caches import CATCH_UP_S, KINDS, StaleCacheError, cache_of
from lyra.osthreads import name_os_thread

log = logging.getLogger("lyra.operator")

#: Each kind's resource as kopf names it: (group/version, plural).
RESOURCES: Mapping[str, tuple[str, str]] = {
    "nodes": ("v1", "nodes"),
    "pods": ("v1", "pods"),
    "jobs": (names.API_VERSION, names.TRAINING_JOB_PLURAL),
    "services": (names.API_VERSION, names.INFERENCE_SERVICE_PLURAL),
    "deployments": ("apps/v1", "deployments"),
    "budgets": ("policy/v1", "poddisruptionbudgets"),
}
#: How long the layer waits for kopf's thread to stop.
STOP_TIMEOUT_S = 5.0


def _unversioned(slim: Mapping[str, Any]) -> JsonObject:
    """A slimmed object without its resourceVersion: what tells a change from an event that changes nothing kept."""
    meta = dict(slim.get("metadata") or {})
    meta.pop("resourceVersion", None)
    return {**slim, "metadata": meta}


def index_entry(kind: Kind, raw: Mapping[str, Any]) -> dict[str, JsonObject]:
    """What the kind's index keeps of an object: ``{namespace/name: slimmed}``, or nothing when the kind does not keep
    it (an empty mapping: kopf then drops what it kept of the object before)."""
    if not kind.keep(raw):
        return {}
    key = key_of(raw)
    return {key: kind.slim(raw)} if key else {}


def changed(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> bool:
    """Whether an object's kept fields differ (its resourceVersion aside; absent on either side: a change if the
    other is present)."""
    if before is None or after is None:
        return (before is None) != (after is None)
    return _unversioned(before) != _unversioned(after)


def newest(values: list[JsonObject]) -> JsonObject:
    """The value with the highest resourceVersion among those kopf keeps under one key (two objects of one name:
    the old one's deletion not yet seen while its successor's creation is)."""
    return max(values, key=lambda value: int(str(value["metadata"].get("resourceVersion") or "0") or "0"))


def connection_info(configuration: client.Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the kubernetes client's configuration (the operator's kubeconfig or service account)."""
    header = configuration.get_api_key_with_prefix("BearerToken", alias="authorization") or ""
    scheme, _, token = header.rpartition(" ")  # "Bearer <token>" (the kubeconfig's and the service account's)
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=(scheme or "Bearer") if token else None,
        token=token or None,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
        username=configuration.username or None,
        password=configuration.password or None,
    )


@dataclass(slots=True)
class KopfKindCache:
    """One kind's counts and the newest resourceVersion it has delivered (what the metrics and ``catch_up`` read)."""

    kind: Kind
    lists: int = 0  # kopf does not tell its lists (see the module docstring)
    errors: int = 0
    events: int = 0
    version: str = ""


class KopfCaches:
    """The six kinds a pass reads, as kopf indexes kept by kopf's watches in a thread of their own (see the module
    docstring); the interface of :class:`lyra.operator.caches.ClusterCaches`."""

    def __init__(
        self,
        configuration: client.Configuration,
        *,
        on_change: Callable[[], None] | None = None,
        catch_up_s: float = CATCH_UP_S,
    ) -> None:
        self.on_change = on_change
        self.catch_up_s = catch_up_s
        self.configuration = configuration
        self.caches = {name: KopfKindCache(kind) for name, kind in KINDS.items()}
        self.registry = kopf.OperatorRegistry()
        self.indexers = OperatorIndexers()
        self.settings = self._settings()
        self._written: dict[str, str] = {}
        self._lock = threading.Lock()
        self._seen = threading.Condition(self._lock)
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        #: Why kopf's watches ended (empty while they run): a pass then fails rather than read what they last held.
        self.failure = ""
        self._register()

    def _settings(self) -> kopf.OperatorSettings:
        settings = kopf.OperatorSettings()
        settings.peering.standalone = True
        settings.scanning.disabled = True
        settings.posting.enabled = False
        for name, (_, plural) in RESOURCES.items():
            selector = KINDS[name].label_selector
            if selector:
                settings.watching.label_selectors[plural] = selector
        return settings

    def _register(self) -> None:
        def login(**_: Any) -> kopf.ConnectionInfo:
            return connection_info(self.configuration)

        kopf.on.login(registry=self.registry)(login)
        for name, (group_version, plural) in RESOURCES.items():
            kopf.index(group_version, plural, id=name, registry=self.registry)(self._indexer(name))
            kopf.on.event(group_version, plural, id=f"{name}-events", registry=self.registry)(self._observer(name))

    def _indexer(self, name: str) -> Callable[..., Any]:
        kind = KINDS[name]

        async def index(body: kopf.Body, **_: Any) -> dict[str, JsonObject]:
            entry = index_entry(kind, dict(body))
            key = key_of(body)
            held = self.indexers.indices[name]
            before = newest(list(held[key])) if key in held else None
            if changed(before, entry.get(key)):
                self._changed()
            return entry

        return index

    def _observer(self, name: str) -> Callable[..., Any]:
        cache = self.caches[name]

        async def observe(event: Mapping[str, Any], **_: Any) -> None:
            raw = event.get("object")
            version = str(((raw or {}).get("metadata") or {}).get("resourceVersion") or "")
            with self._seen:
                cache.events += 1
                if version and not reached(cache.version, version):
                    cache.version = version
                self._seen.notify_all()
            self._synced.set()  # kopf holds event handlers until every kind has listed and every object is indexed
            if event.get("type") == "DELETED" and raw is not None and key_of(raw) in self.indexers.indices[name]:
                return  # another object of the same name is kept: its own event said whether it changed
            if event.get("type") == "DELETED":
                self._changed()

        return observe

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kopf", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        name_os_thread()
        loop = asyncio.new_event_loop()
        self._loop = loop
        logging.getLogger("kopf").setLevel(logging.WARNING)  # a line per object and handler otherwise
        try:
            loop.run_until_complete(
                kopf.operator(
                    registry=self.registry,
                    settings=self.settings,
                    indexers=self.indexers,
                    standalone=True,
                    clusterwide=True,
                    stop_flag=self._stop,
                )
            )
        except Exception as error:  # kopf ended: no more events, so every later pass fails (catch_up says why)
            self.failure = f"{type(error).__name__}: {error}"
            log.error("the kopf watch layer stopped: %s", self.failure)
        finally:
            self.failure = self.failure or "kopf stopped"
            loop.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_TIMEOUT_S)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def wrote(self, kind: str, version: str) -> None:
        """The operator wrote an object of ``kind`` and the API answered with ``version``."""
        name = cache_of(kind)
        if name is None or not version:
            return
        with self._lock:
            if not reached(self._written.get(name, ""), version):
                self._written[name] = version

    def catch_up(self) -> None:
        """Wait until every kind has delivered the operator's writes (kopf cannot be asked to reopen a watch)."""
        if self.failure:
            raise StaleCacheError(f"kopf's watches have ended ({self.failure}): the indexes are no longer kept")
        with self._seen:
            for name, version in sorted(self._written.items()):
                cache = self.caches[name]

                def seen(cache: KopfKindCache = cache, version: str = version) -> bool:
                    return reached(cache.version, version)

                if not self._seen.wait_for(seen, self.catch_up_s):
                    raise StaleCacheError(
                        f"kopf's {name} watch is at version {cache.version or 'none'}, before the operator's write at "
                        f"{version}, after {self.catch_up_s:.0f} s"
                    )

    def reconnect(self) -> bool:
        """``False``: kopf offers no way to reopen its watches from outside (see the module docstring); its own
        inactivity timeout (70 s without an event or a bookmark) takes a silent stream for dead."""
        return False

    def _on_loop(self, read: Callable[[], Any]) -> Any:
        """``read()`` run on kopf's loop, between two of its steps: the indexes do not change under it."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return read()
        future: Future[Any] = Future()

        def call() -> None:
            try:
                future.set_result(read())
            except Exception as error:
                future.set_exception(error)

        loop.call_soon_threadsafe(call)
        return future.result()

    def _objects(self) -> dict[str, list[JsonObject]]:
        indices = self.indexers.indices
        return {name: [newest(list(store)) for store in indices[name].values()] for name in KINDS}

    def snapshot(self) -> dict[str, list[JsonObject]]:
        """Each kind's objects now, by ``read_world``'s argument names."""
        objects: dict[str, list[JsonObject]] = self._on_loop(self._objects)
        return objects

    def node_kinds(self) -> set[tuple[str, Pool]]:
        """The (GPU type, pool) of every indexed node in one of Lyra's pools."""
        kinds: set[tuple[str, Pool]] = set()
        for node in self.snapshot()["nodes"]:
            labels = (node.get("metadata") or {}).get("labels") or {}
            pool = node_pool(labels)
            if pool is not None:
                kinds.add((node_gpu_type(labels), pool))
        return kinds

    def versions(self) -> dict[str, dict[str, str]]:
        """Each kind's indexed objects as key -> resourceVersion (the operator's ``/debug/caches``)."""
        return {
            name: {key_of(o): str(o["metadata"].get("resourceVersion") or "") for o in objects}
            for name, objects in self.snapshot().items()
        }
