"""A fault-injecting reverse proxy in front of the local control plane's kube-apiserver, for tests.

A client (the operator) gets a kubeconfig that names the proxy instead of the API server. The proxy terminates TLS
with the API server's own serving certificate (the local cluster's CA signed it for 127.0.0.1), so the client
verifies TLS as before, and forwards every request over TLS to the real API server with the client's headers,
bearer token included: the API server authenticates and authorizes the client itself, so RBAC is the client's own.

What goes wrong is data, a tuple of :class:`Rule`: which requests (method, path, watch or not) get which fault
(an error status instead of the API server's answer, or after the write went through; added latency; a watch stream
cut in the middle of an event), on every n-th matching request, at most so many times. :class:`Record` counts
the requests each rule matched and the faults it injected, so a test can show the faults were really hit.

The proxy runs its own event loop in a thread (aiohttp server and client), started and stopped by the context
manager; it speaks HTTP/1.1, which is what the Python clients use.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

ANY_METHOD = "*"
#: Headers that belong to one connection, never forwarded (RFC 9110 section 7.6.1), and the ones aiohttp sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
#: The machine-readable reason of the Status object the API server sends with each code.
STATUS_REASONS = {409: "Conflict", 500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Rule:
    """One kind of fault, on the requests it matches.

    ``path`` is a regular expression the whole URL path must match; ``watch`` restricts the rule to watches (True)
    or to other requests (False). On every ``every``-th matching request (the first included), at most ``limit``
    times (0: no limit), the rule injects: ``delay_s`` seconds of latency before forwarding; ``status``, an error
    answered instead of forwarding, or, with ``applied``, after the request went through (the write is done, the
    client is told it failed); ``cut_after_events``, a watch stream that forwards that many events and half of the
    next, then drops the connection.
    """

    name: str
    method: str
    path: str
    watch: bool | None = None
    every: int = 1
    limit: int = 0
    delay_s: float = 0.0
    status: int = 0
    applied: bool = False
    cut_after_events: int = -1

    def __post_init__(self) -> None:
        if self.every < 1 or self.limit < 0 or self.delay_s < 0:
            raise ValueError(f"rule {self.name}: every >= 1, limit >= 0 and delay_s >= 0")
        if self.status and self.status not in STATUS_REASONS:
            raise ValueError(f"rule {self.name}: status {self.status} is not one of {sorted(STATUS_REASONS)}")
        if self.cut_after_events >= 0 and self.watch is not True:
            raise ValueError(f"rule {self.name}: only a watch (watch=True) can be cut")
        if not (self.delay_s or self.status or self.cut_after_events >= 0):
            raise ValueError(f"rule {self.name}: no fault (delay_s, status or cut_after_events)")

    def matches(self, method: str, path: str, watch: bool) -> bool:
        return (
            self.method in (ANY_METHOD, method)
            and (self.watch is None or self.watch == watch)
            and re.fullmatch(self.path, path) is not None
        )


@dataclass
class Record:
    """What went through the proxy: requests forwarded, and per rule the requests matched and faults injected."""

    requests: int = 0
    matched: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    armed: Counter[str] = field(default_factory=Counter)  # chosen to inject (a watch may end before its cut)

    def snapshot(self) -> dict[str, Any]:
        return {"requests": self.requests, "matched": dict(self.matched), "injected": dict(self.injected)}


class FaultProxy:
    """The proxy; use :func:`fault_proxy` to run one."""

    def __init__(self, upstream: str, *, ca_cert: Path, serving_cert: Path, serving_key: Path, rules: Sequence[Rule]):
        names = [rule.name for rule in rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rule names must be unique: {names}")
        self.upstream = upstream.rstrip("/")
        self.rules = tuple(rules)
        self.record = Record()
        self._lock = threading.Lock()
        self._server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_tls.load_cert_chain(serving_cert, serving_key)
        self._client_tls = ssl.create_default_context(cafile=str(ca_cert))
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._socket.getsockname()[1]}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        #: The clients' connections (their transports and sockets), all closed before the loop stops: a TLS shutdown
        #: or a write to a client that went away would otherwise leave them half closed.
        self._clients: set[asyncio.BaseTransport] = set()
        #: The connections to the API server, aborted and awaited the same way: closing the session only starts
        #: their TLS shutdown, and a loop closed before it ends leaves their sockets open.
        self._upstreams: set[asyncio.BaseTransport] = set()
        self._handlers: set[asyncio.Task[Any]] = set()  # requests being answered
        self._sockets: list[Any] = []

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return self.record.snapshot()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=3 * STOP_TIMEOUT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=STOP_TIMEOUT_S)
            self._loop.close()
            self._socket.close()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._client_tls, limit=0),
            auto_decompress=False,  # bodies pass through as the API server encoded them
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),  # only the client's own go
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket, ssl_context=self._server_tls).start()

    async def _stop(self) -> None:
        handlers = [task for task in self._handlers if not task.done()]
        for task in handlers:  # watches still streaming (their client may be gone): ended, not left pending
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        for transport in list(self._clients) + list(self._upstreams):  # connections a TLS shutdown would wait on
            transport.abort()
        deadline = asyncio.get_running_loop().time() + STOP_TIMEOUT_S
        while any(sock.fileno() != -1 for sock in self._sockets) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # the loop closes aborted connections in callbacks of its own
        self._sockets.clear()
        self._clients.clear()
        self._upstreams.clear()

    def _choose(self, method: str, path: str, watch: bool) -> list[Rule]:
        """The rules that inject on this request (counted as matched and armed); of the rules with a status, the
        first due one only."""
        chosen = []
        with self._lock:
            self.record.requests += 1
            for rule in self.rules:
                if not rule.matches(method, path, watch):
                    continue
                self.record.matched[rule.name] += 1
                due = (self.record.matched[rule.name] - 1) % rule.every == 0
                answered = rule.status and any(other.status for other in chosen)  # one error per request
                if due and not answered and (not rule.limit or self.record.armed[rule.name] < rule.limit):
                    self.record.armed[rule.name] += 1
                    chosen.append(rule)
        return chosen

    def _injected(self, rule: Rule) -> None:
        with self._lock:
            self.record.injected[rule.name] += 1

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request; kept in a set, so that :meth:`stop` ends the ones still streaming."""
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            return await self._answer(request)
        finally:
            self._handlers.discard(task)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        if request.transport is not None and request.transport not in self._clients:
            self._clients.add(request.transport)
            self._sockets.append(request.transport.get_extra_info("socket"))
        watch = request.query.get("watch", "").lower() in ("true", "1")
        chosen = self._choose(request.method, request.path, watch)
        for rule in chosen:
            if rule.delay_s:
                await asyncio.sleep(rule.delay_s)  # the injected latency
                self._injected(rule)
        refusal = next((rule for rule in chosen if rule.status), None)
        if refusal is not None and not refusal.applied:
            self._injected(refusal)
            return failure(refusal)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        target = URL(self.upstream + request.raw_path, encoded=True)
        async with self._session.request(request.method, target, data=body or None, headers=headers) as upstream:
            connection = upstream.connection
            transport = connection.transport if connection is not None else None
            if transport is not None and transport not in self._upstreams:
                self._upstreams.add(transport)
                self._sockets.append(transport.get_extra_info("socket"))
            if refusal is not None:  # applied: the API server did it, the client hears otherwise
                await upstream.read()
                self._injected(refusal)
                return failure(refusal)
            reply_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            if not watch or upstream.status != 200:
                return web.Response(status=upstream.status, body=await upstream.read(), headers=reply_headers)
            cut = next((rule for rule in chosen if rule.cut_after_events >= 0), None)
            return await self._stream(request, upstream, reply_headers, cut)

    async def _stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse, headers: dict[str, str], cut: Rule | None
    ) -> web.StreamResponse:
        """Forward a watch as it comes; with ``cut``, drop the connection in the middle of event ``cut + 1``."""
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        events = 0
        try:
            async for data in upstream.content.iter_any():
                if cut is None:
                    await response.write(data)
                    continue
                sent = 0
                while events < cut.cut_after_events:
                    end = data.find(b"\n", sent)
                    if end < 0:
                        break
                    sent, events = end + 1, events + 1
                if events < cut.cut_after_events:
                    await response.write(data)
                    continue
                rest = data[sent:]
                if not rest:
                    await response.write(data)
                    continue  # the next event has not begun: cut in its middle when it comes
                end = rest.find(b"\n")
                event = rest if end < 0 else rest[:end]  # the next event, or as much of it as has come
                await response.write(data[:sent] + event[: max(len(event) // 2, 1)])
                self._injected(cut)
                if request.transport is not None:
                    request.transport.abort()  # no last chunk: the client sees a broken stream
                return response
        except (ConnectionResetError, aiohttp.ClientError):
            return response  # the client went away, or the API server ended the watch abruptly
        await response.write_eof()
        return response


def failure(rule: Rule) -> web.Response:
    """The API server's own form of an error: a Status object."""
    reason = STATUS_REASONS[rule.status]
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"injected by the fault proxy ({rule.name})",
        "reason": reason,
        "code": rule.status,
    }
    return web.Response(status=rule.status, text=json.dumps(status), content_type="application/json")


@contextmanager
def fault_proxy(
    upstream: str, *, ca_cert: Path, serving_cert: Path, serving_key: Path, rules: Sequence[Rule] = ()
) -> Iterator[FaultProxy]:
    """A running proxy to ``upstream``, stopped on exit."""
    proxy = FaultProxy(upstream, ca_cert=ca_cert, serving_cert=serving_cert, serving_key=serving_key, rules=rules)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
