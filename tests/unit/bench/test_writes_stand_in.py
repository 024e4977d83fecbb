"""The writes benchmark's stand-in API server answers as kube-apiserver was observed to
(``tests/integration/test_write_answers.py``): the object whole, or its metadata alone when the request asks for it,
written as compact JSON in Go's field order, framed as kube-apiserver frames it and sent in one block."""

from __future__ import annotations

import json
import socket
from typing import cast

import pytest
from bench.operator_writes_bench import StandInState, framed

from lyra.api.names import METADATA_ANSWER
from lyra.operator.commit import _VERSION_UP_FRONT
from lyra.operator.http_answers import read_answer

WRITES = [
    ("POST", "/api/v1/namespaces/ml/pods", b'{"metadata": {"name": "j-w0"}, "spec": {"containers": []}}'),
    ("PATCH", "/api/v1/namespaces/ml/pods/j-w0", b'{"metadata": {"labels": {"a": "b"}}}'),
    ("PATCH", "/api/v1/nodes/t4-00000", b'{"metadata": {"labels": {"a": "b"}}}'),
    ("PATCH", "/apis/lyra.dev/v1alpha1/namespaces/ml/trainingjobs/j/status", b'{"status": {}}'),
    ("DELETE", "/api/v1/namespaces/ml/pods/j-w0", b""),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_write_asking_for_metadata_gets_the_objects_metadata_alone(method: str, path: str, body: bytes) -> None:
    state = StandInState(0.0)
    status, whole = state.answer(method, path, body)
    _, metadata = state.answer(method, path, body, METADATA_ANSWER)
    whole_object, partial = json.loads(whole), json.loads(metadata)
    assert status == (201 if method == "POST" else 200)
    assert whole_object.get("kind") != "PartialObjectMetadata"
    assert (partial["kind"], partial["apiVersion"], set(partial)) == (
        "PartialObjectMetadata",
        "meta.k8s.io/v1",
        {"kind", "apiVersion", "metadata"},
    )
    assert partial["metadata"]["name"] == whole_object["metadata"]["name"]
    assert int(partial["metadata"]["resourceVersion"]) > int(whole_object["metadata"]["resourceVersion"])
    assert len(metadata) < len(whole)
    front = _VERSION_UP_FRONT.match(metadata)  # written as kube-apiserver writes it: compact, in Go's field order
    assert front is not None
    assert front.group(1).decode() == partial["metadata"]["resourceVersion"]
    assert whole.startswith((b'{"kind":', b'{"apiVersion":')), whole[:40]
    assert b'": ' not in whole


class _OneBlock:
    """A socket holding one block of bytes, as one TLS record arrives: the first ``recv`` takes all of it."""

    def __init__(self, data: bytes) -> None:
        self.blocks = [data]
        self.reads = 0

    def recv(self, size: int) -> bytes:
        self.reads += 1
        block = self.blocks.pop(0) if self.blocks else b""
        assert len(block) <= size
        return block


@pytest.mark.parametrize(
    ("size", "framing"), [(200, "content-length"), (2047, "content-length"), (2048, "chunked"), (2534, "chunked")]
)
def test_an_answer_is_framed_as_kube_apiserver_frames_it_in_one_block(size: int, framing: str) -> None:
    payload = json.dumps({"metadata": {"note": "x" * (size - 26)}}).encode()
    assert len(payload) == size
    sock = _OneBlock(framed(201, payload))
    answer = read_answer(cast("socket.socket", sock), "POST")
    assert (answer.status, answer.reason, answer.will_close) == (201, "Created", False)
    assert json.loads(answer.data) == json.loads(payload)
    assert answer.data == payload + b"\n"
    assert framing in answer.headers or answer.headers.get("transfer-encoding") == framing
    assert {"audit-id", "cache-control", "content-type", "date", "x-kubernetes-pf-flowschema-uid"} <= set(
        answer.headers
    )
    assert sock.reads == 1  # the whole answer was in the one block


def test_a_created_pods_managed_fields_name_what_the_server_defaulted_in_gos_order() -> None:
    """As the local control plane answered the creation of a pod of 30 environment variables (2,876 bytes): the
    creator's entry names the fields the server defaulted too, each map's keys sorted, owners keyed by UID."""
    env = [{"name": f"VAR_{i}", "value": "v" * 40} for i in range(30)]
    owner = {"apiVersion": "lyra.dev/v1alpha1", "kind": "TrainingJob", "name": "j", "uid": "u-1", "controller": True}
    pod = {
        "metadata": {"name": "j-w0", "labels": {"app": "j"}, "ownerReferences": [owner]},
        "spec": {"nodeName": "n", "containers": [{"name": "main", "image": "app:1", "env": env}]},
    }
    body = json.dumps(pod).encode()
    _, answer = StandInState(0.0).answer("POST", "/api/v1/namespaces/ml/pods", body, METADATA_ANSWER)
    metadata = json.loads(answer)["metadata"]
    fields = metadata["managedFields"][0]["fieldsV1"]
    assert list(fields) == ["f:metadata", "f:spec"]
    assert fields["f:metadata"]["f:ownerReferences"] == {".": {}, 'k:{"uid":"u-1"}': {}}
    spec = fields["f:spec"]
    assert {"f:dnsPolicy", "f:restartPolicy", "f:schedulerName", "f:terminationGracePeriodSeconds"} <= set(spec)
    container = spec["f:containers"]['k:{"name":"main"}']
    assert {"f:imagePullPolicy", "f:terminationMessagePath"} <= set(container)
    assert list(spec) == sorted(spec)
    assert list(container["f:env"])[1:] == sorted(container["f:env"])[1:]
    assert metadata["generation"] == 1
    assert 2_700 <= len(answer) <= 2_900  # the real server's 2,876, its UIDs and manager's name a little longer
