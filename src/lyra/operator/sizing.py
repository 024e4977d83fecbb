"""Inference sizing: replicas from a service's spec or load, and the whole servers its replicas need.

A service runs on one GPU type: its ``gpuType``, or, when it names none, the inference pool's main type (the type of
most inference servers, then by name). Servers needed per GPU type come from packing every service's replicas of
that type onto servers of that type (first-fit decreasing on GPUs per replica; a replica's GPUs sit on one server),
so several small services share servers the way the scheduler will pack them. The packing is computed per distinct
replica size, not per replica: 40,000 replicas cost what a handful do.

An admin bounds inference demand per namespace (:class:`InferenceGpuCaps`, ``lyra operator --inference-gpu-cap``):
the GPUs a namespace's InferenceServices may claim together. Services take their replicas in name order within
their namespace until the cap is spent; a service cut short runs fewer replicas and says so (``Capped``), so one
namespace cannot make Lyra reclaim every loaned server (docs/security.md).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lyra.api.resources import InferenceServiceSpec
from lyra.core.model import MAX_GPUS_PER_SERVER, MAX_WORKERS, Pool
from lyra.operator.world import NodeRecord
from lyra.settings import DEFAULT_INFERENCE_GPU_CAP

__all__ = ["DEFAULT_INFERENCE_GPU_CAP", "EVERY_OTHER_NAMESPACE", "InferenceGpuCaps", "namespace_problem"]

#: The namespace entry of a cap that applies to every namespace not named.
EVERY_OTHER_NAMESPACE = "*"
#: The largest cap: every replica a service may have, at the largest size.
MAX_CAP_GPUS = MAX_WORKERS * MAX_GPUS_PER_SERVER
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def namespace_problem(namespace: str) -> str | None:
    """Why ``namespace`` cannot name a namespace in a per-namespace setting (``*``: every other one), or ``None``."""
    if namespace == EVERY_OTHER_NAMESPACE or _NAMESPACE.fullmatch(namespace):
        return None
    return f"{namespace!r} is not a namespace name (nor {EVERY_OTHER_NAMESPACE} for all others)"


@dataclass(frozen=True, slots=True)
class InferenceGpuCaps:
    """The GPUs each namespace's InferenceServices may claim together, as an admin set them: ``(namespace, GPUs)``
    pairs, sorted, the namespace ``*`` standing for every namespace not named. No entry for a namespace: no cap."""

    entries: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        names = [namespace for namespace, _ in self.entries]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"a namespace is capped twice: {', '.join(twice)}")
        for namespace, gpus in self.entries:
            problem = namespace_problem(namespace)
            if problem is not None:
                raise ValueError(problem)
            if not 0 <= gpus <= MAX_CAP_GPUS:
                raise ValueError(f"the cap of {namespace} must be 0 to {MAX_CAP_GPUS} GPUs, not {gpus}")
        object.__setattr__(self, "entries", tuple(sorted(self.entries)))

    @classmethod
    def parse(cls, settings: Iterable[str], *, default: int | None = None) -> InferenceGpuCaps:
        """From ``NAMESPACE=GPUS`` settings (``*=GPUS`` for every namespace not named), with ``default`` for ``*``
        when no setting names it; ValueError says what is wrong with which."""
        entries = []
        for setting in settings:
            namespace, equals, gpus = setting.partition("=")
            if not equals or not gpus.strip().isdigit():
                raise ValueError(f"{setting!r} is not NAMESPACE=GPUS (a whole number of GPUs)")
            entries.append((namespace.strip(), int(gpus)))
        if default is not None and EVERY_OTHER_NAMESPACE not in {n for n, _ in entries}:
            entries.append((EVERY_OTHER_NAMESPACE, default))
        return cls(tuple(entries))

    def cap_of(self, namespace: str) -> int | None:
        """The namespace's cap in GPUs, ``None`` when it has none."""
        named = dict(self.entries)
        return named.get(namespace, named.get(EVERY_OTHER_NAMESPACE))


