"""GPU types: validation, the family defaults recognised from Kubernetes product names, and the catalogue."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from lyra.core import GpuCatalog, GpuType, InvalidClusterError, default_gpu_type
from lyra.core.gpus import InvalidGpuTypeError, MemoryDisagreement

# (product name as nvidia.com/gpu.product reports it, expected speed, expected memory in GiB or None)
FAMILY_DEFAULTS = [
    ("Tesla-T4", 0.4, 16.0),
    ("tesla-t4", 0.4, 16.0),
    ("NVIDIA-A100-SXM4-80GB", 1.0, 80.0),
    ("NVIDIA-A100-PCIE-40GB", 1.0, 40.0),
    ("NVIDIA-A100", 1.0, 40.0),
    ("Tesla-V100-SXM2-32GB", 1.0, 32.0),
    ("Tesla-V100-SXM2-16GB", 1.0, 16.0),
    ("Tesla-V100", 1.0, 16.0),
    ("NVIDIA-H100-80GB-HBM3", 1.0, 80.0),
    ("NVIDIA-H200", 1.0, 141.0),
    # A10G is its own family, not an A100 (nor an A10 by prefix matching of "A100").
    ("NVIDIA-A10G", 0.6, 24.0),
    ("NVIDIA-A10", 0.6, 24.0),
    ("NVIDIA-L4", 0.5, 24.0),
    ("Tesla-P100-PCIE-16GB", 0.5, 16.0),
    ("Tesla-K80", 0.25, 12.0),
    # Unknown family: reference speed, unknown memory (excludes no job) unless the name states a size.
    ("NVIDIA-GeForce-RTX-4090", 1.0, None),
    ("Mystery", 1.0, None),
    ("Mystery-48GB", 1.0, 48.0),
]


@pytest.mark.parametrize(("name", "speed", "memory"), FAMILY_DEFAULTS, ids=[c[0] for c in FAMILY_DEFAULTS])
def test_family_defaults(name: str, speed: float, memory: float | None) -> None:
    assert default_gpu_type(name) == GpuType(name, speed, memory)
    assert GpuCatalog()[name] == GpuType(name, speed, memory), "an empty catalogue falls back to the family"


# (id, keyword arguments, pattern of the message: the type, then the field)
BAD_GPU_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("empty-name", {"name": ""}, r"a GPU type needs a non-empty name, got ''"),
    ("name-not-str", {"name": 4}, r"a GPU type needs a non-empty name, got 4"),
    ("zero-speed", {"name": "X", "speed": 0}, r"GPU type X: speed must be in \(0, 1000\], got 0"),
    ("negative-speed", {"name": "X", "speed": -1.0}, r"GPU type X: speed must be in \(0, 1000\]"),
    ("huge-speed", {"name": "X", "speed": 1001}, r"GPU type X: speed must be in \(0, 1000\]"),
    ("nan-speed", {"name": "X", "speed": float("nan")}, r"GPU type X: speed must be in \(0, 1000\]"),
    ("str-speed", {"name": "X", "speed": "1"}, r"GPU type X: speed must be in \(0, 1000\]"),
    ("zero-memory", {"name": "X", "memory_gib": 0}, r"GPU type X: memory_gib must be in \(0, 1e6\] GiB, got 0"),
    ("inf-memory", {"name": "X", "memory_gib": float("inf")}, r"GPU type X: memory_gib must be in \(0, 1e6\] GiB"),
]


@pytest.mark.parametrize(("kwargs", "message"), [c[1:] for c in BAD_GPU_TYPES], ids=[c[0] for c in BAD_GPU_TYPES])
def test_gpu_type_refuses_bad_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidGpuTypeError, match=message) as raised:
        GpuType(**kwargs)
    assert isinstance(raised.value, InvalidClusterError), "adapters catch one error type for bad input"


def test_gpu_type_defaults_to_reference_speed_and_unknown_memory() -> None:
    assert GpuType("X") == GpuType("X", 1.0, None)


def test_catalogue_entries_win_over_family_defaults() -> None:
    measured = GpuType("Tesla-T4", 0.3, 15.0)
    catalog = GpuCatalog.of(measured, GpuType("V100", 1.0, 32.0))
    assert catalog["Tesla-T4"] is measured
    assert catalog["V100"] == GpuType("V100", 1.0, 32.0)
    assert catalog["NVIDIA-L4"] == GpuType("NVIDIA-L4", 0.5, 24.0), "undescribed types get their family's"
    assert catalog["NVIDIA-L4"] is catalog["NVIDIA-L4"], "resolved defaults are cached"
    assert list(catalog.types) == ["Tesla-T4", "V100"], "entries kept sorted by name"


def test_catalogue_is_read_only_and_compares_by_entries() -> None:
    catalog = GpuCatalog({"B": GpuType("B"), "A": GpuType("A", 0.5)})
    with pytest.raises(TypeError):
        catalog.types["C"] = GpuType("C")  # type: ignore[index]
    resolved = GpuCatalog.of(GpuType("A", 0.5), GpuType("B"))
    _ = resolved["Tesla-T4"]  # the cache of defaults does not take part in equality
    assert catalog == resolved
    assert catalog != GpuCatalog.of(GpuType("A", 0.6), GpuType("B"))


@pytest.mark.parametrize(
    "types",
    [
        {"T4": GpuType("Tesla-T4")},
        {"T4": 0.5},
        MappingProxyType({"T4": GpuType("T4"), "V100": "V100"}),
    ],
    ids=["name-mismatch", "not-a-gpu-type", "one-bad-entry"],
)
def test_catalogue_refuses_bad_entries(types: Any) -> None:
    with pytest.raises(InvalidGpuTypeError, match=r"GPU catalogue entry '(T4|V100)' must be a GpuType named"):
        GpuCatalog(types)


def test_reported_memory_fills_what_the_catalogue_does_not_say_and_never_overrides_it() -> None:
    catalog = GpuCatalog.of(GpuType("Tesla-T4", 0.35, 16.0), GpuType("NVIDIA-A100-SXM4-80GB", 0.9))
    reported = {"Tesla-T4": 15.0, "NVIDIA-A100-SXM4-80GB": 40.0, "NVIDIA-L4": 22.0}
    merged, disagreements = catalog.with_reported_memory(reported)
    assert merged["Tesla-T4"] == GpuType("Tesla-T4", 0.35, 16.0)  # the entry's memory wins; 15 is within 10%
    assert merged["NVIDIA-A100-SXM4-80GB"] == GpuType("NVIDIA-A100-SXM4-80GB", 0.9, 40.0)  # entry's speed, label's GiB
    assert merged["NVIDIA-L4"] == GpuType("NVIDIA-L4", 0.5, 22.0)  # family speed, label's GiB over the family's 24
    assert merged["Tesla-V100"] == default_gpu_type("Tesla-V100")  # nothing reported: family defaults
    assert disagreements == ()
    assert catalog.with_reported_memory({}) == (catalog, ())


def test_a_report_far_from_the_catalogue_is_a_disagreement_the_catalogue_wins() -> None:
    catalog = GpuCatalog.of(GpuType("Tesla-T4", 0.4, 16.0))
    merged, disagreements = catalog.with_reported_memory({"Tesla-T4": 8.0})
    assert merged["Tesla-T4"].memory_gib == 16.0
    assert disagreements == (MemoryDisagreement("Tesla-T4", 16.0, 8.0),)
