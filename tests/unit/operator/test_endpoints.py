"""The operator's HTTP endpoints: liveness follows the loop's heartbeat, readiness also its last pass's success,
and /metrics serves the registry."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from lyra.listening import ListenError
from lyra.operator.endpoints import Health, serve
from lyra.operator.metrics import OperatorMetrics
from tests.unit.cli.running import taken_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_liveness_lapses_when_the_loop_stops_beating_and_readiness_follows_the_last_pass() -> None:
    clock = Clock()
    health = Health(stale_after_s=30, clock=clock)
    assert health.liveness()[0]
    assert health.readiness() == (False, "not synced: no pass yet")

    health.beat(synced=True)
    assert health.readiness() == (True, "ok")
    health.beat(synced=False, problem="the last pass failed: MaxRetryError")
    assert health.liveness()[0]
    assert health.readiness() == (False, "not synced: the last pass failed: MaxRetryError")

    clock.now += 31
    alive, why = health.liveness()
    assert not alive
    assert "31 s" in why
    assert not health.readiness()[0]


@pytest.fixture
def endpoints() -> Iterator[tuple[str, Health, OperatorMetrics]]:
    health, metrics = Health(stale_after_s=30), OperatorMetrics()
    server = serve("127.0.0.1", 0, metrics, health)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", health, metrics
    finally:
        server.shutdown()
        server.server_close()


def status_of(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_endpoints_answer_for_health_and_metrics(endpoints: tuple[str, Health, OperatorMetrics]) -> None:
    url, health, metrics = endpoints
    assert status_of(f"{url}/healthz") == (200, "ok\n")
    assert status_of(f"{url}/readyz")[0] == 503
    health.beat(synced=True)
    metrics.standing_by()
    assert status_of(f"{url}/readyz") == (200, "ok\n")
    code, body = status_of(f"{url}/metrics")
    assert code == 200
    assert "lyra_leader 0.0" in body
    assert status_of(f"{url}/nothing")[0] == 404
    assert status_of(f"{url}/debug/caches")[0] == 404  # only with --debug-endpoints


def test_the_caches_debug_endpoint_answers_each_kinds_keys_and_versions() -> None:
    held = {"pods": {"team/gpu-0": "41"}, "nodes": {"t4-0": "7"}}
    server = serve("127.0.0.1", 0, OperatorMetrics(), Health(stale_after_s=30), caches=lambda: held)
    try:
        code, body = status_of(f"http://127.0.0.1:{server.server_address[1]}/debug/caches")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 200
    assert json.loads(body) == held


def test_an_ipv6_address_is_served() -> None:
    server = serve("::1", 0, OperatorMetrics(), Health(stale_after_s=30))
    try:
        assert status_of(f"http://[::1]:{server.server_address[1]}/healthz")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_in_use_is_a_listen_error_not_a_traceback() -> None:
    with taken_port() as port, pytest.raises(ListenError) as raised:
        serve("127.0.0.1", port, OperatorMetrics(), Health(stale_after_s=30))
    assert str(raised.value) == f"cannot listen on 127.0.0.1:{port}: address already in use"
