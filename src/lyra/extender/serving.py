"""How the extender's HTTP server is run: uvicorn with deadlines for slow clients and a bound on connections.

The HTTP/1.1 parser is httptools (llhttp, native code) on uvloop: kube-scheduler waits on every round trip inside a
pod's scheduling cycle, and h11 (pure Python) cost about as much CPU per request as the extender's answer itself
(docs/benchmarks.md, "Scheduler extender"). uvicorn cuts an idle keep-alive connection (``timeout_keep_alive``), but
it has no deadline for a request head that arrives slowly (a client that connects and sends a byte now and then,
slowloris, would hold its connection for ever) and, with httptools, no bound on a head's size.
:func:`deadline_protocol` adds both: from the connection's start, and again from the first byte after each answer,
the head must be complete within ``client_timeout_s`` or the connection is closed, and a head over
``MAX_HEAD_BYTES`` (h11's bound) gets a 400 and the connection closed. The body has its own deadline in the app
(:func:`lyra.extender.app.create_app`, 408), as uvicorn has none. Past ``MAX_CONNECTIONS`` open connections,
uvicorn answers 503 at once. With TLS, asyncio gives a handshake 60 s before it drops the connection.

The verbs are answered straight from the protocol when they can be (``direct``): a ``POST`` to a verb's path with a
``Content-Length`` of at most :data:`DIRECT_BODY_BYTES` (1 MiB, and within the verb's body cap), no ``Expect``, and its
declared size taken from the bytes held across requests, is read by the protocol itself and answered in one write
(status line, headers and body) as soon as the last byte arrives, without an ASGI task, scope, receive and send. This
is every request kube-scheduler sends to prioritize a pod (a pod and a few hundred node names), and the ASGI layers
cost about as much CPU as the answer. The head deadline then covers the body too; when it passes before the body is
whole, the request goes on the ASGI way with what has arrived, and the app's own body deadline (408) applies. Every
other request (larger, chunked, pipelined behind another, over the held bytes) takes the ASGI way as before, and
both ways give the same answers (the verb's :class:`~lyra.extender.app.DirectVerb`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from lyra.extender.app import Answer, DirectVerb, ExtenderApp

log = logging.getLogger("lyra.extender")

#: Connections served at once; past it, requests are answered 503 (kube-scheduler opens a few).
MAX_CONNECTIONS = 100
#: Bytes a request head (request line and headers) may take, as h11's default bound: kube-scheduler's are a few
#: hundred bytes.
MAX_HEAD_BYTES = 16 * 1024
#: Seconds an idle keep-alive connection stays open (uvicorn's default).
KEEP_ALIVE_S = 5
#: The largest body a verb is answered straight from the protocol for. kube-scheduler's prioritize at 5,000 nodes
#: sends about 15 KiB (the pod and the names of the nodes its filters kept, a tenth of them by default), and about
#: 220 KiB when it is set to keep every feasible node (``percentageOfNodesToScore: 100``). The body's bytes are taken
#: from the held count before they are read, so the protocol reads them without uvicorn's flow control.
DIRECT_BODY_BYTES = 1024 * 1024


#: How long a Python thread may hold the GIL while another waits for it (the interpreter's default is 5 ms). The
#: extender's watch threads parse events and recompute reclaim ranks while pods land, exactly when kube-scheduler
#: waits on the event loop's answers inside each pod's scheduling cycle: at 5 ms a request that arrived during that
#: work waited up to 5 ms for the loop to run at all, against an answer of a few tenths of a millisecond.
GIL_SWITCH_INTERVAL_S = 0.0005


def serve(config: uvicorn.Config, sockets: Sequence[socket.socket]) -> None:
    """Run the server on ``sockets`` (bound by :func:`lyra.listening.bound_sockets` before the watch starts, so that
    a port in use is said first) until it is told to stop, the loop's thread handed the GIL within
    :data:`GIL_SWITCH_INTERVAL_S` when it needs it."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    uvicorn.Server(config).run(sockets=list(sockets))


@dataclass(slots=True)
class _Direct:
    """A verb request being read by the protocol: its cycle (uvicorn's request state), the verb, the bytes taken
    from the held count, when it began and the body so far."""

    cycle: RequestResponseCycle
    verb: DirectVerb
    size: int
    started: float
    parts: list[bytes] = field(default_factory=list)


