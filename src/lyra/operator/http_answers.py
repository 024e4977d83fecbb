"""An HTTP/1.1 answer read straight off a kept-alive connection's socket: the commit step's writes
(:mod:`lyra.operator.writes`) read thousands of them in a busy pass.

``http.client.HTTPResponse`` wraps the socket in a buffered file for every answer, reads its head a line at a time
and parses the headers with the ``email`` package; over TLS with the API server's few-kilobyte answers that was about
100 us of CPU an answer, as much as all the rest of a write (docs/benchmarks.md, "The pass with its writes"). Here
the socket is read in large blocks (an answer usually comes in one), the head found and split once, and the body
framed as RFC 9112 says: chunked (kube-apiserver's framing for an answer past 2 KiB), ``Content-Length``, no body
(``HEAD``, 204, 304), or up to the connection's close. The read block is consumed by position, not copied down, and a
chunked body held whole as one chunk with no trailer (as kube-apiserver sends it, in one TLS record) is taken by one
match instead of the chunk-by-chunk reading. A writer of an interleaving (:mod:`lyra.operator.interleaving`) gives way
to the others before each read of the socket, until it has something to read. Interim 1xx answers are skipped (none
is expected: no request says ``Expect``).

Errors are ``http.client``'s, so callers handle them as before: :class:`http.client.RemoteDisconnected` when the
connection closed before any byte of an answer (a kept-alive connection the server had closed: the request may be
sent again), :class:`http.client.IncompleteRead` when it closed part-way, :class:`http.client.BadStatusLine`,
:class:`http.client.LineTooLong` and :class:`http.client.HTTPException` for what is not HTTP/1.1; and the socket's
own ``OSError`` (a timeout, a reset). After any of them the connection must be closed. Bytes past the answer (nothing
was pipelined, so they belong to no request) mark the connection to be closed too.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from lyra.operator.interleaving import wait_readable

#: Bytes asked of the socket at once; over TLS a read returns at most one record (16 KiB).
READ_BYTES = 256 * 1024
#: The longest answer head (status line and headers) taken, and the longest chunk-size line or trailer section.
MAX_HEAD_BYTES = 64 * 1024
#: Statuses whose answers have no body (RFC 9112, section 6.3).
_NO_BODY = frozenset({204, 304})
_HEX = frozenset("0123456789abcdefABCDEF")
#: What begins an obsolete folded header line.
_FOLDS = (" ", "\t")
#: A body chunked whole in one chunk and then ended with no trailer, as kube-apiserver sends an answer past 2 KiB:
#: the chunk's size line (hex digits alone).
_ONE_CHUNK = re.compile(rb"([0-9a-fA-F]{1,15})\r\n")
_LAST_CHUNK = b"\r\n0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """One answer: status, reason, headers (names in lower case, repeated ones joined with ``", "``), the body, and
    whether the connection must be closed after it."""

    status: int
    reason: str
    headers: Mapping[str, str]
    data: bytes
    will_close: bool


class _Received:
    """What came off the socket for one answer: ``held[at:]`` is not consumed yet."""

    def __init__(self, sock: socket.socket | ssl.SSLSocket) -> None:
        self.sock = sock
        self.held = bytearray()
        self.at = 0
        self.any = False

    def more(self) -> bool:
        """Read once more (a writer of an interleaving gives way until there is something to read); ``False`` when
        the peer closed the connection."""
        wait_readable(self.sock)
        block = self.sock.recv(READ_BYTES)
        if not block:
            return False
        self.any = True
        self.held += block
        return True

    def left(self) -> int:
        return len(self.held) - self.at

    def through(self, marker: bytes, limit: int, what: str) -> bytes:
        """The bytes before the next ``marker`` (which is consumed too), at most ``limit`` of them."""
        start = self.at
        while True:
            found = self.held.find(marker, start)
            if found >= 0:
                if found - self.at > limit:
                    raise http.client.LineTooLong(what)
                taken = bytes(self.held[self.at : found])
                self.at = found + len(marker)
                return taken
            if self.left() > limit:
                raise http.client.LineTooLong(what)
            start = max(self.at, len(self.held) - len(marker) + 1)
            if not self.more():
                if not self.any:
                    raise http.client.RemoteDisconnected("the server closed the connection without an answer")
                raise http.client.IncompleteRead(bytes(self.held[self.at :]))

    def exactly(self, size: int) -> bytes:
        while self.left() < size:
            if not self.more():
                raise http.client.IncompleteRead(bytes(self.held[self.at :]), size - self.left())
        taken = bytes(self.held[self.at : self.at + size])
        self.at += size
        return taken

    def one_chunk(self) -> bytes | None:
        """A chunked body already held whole as one chunk and the last chunk with no trailer (the API server's way),
        consumed; ``None`` (nothing consumed) for any other framing or a body not yet all read."""
        size_line = _ONE_CHUNK.match(self.held, self.at)
        if size_line is None:
            return None
        start = size_line.end()
        end = start + int(size_line.group(1), 16)
        if end == start or self.held[end : end + len(_LAST_CHUNK)] != _LAST_CHUNK:
            return None
        self.at = end + len(_LAST_CHUNK)
        return bytes(self.held[start:end])

    def to_close(self) -> bytes:
        while self.more():
            pass
        taken = bytes(self.held[self.at :])
        self.at = len(self.held)
        return taken


def _status_line(line: str) -> tuple[str, int, str]:
    version, _, rest = line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise http.client.BadStatusLine(line)
    return version, int(code), reason.strip()


def _header_fields(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    last = None
    for line in lines:
        if line[:1] in _FOLDS and last is not None:  # an obsolete folded line continues the field before it
            fields[last] = f"{fields[last]} {line.strip()}"
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise http.client.HTTPException(f"a malformed header line in the answer: {line[:100]!r}")
        name = name.lower()
        value = value.strip()
        if name in fields:
            fields[name] = f"{fields[name]}, {value}"
        else:
            fields[name] = value
        last = name
    return fields


def _chunked(received: _Received) -> bytes:
    parts: list[bytes] = []
    while True:
        line = received.through(b"\r\n", MAX_HEAD_BYTES, "chunk size").decode("latin-1")
        digits = line.partition(";")[0].strip()  # chunk extensions are ignored
        if not digits or not _HEX.issuperset(digits):
            raise http.client.HTTPException(f"a malformed chunk size in the answer: {line[:100]!r}")
        size = int(digits, 16)
        if size == 0:
            while received.through(b"\r\n", MAX_HEAD_BYTES, "trailer"):
                pass  # trailer fields, up to the empty line, are not used
            return b"".join(parts)
        parts.append(received.exactly(size))
        if received.exactly(2) != b"\r\n":
            raise http.client.HTTPException("a chunk of the answer is longer than its size")


def _length(value: str) -> int:
    if not value.isdigit():
        raise http.client.HTTPException(f"the answer's Content-Length is not a length: {value[:100]!r}")
    return int(value)


def read_answer(sock: socket.socket | ssl.SSLSocket, method: str) -> HttpAnswer:
    """The next answer on ``sock`` to a ``method`` request (see the module's docstring)."""
    received = _Received(sock)
    while True:
        lines = received.through(b"\r\n\r\n", MAX_HEAD_BYTES, "answer head").decode("latin-1").split("\r\n")
        version, status, reason = _status_line(lines[0])
        fields = _header_fields(lines[1:])
        if not 100 <= status < 200 or status == 101:
            break  # 101 (switching protocols) is final; other 1xx answers come before the real one
    connection = fields.get("connection")
    tokens = {token.strip().lower() for token in connection.split(",")} if connection is not None else set()
    will_close = "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)
    coding = fields.get("transfer-encoding")
    codings = [c.strip().lower() for c in coding.split(",") if c.strip()] if coding is not None else []
    if method == "HEAD" or status in _NO_BODY or 100 <= status < 200:
        data = b""
    elif codings and codings[-1] == "chunked":
        whole = received.one_chunk()
        data = whole if whole is not None else _chunked(received)
    elif codings:  # framed by the connection's close (RFC 9112, section 6.3)
        data, will_close = received.to_close(), True
    elif "content-length" in fields:
        data = received.exactly(_length(fields["content-length"]))
    else:
        data, will_close = received.to_close(), True
    if received.left():
        will_close = True  # bytes past the answer belong to no request sent
    return HttpAnswer(status, reason, fields, data, will_close)
