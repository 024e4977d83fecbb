"""Answers read straight off a socket (:mod:`lyra.operator.http_answers`): each framing, however the bytes arrive,
agrees with ``http.client``'s own reading of the same bytes; and what is not a whole HTTP/1.1 answer raises
``http.client``'s errors."""

from __future__ import annotations

import http.client
import io
import random
import socket
from typing import cast

import pytest

from lyra.operator.http_answers import MAX_HEAD_BYTES, read_answer


class Pieces:
    """A socket that hands out the given bytes ``size`` at a time, then the peer's close."""

    def __init__(self, raw: bytes, size: int) -> None:
        self.raw = raw
        self.size = size

    def recv(self, limit: int) -> bytes:
        taken, self.raw = self.raw[: min(limit, self.size)], self.raw[min(limit, self.size) :]
        return taken


def read(raw: bytes, method: str = "POST", size: int = 1 << 20) -> tuple[int, str, dict[str, str], bytes, bool]:
    answer = read_answer(cast(socket.socket, Pieces(raw, size)), method)
    return answer.status, answer.reason, dict(answer.headers), answer.data, answer.will_close


OK = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"a":"bc"}\n'
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nAudit-Id: x\r\n\r\n"
    b'4;ext=1\r\n{"a"\r\nA\r\n:"0123456"\r\n1\r\n}\r\n0\r\nTrailer-Field: y\r\n\r\n'
)

