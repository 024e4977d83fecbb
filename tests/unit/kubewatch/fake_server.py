"""An in-memory API server for one kind, as a watch cache's source sees it: resourceVersions from one counter, pages
with continue tokens, watch streams that block for events, bookmarks, compaction (``410`` for versions it no longer
keeps) and streams the test ends or breaks. Written from the API's documented behaviour; shares no code with
:mod:`lyra.kubewatch`."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from lyra.kubewatch import GoneError, WatchError


class FakeServer:
    def __init__(self) -> None:
        self.version = 0
        self.objects: dict[str, dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted = 0  # watches from a version below this get 410
        self.pages = 0
        self.watches: list[str] = []  # the versions each watch started from
        self.refusing: int | None = None  # while set, watch requests are refused with this HTTP status
        self.cutting = False  # while set, every watch stream ends at once, empty
        self._opened = 0  # watch streams opened so far
        self._stalled = 0  # streams opened up to this one deliver nothing more (until they end)
        self._cond = threading.Condition()
        self._stream = 0  # bumped to end every open stream

    # What the test does to the cluster.

    def put(self, obj: dict[str, Any]) -> str:
        with self._cond:
            self.version += 1
            stored = copy.deepcopy(obj)
            stored["metadata"]["resourceVersion"] = str(self.version)
            key = _key(stored)
            kind = "MODIFIED" if key in self.objects else "ADDED"
            self.objects[key] = stored
            self.history.append((self.version, kind, stored))
            self._cond.notify_all()
            return str(self.version)

    def delete(self, key: str) -> str:
        with self._cond:
            self.version += 1
            gone = copy.deepcopy(self.objects.pop(key))
            gone["metadata"]["resourceVersion"] = str(self.version)
            self.history.append((self.version, "DELETED", gone))
            self._cond.notify_all()
            return str(self.version)

    def bookmark(self) -> str:
        """Another kind changes (the version moves on) and the server sends a bookmark."""
        with self._cond:
            self.version += 1
            self.history.append((self.version, "BOOKMARK", {"metadata": {"resourceVersion": str(self.version)}}))
            self._cond.notify_all()
            return str(self.version)

    def compact(self) -> None:
        with self._cond:
            self.compacted = self.version

    def stall_streams(self) -> None:
        """The streams open now stay open but deliver nothing more (a connection that hangs); new ones deliver."""
        with self._cond:
            self._stalled = self._opened

    def end_streams(self) -> None:
        """The server's watch timeout: every open stream ends normally."""
        with self._cond:
            self._stream += 1
            self._cond.notify_all()

    # The Source protocol.

    def list_page(self, *, limit: int, continue_token: str) -> Mapping[str, Any]:
        with self._cond:
            self.pages += 1
            if continue_token:
                at, offset = (int(part) for part in continue_token.split(":"))
                if at < self.compacted:
                    raise GoneError(410, "the continue token has expired")
                items = self._state_at(at)
            else:
                at, offset = self.version, 0
                items = self._state_at(at)
            page = items[offset : offset + limit]
            more = offset + limit < len(items)
            return {
                "metadata": {"resourceVersion": str(at), **({"continue": f"{at}:{offset + limit}"} if more else {})},
                "items": copy.deepcopy(page),
            }

    def _state_at(self, version: int) -> list[dict[str, Any]]:
        state: dict[str, dict[str, Any]] = {}
        for at, kind, obj in self.history:
            if at > version:
                break
            if kind == "DELETED":
                state.pop(_key(obj), None)
            elif kind != "BOOKMARK":
                state[_key(obj)] = obj
        return [state[key] for key in sorted(state)]

    def watch(self, *, resource_version: str, timeout_s: int) -> Iterator[Mapping[str, Any]]:
        with self._cond:
            self.watches.append(resource_version)
            refused = self.refusing
            stream = self._stream
            self._opened += 1
            serial = self._opened
        if refused is not None:
            raise WatchError(refused, "refused")
        if self.cutting:
            return
        start = int(resource_version)
        if start < self.compacted:
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
            return
        sent = start
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda at=sent: self._stream != stream or (self.version > at and serial > self._stalled), timeout=5
                )
                if self._stream != stream:
                    return
                if serial <= self._stalled:
                    continue
                events = [(at, kind, obj) for at, kind, obj in self.history if at > sent]
            for at, kind, obj in events:
                sent = at
                yield {"type": kind, "object": copy.deepcopy(obj)}

    def close(self) -> None:
        self.end_streams()


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])
