"""GPU types: how fast each trains and how much memory it has, as the policies see them.

A server names its GPU type the way Kubernetes does (the ``nvidia.com/gpu.product`` label, e.g.
``Tesla-T4`` or ``NVIDIA-A100-SXM4-80GB``). The cluster may describe each type explicitly (a :class:`GpuCatalog`
entry: the snapshot document's ``gpuCatalog``, the operator's configuration, a simulator scenario); a type it
does not describe gets the defaults of its family, recognised from the product name:

=================  =====  ===============  =========================================================
family (token)     speed  memory (GiB)     note
=================  =====  ===============  =========================================================
H100, H200, A100   1.0    80 / 141 / 40    reference types (a ``-80GB`` suffix in the name wins)
V100               1.0    16               reference type; ``-32GB`` in the name gives 32
A10, A10G          0.6    24
L4                 0.5    24
P100               0.5    16
T4                 0.4    16               inference GPU; trains at roughly 0.3-0.5 of a V100
K80                0.25   12
anything else      1.0    unknown          unknown memory excludes no job: describe the type instead
=================  =====  ===============  =========================================================

A node may also report its GPUs' memory (GPU feature discovery's ``nvidia.com/gpu.memory`` label, in MiB):
:meth:`GpuCatalog.with_reported_memory` uses it for a type whose catalogue entry gives no memory. The precedence,
per type, is the catalogue's entry, then the memory nodes report, then the family defaults.

*Speed* is training throughput per GPU relative to a reference GPU (a V100 or an A100, speed 1.0): a job's
``remaining_work`` is in worker-seconds on a reference GPU. These defaults are deliberately round; a cluster
that has measured its own ratios, or a job that has measured its own throughput per type (Gavel's throughput
matrix), overrides them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.core.errors import InvalidClusterError


class InvalidGpuTypeError(InvalidClusterError):
    """A GPU type description is invalid. The message names the type and the field."""


@dataclass(frozen=True, slots=True)
class GpuType:
    """One GPU type: its name as servers report it, its training speed and its memory (``None``: unknown)."""

    name: str
    speed: float = 1.0
    memory_gib: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidGpuTypeError(f"a GPU type needs a non-empty name, got {self.name!r}")
        if not (
            isinstance(self.speed, int | float)
            and not isinstance(self.speed, bool)
            and math.isfinite(self.speed)
            and 0 < self.speed <= 1000
        ):
            raise InvalidGpuTypeError(f"GPU type {self.name}: speed must be in (0, 1000], got {self.speed!r}")
        if self.memory_gib is not None and not (
            isinstance(self.memory_gib, int | float)
            and not isinstance(self.memory_gib, bool)
            and math.isfinite(self.memory_gib)
            and 0 < self.memory_gib <= 1e6
        ):
            raise InvalidGpuTypeError(
                f"GPU type {self.name}: memory_gib must be in (0, 1e6] GiB, got {self.memory_gib!r}"
            )


@dataclass(frozen=True, slots=True)
class _Family:
    token: str
    speed: float
    memory_gib: float | None


#: Families recognised in product names: a name belongs to the first family whose token is one of the name's
#: alphanumeric tokens (``NVIDIA-A100-SXM4-80GB`` has the tokens NVIDIA, A100, SXM4 and 80GB).
FAMILIES: tuple[_Family, ...] = (
    _Family("H200", 1.0, 141.0),
    _Family("H100", 1.0, 80.0),
    _Family("A100", 1.0, 40.0),
    _Family("V100", 1.0, 16.0),
    _Family("A10G", 0.6, 24.0),
    _Family("A10", 0.6, 24.0),
    _Family("L4", 0.5, 24.0),
    _Family("P100", 0.5, 16.0),
    _Family("T4", 0.4, 16.0),
    _Family("K80", 0.25, 12.0),
)

_TOKEN = re.compile(r"[A-Z0-9]+")
_MEMORY = re.compile(r"^(\d{1,4})GB$")


def default_gpu_type(name: str) -> GpuType:
    """The defaults of ``name``'s family (table above); speed 1.0 and unknown memory for an unknown family."""
    tokens = _TOKEN.findall(name.upper())
    memory: float | None = None
    for token in tokens:
        sized = _MEMORY.match(token)
        if sized:
            memory = float(sized.group(1))
    for family in FAMILIES:
        if family.token in tokens:
            return GpuType(name, family.speed, memory if memory is not None else family.memory_gib)
    return GpuType(name, 1.0, memory)


#: A reported memory within this fraction of the catalogue's agrees with it: GPU feature discovery reports the usable
#: memory, a little below the nominal (15360 MiB for a 16 GB T4).
MEMORY_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class MemoryDisagreement:
    """Nodes report ``reported_gib`` of memory for a type the catalogue gives ``catalog_gib``: the catalogue wins."""

    gpu_type: str
    catalog_gib: float
    reported_gib: float


@dataclass(frozen=True, slots=True)
class GpuCatalog:
    """The GPU types a cluster describes explicitly; any other type gets its family's defaults."""

    types: Mapping[str, GpuType] = field(default_factory=lambda: MappingProxyType({}))
    #: Family defaults resolved so far (a cache: resolving parses the name).
    _defaults: dict[str, GpuType] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        checked: dict[str, GpuType] = {}
        for name, gpu in sorted(dict(self.types).items()):
            if not isinstance(gpu, GpuType) or gpu.name != name:
                raise InvalidGpuTypeError(f"GPU catalogue entry {name!r} must be a GpuType named {name!r}")
            checked[name] = gpu
        object.__setattr__(self, "types", MappingProxyType(checked))

    @classmethod
    def of(cls, *gpus: GpuType) -> GpuCatalog:
        names = [g.name for g in gpus]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidGpuTypeError(f"GPU catalogue describes {', '.join(twice)} more than once")
        return cls(MappingProxyType({g.name: g for g in gpus}))

    def with_reported_memory(self, reported: Mapping[str, float]) -> tuple[GpuCatalog, tuple[MemoryDisagreement, ...]]:
        """This catalogue with the memory nodes report (GiB per type, the smallest of the type's nodes) for each type
        whose entry gives none (the speed stays the entry's or the family's), and where an entry's memory disagrees
        with a report by more than :data:`MEMORY_TOLERANCE`: the catalogue wins, the disagreement is returned."""
        types = dict(self.types)
        disagreements: list[MemoryDisagreement] = []
        for name, gib in sorted(reported.items()):
            entry = self.types.get(name)
            if entry is not None and entry.memory_gib is not None:
                if abs(gib - entry.memory_gib) > MEMORY_TOLERANCE * entry.memory_gib:
                    disagreements.append(MemoryDisagreement(name, entry.memory_gib, gib))
                continue
            speed = entry.speed if entry is not None else self[name].speed
            types[name] = GpuType(name, speed, gib)
        return GpuCatalog(MappingProxyType(types)), tuple(disagreements)

    def __getitem__(self, name: str) -> GpuType:
        known = self.types.get(name)
        if known is not None:
            return known
        resolved = self._defaults.get(name)
        if resolved is None:
            resolved = self._defaults[name] = default_gpu_type(name)
        return resolved
