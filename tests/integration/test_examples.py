"""The manifests in examples/ are accepted by the real API server as written (and read back with their defaults)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from lyra.api import names

pytestmark = pytest.mark.integration

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
#: examples/ (applied whole by the user guide and the whole-system e2e test) and examples/real-nodes/ (the project's
#: workload images, for real nodes).
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml")) + sorted(EXAMPLES_DIR.glob("real-nodes/*.yaml"))
PLURALS = {
    names.TRAINING_JOB_KIND: names.TRAINING_JOB_PLURAL,
    names.INFERENCE_SERVICE_KIND: names.INFERENCE_SERVICE_PLURAL,
}


def test_there_are_examples_of_both_kinds() -> None:
    kinds = {yaml.safe_load(path.read_text())["kind"] for path in EXAMPLES}
    assert kinds == set(PLURALS)


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(EXAMPLES_DIR)) for p in EXAMPLES])
def test_an_example_is_accepted(path: Path, kube_api: client.ApiClient, namespace: str) -> None:
    body = yaml.safe_load(path.read_text())
    plural = PLURALS[body["kind"]]
    api = client.CustomObjectsApi(kube_api)
    api.create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, body)
    stored = api.get_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, body["metadata"]["name"])
    assert stored["spec"]["template"] == body["spec"]["template"]
