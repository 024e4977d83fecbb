"""A list-and-watch cache of one kind of object, kept current by one thread.

The thread lists the kind in pages (``limit``/``continue``), then watches from the list's resourceVersion with bookmarks
on (the server then sends the current version about once a minute while objects of the kind change, even ones the watch
does not select), and when the server ends the stream (its timeout) resumes from the last version it saw. Only
``410 Gone`` (the version is older than the server keeps) makes it list again; any other failure (the connection drops,
5xx, 403) is retried with a capped exponential backoff, resuming from where it was. A stream that carries nothing, not
even a bookmark, for :data:`WATCH_SILENCE_S` is ended and resumed as if the server had ended it: a connection a
partition or a hung server left open is left behind, and a kind that does not change costs one request every so often. A
reader may also ask it to reopen its watch from the last version it saw (:meth:`WatchCache.resume`: a stream that has
stalled brings nothing more), which lists nothing. Every object is slimmed (:class:`~lyra.kubewatch.kinds.Kind`) before
it is stored, and objects the kind does not keep are never stored.

Readers never call the API: :meth:`WatchCache.snapshot` is a consistent copy of the objects (each stored object is
replaced whole by the next event about it, never changed in place, so the copy stays valid while events go on),
:meth:`WatchCache.wait_for` waits until the cache has seen a given resourceVersion (a reader that has just written
an object waits for its write to come back before reading), and ``on_change(key, object or None)`` is called once
per change, in order, from the cache's thread, including the differences a re-list finds, so a reader can keep its
own structures current incrementally. An event that changes no kept field but the resourceVersion (a node's status
heartbeat, once ``lastHeartbeatTime`` is dropped) is stored and is not a change: at 5,000 nodes the kubelets'
reports would otherwise wake a pass many times a second.

resourceVersions are compared as integers (etcd revisions, which the API server uses for every object, grow with
every write across all kinds); a version that is not an integer is reached only when seen exactly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from lyra.apiserver_failures import describe_api_failure
from lyra.kubewatch.kinds import JsonObject, Kind
from lyra.osthreads import name_os_thread

log = logging.getLogger("lyra.kubewatch")

PAGE_SIZE = 500
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
#: The server ends each watch after a random time in this range (client-go's choice); the cache then resumes.
WATCH_TIMEOUT_RANGE_S = (300, 600)
CONNECT_TIMEOUT_S = 10.0
#: A watch stream that carries nothing (no event, no bookmark) for this long is ended and resumed from the last
#: version seen. The API server sends a watcher with bookmarks on a bookmark about every minute while its kind changes
#: (59.6 to 60.4 s apart, measured on kube-apiserver v1.34) and none while nothing of the kind changes; it keeps at
#: least the last 75 s of events, so a watch resumed within that needs no new list. A silent stream is therefore a
#: kind that does not change (resumed at the cost of one request) or a connection a partition or a hung server left
#: open, which was otherwise waited on until the watch's own timeout and a minute more (6 to 11 minutes), the cache
#: stale meanwhile.
WATCH_SILENCE_S = 70.0
#: A watch stream that ends empty sooner than this is reopened only after the backoff.
QUIET_STREAM_S = 1.0

Change = Callable[[str, JsonObject | None], None]


class WatchError(Exception):
    """The API server refused a list or a watch, or the watch stream carried an error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class GoneError(WatchError):
    """``410 Gone``: the resourceVersion (or the continue token) is older than the server keeps: list again."""


class Source(Protocol):
    """Where a cache's objects come from: one page of a list, and a stream of watch events."""

    def list_page(self, *, limit: int, continue_token: str) -> Mapping[str, Any]: ...

    def watch(self, *, resource_version: str, timeout_s: int) -> Iterator[Mapping[str, Any]]: ...

    def close(self) -> None:
        """End a watch under way (called from another thread, to stop)."""


def key_of(raw: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "")
    return f"{namespace}/{name}" if namespace and name else name


