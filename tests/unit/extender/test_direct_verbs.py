"""The verbs answered straight from the HTTP protocol (:mod:`lyra.extender.serving`), on a real server on loopback:
the same answers, statuses and metrics as the ASGI way, in one piece however the request arrives, the bytes held
counted while a body is read, and every request the protocol does not take (larger, chunked, expecting ``100
Continue``) still served the ASGI way."""

from __future__ import annotations

import dataclasses
import http.client
import json
import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from lyra.api.objects import Node, Pod
from lyra.extender.app import ExtenderApp, FixedView, create_app
from lyra.extender.serving import DIRECT_BODY_BYTES
from lyra.extender.view import ClusterView, build_view
from lyra.localcluster.waiting import wait_for
from tests.unit.extender.test_app import NAMES, NODES, RUNNING, T4, pod
from tests.unit.extender.test_limits import serving

FLEXIBLE = pod("bert-1", 1, "flexible", "bert", T4)


def counted(app: ExtenderApp) -> list[str]:
    """Record each verb request that reaches the ASGI way (the protocol reads ``app.verbs`` when serving starts)."""
    seen: list[str] = []
    for path, verb in app.verbs.items():

        async def asgi(scope: Scope, receive: Receive, send: Send, inner: Any = verb.asgi, path: str = path) -> None:
            seen.append(path)
            await inner(scope, receive, send)

        app.verbs[path] = dataclasses.replace(verb, asgi=asgi)
    return seen


@pytest.fixture
def app() -> ExtenderApp:
    view = build_view([Node.model_validate(n) for n in NODES], [Pod.model_validate(p) for p in RUNNING])
    return create_app(FixedView(view))


