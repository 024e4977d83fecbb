"""The fault proxy of the API-fault tests (tests/fault_proxy.py), against a small TLS server standing in for the API
server: requests and bodies pass through unchanged with the client's token; each rule injects what it says, on every
n-th matching request, at most ``limit`` times; an error ``applied`` reaches the server first; a cut watch breaks in
the middle of an event; the record counts what was matched and injected."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import urllib3
from aiohttp import web

from lyra.localcluster.credentials import Credentials, generate_credentials
from tests.fault_proxy import ANY_METHOD, Rule, fault_proxy

EVENTS = 6


class Upstream:
    """An HTTPS server with the local CA's serving certificate: it answers every request with what it received, and
    ``?watch=true`` with ``EVENTS`` JSON lines."""

    def __init__(self, credentials: Credentials) -> None:
        self.received: list[tuple[str, str, bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._socket.getsockname()[1]}"
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(credentials.serving_cert, credentials.serving_key)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append((request.method, request.path_qs, body))
        if request.query.get("watch") == "true":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            for index in range(EVENTS):
                await response.write(json.dumps({"type": "MODIFIED", "object": {"index": index}}).encode() + b"\n")
            await response.write_eof()
            return response
        seen = {
            "method": request.method,
            "body": body.decode(),
            "token": request.headers.get("Authorization"),
            "type": request.headers.get("Content-Type"),
        }
        return web.json_response(seen)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket, ssl_context=self._tls).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def __enter__(self) -> Upstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._socket.close()


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory) -> Credentials:
    return generate_credentials(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def upstream(credentials: Credentials) -> Iterator[Upstream]:
    with Upstream(credentials) as server:
        yield server


@contextmanager
def client(credentials: Credentials) -> Iterator[urllib3.PoolManager]:
    http = urllib3.PoolManager(ca_certs=str(credentials.ca_cert), retries=False)
    try:
        yield http
    finally:
        http.clear()


def proxied(upstream: Upstream, credentials: Credentials, *rules: Rule) -> Any:
    return fault_proxy(
        upstream.url,
        ca_cert=credentials.ca_cert,
        serving_cert=credentials.serving_cert,
        serving_key=credentials.serving_key,
        rules=rules,
    )


def test_requests_pass_through_unchanged_with_the_clients_token_and_no_content_type_added(
    upstream: Upstream, credentials: Credentials
) -> None:
    with proxied(upstream, credentials) as proxy, client(credentials) as http:
        answer = http.request(
            "PATCH", f"{proxy.url}/api/v1/nodes/n1?fieldManager=a%2Fb", body=b'{"x":1}', headers={"Authorization": "t"}
        )
        typed = http.request("POST", f"{proxy.url}/api/v1/pods", body=b"{}", headers={"Content-Type": "text/x"})
    assert answer.status == 200
    assert json.loads(answer.data) == {"method": "PATCH", "body": '{"x":1}', "token": "t", "type": None}
    assert json.loads(typed.data)["type"] == "text/x"
    assert upstream.received[0] == ("PATCH", "/api/v1/nodes/n1?fieldManager=a%2Fb", b'{"x":1}')
    assert proxy.counts() == {"requests": 2, "matched": {}, "injected": {}}


def test_an_error_on_every_second_match_up_to_its_limit_never_reaches_the_server(
    upstream: Upstream, credentials: Credentials
) -> None:
    conflict = Rule("conflict", "PATCH", r"/api/v1/nodes/[^/]+", status=409, every=2, limit=2)
    with proxied(upstream, credentials, conflict) as proxy, client(credentials) as http:
        statuses = [http.request("PATCH", f"{proxy.url}/api/v1/nodes/n{i}", body=b"{}").status for i in range(6)]
        other = http.request("PATCH", f"{proxy.url}/api/v1/nodes/n1/status", body=b"{}").status
    assert statuses == [409, 200, 409, 200, 200, 200]
    assert other == 200, "the path must match whole"
    assert [path for _, path, _ in upstream.received] == [f"/api/v1/nodes/n{i}" for i in (1, 3, 4, 5)] + [
        "/api/v1/nodes/n1/status"
    ]
    assert proxy.counts()["matched"] == {"conflict": 6}
    assert proxy.counts()["injected"] == {"conflict": 2}


def test_an_applied_error_reaches_the_server_and_answers_a_status_object(
    upstream: Upstream, credentials: Credentials
) -> None:
    failing = Rule("error", ANY_METHOD, r".*/status", status=500, applied=True)
    with proxied(upstream, credentials, failing) as proxy, client(credentials) as http:
        answer = http.request("PATCH", f"{proxy.url}/apis/g/v1/namespaces/n/x/y/status", body=b"[]")
    assert answer.status == 500
    assert json.loads(answer.data)["reason"] == "InternalError"
    assert [method for method, _, _ in upstream.received] == ["PATCH"]


def test_latency_delays_the_matching_requests_only(upstream: Upstream, credentials: Credentials) -> None:
    slow = Rule("slow", "GET", r"/slow", delay_s=0.4)
    with proxied(upstream, credentials, slow) as proxy, client(credentials) as http:
        started = time.monotonic()
        http.request("GET", f"{proxy.url}/slow")
        delayed = time.monotonic() - started
        started = time.monotonic()
        http.request("GET", f"{proxy.url}/fast")
        direct = time.monotonic() - started
    assert delayed >= 0.4
    assert direct < 0.4
    assert proxy.counts()["injected"] == {"slow": 1}


def test_a_cut_watch_breaks_in_the_middle_of_an_event(upstream: Upstream, credentials: Credentials) -> None:
    cut = Rule("cut", "GET", r"/api/v1/pods", watch=True, cut_after_events=2, limit=1)
    with proxied(upstream, credentials, cut) as proxy, client(credentials) as http:
        response = http.request("GET", f"{proxy.url}/api/v1/pods?watch=true", preload_content=False)
        chunks: list[bytes] = []
        with pytest.raises(urllib3.exceptions.ProtocolError):
            chunks.extend(response.stream(64))
        received = b"".join(chunks)
        whole = http.request("GET", f"{proxy.url}/api/v1/pods?watch=true").data
    lines = received.split(b"\n")
    assert [json.loads(line)["object"]["index"] for line in lines[:2]] == [0, 1]
    assert lines[2], "half of the third event"
    with pytest.raises(ValueError, match=r"Expecting|Unterminated"):
        json.loads(lines[2])
    assert len(whole.splitlines()) == EVENTS, "past its limit the rule lets watches through whole"
    assert proxy.counts()["injected"] == {"cut": 1}


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"status": 418}, "is not one of"),
        ({"cut_after_events": 1}, "only a watch"),
        ({}, "no fault"),
        ({"status": 500, "every": 0}, "every >= 1"),
    ],
)
def test_a_rule_that_cannot_inject_is_refused(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rule("bad", "GET", ".*", **rule)


def test_rule_names_are_unique(tmp_path: Path, credentials: Credentials) -> None:
    twice = [Rule("same", "GET", ".*", delay_s=0.1), Rule("same", "PUT", ".*", delay_s=0.1)]
    with (
        pytest.raises(ValueError, match="unique"),
        fault_proxy(
            "https://127.0.0.1:1",
            ca_cert=credentials.ca_cert,
            serving_cert=credentials.serving_cert,
            serving_key=credentials.serving_key,
            rules=twice,
        ),
    ):
        pass