FRAMINGS = [
    pytest.param(OK, "POST", (201, "Created", b'{"a":"bc"}\n', False), id="content-length"),
    pytest.param(CHUNKED, "GET", (200, "OK", b'{"a":"0123456"}', False), id="chunked with an extension and a trailer"),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nf\r\n{\"a\":\"0123456\"}\r\n0\r\n\r\n", "GET",
        (200, "OK", b'{"a":"0123456"}', False), id="chunked whole in one chunk (kube-apiserver's way)",
    ),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00F\r\n{\"a\":\"0123456\"}\r\n0\r\nX-T: 1\r\n\r\n",
        "GET", (200, "OK", b'{"a":"0123456"}', False), id="one chunk and a trailer",
    ),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", "GET", (200, "OK", b"{}", True),
        id="connection close",
    ),
    pytest.param(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", "GET", (200, "OK", b"{}", True), id="HTTP/1.0"),
    pytest.param(
        b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\n{}", "GET", (200, "OK", b"{}", False),
        id="HTTP/1.0 kept alive",
    ),
    pytest.param(b"HTTP/1.1 200 OK\r\n\r\n{\"to\":\"close\"}", "GET", (200, "OK", b'{"to":"close"}', True),
                 id="framed by the close"),
    pytest.param(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", "PATCH",
        (200, "OK", b"{}", False),
        id="an interim answer skipped",
    ),
    pytest.param(b"HTTP/1.1 204 No Content\r\n\r\n", "DELETE", (204, "No Content", b"", False), id="204"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", "HEAD", (200, "OK", b"", False), id="HEAD"),
    pytest.param(b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", "GET", (200, "", b"", False), id="no reason"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "method", "expected"), FRAMINGS)
@pytest.mark.parametrize("size", [1, 2, 7, 1 << 20])
def test_each_framing_is_read_however_the_bytes_arrive(
    raw: bytes, method: str, expected: tuple[int, str, bytes, bool], size: int
) -> None:
    status, reason, _, data, will_close = read(raw, method, size)
    assert (status, reason, data, will_close) == expected


def test_bytes_that_came_with_the_answer_past_its_end_close_the_connection() -> None:
    """Nothing was pipelined, so they belong to no request sent (bytes that come later are the next read's)."""
    assert read(OK + b"HTTP/1.1", "POST") == (
        201,
        "Created",
        {"content-type": "application/json", "content-length": "11"},
        b'{"a":"bc"}\n',
        True,
    )


def test_header_names_are_lower_case_and_repeated_ones_joined() -> None:
    raw = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nWarning: a\r\nwarning: b\r\n  c\r\n"
    raw += b"Content-Length: 0\r\n\r\n"
    assert read(raw)[2] == {"retry-after": "1", "warning": "a, b c", "content-length": "0"}


def http_client_reads(raw: bytes, method: str) -> tuple[int, str, bytes, bool]:
    """The same bytes through ``http.client``'s own response."""

    class Sock:
        def makefile(self, mode: str) -> io.BufferedReader:
            return io.BufferedReader(io.BytesIO(raw))

    response = http.client.HTTPResponse(cast(socket.socket, Sock()), method=method)
    response.begin()
    return response.status, response.reason, response.read(), bool(response.will_close)


def random_answer(rng: random.Random) -> bytes:
    body = bytes(rng.randrange(32, 127) for _ in range(rng.choice([0, 1, 17, 2048, 40_000])))
    head = [f"HTTP/1.{rng.choice([0, 1])} {rng.choice([200, 201, 404, 409, 500])} {rng.choice(['OK', 'Some Reason'])}"]
    head += [f"X-Field-{index}: {rng.random()}" for index in range(rng.randrange(4))]
    if rng.random() < 0.3:
        head.append(f"Connection: {rng.choice(['close', 'keep-alive'])}")
    if rng.random() < 0.5:
        head.append(f"Content-Length: {len(body)}")
        framed = body
    else:
        head.append("Transfer-Encoding: chunked")
        chunks, at = [], 0
        while at < len(body):
            size = rng.randrange(1, 5000)
            chunks.append(b"%x\r\n%s\r\n" % (len(body[at : at + size]), body[at : at + size]))
            at += size
        framed = b"".join(chunks) + b"0\r\n\r\n"
    return "\r\n".join(head).encode() + b"\r\n\r\n" + framed


@pytest.mark.parametrize("seed", range(40))
def test_random_answers_read_as_http_client_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    raw = random_answer(rng)
    status, reason, _, data, will_close = read(raw, "GET", rng.choice([1, 100, 16 * 1024, 1 << 20]))
    assert (status, reason, data, will_close) == http_client_reads(raw, "GET")


BROKEN = [
    pytest.param(b"", http.client.RemoteDisconnected, id="closed before any byte"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Le", http.client.IncompleteRead, id="closed in the head"),
    pytest.param(OK[:-3], http.client.IncompleteRead, id="closed in the body"),
    pytest.param(CHUNKED[:-20], http.client.IncompleteRead, id="closed in a chunk"),
    pytest.param(b"SSH-2.0-OpenSSH\r\n\r\n", http.client.BadStatusLine, id="not HTTP"),
    pytest.param(b"HTTP/1.1 2000 OK\r\n\r\n", http.client.BadStatusLine, id="a status of four digits"),
    pytest.param(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", http.client.HTTPException, id="a header without a colon"),
    pytest.param(b"HTTP/1.1 200 OK\r\nName : v\r\n\r\n", http.client.HTTPException, id="a space before the colon"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", http.client.HTTPException, id="a negative length"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx", http.client.HTTPException, id="two lengths"),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", http.client.HTTPException,
        id="a chunk size not hex",
    ),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", http.client.HTTPException,
        id="a chunk longer than its size",
    ),
    pytest.param(b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_HEAD_BYTES, http.client.LineTooLong, id="an endless head"),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", http.client.LineTooLong, id="a head too long"
    ),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "error"), BROKEN)
@pytest.mark.parametrize("size", [1, 1 << 20])
def test_what_is_not_a_whole_answer_raises_http_clients_error(raw: bytes, error: type[Exception], size: int) -> None:
    if size == 1 and len(raw) > 10_000:
        size = 4096  # the same bytes, in fewer reads
    with pytest.raises(error):
        read(raw, "GET", size)


def test_over_a_real_socket_the_answer_ends_where_its_framing_says() -> None:
    """The next answer on a kept-alive connection starts where the first one's framing ended."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(CHUNKED)
        assert read_answer(ours, "GET").data == b'{"a":"0123456"}'
        theirs.sendall(OK)
        assert read_answer(ours, "POST").status == 201


@pytest.mark.parametrize(
    "line", ["X-A : 1", "X-A\x0b: 1", "X-A\x85: 1", "X-A\xa0: 1", "\x0bX-A: 1", "\x1cX-A: 1", "\xa0X-A: 1"]
)
def test_a_header_name_that_begins_or_ends_with_white_space_is_refused(line: str) -> None:
    """As ``str.strip`` sees white space in a head read as Latin-1 (a space or tab first folds the line before)."""
    raw = f"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n{line}\r\n\r\n".encode("latin-1")
    with pytest.raises(http.client.HTTPException, match="malformed header line"):
        read(raw)
