"""The extender's bounds on what a client may cost it, on a real server on loopback (uvicorn as ``lyra extender``
runs it, :func:`lyra.extender.serving.server_config`): the body cap fits what kube-scheduler sends and refuses more
while streaming, the bytes held across requests are capped (503), and slow clients are cut."""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from lyra.api.objects import MAX_NODES
from lyra.extender.app import (
    DEFAULT_MAX_BODY_BYTES,
    NODE_ENTRY_BYTES,
    POD_ALLOWANCE_BYTES,
    FixedView,
    create_app,
)
from lyra.extender.serving import MAX_HEAD_BYTES, server_config
from lyra.extender.view import build_view
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.waiting import wait_for

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [{"name": "c"}]}}


@contextmanager
def serving(app: FastAPI, client_timeout_s: float = 10) -> Iterator[int]:
    [port] = allocate_ports(1)
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, client_timeout_s=client_timeout_s))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 10, "the test server to start")
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def empty_app(**limits: Any) -> FastAPI:
    return create_app(FixedView(build_view([], [])), **limits)


def post(port: int, body: bytes) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/prioritize", body=body, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def closed_within(sock: socket.socket, seconds: float, drip: bytes = b"") -> float | None:
    """Seconds until the server closes ``sock`` (polled), sending one byte of ``drip`` at each poll; ``None`` if it
    is still open after ``seconds``."""
    started = time.monotonic()
    for byte in [drip[i : i + 1] for i in range(len(drip))] or [b""]:
        if byte:
            try:
                sock.sendall(byte)
            except OSError:
                return time.monotonic() - started
        remaining = seconds - (time.monotonic() - started)
        if remaining <= 0:
            return None
        readable, _, _ = select.select([sock], [], [], min(remaining, 0.2 if drip else remaining))
        if readable and sock.recv(4096) == b"":
            return time.monotonic() - started
    readable, _, _ = select.select([sock], [], [], max(0.0, seconds - (time.monotonic() - started)))
    if readable and sock.recv(4096) == b"":
        return time.monotonic() - started
    return None


def test_the_default_body_cap_fits_the_largest_request_kube_scheduler_sends() -> None:
    """``nodeCacheCapable``: a pod and ``MAX_NODES`` names of 253 characters; the cap is derived from them."""
    assert DEFAULT_MAX_BODY_BYTES >= POD_ALLOWANCE_BYTES + MAX_NODES * NODE_ENTRY_BYTES
    assert DEFAULT_MAX_BODY_BYTES <= 8 * 1024 * 1024
    names = [f"{index:05d}".ljust(253, "n") for index in range(MAX_NODES)]
    body = json.dumps({"Pod": POD, "NodeNames": names}).encode()
    assert len(body) + POD_ALLOWANCE_BYTES <= DEFAULT_MAX_BODY_BYTES
    with serving(empty_app()) as port:
        assert post(port, body) == (200, [])  # an empty view scores nothing, but the body was taken


