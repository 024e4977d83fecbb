"""Node health, judged on each node's reading: the rules, and what a running operator remembers for them.

Health is read here too (docs/reliability.md, "Node and pod health"): a node is unhealthy while its Ready condition
is not True, while it carries the node-lifecycle controller's ``unreachable`` or ``not-ready`` taint, or while its
allocatable GPUs are below its capacity (a device plugin restarting), and while its reading is malformed: no whole
number of GPUs above 0 (``0`` allocatable and capacity after a kubelet reset, ``8Gi``, ``1k``) or an empty GPU product
label. Such a node is held with its last good reading (:class:`HealthMemory`): unhealthy, so it takes no new work and
is not lent, and lost only past the grace like any other; one this operator never read well is held out of every plan
but known (:class:`MisreadNode`), so its workers are not taken for gone either. Kubernetes records since when for the
first two (the condition's transition time, the NoExecute taint's ``timeAdded``); what has no time of its own (a dip
in allocatable GPUs, a malformed reading) is dated by :class:`HealthMemory`, from when a running operator first saw
it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lyra.api import names
from lyra.api.objects import Condition, Taint
from lyra.operator.timestamps import parse_time
from lyra.operator.world import MisreadNode, NodeRecord, ObjectRef, PodRecord


class HealthMemory:
    """When a running operator first saw each node unhealthy, for what the API dates nowhere (a dip in allocatable
    GPUs, a health taint without ``timeAdded`` on a node that reports Ready, a malformed reading), and each node's
    last good reading (GPU type and GPUs), which a node whose reading turns malformed is held with. Lost on restart: a
    new operator starts the clock again, which only delays dropping the node, and knows no good reading of a node that
    reads badly when it starts (:class:`MisreadNode`)."""

    def __init__(self) -> None:
        self._first_seen: dict[str, float] = {}
        self._good: dict[str, tuple[str, int]] = {}

    def first_seen(self, node: str, now: float) -> float:
        return self._first_seen.setdefault(node, now)

    def read_well(self, node: str, gpu_type: str, gpus: int) -> None:
        if self._good.get(node) != (gpu_type, gpus):
            self._good[node] = (gpu_type, gpus)

    def last_good(self, node: str) -> tuple[str, int] | None:
        """The GPU type and GPUs ``node`` last read well with, or ``None``."""
        return self._good.get(node)

    def forget_all_but(self, unhealthy: set[str], present: set[str] | None = None) -> None:
        """Keep the first sightings of the ``unhealthy`` nodes only, and the good readings of the ``present`` ones."""
        self._first_seen = {name: since for name, since in self._first_seen.items() if name in unhealthy}
        if present is not None and not self._good.keys() <= present:
            self._good = {name: good for name, good in self._good.items() if name in present}


@dataclass(frozen=True, slots=True)
class NodeReading:
    """A node as its object alone reads: its record but for its health, and what its health is judged on (its Ready
    condition, its health taints, its allocatable and capacity GPUs), not the whole object."""

    record: NodeRecord
    ready: Condition | None
    tainted: tuple[Taint, ...]
    allocatable: int
    capacity: int
    #: Why the reading is malformed ("" when it is not): then ``record`` has 0 GPUs or no GPU type.
    misread: str = ""
    ref: ObjectRef | None = None


class OccupiedNodes:
    """The nodes where GPU pods run, worked out only if a pass asks (a node that never read well reads badly)."""

    def __init__(self, pods: list[PodRecord]) -> None:
        self._pods = pods
        self._nodes: set[str] | None = None

    def holds(self, node: str) -> bool:
        if self._nodes is None:
            self._nodes = {p.node for p in self._pods if p.holds_gpus}
        return node in self._nodes


def node_ref(reading: NodeReading) -> ObjectRef:
    return reading.ref if reading.ref is not None else ObjectRef("Node", "", reading.record.name)


def with_health(
    reading: NodeReading, now: float, memory: HealthMemory, occupied: OccupiedNodes
) -> tuple[NodeRecord | None, MisreadNode | None]:
    """The node's record with its health at ``now`` (``None``: it is in no plan) and, when its reading is malformed,
    how it is held. A malformed reading is held with the node's last good one; a node never read well is held out
    of every plan while GPU pods run on it (``occupied``: the nodes where some do), and is no node of Lyra's
    otherwise (a node whose device plugin or feature discovery has not reported yet)."""
    record = reading.record
    if not reading.misread:
        memory.read_well(record.name, record.gpu_type, record.gpus)
    else:
        good = memory.last_good(record.name)
        if good is None:
            if not occupied.holds(record.name):
                return None, None
            since = memory.first_seen(record.name, now)
            return None, MisreadNode(node_ref(reading), reading.misread, since, held=False)
        record = replace(record, gpu_type=good[0], gpus=good[1])
    unhealthy_since, health = _node_health(reading, now, memory)
    held = None
    if reading.misread:
        held = MisreadNode(node_ref(reading), reading.misread, memory.first_seen(record.name, now), held=True)
    if unhealthy_since is None:
        return record, held
    return replace(record, unhealthy_since=unhealthy_since, health=health), held


def _node_health(reading: NodeReading, now: float, memory: HealthMemory) -> tuple[float | None, str]:
    """Since when the node is unhealthy and why (``None, ""`` while healthy): the earliest of its problems, each dated
    by the API where it can be (the Ready condition's transition, a taint's ``timeAdded``), else by ``memory``."""
    problems: list[tuple[float, str]] = []
    ready, tainted, name = reading.ready, reading.tainted, reading.record.name
    not_ready_since: float | None = None
    if ready is not None and ready.status != names.CONDITION_TRUE:
        not_ready_since = parse_time(ready.last_transition_time)
        why = f"{names.NODE_READY_CONDITION}={ready.status or '?'}" + (f" ({ready.reason})" if ready.reason else "")
        problems.append((not_ready_since if not_ready_since is not None else 0.0, why))
    if tainted:
        added = [when for t in tainted if (when := parse_time(t.time_added)) is not None]
        since = min(added) if added else not_ready_since
        since = since if since is not None else memory.first_seen(name, now)
        problems.append((since, f"tainted {', '.join(sorted({t.key for t in tainted}))}"))
    if reading.misread:
        problems.append((memory.first_seen(name, now), reading.misread))
    if reading.allocatable < reading.capacity:
        problems.append(
            (
                memory.first_seen(name, now),
                f"{reading.allocatable} of {reading.capacity} {names.GPU_RESOURCE} allocatable",
            )
        )
    if not problems:
        return None, ""
    return min(since for since, _ in problems), "; ".join(why for _, why in problems)
