"""The commit step's lean requests (:mod:`lyra.operator.writes`) against a small HTTP server on loopback: what is
sent (method, path, headers, body), what an error answer raises, a kept-alive connection the server closed, and the
fence asked before every write and never before a read."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api.names import JSON_PATCH, METADATA_ANSWER
from lyra.operator.leader import LeadershipLostError
from lyra.operator.writes import ApiWrites, serialised


@dataclass
class Seen:
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: list[tuple[int, dict[str, Any], bool]] = field(default_factory=list)  # status, body, close after


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen = self.server.seen
        seen.requests.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode(),
            }
        )
        status, answer, close = (
            seen.answers.pop(0) if seen.answers else (200, {"metadata": {"resourceVersion": "7"}}, False)
        )
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        if close:
            self.close_connection = True

    do_GET = do_POST = do_PATCH = do_DELETE = _answer  # noqa: N815 - the names http.server calls

    def log_message(self, format: str, *args: Any) -> None:
        return


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen = Seen()


OPENED: list[ApiWrites] = []


@pytest.fixture
def server() -> Iterator[Server]:
    made = Server()
    thread = threading.Thread(target=made.serve_forever, daemon=True)
    thread.start()
    yield made
    while OPENED:
        OPENED.pop().close()
    made.shutdown()
    made.server_close()


def writes_to(server: Server, fence: list[bool] | None = None) -> ApiWrites:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    configuration.api_key = {"authorization": "Bearer secret-token"}
    api = client.ApiClient(configuration)
    api.user_agent = "lyra-operator/test (op-1)"
    answers = fence if fence is not None else None
    made = ApiWrites(api, lambda: (lambda: answers[0]) if answers is not None else None)
    OPENED.append(made)
    return made


def test_a_write_is_one_request_with_the_clients_headers_and_its_body_as_json(server: Server) -> None:
    writes = writes_to(server)
    answer = writes.create_namespaced_pod("ml", {"metadata": {"name": "j-w0"}, "spec": {"containers": []}})
    assert json.loads(answer.data) == {"metadata": {"resourceVersion": "7"}}
    status = [{"op": "add", "path": "/status", "value": {"phase": "Running"}}]
    writes.patch_namespaced_custom_object_status(
        "lyra.dev", "v1alpha1", "ml", "trainingjobs", "j", status, _content_type=JSON_PATCH
    )
    writes.delete_namespaced_pod("j-w0", "ml", grace_period_seconds=30, body={"preconditions": {"uid": "u1"}})
    writes.patch_node("t0", {"metadata": {"labels": {"lyra.dev/state": "loaned"}}})
    made, patched, deleted, node = server.seen.requests
    assert (made["method"], made["path"]) == ("POST", "/api/v1/namespaces/ml/pods")
    assert json.loads(made["body"]) == {"metadata": {"name": "j-w0"}, "spec": {"containers": []}}
    assert made["headers"]["authorization"] == "Bearer secret-token"
    assert made["headers"]["user-agent"] == "lyra-operator/test (op-1)"
    assert made["headers"]["content-type"] == "application/json"
    assert {r["headers"]["accept"] for r in server.seen.requests} == {METADATA_ANSWER}
    assert patched["path"] == "/apis/lyra.dev/v1alpha1/namespaces/ml/trainingjobs/j/status"
    assert patched["headers"]["content-type"] == "application/json-patch+json"
    assert json.loads(patched["body"]) == status
    assert deleted["path"] == "/api/v1/namespaces/ml/pods/j-w0?gracePeriodSeconds=30"
    assert json.loads(deleted["body"]) == {"preconditions": {"uid": "u1"}}
    assert node["headers"]["content-type"] == "application/strategic-merge-patch+json"
    assert len({r["headers"].get("host") for r in server.seen.requests}) == 1


def test_a_refreshed_token_and_a_new_user_agent_go_with_the_next_request(server: Server) -> None:
    writes = writes_to(server)
    tokens = iter(["Bearer first", "Bearer first", "Bearer second"])
    configuration = writes.api.configuration

    def refresh(settings: client.Configuration) -> None:  # as the kubernetes client's token refresh hook is called
        settings.api_key["authorization"] = next(tokens)

    configuration.refresh_api_key_hook = refresh
    for name in ("a", "b", "c"):
        writes.patch_namespaced_pod(name, "ml", {})
    writes.api.user_agent = "lyra-operator/test (op-2)"
    configuration.refresh_api_key_hook = None
    writes.patch_namespaced_pod("d", "ml", {})
    seen = [(r["headers"]["authorization"], r["headers"]["user-agent"]) for r in server.seen.requests]
    assert seen == [
        ("Bearer first", "lyra-operator/test (op-1)"),
        ("Bearer first", "lyra-operator/test (op-1)"),
        ("Bearer second", "lyra-operator/test (op-1)"),
        ("Bearer second", "lyra-operator/test (op-2)"),
    ]
    assert all(r["headers"]["content-type"] == "application/strategic-merge-patch+json" for r in server.seen.requests)


def test_an_error_answer_raises_the_clients_exception_with_its_status_and_body(server: Server) -> None:
    body = {"kind": "Status", "reason": "Forbidden", "message": "exceeded quota: gpus"}
    server.seen.answers.append((403, body, False))
    writes = writes_to(server)
    with pytest.raises(ApiException) as raised:
        writes.create_namespaced_pod("quota", {"metadata": {"name": "q-w0"}})
    assert raised.value.status == 403
    assert json.loads(raised.value.body) == body
    writes.create_namespaced_pod("quota", {"metadata": {"name": "q-w1"}})  # the connection serves on


def test_a_kept_alive_connection_the_server_closed_is_replaced_and_the_write_sent_once(server: Server) -> None:
    server.seen.answers.append((200, {"metadata": {"resourceVersion": "8"}}, True))  # closes after answering
    writes = writes_to(server)
    writes.patch_namespaced_pod("p", "ml", {"metadata": {"labels": {"lyra.dev/role": "base"}}})
    writes.patch_namespaced_pod("q", "ml", {"metadata": {"labels": {"lyra.dev/role": "base"}}})
    assert [r["path"] for r in server.seen.requests] == ["/api/v1/namespaces/ml/pods/p", "/api/v1/namespaces/ml/pods/q"]


def test_a_closed_fence_sends_no_write_and_reads_go_on(server: Server) -> None:
    fence = [True]
    writes = writes_to(server, fence)
    writes.create_namespaced_event("ml", {"reason": "Started"})
    fence[0] = False
    with pytest.raises(LeadershipLostError, match="POST /api/v1/namespaces/ml/pods not sent"):
        writes.create_namespaced_pod("ml", {"metadata": {"name": "j-w0"}})
    writes.read_namespaced_pod("j-w0", "ml")
    assert [r["method"] for r in server.seen.requests] == ["POST", "GET"]


def test_names_are_sent_as_one_path_segment_and_a_header_with_a_line_break_is_refused(server: Server) -> None:
    writes = writes_to(server)
    writes.patch_namespaced_pod("a/b?c", "ml", {})
    assert server.seen.requests[-1]["path"] == "/api/v1/namespaces/ml/pods/a%2Fb%3Fc"
    writes.api.user_agent = "lyra\r\nX-Injected: 1"
    with pytest.raises(ValueError, match="line break"):
        writes.patch_namespaced_pod("p", "ml", {})
    assert len(server.seen.requests) == 1


def test_a_body_is_serialised_as_json_reads_it_back_whatever_it_holds() -> None:
    frozen = MappingProxyType({"labels": MappingProxyType({"lyra.dev/role": "base"}), "ports": (1, 2)})
    body = {"metadata": frozen, "note": 'GPU \u2028 \U0001f600 "quoted"', "count": 2**62, "ratio": 0.1}
    assert json.loads(serialised(body)) == json.loads(json.dumps(body, default=dict))
    # What orjson refuses, json takes.
    assert json.loads(serialised({1: "a key that is not a string"})) == {"1": "a key that is not a string"}
    assert json.loads(serialised({"count": 2**70})) == {"count": 2**70}
    with pytest.raises(TypeError):
        serialised({"what": object()})
