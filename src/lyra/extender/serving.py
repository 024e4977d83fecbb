"""How the extender's HTTP server is run: uvicorn with deadlines for slow clients and a bound on connections.

uvicorn cuts an idle keep-alive connection (``timeout_keep_alive``) and bounds a request head's size (h11's 16 KiB),
but it has no deadline for a request head that arrives slowly: a client that connects and sends a byte now and then
(slowloris) holds its connection for ever. :func:`deadline_protocol` adds one: from the connection's start, and
again from the first byte after each answer, the head must be complete within ``client_timeout_s`` or the
connection is closed. The body has its own deadline in the app (:func:`lyra.extender.app.create_app`, 408), as
uvicorn has none. Past ``MAX_CONNECTIONS`` open connections, uvicorn answers 503 at once. With TLS, asyncio gives a
handshake 60 s before it drops the connection.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

#: Connections served at once; past it, requests are answered 503 (kube-scheduler opens a few).
MAX_CONNECTIONS = 100
#: Seconds an idle keep-alive connection stays open (uvicorn's default).
KEEP_ALIVE_S = 5


def deadline_protocol(client_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with a deadline on each request head (see the module's docstring)."""

    class DeadlineH11Protocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
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

    return DeadlineH11Protocol


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
