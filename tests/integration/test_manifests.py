"""Invalid TrainingJob and InferenceService manifests (kept as data in data/invalid_manifests.yaml) are refused by
the real API server, each with a message that says what to fix."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names

pytestmark = pytest.mark.integration

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "data" / "invalid_manifests.yaml").read_text())
VALID_SPECS: dict[str, dict[str, Any]] = {
    names.TRAINING_JOB_KIND: {
        "minWorkers": 2,
        "maxWorkers": 4,
        "gpusPerWorker": 1,
        "expectedDuration": 600,
        "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}},
    },
    names.INFERENCE_SERVICE_KIND: {
        "replicas": 2,
        "gpusPerReplica": 1,
        "minReplicas": 1,
        "maxReplicas": 4,
        "template": {"spec": {"containers": [{"name": "server", "image": "server:1"}]}},
    },
}
PLURALS = {
    names.TRAINING_JOB_KIND: names.TRAINING_JOB_PLURAL,
    names.INFERENCE_SERVICE_KIND: names.INFERENCE_SERVICE_PLURAL,
}


def manifest(case: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(VALID_SPECS[case["kind"]]) | case.get("set", {})
    for field in case.get("unset", []):
        del spec[field]
    return {"apiVersion": names.API_VERSION, "kind": case["kind"], "metadata": {"name": case["name"]}, "spec": spec}


def test_the_cases_cover_both_kinds_and_are_enough() -> None:
    assert len(CASES) >= 15
    assert {c["kind"] for c in CASES} == set(PLURALS)
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("kind", sorted(VALID_SPECS))
def test_the_starting_point_is_valid(kind: str, kube_api: client.ApiClient, namespace: str) -> None:
    body = manifest({"kind": kind, "name": f"valid-{kind.lower()}"})
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, PLURALS[kind], body
    )


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_an_invalid_manifest_is_refused_with_a_message(
    case: dict[str, Any], kube_api: client.ApiClient, namespace: str
) -> None:
    api = client.CustomObjectsApi(kube_api)
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, PLURALS[case["kind"]], manifest(case)
        )
    assert refused.value.status == 422
    message = json.loads(refused.value.body)["message"]
    assert case["message"] in message
