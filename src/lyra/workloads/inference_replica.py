"""An inference replica: a small HTTP server with a readiness endpoint.

Endpoints:
    GET /healthz          200 "ok" once ready (after LYRA_WARMUP_SECONDS), 503 before: the pod's readiness probe
    GET /predict?x=NUM    200 {"x": x, "y": 3x + 1, "replica": HOSTNAME}: the "model"; 400 on a bad x
    anything else         404

Environment:
    LYRA_LISTEN_HOST      address to listen on (default 0.0.0.0, all of the container's addresses)
    LYRA_PORT             port (default 8000; 0: one the kernel picks, printed on start)
    LYRA_WARMUP_SECONDS   time before /healthz answers 200, like a model being loaded (default 0)

SIGTERM stops the server and exits 0. Bad input: exit 2 with a message. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from urllib.parse import parse_qs, urlsplit

EXIT_BAD_INPUT = 2


class BadInputError(ValueError):
    pass


class Replica(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], ready_at: float) -> None:
        super().__init__(address, Handler)
        self.ready_at = ready_at
        self.name = socket.gethostname()

    def ready(self) -> bool:
        return time.monotonic() >= self.ready_at


class Handler(BaseHTTPRequestHandler):
    server: Replica

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/healthz":
            ready = self.server.ready()
            self._send(200 if ready else 503, "text/plain", b"ok\n" if ready else b"warming up\n")
        elif url.path == "/predict":
            raw = parse_qs(url.query).get("x", [""])[0]
            try:
                x = float(raw)
            except ValueError:
                x = math.nan
            if not math.isfinite(x):
                self._send(400, "text/plain", f"x={raw!r} is not a finite number\n".encode())
                return
            body = json.dumps({"x": x, "y": 3.0 * x + 1.0, "replica": self.server.name}).encode()
            self._send(200, "application/json", body)
        else:
            self._send(404, "text/plain", b"not found\n")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a probe every few seconds would flood the container's log


def settings_from(environ: dict[str, str]) -> tuple[str, int, float]:
    host = environ.get("LYRA_LISTEN_HOST", "0.0.0.0").strip() or "0.0.0.0"
    raw_port = environ.get("LYRA_PORT", "8000").strip()
    if not raw_port.isdigit() or int(raw_port) > 65535:
        raise BadInputError(f"LYRA_PORT={raw_port!r} is not a port number (0-65535)")
    raw_warmup = environ.get("LYRA_WARMUP_SECONDS", "0").strip()
    try:
        warmup = float(raw_warmup)
    except ValueError:
        warmup = math.nan
    if not math.isfinite(warmup) or warmup < 0:
        raise BadInputError(f"LYRA_WARMUP_SECONDS={raw_warmup!r} must be a finite number >= 0")
    return host, int(raw_port), warmup


def main() -> int:
    try:
        host, port, warmup = settings_from(dict(os.environ))
        server = Replica((host, port), ready_at=time.monotonic() + warmup)
    except BadInputError as error:
        print(f"inference-replica: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"inference-replica: cannot listen: {error.strerror}", file=sys.stderr)
        return 1

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()  # shutdown() waits for serve_forever

    signal.signal(signal.SIGTERM, on_sigterm)
    bound_host, bound_port = server.socket.getsockname()[:2]
    print(f"listening on {bound_host}:{bound_port}; ready in {warmup:g} s", flush=True)
    with server:
        server.serve_forever(poll_interval=0.2)
    print("SIGTERM: stopped serving; exiting", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
