"""Cluster profiles: which fake GPU nodes a local control plane gets.

A profile is a small YAML file (the default ships in ``profiles/default.yaml``) parsed here into frozen value
objects. Parsing is strict: an unknown key or a wrong type is an error that names the field, so a typo such as
``gpus:`` fails loudly instead of silently giving nodes without GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lyra.api import names
from lyra.api.object_names import MAX_LABEL, is_dns_label, is_dns_subdomain
from lyra.text_files import TextFileError, read_text_file
from lyra.yaml_files import YamlError, load_yaml

POOLS = names.POOLS
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Labels the profile sets itself; a profile may not override them through `labels`.
RESERVED_LABELS = frozenset(
    {names.POOL_LABEL, names.GPU_PRODUCT_LABEL, names.GPU_COUNT_LABEL, names.GPU_MEMORY_LABEL, "kubernetes.io/hostname"}
)

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?$")


class ProfileError(ValueError):
    """A cluster profile is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class GpuSpec:
    """The GPUs of one node, as GPU feature discovery would label them."""

    product: str
    count: int
    memory_mib: int


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical nodes named ``<name>-0`` .. ``<name>-<count-1>``."""

    name: str
    pool: str
    count: int
    gpu: GpuSpec | None
    cpu: str
    memory: str
    pods: int
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]

    def node_names(self) -> list[str]:
        return [f"{self.name}-{index}" for index in range(self.count)]


@dataclass(frozen=True)
class ClusterProfile:
    name: str
    node_groups: tuple[NodeGroup, ...]
    #: Shapes of the real nodes ``lyra cluster up --real-nodes N`` may start (kubelets with containers; their cpu
    #: and memory are the machine's, so only pool, GPUs, pods, labels and taints apply). N takes nodes from the
    #: groups in turn: the first node of each group, then the second, and so on.
    real_node_groups: tuple[NodeGroup, ...] = ()

    def real_node_plan(self, count: int) -> list[tuple[str, NodeGroup]]:
        """The first ``count`` real nodes, (name, group), taking the groups in turn; ProfileError when the profile
        offers fewer."""
        available = sum(group.count for group in self.real_node_groups)
        if count > available:
            raise ProfileError(
                f"profile {self.name!r} offers {available} real nodes (realNodeGroups), {count} asked for"
            )
        plan: list[tuple[str, NodeGroup]] = []
        index = 0
        while len(plan) < count:
            for group in self.real_node_groups:
                if index < group.count and len(plan) < count:
                    plan.append((f"{group.name}-{index}", group))
            index += 1
        return plan

    def node_names(self) -> list[str]:
        return [node for group in self.node_groups for node in group.node_names()]

    def gpu_total(self) -> int:
        return sum(group.count * group.gpu.count for group in self.node_groups if group.gpu is not None)


def load_profile(path: Path) -> ClusterProfile:
    """Read and validate a profile file."""
    try:
        text = read_text_file(path, "profile")
    except TextFileError as error:
        raise ProfileError(str(error)) from None
    return parse_profile_text(text, source=str(path))


def load_default_profile() -> ClusterProfile:
    """The profile shipped with Lyra: 4 training nodes with 8 A100 each, 8 inference nodes with 8 T4 each."""
    text = resources.files("lyra.localcluster").joinpath("profiles", "default.yaml").read_text(encoding="utf-8")
    return parse_profile_text(text, source="default profile")


def parse_profile_text(text: str, source: str) -> ClusterProfile:
    try:
        data = load_yaml(text)
    except YamlError as error:
        raise ProfileError(f"{source}: {error}") from None
    return parse_profile(data, source)


def parse_profile(data: object, source: str) -> ClusterProfile:
    """Validate already-loaded YAML data; ``source`` names the file in error messages."""
    fields = _mapping(data, source, "the profile", {"name", "nodeGroups", "realNodeGroups"}, required={"nodeGroups"})
    name = _dns_label(fields.get("name", "default"), source, "name")
    raw_groups = fields["nodeGroups"]
    if not isinstance(raw_groups, list) or not raw_groups:
        raise ProfileError(f"{source}: nodeGroups: expected a non-empty list of node groups")
    groups = tuple(_node_group(raw, source, f"nodeGroups[{index}]") for index, raw in enumerate(raw_groups))
    seen: dict[str, str] = {}
    for index, group in enumerate(groups):
        where = f"nodeGroups[{index}].name"
        if group.name in seen:
            raise ProfileError(f"{source}: {where}: {group.name!r} is already used by {seen[group.name]}")
        seen[group.name] = where
    # Node names are "<group>-<index>" and an index has no '-', so distinct group names give distinct nodes.
    if not any(group.count for group in groups):
        raise ProfileError(f"{source}: nodeGroups: the profile creates no node (every count is 0)")
    raw_real = fields.get("realNodeGroups", [])
    if not isinstance(raw_real, list):
        raise ProfileError(f"{source}: realNodeGroups: expected a list of node groups")
    real = tuple(_node_group(raw, source, f"realNodeGroups[{index}]") for index, raw in enumerate(raw_real))
    for index, group in enumerate(real):
        where = f"realNodeGroups[{index}].name"
        if group.name in seen:
            raise ProfileError(f"{source}: {where}: {group.name!r} is already used by {seen[group.name]}")
        seen[group.name] = where
    return ClusterProfile(name=name, node_groups=groups, real_node_groups=real)


def _node_group(raw: object, source: str, where: str) -> NodeGroup:
    known = {"name", "pool", "count", "gpu", "cpu", "memory", "pods", "labels", "taints"}
    fields = _mapping(raw, source, where, known, required={"name", "pool", "count"})
    name = _dns_label(fields["name"], source, f"{where}.name")
    count = _integer(fields["count"], source, f"{where}.count", minimum=0)
    longest = f"{name}-{max(count - 1, 0)}"
    if len(longest) > MAX_LABEL:
        raise ProfileError(f"{source}: {where}.name: node name {longest!r} would exceed {MAX_LABEL} characters")
    pool = fields["pool"]
    if pool not in POOLS:
        raise ProfileError(f"{source}: {where}.pool: expected one of {', '.join(POOLS)}, got {pool!r}")
    gpu = None if fields.get("gpu") is None else _gpu(fields["gpu"], source, f"{where}.gpu")
    labels = _labels(fields.get("labels", {}), source, f"{where}.labels")
    raw_taints = fields.get("taints", [])
    if not isinstance(raw_taints, list):
        raise ProfileError(f"{source}: {where}.taints: expected a list")
    taints = tuple(_taint(raw, source, f"{where}.taints[{index}]") for index, raw in enumerate(raw_taints))
    return NodeGroup(
        name=name,
        pool=str(pool),
        count=count,
        gpu=gpu,
        cpu=_quantity(fields.get("cpu", "32"), source, f"{where}.cpu"),
        memory=_quantity(fields.get("memory", "256Gi"), source, f"{where}.memory"),
        pods=_integer(fields.get("pods", 110), source, f"{where}.pods", minimum=1),
        labels=labels,
        taints=taints,
    )


def _gpu(raw: object, source: str, where: str) -> GpuSpec:
    fields = _mapping(raw, source, where, {"product", "count", "memoryMiB"}, required={"product", "count"})
    product = fields["product"]
    if not isinstance(product, str) or not _valid_label_value(product) or not product:
        raise ProfileError(f"{source}: {where}.product: expected a label value such as Tesla-T4, got {product!r}")
    return GpuSpec(
        product=product,
        count=_integer(fields["count"], source, f"{where}.count", minimum=1),
        memory_mib=_integer(fields.get("memoryMiB", 0), source, f"{where}.memoryMiB", minimum=0),
    )


def _taint(raw: object, source: str, where: str) -> Taint:
    fields = _mapping(raw, source, where, {"key", "value", "effect"}, required={"key", "effect"})
    key = fields["key"]
    if not isinstance(key, str) or not _valid_label_key(key):
        raise ProfileError(f"{source}: {where}.key: {key!r} is not a valid taint key")
    value = fields.get("value", "")
    if not isinstance(value, str) or not _valid_label_value(value):
        raise ProfileError(f"{source}: {where}.value: {value!r} is not a valid taint value")
    effect = fields["effect"]
    if effect not in TAINT_EFFECTS:
        raise ProfileError(f"{source}: {where}.effect: expected one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
    return Taint(key=key, value=value, effect=str(effect))


def _labels(raw: object, source: str, where: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{source}: {where}: expected a mapping of label keys to string values")
    labels: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _valid_label_key(key):
            raise ProfileError(f"{source}: {where}: {key!r} is not a valid label key")
        if key in RESERVED_LABELS:
            raise ProfileError(f"{source}: {where}.{key}: set by the profile itself, it cannot be overridden")
        if not isinstance(value, str) or not _valid_label_value(value):
            raise ProfileError(f"{source}: {where}.{key}: {value!r} is not a valid label value (quote numbers)")
        labels[key] = value
    return labels


def _mapping(raw: object, source: str, where: str, known: set[str], required: set[str]) -> dict[str, object]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{source}: {where}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        prefix = "" if where == "the profile" else f"{where}."
        raise ProfileError(f"{source}: {prefix}{unknown[0]}: unknown field (known fields: {', '.join(sorted(known))})")
    missing = sorted(required - set(raw))
    if missing:
        prefix = "" if where == "the profile" else f"{where}."
        raise ProfileError(f"{source}: {prefix}{missing[0]}: required field is missing")
    return {str(key): value for key, value in raw.items()}


def _integer(raw: object, source: str, where: str, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise ProfileError(f"{source}: {where}: expected an integer >= {minimum}, got {raw!r}")
    return raw


def _quantity(raw: object, source: str, where: str) -> str:
    text = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
    if not isinstance(text, str) or not _QUANTITY.match(text):
        raise ProfileError(f"{source}: {where}: expected a Kubernetes quantity such as 64 or 512Gi, got {raw!r}")
    return text


def _dns_label(raw: object, source: str, where: str) -> str:
    if not isinstance(raw, str) or not is_dns_label(raw):
        raise ProfileError(f"{source}: {where}: expected a lower-case DNS label (a-z, 0-9, '-'), got {raw!r}")
    return raw


def _valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= MAX_LABEL and bool(_LABEL_NAME.match(name))


def _valid_label_value(value: str) -> bool:
    return value == "" or (len(value) <= MAX_LABEL and bool(_LABEL_NAME.match(value)))
