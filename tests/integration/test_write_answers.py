"""The commit step reads kube-apiserver's answers straight off the socket (:mod:`lyra.operator.http_answers`): here the
real API server, over its TLS, answers a write whose object is large (chunked, as Go frames an answer past 2 KiB) and
a small refusal (``Content-Length``), on one kept-alive connection, and each is read whole."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.localcluster.controlplane import ControlPlane
from lyra.operator.http_answers import read_answer
from lyra.operator.writes import ApiWrites

pytestmark = pytest.mark.integration


def test_large_and_small_answers_are_read_whole_on_one_connection(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str
) -> None:
    writes = ApiWrites(kube_api)
    try:
        note = "x" * 20_000  # the pod's answer spans several TLS records and chunks
        pod = {
            "metadata": {"name": "big", "annotations": {"lyra.dev/note": note}},
            "spec": {"nodeName": "nowhere", "containers": [{"name": "main", "image": "registry.invalid/app:1"}]},
        }
        made = json.loads(writes.create_namespaced_pod(namespace, pod).data)
        assert made["metadata"]["annotations"]["lyra.dev/note"] == note
        assert made["metadata"]["resourceVersion"]
        with pytest.raises(ApiException) as refused:
            writes.create_namespaced_pod(namespace, pod)  # the name is taken: a small Status
        assert refused.value.status == 409
        assert json.loads(refused.value.body or "{}")["reason"] == "AlreadyExists"
        assert (
            json.loads(writes.read_namespaced_pod("big", namespace).data)["metadata"]["uid"] == made["metadata"]["uid"]
        )
        assert len(writes.connections._idle) == 1  # every answer was framed whole: the connection served on

        # The framings themselves, as the API server chose them, on that connection.
        connection, _ = writes.connections.take()
        headers = writes._headers(None)
        head = [f"GET /api/v1/namespaces/{namespace}/pods/big HTTP/1.1", f"Host: {writes.connections.authority}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        assert connection.sock is not None
        connection.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        large = read_answer(connection.sock, "GET")
        connection.sock.sendall(("\r\n".join(head).replace("/pods/big", "/pods/none") + "\r\n\r\n").encode())
        small = read_answer(connection.sock, "GET")
        writes.connections.give_back(connection)
        assert (large.status, large.headers.get("transfer-encoding"), large.will_close) == (200, "chunked", False)
        assert json.loads(large.data)["metadata"]["annotations"]["lyra.dev/note"] == note
        assert (small.status, "content-length" in small.headers) == (404, True)
        assert json.loads(small.data)["reason"] == "NotFound"
    finally:
        writes.close()