def raw_request(body: bytes, *, path: str = "/prioritize", headers: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def answers(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Read ``count`` HTTP answers (framed by Content-Length) from ``sock``."""
    buffer = b""
    read: list[tuple[int, dict[str, str], bytes]] = []
    while len(read) < count:
        if b"\r\n\r\n" in buffer:
            head, rest = buffer.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            fields = dict(line.lower().split(": ", 1) for line in lines[1:])
            length = int(fields["content-length"])
            if len(rest) >= length:
                read.append((int(lines[0].split()[1]), fields, rest[:length]))
                buffer = rest[length:]
                continue
        readable, _, _ = select.select([sock], [], [], 10)
        assert readable, f"no answer after {len(read)} of {count}"
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(read)} of {count} answers"
        buffer += chunk
    return read


def body_of(subject: dict[str, Any], pad: int = 0) -> bytes:
    data: dict[str, Any] = {"Pod": subject, "NodeNames": NAMES}
    if pad:
        data["padding"] = "x" * pad  # an unknown field: ignored, but it makes the body large
    return json.dumps(data).encode()


@pytest.fixture
def connection(app: ExtenderApp) -> Iterator[tuple[socket.socket, ExtenderApp, list[str]]]:
    seen = counted(app)
    with serving(app) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        yield sock, app, seen


def test_a_small_body_is_answered_by_the_protocol_as_the_asgi_way_answers_a_large_one(
    connection: tuple[socket.socket, ExtenderApp, list[str]],
) -> None:
    sock, app, seen = connection
    small, large = body_of(FLEXIBLE), body_of(FLEXIBLE, pad=DIRECT_BODY_BYTES)
    assert len(small) <= DIRECT_BODY_BYTES < len(large)
    sock.sendall(raw_request(small))
    [(status, fields, direct)] = answers(sock, 1)
    assert seen == []
    sock.sendall(raw_request(large))
    [(status_asgi, fields_asgi, asgi)] = answers(sock, 1)
    assert seen == ["/prioritize"]
    assert (status, direct) == (status_asgi, asgi) == (200, asgi)
    assert fields == fields_asgi == {"content-type": "application/json", "content-length": str(len(asgi))}
    assert json.loads(direct), "the flexible worker scores on the loaned nodes"
    assert app.state.held.held == 0


def test_a_body_in_pieces_and_pipelined_requests_are_answered_in_order(
    connection: tuple[socket.socket, ExtenderApp, list[str]],
) -> None:
    sock, app, seen = connection
    first = raw_request(body_of(FLEXIBLE))
    head, body = first.split(b"\r\n\r\n", 1)
    for piece in (head + b"\r\n", b"\r\n", body[:5], body[5:-1], body[-1:]):
        sock.sendall(piece)
    inference = body_of(pod("chat-1", 1, "inference"))
    sock.sendall(raw_request(inference) + raw_request(b"{}") + raw_request(b'{"Pod": 5}', path="/preempt"))
    got = answers(sock, 4)
    assert [status for status, _, _ in got] == [200, 200, 422, 422]
    assert json.loads(got[0][2]) != json.loads(got[1][2])  # a flexible worker and a replica score different nodes
    assert "pod" in json.loads(got[3][2])["Error"].lower()
    # the pipelined requests behind the first went the ASGI way or straight: either gives the same answers
    assert set(seen) <= {"/prioritize", "/preempt"}
    assert app.state.held.held == 0


def test_bad_bodies_get_the_same_4xx_and_are_counted_as_the_asgi_way_counts_them(app: ExtenderApp) -> None:
    seen = counted(app)
    with serving(app) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            for raw, status, says in ((b"{", 400, "not JSON"), (b"[1]", 400, "JSON object"), (b"{}", 422, "Pod")):
                connection.request("POST", "/prioritize", body=raw)
                answer = connection.getresponse()
                assert answer.status == status
                assert says.lower() in json.loads(answer.read())["Error"].lower()
            connection.request("GET", "/metrics")
            exposed = connection.getresponse().read().decode()
        finally:
            connection.close()
    assert seen == []
    assert 'lyra_extender_requests_total{outcome="bad-request",verb="prioritize"} 3.0' in exposed
    assert 'lyra_extender_request_seconds_count{verb="prioritize"} 3.0' in exposed


def test_the_bytes_of_a_body_being_read_are_held_and_given_back_when_the_client_leaves(
    connection: tuple[socket.socket, ExtenderApp, list[str]],
) -> None:
    sock, app, _ = connection
    sock.sendall(raw_request(b"{" + b" " * 999)[:-500])  # the head and half of a 1,000-byte body
    wait_for(lambda: app.state.held.held == 1000, 10, "the declared body to be counted as held", interval=0.01)
    sock.close()
    wait_for(lambda: app.state.held.held == 0, 10, "the held bytes to be given back", interval=0.01)


def test_a_body_that_stops_after_an_answer_on_the_same_connection_gets_a_408() -> None:
    """The head's deadline is re-armed for a verb's body even when the head came whole right after an answer."""
    app = create_app(FixedView(build_view([], [])), body_timeout_s=1)
    with serving(app, client_timeout_s=1) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw_request(b"{}"))
        [(status, _, _)] = answers(sock, 1)
        assert status == 422
        sock.sendall(raw_request(b"{" + b" " * 999)[:-500])  # the next head whole, half of its body
        started = time.monotonic()
        [(status, _, answer)] = answers(sock, 1)
        assert status == 408
        assert b"request body not received within 1 s" in answer
        assert time.monotonic() - started <= 4
        readable, _, _ = select.select([sock], [], [], 5)
        assert readable
        assert sock.recv(4096) == b""
    assert app.state.held.held == 0


@pytest.mark.parametrize(
    "headers",
    ["Expect: 100-continue\r\n", "Connection: close\r\n"],
)
def test_requests_the_protocol_does_not_take_whole_are_still_served(app: ExtenderApp, headers: str) -> None:
    seen = counted(app)
    with serving(app) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        body = body_of(FLEXIBLE)
        request = raw_request(body, headers=headers)
        if "100-continue" in headers:
            head, _ = request.split(b"\r\n\r\n", 1)
            sock.sendall(head + b"\r\n\r\n")
            readable, _, _ = select.select([sock], [], [], 10)
            assert readable
            assert sock.recv(4096).startswith(b"HTTP/1.1 100")
            sock.sendall(body)
        else:
            sock.sendall(request)
        [(status, _, answer)] = answers(sock, 1)
        assert status == 200
        assert json.loads(answer)
        if "close" in headers:
            readable, _, _ = select.select([sock], [], [], 10)
            assert readable
            assert sock.recv(4096) == b"", "the connection is closed after the answer"
    assert seen == (["/prioritize"] if "100-continue" in headers else [])


def test_a_fault_while_answering_is_a_500_and_the_connection_closed() -> None:
    class Broken:
        synced = True

        def current(self) -> ClusterView:
            raise RuntimeError("a fault of the extender's own")

    app = create_app(Broken())
    with serving(app) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw_request(body_of(FLEXIBLE)))
        [(status, _, answer)] = answers(sock, 1)
        assert status == 500
        assert json.loads(answer) == {"Error": "Internal Server Error"}
        readable, _, _ = select.select([sock], [], [], 10)
        assert readable
        assert sock.recv(4096) == b""
    assert app.state.held.held == 0
