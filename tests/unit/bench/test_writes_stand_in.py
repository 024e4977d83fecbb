"""The writes benchmark's stand-in API server answers as kube-apiserver was observed to
(``tests/integration/test_write_answers.py``): the object whole, or its metadata alone when the request asks for it."""

from __future__ import annotations

import json

import pytest
from bench.operator_writes_bench import StandInState

from lyra.api.names import METADATA_ANSWER

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
