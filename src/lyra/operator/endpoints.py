"""The operator's HTTP endpoints, on one port (``--http-port``): ``/metrics`` (Prometheus), ``/healthz`` (liveness)
and ``/readyz`` (readiness).

* **liveness**: the reconcile loop is alive: it finished a pass or a standby's Lease check (successful or not)
  within :attr:`Health.stale_after_s`, a few resync periods. A loop stuck in an API call without end fails it, and
  the kubelet restarts the operator.
* **readiness**: connected and synced: the last pass (or standby check) reached the API server and read what it
  needed. A standby replica is ready: it can take over.
* ``/debug/caches``, only with ``--debug-endpoints`` (off by default): what the watch caches hold, as JSON, per kind
  the map key (``namespace/name``) -> resourceVersion. Read-only; tests compare it with a fresh list.

Served by the standard library's threading HTTP server in a daemon thread, beside the operator's event loop.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

from lyra.listening import addresses, listen_failure
from lyra.operator.metrics import OperatorMetrics

log = logging.getLogger("lyra.operator")

METRICS_PATH, LIVENESS_PATH, READINESS_PATH = "/metrics", "/healthz", "/readyz"
CACHES_PATH = "/debug/caches"
#: Shadow mode only (``--dry-run``): the last pass's plan, what the operator would have done (``lyra status --shadow``).
PLAN_PATH = "/plan"


class Health:
    """The loop's heartbeat. ``clock``: monotonic seconds."""

    def __init__(self, stale_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after_s = stale_after_s
        self.clock = clock
        self._started = clock()
        self._beat: float | None = None
        self._synced = False
        self._problem = "no pass yet"

    def beat(self, *, synced: bool, problem: str = "") -> None:
        """A pass or a standby check ended; ``synced``: it reached the API and read what it needed."""
        self._beat = self.clock()
        self._synced = synced
        self._problem = problem

    def liveness(self) -> tuple[bool, str]:
        since = self._beat if self._beat is not None else self._started
        idle = self.clock() - since
        if idle > self.stale_after_s:
            return False, f"the reconcile loop has not finished a pass for {idle:.0f} s"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        alive, why = self.liveness()
        if not alive:
            return False, why
        if not self._synced:
            return False, f"not synced: {self._problem}"
        return True, "ok"


def serve(
    address: str,
    port: int,
    metrics: OperatorMetrics,
    health: Health,
    caches: Callable[[], Mapping[str, Mapping[str, str]]] | None = None,
    *,
    plan: Callable[[], Mapping[str, object] | None] | None = None,
) -> ThreadingHTTPServer:
    """Serve the endpoints in a daemon thread; ``server.shutdown()`` stops it. ``port`` 0 picks a free one
    (``server.server_address``). ``caches``: what ``/debug/caches`` answers (``None``: the path is not served).
    ``plan``: what ``/plan`` answers (``None``: not served; a plan of ``None``: no pass yet, 503)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == METRICS_PATH:
                self._send(HTTPStatus.OK, metrics.exposition(), CONTENT_TYPE_LATEST)
            elif path in (LIVENESS_PATH, READINESS_PATH):
                ok, message = health.liveness() if path == LIVENESS_PATH else health.readiness()
                status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
                self._send(status, f"{message}\n".encode(), "text/plain; charset=utf-8")
            elif path == CACHES_PATH and caches is not None:
                self._send(HTTPStatus.OK, json.dumps(caches(), sort_keys=True).encode(), "application/json")
            elif path == PLAN_PATH and plan is not None:
                proposed = plan()
                if proposed is None:
                    self._send(HTTPStatus.SERVICE_UNAVAILABLE, b"no pass yet\n", "text/plain; charset=utf-8")
                else:
                    self._send(HTTPStatus.OK, json.dumps(proposed, default=str).encode(), "application/json")
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http: " + format, *args)

    try:
        family, bind_to = addresses(address, port)[0]

        class Server(ThreadingHTTPServer):
            address_family = family  # an IPv6 address too
            daemon_threads = True

        server = Server(bind_to, Handler)
    except OSError as error:
        raise listen_failure(address, port, error) from None
    threading.Thread(target=server.serve_forever, name="lyra-http", daemon=True).start()
    paths = [METRICS_PATH, LIVENESS_PATH, READINESS_PATH] + ([CACHES_PATH] if caches is not None else [])
    log.info("serving %s on %s:%d", ", ".join(paths), *server.server_address[:2])
    return server