def _version_of(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def reached(seen: str, wanted: str) -> bool:
    """Whether a cache that has seen version ``seen`` has seen ``wanted`` (empty ``wanted``: nothing to wait for)."""
    if not wanted:
        return True
    if seen.isdigit() and wanted.isdigit():
        return int(seen) >= int(wanted)
    return seen == wanted


class ApiSource:
    """A :class:`Source` on the API server, through the kubernetes client's list call for the kind (on raw JSON:
    the client's model objects would cost more than everything the cache does with an event)."""

    def __init__(self, api: client.ApiClient, kind: Kind) -> None:
        self._call = kind.list_function(api)
        self.kind_name = kind.name
        selectors = {"label_selector": kind.label_selector, "field_selector": kind.field_selector}
        self._selectors = {argument: value for argument, value in selectors.items() if value}
        self._open: Any = None
        self._closed_before_open = False  # close() came while no watch was open
        self._lock = threading.Lock()

    def _common(self) -> dict[str, Any]:
        return dict(self._selectors)

    def list_page(self, *, limit: int, continue_token: str) -> Mapping[str, Any]:
        kwargs = self._common()
        if continue_token:
            kwargs["_continue"] = continue_token
        try:
            response = self._call(
                limit=limit, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, 120), **kwargs
            )
        except ApiException as error:
            raise _refused(error) from None
        page: Mapping[str, Any] = decoded(response.data)
        return page

    def watch(self, *, resource_version: str, timeout_s: int) -> Iterator[Mapping[str, Any]]:
        try:
            response = self._call(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_s,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT_S, WATCH_SILENCE_S),
                **self._common(),
            )
        except ApiException as error:
            raise _refused(error) from None
        with self._lock:
            closed, self._closed_before_open = self._closed_before_open, False
            self._open = None if closed else response
        if closed:  # asked to end while this watch was being opened: it ends as soon as it is open
            _shut(response)
            response.release_conn()
            return
        try:
            pending = b""
            try:
                for chunk in response.stream(amt=None, decode_content=False):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield decoded(line)
            except ReadTimeoutError:
                # A quiet kind, or a connection lost: ended as if the server had ended it, and reopened.
                log.debug(
                    "%s: the watch carried nothing for %g s (no event, no bookmark): reopening it",
                    self.kind_name,
                    WATCH_SILENCE_S,
                )
                return
            if pending.strip():
                yield decoded(pending)
        finally:
            with self._lock:
                self._open = None
            response.release_conn()

    def close(self) -> None:
        """End the watch under way; if none is open yet (one may be being opened), the next one ends as soon as it
        is open, so that no request to end a watch is lost."""
        with self._lock:
            response = self._open
            if response is None:
                self._closed_before_open = True
                return
        _shut(response)


def decoded(data: bytes) -> Any:
    """A list page or a watch event: by orjson (a bound pod's event in about 0.42x of ``json.loads``' CPU,
    docs/benchmarks.md; the extender and the operator decode every event of their watches), and by ``json`` for what
    orjson refuses and ``json`` takes (integers past 64 bits, which a custom resource's free-form field may hold).
    Malformed JSON raises :class:`json.JSONDecodeError` either way."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _shut(response: Any) -> None:
    """Close a watch's answer; closing a socket does not wake a thread blocked reading it, shutting it down does."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        response.close()


def _refused(error: ApiException) -> WatchError:
    """A list or watch the API server refused: its ``Status`` body's message when it has one (it names the verb and
    resource RBAC refused), else the status line's reason."""
    message = str(error.reason or "")
    body = error.body.decode("utf-8", "replace") if isinstance(error.body, bytes) else error.body
    if isinstance(body, str) and body.startswith("{"):
        with contextlib.suppress(ValueError):
            status = json.loads(body)
            if isinstance(status, dict) and isinstance(status.get("message"), str) and status["message"]:
                message = status["message"]
    return _error(error.status or 0, message)


def _error(status: int, message: str) -> WatchError:
    return GoneError(status, message) if status == 410 else WatchError(status, message)