def desired_replicas(spec: InferenceServiceSpec) -> int:
    """``spec.replicas``, or with built-in sizing ``ceil(requestsPerSecond / perReplica)`` within the bounds."""
    if spec.sizing is None:
        return spec.replicas
    ratio = spec.sizing.requests_per_second / spec.sizing.requests_per_second_per_replica
    if math.isnan(ratio):
        raise ValueError(f"spec.sizing: {spec.sizing.requests_per_second} requests per second is not a load")
    if ratio >= spec.max_replicas:  # an infinite ratio included: the quotient of extremes never reaches math.ceil
        return spec.max_replicas
    wanted = math.ceil(ratio - 1e-9)
    return min(max(wanted, spec.min_replicas, 0), spec.max_replicas)


def main_inference_type(nodes: Iterable[NodeRecord]) -> str | None:
    counts = Counter(n.gpu_type for n in nodes if n.pool is Pool.INFERENCE)
    if not counts:
        return None
    return min(counts, key=lambda t: (-counts[t], t))


def server_sizes(nodes: Iterable[NodeRecord]) -> dict[str, int]:
    """GPUs per server of each GPU type in the inference pool (the smallest, to be safe); a type the pool does not
    have is absent (a size of 0). One scan for every service of a pass."""
    sizes: dict[str, int] = {}
    for node in nodes:
        if node.pool is Pool.INFERENCE:
            known = sizes.get(node.gpu_type)
            sizes[node.gpu_type] = node.gpus if known is None else min(known, node.gpus)
    return sizes


def servers_for(replicas: Mapping[int, int], server_gpus: int) -> int:
    """Servers of ``server_gpus`` GPUs that hold ``replicas`` (how many replicas of each size in GPUs), packed
    first-fit decreasing, in O(d^2) for d distinct sizes rather than O(replicas x servers).

    First-fit decreasing places the replicas of one size, in turn, on the first server (in opening order) with room,
    so a server with ``room`` GPUs free takes ``room // size`` of them before the next is tried, and servers opened
    together for one size stay alike. The servers are kept as runs (free GPUs, how many servers) in opening order:
    a size splits at most one run and opens at most two, so there are at most 3d runs.
    """
    if server_gpus <= 0:
        return 0
    runs: list[tuple[int, int]] = []  # (free GPUs per server, servers), in the order the servers were opened
    for size in sorted((s for s, n in replicas.items() if n > 0), reverse=True):
        if size > server_gpus:
            raise ValueError(f"a replica of {size} GPUs does not fit on a server of {server_gpus}")
        if size <= 0:
            raise ValueError(f"a replica needs at least one GPU, not {size}")
        left = replicas[size]
        placed: list[tuple[int, int]] = []
        for room, servers in runs:
            each = room // size
            if left == 0 or each == 0:
                placed.append((room, servers))
                continue
            filled = min(servers, left // each)
            left -= filled * each
            placed.append((room - each * size, filled))
            rest = servers - filled
            if rest and left:  # fewer than ``each`` replicas are left: one server takes them
                placed.append((room - left * size, 1))
                left = 0
                rest -= 1
            placed.append((room, rest))
        each = server_gpus // size
        placed.append((server_gpus - each * size, left // each))
        placed.append((server_gpus - (left % each) * size, 1 if left % each else 0))
        runs = [(room, servers) for room, servers in placed if servers > 0]
    return sum(servers for _, servers in runs)


def servers_needed(demands: Mapping[str, Mapping[int, int]], server_gpus: Mapping[str, int]) -> dict[str, int]:
    """Servers needed per GPU type, from each type's replicas (how many of each size) and its servers' GPUs
    (:func:`server_sizes`)."""
    return {t: servers_for(sizes, server_gpus.get(t, 0)) for t, sizes in sorted(demands.items())}
