"""The CRDs: generated from the models without drift, structural, and the models' own validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from lyra.api.crds import all_crds
from lyra.api.resources import InferenceServiceSpec, TrainingJobSpec, wire
from lyra.cli import main

REPOSITORY = Path(__file__).resolve().parents[3]
CHECKED_IN = REPOSITORY / "manifests" / "crds"


def test_the_checked_in_crds_match_the_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["api", "crds", "--check", "--out-dir", str(CHECKED_IN)]) == 0, capsys.readouterr().err


def test_check_reports_drift_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["api", "crds", "--out-dir", str(tmp_path)]) == 0
    (tmp_path / "trainingjobs.lyra.dev.yaml").write_text("edited by hand\n")
    assert main(["api", "crds", "--check", "--out-dir", str(tmp_path)]) == 1
    assert "trainingjobs.lyra.dev.yaml" in capsys.readouterr().err


def structural_problems(node: Any, where: str = "") -> list[str]:
    """An independent reading of the API server's structural-schema rules (the parts a generator can get wrong)."""
    problems: list[str] = []
    if not isinstance(node, dict):
        return [f"{where}: not an object"]
    for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "title", "nullable"):
        if forbidden in node:
            problems.append(f"{where}: {forbidden}")
    untyped = ("x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string")  # the only nodes allowed no type
    if "type" not in node and not any(node.get(key) for key in untyped):
        problems.append(f"{where}: no type")
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if bound in node and not isinstance(node[bound], bool):
            problems.append(f"{where}: {bound} must be a boolean")
    for key, child in node.get("properties", {}).items():
        problems += structural_problems(child, f"{where}.{key}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{where}.*")
    if "items" in node:
        problems += structural_problems(node["items"], f"{where}[]")
    return problems


@pytest.mark.parametrize("name", sorted(all_crds()))
def test_every_schema_is_structural(name: str) -> None:
    crd = all_crds()[name]
    version = crd["spec"]["versions"][0]
    assert structural_problems(version["schema"]["openAPIV3Schema"]) == []
    assert version["subresources"]["status"] == {}
    assert crd["spec"]["names"]["categories"] == ["lyra"]
    assert "isvc" not in crd["spec"]["names"]["shortNames"]


def spec(**changes: Any) -> dict[str, Any]:
    base = {
        "minWorkers": 2,
        "maxWorkers": 8,
        "gpusPerWorker": 1,
        "expectedDuration": 3600,
        "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}},
    }
    return base | changes


def test_a_training_job_round_trips_in_camel_case() -> None:
    parsed = TrainingJobSpec.model_validate(spec(gpuTypes=["Tesla-T4"], gpuMemoryGiB=12))
    assert parsed.gpu_memory_gib == 12
    document = wire(parsed)
    assert document["gpuMemoryGiB"] == 12
    assert document["preemption"] == {"gracePeriodSeconds": 60}
    assert TrainingJobSpec.model_validate(document) == parsed


BAD_TRAINING = [
    (spec(minWorkers=9), "minWorkers (9) must be <= maxWorkers (8)"),
    (spec(gpusPerWorker=0), "gpusPerWorker"),
    (spec(maxWorkers=10**9), "maxWorkers"),
    (spec(surprise=1), "surprise"),
]


@pytest.mark.parametrize(("document", "message"), BAD_TRAINING)
def test_bad_training_jobs_are_refused_with_the_field(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainingJobSpec.model_validate(document)


def test_inference_replicas_must_sit_within_their_range() -> None:
    base = {
        "replicas": 3,
        "gpusPerReplica": 1,
        "minReplicas": 1,
        "maxReplicas": 2,
        "template": {"spec": {"containers": [{"name": "server", "image": "server:1"}]}},
    }
    with pytest.raises(ValidationError, match="replicas \\(3\\) must be within"):
        InferenceServiceSpec.model_validate(base)
