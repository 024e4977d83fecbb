"""Cluster profiles: the default profile's shape, and bad profiles rejected with the field named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lyra.localcluster.fakenodes import node_manifests
from lyra.localcluster.profile import (
    ProfileError,
    load_default_profile,
    load_profile,
    parse_profile,
    parse_profile_text,
)


def group(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "train",
        "pool": "training",
        "count": 2,
        "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8, "memoryMiB": 81920},
    }
    base.update(overrides)
    return base


def profile(*groups: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"nodeGroups": list(groups) or [group()], **top}


def test_default_profile_has_four_a100_training_nodes_and_eight_t4_inference_nodes() -> None:
    default = load_default_profile()

    shapes = [
        (g.pool, g.count, g.gpu.product if g.gpu else None, g.gpu.count if g.gpu else 0) for g in default.node_groups
    ]
    assert shapes == [("training", 4, "NVIDIA-A100-SXM4-80GB", 8), ("inference", 8, "Tesla-T4", 8)]
    assert default.gpu_total() == 96
    assert default.node_names()[:2] == ["training-a100-0", "training-a100-1"]
    assert len(default.node_names()) == 12


def test_a_minimal_group_gets_documented_defaults() -> None:
    parsed = parse_profile(profile(group(gpu=None)), "test.yaml")

    only = parsed.node_groups[0]
    assert (parsed.name, only.gpu, only.cpu, only.memory, only.pods, dict(only.labels), only.taints) == (
        "default",
        None,
        "32",
        "256Gi",
        110,
        {},
        (),
    )


BAD_PROFILES = [
    ("not-a-mapping", ["a list"], "test.yaml: the profile: expected a mapping"),
    ("no-groups", {"name": "x"}, "nodeGroups: required field is missing"),
    ("empty-groups", {"nodeGroups": []}, "nodeGroups: expected a non-empty list"),
    ("unknown-top-key", profile(nodes=3), "test.yaml: nodes: unknown field"),
    ("typo-in-group", profile(group(gpus={"count": 8})), "nodeGroups[0].gpus: unknown field"),
    ("word-count", profile(group(count="four")), "nodeGroups[0].count: expected an integer >= 0, got 'four'"),
    ("bool-count", profile(group(count=True)), "nodeGroups[0].count: expected an integer >= 0, got True"),
    ("bad-pool", profile(group(pool="serving")), "nodeGroups[0].pool: expected one of training, inference"),
    ("zero-gpus", profile(group(gpu={"product": "Tesla-T4", "count": 0})), "nodeGroups[0].gpu.count"),
    ("gpu-without-product", profile(group(gpu={"count": 8})), "nodeGroups[0].gpu.product: required field"),
    ("bad-product", profile(group(gpu={"product": "Tesla T4", "count": 1})), "nodeGroups[0].gpu.product"),
    ("bad-memory", profile(group(memory="lots")), "nodeGroups[0].memory: expected a Kubernetes quantity"),
    ("upper-case-name", profile(group(name="Train")), "nodeGroups[0].name: expected a lower-case DNS label"),
    ("unquoted-label-number", profile(group(labels={"rack": 7})), "nodeGroups[0].labels.rack: 7 is not a valid"),
    ("reserved-label", profile(group(labels={"lyra.dev/pool": "x"})), "labels.lyra.dev/pool: set by the profile"),
    ("bad-taint-effect", profile(group(taints=[{"key": "a", "effect": "Never"}])), "taints[0].effect"),
    ("duplicate-group", profile(group(), group()), "nodeGroups[1].name: 'train' is already used by"),
    ("no-nodes", profile(group(count=0)), "the profile creates no node"),
    ("second-group", profile(group(), group(name="infer", pool="inference", pods=0)), "nodeGroups[1].pods"),
]


@pytest.mark.parametrize(("data", "message"), [case[1:] for case in BAD_PROFILES], ids=[c[0] for c in BAD_PROFILES])
def test_a_bad_profile_is_rejected_with_the_field_named(data: object, message: str) -> None:
    with pytest.raises(ProfileError) as error:
        parse_profile(data, "test.yaml")

    assert message in str(error.value)
    assert str(error.value).startswith("test.yaml: ")


def test_yaml_syntax_errors_and_missing_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"^broken\.yaml: not valid YAML"):
        parse_profile_text("nodeGroups: [", "broken.yaml")
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ProfileError, match=r"absent\.yaml: cannot read the profile"):
        load_profile(missing)


def test_a_profile_file_round_trips_into_node_objects(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(
        yaml.safe_dump(
            profile(
                group(
                    name="infer",
                    pool="inference",
                    count=1,
                    gpu={"product": "Tesla-T4", "count": 4, "memoryMiB": 15360},
                    cpu=48,
                    memory="192Gi",
                    labels={"topology.kubernetes.io/zone": "zone-a"},
                    taints=[{"key": "lyra.dev/dedicated", "value": "inference", "effect": "NoSchedule"}],
                )
            )
        )
    )

    [node] = node_manifests(load_profile(path))

    assert node["metadata"]["name"] == "infer-0"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    labels = node["metadata"]["labels"]
    assert {key: labels[key] for key in labels if key.startswith(("nvidia.com/", "lyra.dev/", "topology."))} == {
        "nvidia.com/gpu.product": "Tesla-T4",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.memory": "15360",
        "lyra.dev/pool": "inference",
        "topology.kubernetes.io/zone": "zone-a",
    }
    assert labels["kubernetes.io/hostname"] == "infer-0"
    assert labels["type"] == "kwok"
    expected_resources = {"cpu": "48", "memory": "192Gi", "pods": "110", "nvidia.com/gpu": "4"}
    assert node["status"]["capacity"] == expected_resources
    assert node["status"]["allocatable"] == expected_resources
    assert node["spec"]["taints"] == [{"key": "lyra.dev/dedicated", "value": "inference", "effect": "NoSchedule"}]


def test_a_node_without_gpus_advertises_none() -> None:
    [node] = node_manifests(parse_profile(profile(group(count=1, gpu=None)), "cpu.yaml"))

    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    assert not any(key.startswith("nvidia.com/") for key in node["metadata"]["labels"])
    assert node["spec"] == {}
