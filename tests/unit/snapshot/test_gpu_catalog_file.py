"""The GPU catalogue file (``lyra operator --gpu-catalog``, the chart's ``operator.gpuCatalog``): the snapshot's
``gpuCatalog`` on its own, in YAML or JSON; every refusal names the entry and the field."""

from __future__ import annotations

import json

import pytest

from lyra.core import GpuType
from lyra.snapshot import MAX_GPU_CATALOG_BYTES, SnapshotError, parse_gpu_catalog, parse_snapshot


def test_a_yaml_catalogue_describes_its_types_and_leaves_the_others_to_their_family() -> None:
    catalog = parse_gpu_catalog("gpuCatalog:\n  Tesla-T4: {speed: 0.35, memoryGiB: 15}\n  Mystery: {speed: 2}\n")
    assert catalog.types == {"Tesla-T4": GpuType("Tesla-T4", 0.35, 15.0), "Mystery": GpuType("Mystery", 2.0, None)}
    assert catalog["NVIDIA-A100-SXM4-80GB"] == GpuType("NVIDIA-A100-SXM4-80GB", 1.0, 80.0)


def test_the_file_and_a_snapshots_gpu_catalog_are_one_format() -> None:
    entries = {"Tesla-T4": {"speed": 0.4, "memoryGiB": 16}, "NVIDIA-L4": {"speed": 0.55}}
    from_file = parse_gpu_catalog(json.dumps({"gpuCatalog": entries}).encode())
    snapshot = {"servers": [{"name": "t", "pool": "training", "gpuType": "Tesla-T4", "gpus": 1}], "gpuCatalog": entries}
    assert parse_snapshot(json.dumps(snapshot)).gpus == from_file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpuCatalog:\n  Tesla-T4: {speed: 0}\n", "gpuCatalog.Tesla-T4.speed: Input should be greater than 0, got 0"),
        ("gpuCatalog:\n  Tesla-T4: {speed: 1, memoryGiB: -4}\n", "gpuCatalog.Tesla-T4.memoryGiB: Input should be"),
        ("gpuCatalog:\n  Tesla-T4: {speed: '0.4'}\n", "gpuCatalog.Tesla-T4.speed: Input should be a valid number"),
        ("gpuCatalog:\n  Tesla-T4: {speed: .nan}\n", "gpuCatalog.Tesla-T4.speed: Input should be a finite number"),
        ("gpuCatalog:\n  Tesla-T4: {speed: 1, memory: 16}\n", "gpuCatalog.Tesla-T4.memory: Extra inputs"),
        ("gpuCatalog:\n  Tesla-T4: {memoryGiB: 16}\n", "gpuCatalog.Tesla-T4.speed: Field required"),
        (
            "gpuCatalog:\n  T4: {speed: 1}\n  T4: {speed: 2}\n",
            "not valid YAML: line 3, column 3: 'T4' is written twice; write each key once",
        ),
        ("Tesla-T4: {speed: 0.4}\n", "no gpuCatalog key: write the GPU types under it"),
        ("gpuCatalog: {}\nspeeds: {}\n", "speeds: Extra inputs are not permitted"),
        ("", "got an empty file"),
        ("- Tesla-T4\n", "must be a mapping with the key gpuCatalog, got a list"),
        ("gpuCatalog: [\n", "not valid YAML"),
        (b"gpuCatalog: {\xff: 1}", "not UTF-8"),
        ("x" * (MAX_GPU_CATALOG_BYTES + 1), "larger than the limit"),
    ],
)
def test_a_bad_catalogue_is_refused_naming_the_entry_and_field(text: str | bytes, message: str) -> None:
    with pytest.raises(SnapshotError) as refused:
        parse_gpu_catalog(text)
    assert message in str(refused.value)