def _declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The request's ``Content-Length`` when it is the only framing and sane, else ``None``; and ``None`` for a
    request that expects ``100 Continue`` (the ASGI way sends it)."""
    length = None
    for name, value in headers:
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif name in (b"transfer-encoding", b"expect"):
            return None
    return length


def deadline_protocol(
    client_timeout_s: float, direct: Mapping[str, DirectVerb] | None = None
) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP/1.1 protocol (httptools) with a deadline on each request head and a bound on its size, and the
    verbs in ``direct`` (by path) answered straight from the protocol when they can be (see the module's
    docstring)."""
    direct_verbs = dict(direct or {})

    class DeadlineHttpToolsProtocol(HttpToolsProtocol):
        _head_deadline: asyncio.TimerHandle | None = None
        _head_bytes = 0
        _in_head = False
        _direct: _Direct | None = None
        _answered = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            waiting = self.cycle is None or self.cycle.response_complete
            before = self.cycle
            self._answered = False
            super().data_received(data)
            if waiting and self.cycle is before and not self.transport.is_closing():
                self._head_bytes += len(data)  # no request began: every byte so far is part of a head
                if self._head_bytes > MAX_HEAD_BYTES:
                    self.send_400_response(f"request head over {MAX_HEAD_BYTES} bytes")
                    return
            else:
                self._head_bytes = 0
            if self.cycle is None or self.cycle.response_complete:
                # A head (or the rest of a refused body) is on its way; after a verb answered here, the next head's
                # deadline starts with its first byte, as after an answer the ASGI way.
                if self._head_deadline is None and not self._answered:
                    self._arm()
            elif self._direct is None:
                self._disarm()  # a request is being served: the app's own deadline holds for its body
            elif self._head_deadline is None:
                self._arm()  # a verb's body is being read here: the head's deadline holds for it too (from now, when
                # its head came in one piece right after an answer)

        def on_headers_complete(self) -> None:
            self._in_head = True  # a request starting now, not one queued behind another
            try:
                super().on_headers_complete()
            finally:
                self._in_head = False

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
            verb = direct_verbs.get(cycle.scope["path"]) if self._in_head and app is self.app else None
            if verb is not None and cycle.scope["method"] == "POST":
                size = _declared_length(cycle.scope["headers"])
                if size is not None and size <= min(DIRECT_BODY_BYTES, verb.max_body_bytes) and verb.held.take(size):
                    self._direct = _Direct(cycle, verb, size, time.perf_counter())
                    return
            super()._start_asgi_task(cycle, app)

        def on_body(self, body: bytes) -> None:
            if self._direct is None:
                super().on_body(body)
            else:
                self._direct.parts.append(body)  # at most the declared size: the parser frames the body by it

        def on_message_complete(self) -> None:
            if self._direct is None:
                super().on_message_complete()
            else:
                self._answer_direct()

        def _answer_direct(self) -> None:
            request, self._direct = self._direct, None
            assert request is not None
            cycle = request.cycle
            try:
                answer = request.verb.answer(b"".join(request.parts), request.started)
            except Exception:  # a fault of the extender's own: answered as uvicorn answers one the ASGI way
                log.exception("the extender failed to answer %s", cycle.scope["path"])
                answer = Answer(500, b'{"Error":"Internal Server Error"}', close=True)
            finally:
                request.verb.held.give(request.size)
            head = [STATUS_LINE[answer.status]]
            for name, value in answer.headers():
                head += [name, b": ", value, b"\r\n"]
            self.transport.write(b"".join([*head, b"\r\n", answer.body]))
            self._disarm()
            self._answered = True
            cycle.response_started = cycle.response_complete = True
            cycle.more_body = False
            if answer.close or not cycle.keep_alive:
                self.transport.close()
            self.on_response_complete()

        def _to_asgi(self) -> None:
            """The head's deadline passed before a verb's body was whole: serve it the ASGI way with what arrived."""
            request, self._direct = self._direct, None
            assert request is not None
            request.verb.held.give(request.size)
            request.cycle.body = bytearray(b"".join(request.parts))
            request.cycle.message_event.set()
            super()._start_asgi_task(request.cycle, self.app)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._direct is not None:
                request, self._direct = self._direct, None
                request.verb.held.give(request.size)
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_deadline = self.loop.call_later(client_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _too_slow(self) -> None:
            self._head_deadline = None
            if self._direct is not None:
                self._to_asgi()
            elif self.cycle is None or self.cycle.response_complete:
                self.transport.close()

    return DeadlineHttpToolsProtocol


def server_config(
    app: Any,
    *,
    host: str,
    port: int,
    client_timeout_s: float,
    tls_cert_file: Path | None = None,
    tls_key_file: Path | None = None,
    client_ca_file: Path | None = None,
) -> uvicorn.Config:
    """The uvicorn configuration ``lyra extender`` serves with (and the tests and benchmarks run)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        http=deadline_protocol(client_timeout_s, app.verbs if isinstance(app, ExtenderApp) else None),
        server_header=False,
        date_header=False,
        proxy_headers=False,  # kube-scheduler calls it directly; no client address is used
        timeout_keep_alive=KEEP_ALIVE_S,
        limit_concurrency=MAX_CONNECTIONS,
        ssl_certfile=tls_cert_file,
        ssl_keyfile=tls_key_file,
        ssl_ca_certs=client_ca_file,
        ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca_file is not None else ssl.CERT_NONE,
    )