class WatchCache:
    """One kind's objects, by key (``namespace/name``), kept current by a thread (see the module docstring)."""

    def __init__(
        self,
        kind: Kind,
        source: Source,
        *,
        on_change: Change | None = None,
        page_size: int = PAGE_SIZE,
        initial_backoff_s: float = INITIAL_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self.kind = kind
        self._source = source
        self._on_change = on_change
        self._page_size = page_size
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._objects: dict[str, JsonObject] = {}
        self._version = ""
        self._changed = threading.Condition()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._resume = threading.Event()  # reopen the watch (or end a backoff) now; set by resume() and stop()
        self._thread: threading.Thread | None = None
        #: Full lists made (the first one included), events applied (bookmarks included), errors met.
        self.lists = 0
        self.events = 0
        self.errors = 0

    # Reading.

    @property
    def synced(self) -> bool:
        """The first list has completed (the cache has held every object of the kind at least once)."""
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    @property
    def version(self) -> str:
        """The resourceVersion of the last list, event or bookmark seen."""
        with self._changed:
            return self._version

    def snapshot(self) -> list[JsonObject]:
        """The objects now, in key order. The objects themselves are shared: read them, never change them."""
        with self._changed:
            objects = self._objects
            return [objects[key] for key in sorted(objects)]

    def get(self, key: str) -> JsonObject | None:
        with self._changed:
            return self._objects.get(key)

    def __len__(self) -> int:
        with self._changed:
            return len(self._objects)

    def wait_for(self, version: str, timeout_s: float) -> bool:
        """Wait until the cache has seen ``version`` (see :func:`reached`); ``False`` if it did not in time."""
        with self._changed:
            return self._changed.wait_for(lambda: reached(self._version, version), timeout_s)

    # Running.

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.kind.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread: at once between events, or when the stream under way closes (waited for up to
        ``timeout_s``; the thread is a daemon either way)."""
        self._stop.set()
        self._resume.set()  # ends a backoff under way
        self._source.close()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def resume(self) -> None:
        """End the watch under way and open a new one from the last version seen, without listing: for a reader
        that waited in vain for its write to come back (the server sends again every event after that version, or
        ``410 Gone`` if it no longer keeps them, and then the cache lists)."""
        self._resume.set()
        self._source.close()

    def _run(self) -> None:
        name_os_thread()
        backoff = self._initial_backoff_s
        must_list = True
        while not self._stop.is_set():
            try:
                if must_list:
                    self._list()
                    must_list = False
                    backoff = self._initial_backoff_s
                self._resume.clear()
                opened = time.monotonic()
                if self._watch():
                    backoff = self._initial_backoff_s
                elif time.monotonic() - opened < QUIET_STREAM_S and not self._resume.is_set():
                    # A stream that ends at once with nothing in it (a proxy cutting it, a server shedding load):
                    # do not reopen it in a tight loop.
                    self._resume.wait(backoff)
                    backoff = min(backoff * 2, self._max_backoff_s)
            except GoneError as error:
                must_list = True
                self.errors += 1
                log.info("%s: %s; listing again in %.1f s", self.kind.name, error, backoff)
                self._resume.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
            except Exception as error:  # the cache must outlive any failure of the network or the server
                if self._stop.is_set():
                    return
                self.errors += 1
                if self._resume.is_set():
                    continue  # the watch was ended on purpose, to reopen it
                log.warning("%s: %s; retrying in %.1f s", self.kind.name, describe_api_failure(error, None), backoff)
                self._resume.wait(backoff)  # a requested resume does not wait for the backoff
                backoff = min(backoff * 2, self._max_backoff_s)

    def _list(self) -> None:
        fresh, version = _listed(self._source, self.kind, self._page_size)
        with self._changed:
            old = self._objects
            self._objects = fresh
            self._version = version
            self.lists += 1
            self._changed.notify_all()
        self._synced.set()
        if self._on_change is not None:
            for key in sorted(old.keys() - fresh.keys()):
                self._on_change(key, None)
            for key in sorted(fresh):
                if not _same_but_version(old.get(key), fresh[key]):
                    self._on_change(key, fresh[key])

    def _watch(self) -> bool:
        """Follow one watch stream to its end; ``True`` if it delivered anything."""
        low, high = WATCH_TIMEOUT_RANGE_S
        delivered = False
        for event in self._source.watch(resource_version=self.version, timeout_s=random.randint(low, high)):
            if self._stop.is_set() or self._resume.is_set():
                return delivered
            self.apply(event)
            delivered = True
        return delivered

    def apply(self, event: Mapping[str, Any]) -> None:
        """Apply one watch event (the cache's thread does, for each event of its stream; thread-safe)."""
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, Mapping):
            return
        if kind == "ERROR":
            raise _error(int(raw.get("code") or 0), str(raw.get("message") or raw.get("reason") or ""))
        version = _version_of(raw)
        if kind == "BOOKMARK":
            with self._changed:
                self._version = version or self._version
                self.events += 1
                self._changed.notify_all()
            return
        key = key_of(raw)
        new = self.kind.slim(raw) if kind != "DELETED" and self.kind.keep(raw) else None
        with self._changed:
            old = self._objects.get(key)
            if new is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = new
            self._version = version or self._version
            self.events += 1
            self._changed.notify_all()
        if self._on_change is not None and (old is not None or new is not None) and not _same_but_version(old, new):
            self._on_change(key, new)


def _same_but_version(old: JsonObject | None, new: JsonObject | None) -> bool:
    """Whether two kept objects differ in their resourceVersion only: what a write that changed none of the fields
    Lyra keeps (a node's status heartbeat, a foreign annotation) leaves. Such an event is stored (its version is the
    one a conditional write must carry) but is not reported as a change."""
    if old is None or new is None:
        return False
    return _without_version(old) == _without_version(new)


def _without_version(slim: JsonObject) -> JsonObject:
    meta = slim.get("metadata")
    if not isinstance(meta, Mapping):
        return slim
    return {**slim, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}


def _listed(source: Source, kind: Kind, page_size: int) -> tuple[dict[str, JsonObject], str]:
    """Every object of the kind the cache keeps, slimmed, by key, over as many pages as it takes, and the list's
    resourceVersion (the first page's: every page is read at it)."""
    objects: dict[str, JsonObject] = {}
    token = ""
    version = ""
    keep, slim = kind.keep, kind.slim
    while True:
        page = source.list_page(limit=page_size, continue_token=token)
        meta = page.get("metadata") or {}
        version = version or str(meta.get("resourceVersion") or "")
        for raw in page.get("items") or ():
            if isinstance(raw, Mapping) and keep(raw):
                objects[key_of(raw)] = slim(raw)
        token = str(meta.get("continue") or "")
        if not token:
            return objects, version


def list_all(source: Source, kind: Kind, page_size: int = PAGE_SIZE) -> tuple[list[JsonObject], str]:
    """One paginated list, slimmed, in key order, and its resourceVersion: for one-shot readers (``lyra plan
    --from-cluster``, ``lyra status``), which need no watch."""
    objects, version = _listed(source, kind, page_size)
    return [objects[key] for key in sorted(objects)], version
