"""One HTTP GET to a server a user names, bounded in time and in size: ``lyra report`` asks Prometheus and
``lyra status --shadow`` asks the operator.

urllib's ``timeout`` bounds each wait on the socket, not the exchange: a server that sends a byte every half second
holds the command for ever, and one whose body never ends fills the memory (before these bounds, ``lyra report``
against such a server grew to 23 GB in two minutes). Here the whole exchange, from the connection to the body's last
byte, has a deadline, and the body a size limit: :class:`AnswerTooSlowError`, :class:`AnswerTooLargeError`.

The deadline is kept by a watchdog thread: once it passes, the watchdog shuts the exchange's sockets down, which ends
any wait on them at once (a TLS handshake, the headers, the body), and the exchange is reported too slow whatever it
read. urllib still does the rest (proxies from the environment, TLS, redirects): the watch only sees the sockets its
handlers' connections make. Resolving the server's name is the one wait it cannot end (the system's resolver has
its own timeouts).
"""

from __future__ import annotations

import contextlib
import email.message
import http.client
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

#: What one read of the body asks for.
_CHUNK_BYTES: Final = 64 * 1024


class AnswerError(Exception):
    """The server answered, but not with a whole HTTP answer within the bounds; the message says how."""


class AnswerTooSlowError(AnswerError):
    """No whole answer within the deadline."""


class AnswerTooLargeError(AnswerError):
    """A body larger than the limit."""


class AnswerBrokenError(AnswerError):
    """Not HTTP, or HTTP cut short: a body shorter than its length, a header line too long."""


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """The status and body of an answer; an error status (404, 503) is an answer too."""

    status: int
    body: bytes


def bounded_get(url: str, *, within_s: float, limit_bytes: int) -> HttpAnswer:
    """GET ``url``: the whole answer within ``within_s`` seconds and at most ``limit_bytes`` of body, else an
    :class:`AnswerError`. A server that cannot be reached raises as urllib does (``URLError``, ``OSError``; a
    connection closed before any answer is ``RemoteDisconnected``, a ``ConnectionResetError``)."""
    too_slow = AnswerTooSlowError(f"no whole answer within {within_s:g} s")
    with _watched(within_s) as watch:
        opener = urllib.request.build_opener(_WatchedHTTPHandler(watch), _WatchedHTTPSHandler(watch))
        try:
            try:
                response = opener.open(url, timeout=within_s)
            except urllib.error.HTTPError as error:  # an error status: its body may say why
                response = error
            with response:
                answer = HttpAnswer(response.status or 0, _body(response, limit_bytes, watch))
        except (OSError, http.client.HTTPException) as error:
            if watch.connected() and (watch.passed.is_set() or _timed_out(error)):  # the shutdown, seen as a reset
                raise too_slow from None  # or a short read; or a wait on the socket that urllib's timeout ended first
            if isinstance(error, http.client.HTTPException) and not isinstance(error, ConnectionError):
                said = str(error).strip()[:200].encode("unicode_escape").decode("ascii")  # the server's bytes, escaped
                raise AnswerBrokenError(f"a broken HTTP answer ({type(error).__name__}: {said})") from None
            raise
    if watch.passed.is_set():  # a body read to its end because the watchdog shut the socket
        raise too_slow
    return answer


def _timed_out(error: BaseException) -> bool:
    return isinstance(error, TimeoutError) or (
        isinstance(error, urllib.error.URLError) and isinstance(error.reason, TimeoutError)
    )


class _Readable(Protocol):
    @property
    def headers(self) -> email.message.Message: ...

    def read(self, size: int, /) -> bytes: ...


def _body(response: _Readable, limit_bytes: int, watch: _Watch) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while not watch.passed.is_set() and (chunk := response.read(min(_CHUNK_BYTES, limit_bytes + 1 - size))):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit_bytes:
            raise AnswerTooLargeError(f"an answer larger than {_size(limit_bytes)}")
    declared = response.headers.get("Content-Length", "")
    if not watch.passed.is_set() and declared.isdigit() and size < int(declared):  # a read of a size ends quietly
        raise AnswerBrokenError(f"a broken HTTP answer (cut short: {size} of its {int(declared)} bytes)")
    return b"".join(chunks)


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count >= 1024 * 1024 else f"{count} bytes"


class _Watch:
    """The sockets of one exchange, and whether its deadline has passed: a socket made after it is shut down at once."""

    def __init__(self) -> None:
        self.passed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def made_by(self, http_class: type[http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
        """``http_class``, each connection's socket known to the watch the moment it is connected (before TLS)."""

        def make(host: str, **options: Any) -> http.client.HTTPConnection:
            connection = http_class(host, **options)
            # http.client makes its socket through this attribute, an instance's hook since Python 3.4 (its tests
            # replace it); the raw socket, so that a TLS handshake a server trickles is ended too
            create = getattr(connection, "_create_connection")  # noqa: B009 (not in typeshed)

            def create_watched(*arguments: Any, **keywords: Any) -> socket.socket:
                made: socket.socket = create(*arguments, **keywords)
                with self._lock:
                    self._sockets.append(made)
                    late = self.passed.is_set()
                if late:
                    _shut_down(made)
                return made

            setattr(connection, "_create_connection", create_watched)  # noqa: B010 (not in typeshed)
            return connection

        return make

    def connected(self) -> bool:
        """Whether a connection was made: a server that timed out before one was not reached."""
        with self._lock:
            return bool(self._sockets)

    def pass_deadline(self) -> None:
        with self._lock:
            self.passed.set()
            sockets = list(self._sockets)
        for each in sockets:
            _shut_down(each)


def _shut_down(made: socket.socket) -> None:
    """Ends every wait on ``made`` at once (a read sees its end); its owner closes it."""
    with contextlib.suppress(OSError):
        made.shutdown(socket.SHUT_RDWR)


@contextmanager
def _watched(within_s: float) -> Iterator[_Watch]:
    watch = _Watch()
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(within_s):
            watch.pass_deadline()

    thread = threading.Thread(target=watchdog, name="lyra-http-deadline", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        done.set()
        thread.join()


class _WatchedOpening(urllib.request.AbstractHTTPHandler):
    """urllib's handler for one scheme, with each connection it makes known to the watchdog."""

    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self._watch = watch

    def do_open(self, http_class: Any, req: Any, **options: Any) -> Any:
        return super().do_open(self._watch.made_by(http_class), req, **options)


class _WatchedHTTPHandler(_WatchedOpening, urllib.request.HTTPHandler):
    pass


class _WatchedHTTPSHandler(_WatchedOpening, urllib.request.HTTPSHandler):
    pass
