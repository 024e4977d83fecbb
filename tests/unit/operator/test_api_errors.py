"""``lyra_api_errors_total{verb, code}``: every verb and known code exported from zero; the API's refusals and the
requests that got no answer counted by the Kubernetes verb they stand for, through a real kubernetes client talking
to a small HTTP server on loopback that answers as told; a write the fence stops is not sent, so not counted."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from lyra.operator.api_errors import CODES, NETWORK, VERBS, count_api_errors, count_write_errors, verb_of
from lyra.operator.commit import Cluster
from lyra.operator.leader import LeadershipLostError
from lyra.operator.metrics import API_ERRORS, OperatorMetrics
from tests.answering_server import Answer, answering_server

#: (method, path) -> the status the server answers with.
ANSWERS = {
    ("GET", "/api/v1/namespaces/ns/pods/gone"): 404,
    ("GET", "/api/v1/nodes"): 200,
    ("PATCH", "/api/v1/nodes/n1"): 403,
    ("POST", "/api/v1/namespaces/ns/pods"): 429,
    ("DELETE", "/api/v1/namespaces/ns/pods/p"): 500,
}


def _answer(method: str, path: str) -> Answer:
    status = ANSWERS.get((method, path), 200)
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "code": status}
    if status < 400:
        body = {"kind": "NodeList", "items": [], "metadata": {}}
    return status, json.dumps(body).encode(), "application/json"


@pytest.fixture
def server() -> Iterator[str]:
    with answering_server(_answer) as url:
        yield url


def api_at(host: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = host
    configuration.retries = False
    return client.ApiClient(configuration)


def errors(metrics: OperatorMetrics) -> dict[tuple[str, str], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.name == API_ERRORS.name:
                found[(sample.labels["verb"], sample.labels["code"])] = sample.value
    return found


def counted(metrics: OperatorMetrics) -> dict[tuple[str, str], float]:
    return {labels: value for labels, value in errors(metrics).items() if value}


#: What :func:`make_refused_calls` leaves counted.
REFUSED = {("get", "404"): 1.0, ("patch", "403"): 1.0, ("create", "429"): 1.0, ("delete", "500"): 1.0}


def make_refused_calls(core: Any) -> None:
    """One call of each verb the server refuses (:data:`ANSWERS`), on the kubernetes client's ``CoreV1Api`` or the
    commit step's writes (same names): each raises the client's ApiException with the server's status."""
    for call, status in (
        (lambda: core.read_namespaced_pod("gone", "ns"), 404),
        (lambda: core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}), 403),
        (lambda: core.create_namespaced_pod("ns", {"metadata": {"name": "p"}}), 429),
        (lambda: core.delete_namespaced_pod("p", "ns", grace_period_seconds=5), 500),
    ):
        with pytest.raises(ApiException) as refused:
            call()
        assert refused.value.status == status  # raised as the kubernetes client raises it


@pytest.mark.parametrize(
    ("method", "url", "verb"),
    [
        ("GET", "https://h/api/v1/nodes?limit=500", "list"),
        ("GET", "https://h/api/v1/pods?labelSelector=a&limit=500&continue=x", "list"),
        ("GET", "https://h/api/v1/pods?watch=true&resourceVersion=5&allowWatchBookmarks=true", "watch"),
        ("GET", "https://h/api/v1/pods?watch=1", "watch"),
        ("GET", "https://h/api/v1/namespaces/ns/pods/p", "get"),
        ("get", "https://h/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "get"),
        ("HEAD", "https://h/healthz", "get"),
        ("POST", "https://h/api/v1/namespaces/ns/pods", "create"),
        ("PUT", "https://h/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "update"),
        ("PATCH", "https://h/api/v1/nodes/n?watch=true", "patch"),
        ("DELETE", "https://h/api/v1/namespaces/ns/pods/p", "delete"),
    ],
)
def test_the_verb_is_the_kubernetes_verb_the_request_stands_for(method: str, url: str, verb: str) -> None:
    assert verb_of(method, url) == verb


def test_every_verb_and_known_code_is_exported_at_zero() -> None:
    exported = errors(OperatorMetrics())
    assert exported == {(verb, code): 0.0 for verb in VERBS for code in CODES}


def test_refusals_and_unanswered_requests_are_counted_by_verb_and_code(server: str) -> None:
    metrics = OperatorMetrics()
    api = api_at(server)
    count_api_errors(api, metrics.api_error)
    count_api_errors(api, metrics.api_error)  # installed once: nothing counted twice
    core = client.CoreV1Api(api)
    core.list_node(limit=500)  # 200: not an error
    make_refused_calls(core)
    assert counted(metrics) == REFUSED

    with socket.socket() as closed:  # a port nothing listens on: no answer at all
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    unreachable = api_at(f"http://127.0.0.1:{port}")
    count_api_errors(unreachable, metrics.api_error)
    with pytest.raises(urllib3.exceptions.HTTPError):
        client.CoreV1Api(unreachable).list_node(limit=500, watch=True)
    assert counted(metrics)[("watch", NETWORK)] == 1.0


@pytest.mark.parametrize("fence_first", [True, False])
def test_a_write_the_fence_stops_is_not_sent_so_not_counted_whichever_is_installed_first(
    server: str, fence_first: bool
) -> None:
    metrics = OperatorMetrics()
    cluster = Cluster(api_at(server))
    open_fence = [True]
    if fence_first:
        cluster.fence = lambda: open_fence[0]
    count_api_errors(cluster.api, metrics.api_error)
    count_write_errors(cluster.writes, metrics.api_error)
    if not fence_first:
        cluster.fence = lambda: open_fence[0]
    with pytest.raises(ApiException):
        cluster.core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    open_fence[0] = False
    with pytest.raises(LeadershipLostError):
        cluster.core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert counted(metrics) == {("patch", "403"): 1.0}


def test_the_commit_steps_writes_are_counted_as_the_clients_requests(server: str) -> None:
    metrics = OperatorMetrics()
    cluster = Cluster(api_at(server))
    count_write_errors(cluster.writes, metrics.api_error)
    cluster.core.patch_node("n2", {"metadata": {"labels": {"a": "b"}}})  # 200: not an error
    make_refused_calls(cluster.core)
    assert counted(metrics) == REFUSED

    with socket.socket() as closed:  # a port nothing listens on: no answer at all
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    unreachable = Cluster(api_at(f"http://127.0.0.1:{port}"))
    count_write_errors(unreachable.writes, metrics.api_error)
    with pytest.raises(ConnectionRefusedError):
        unreachable.core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert counted(metrics)[("patch", NETWORK)] == 1.0
