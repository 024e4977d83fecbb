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
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Connections served at once; past it, requests are answered 503 (kube-scheduler opens a few).
MAX_CONNECTIONS = 100
#: Bytes a request head (request line and headers) may take, as h11's default bound: kube-scheduler's are a few
#: hundred bytes.
MAX_HEAD_BYTES = 16 * 1024
#: Seconds an idle keep-alive connection stays open (uvicorn's default).
KEEP_ALIVE_S = 5


def deadline_protocol(client_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP/1.1 protocol (httptools) with a deadline on each request head and a bound on its size (see the
    module's docstring)."""

    class DeadlineHttpToolsProtocol(HttpToolsProtocol):
        _head_deadline: asyncio.TimerHandle | None = None
        _head_bytes = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            waiting = self.cycle is None or self.cycle.response_complete
            before = self.cycle
            super().data_received(data)
            if waiting and self.cycle is before and not self.transport.is_closing():
                self._head_bytes += len(data)  # no request began: every byte so far is part of a head
                if self._head_bytes > MAX_HEAD_BYTES:
                    self.send_400_response(f"request head over {MAX_HEAD_BYTES} bytes")
                    return
            else:
                self._head_bytes = 0
            if self.cycle is None or self.cycle.response_complete:
                if self._head_deadline is None:  # a head (or the rest of a refused body) is on its way
                    self._arm()
            else:
                self._disarm()  # a request is being served: the app's own deadline holds for its body

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_deadline = self.loop.call_later(client_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _too_slow(self) -> None:
            self._head_deadline = None
            if self.cycle is None or self.cycle.response_complete:
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
        http=deadline_protocol(client_timeout_s),
        timeout_keep_alive=KEEP_ALIVE_S,
        limit_concurrency=MAX_CONNECTIONS,
        ssl_certfile=tls_cert_file,
        ssl_keyfile=tls_key_file,
        ssl_ca_certs=client_ca_file,
        ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca_file is not None else ssl.CERT_NONE,
    )
