"""An HTTP server on loopback that answers as a test tells it, for the unit tests of the clients of the API server:
a real kubernetes client talks to it over a real socket, and each request gets the status, body and content type
that ``answer(method, path)`` gives (the path without its query)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: (status, body, content type).
Answer = tuple[int, bytes, str]


@contextmanager
def answering_server(answer: Callable[[str, str], Answer]) -> Iterator[str]:
    """Serve in a thread until the block ends; yields the server's URL (``http://127.0.0.1:<port>``)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body, content_type = answer(self.command, self.path.split("?", 1)[0])
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer()

        def do_PATCH(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def do_DELETE(self) -> None:
            self._answer()

        def log_message(self, format: str, *args: object) -> None:
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