def test_a_chunked_body_over_the_cap_is_refused_while_it_streams_and_the_connection_closed() -> None:
    with serving(empty_app(max_body_bytes=64 * 1024)) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            sock.sendall(b"POST /prioritize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"[" + b"0," * 8191 + b"0"
            sent = 0
            answer = b""
            while not answer and sent < 64:  # 1 MiB at most: far past the cap
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += 1
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable:
                    answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
            assert b"over the limit of 65536 bytes" in answer
            assert b"connection: close" in answer.lower()
            assert sent * len(chunk) < 512 * 1024, f"{sent} chunks of 16 KiB read before refusing"
            assert closed_within(sock, 5) is not None


def test_bytes_held_across_requests_are_capped_with_a_503_and_given_back() -> None:
    app = empty_app(max_body_bytes=64 * 1024, max_held_bytes=100 * 1024)
    with serving(app) as port:
        # A first client declares 60 KiB and sends half: its 60 KiB are held while it sends.
        first = socket.create_connection(("127.0.0.1", port), timeout=10)
        with first:
            body = json.dumps({"Pod": POD, "pad": "x" * (60 * 1024)}).encode()
            head = f"POST /prioritize HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            first.sendall(head + body[: len(body) // 2])
            wait_for(lambda: app.state.held.held >= len(body), 10, "the first body to be held")
            # A second one of 60 KiB would hold 120 KiB: refused, the first still held.
            status, answer = post(port, json.dumps({"Pod": POD, "pad": "y" * (60 * 1024)}).encode())
            assert status == 503
            assert f"at most {100 * 1024}" in answer["Error"]
            # Small requests still fit beside it.
            assert post(port, json.dumps({"Pod": POD}).encode()) == (200, [])
            first.sendall(body[len(body) // 2 :])
            reply = first.recv(4096)
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        wait_for(lambda: app.state.held.held == 0, 10, "every byte given back")
        assert post(port, json.dumps({"Pod": POD, "pad": "z" * (60 * 1024)}).encode())[0] == 200


def test_a_refused_or_failed_request_gives_its_bytes_back() -> None:
    app = empty_app(max_body_bytes=1024, max_held_bytes=2048)
    with serving(app) as port:
        for body in (b"{" + b" " * 2000 + b"}", b"{not json", b"[1]", json.dumps({"Pod": {}}).encode()):
            status, _ = post(port, body)
            assert status in (400, 413, 422)
            assert app.state.held.held == 0


def test_a_client_that_sends_its_headers_slowly_is_cut() -> None:
    with serving(empty_app(), client_timeout_s=1) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            head = b"POST /prioritize HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
            cut = closed_within(sock, 6, drip=head)
        assert cut is not None, "a head dripping for 6 s was never cut"
        assert 0.8 <= cut <= 4


@pytest.mark.parametrize("split", [False, True], ids=["at-once", "in-pieces"])
def test_a_request_head_over_the_bound_gets_a_400_and_the_connection_closed(split: bool) -> None:
    """httptools has no bound of its own on a head (h11 had 16 KiB): the server keeps it."""
    with serving(empty_app(), client_timeout_s=10) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            head = b"POST /prioritize HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 1024)
            pieces = [head[i : i + 4096] for i in range(0, len(head), 4096)] if split else [head]
            for piece in pieces:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    sock.sendall(piece)
            readable, _, _ = select.select([sock], [], [], 5)
            assert readable, "no answer to a head over the bound"
            answer = sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
            assert f"request head over {MAX_HEAD_BYTES} bytes".encode() in answer
            assert closed_within(sock, 5) is not None


def test_a_head_within_the_bound_followed_by_a_large_body_is_served() -> None:
    """A head and the start of its body arrive in one read: the body's bytes never count against the head's bound."""
    with serving(empty_app(), client_timeout_s=10) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            body = json.dumps({"Pod": POD, "NodeNames": [f"node-{i:05d}" for i in range(5_000)]}).encode()
            head = f"POST /prioritize HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            sock.sendall(head + body)
            answer = sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_a_client_that_connects_and_sends_nothing_is_cut() -> None:
    with serving(empty_app(), client_timeout_s=1) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            cut = closed_within(sock, 6)
        assert cut is not None
        assert 0.8 <= cut <= 4


def test_a_client_that_sends_its_body_slowly_gets_a_408_and_is_cut() -> None:
    with serving(empty_app(body_timeout_s=1), client_timeout_s=1) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        with sock:
            sock.sendall(b"POST /prioritize HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
            started = time.monotonic()
            readable, _, _ = select.select([sock], [], [], 6)
            assert readable, "no answer to a body that stopped coming"
            answer = sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            assert b"request body not received within 1 s" in answer
            assert time.monotonic() - started <= 4
            assert closed_within(sock, 5) is not None


def test_a_keep_alive_connection_serves_several_requests_within_the_deadlines() -> None:
    with serving(empty_app(), client_timeout_s=1) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            for _ in range(3):
                connection.request("POST", "/prioritize", body=json.dumps({"Pod": POD}).encode())
                answer = connection.getresponse()
                assert (answer.status, answer.read()) == (200, b"[]")
        finally:
            connection.close()


@pytest.mark.parametrize("flood", [8, 32])
def test_a_flood_of_the_largest_bodies_is_answered_or_refused_never_held_past_the_cap(flood: int) -> None:
    """Concurrent bodies of the largest size: at most ``max_held_bytes`` held at any time (the rest 503)."""
    app = empty_app(max_body_bytes=256 * 1024, max_held_bytes=512 * 1024)
    body = json.dumps({"Pod": POD, "pad": [{}] * (60 * 1024)}).encode()
    assert 200 * 1024 <= len(body) <= 256 * 1024
    statuses: list[int | str] = []

    def send() -> None:
        try:
            statuses.append(post(port, body)[0])
        except OSError as error:
            statuses.append(type(error).__name__)  # refused and closed while still sending

    with serving(app) as port:
        senders = [threading.Thread(target=send) for _ in range(flood)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(timeout=60)
        assert app.state.held.held == 0
    assert len(statuses) == flood
    assert statuses.count(200) >= 1
    assert set(statuses) <= {200, 503, "ConnectionResetError", "BrokenPipeError"}, statuses
    assert len(body) <= app.state.held.peak <= 512 * 1024
