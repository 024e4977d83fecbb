"""Inference sizing: replicas from a service's spec or load, and the whole servers its replicas need.

A service runs on one GPU type: its ``gpuType``, or, when it names none, the inference pool's main type (the type of
most inference servers, then by name). Servers needed per GPU type come from packing every service's replicas of
that type onto servers of that type (first-fit decreasing on GPUs per replica; a replica's GPUs sit on one server),
so several small services share servers the way the scheduler will pack them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping

from lyra.api.resources import InferenceServiceSpec
from lyra.core.model import Pool
from lyra.operator.observe import NodeRecord


def desired_replicas(spec: InferenceServiceSpec) -> int:
    """``spec.replicas``, or with built-in sizing ``ceil(requestsPerSecond / perReplica)`` within the bounds."""
    if spec.sizing is None:
        return spec.replicas
    wanted = math.ceil(spec.sizing.requests_per_second / spec.sizing.requests_per_second_per_replica - 1e-9)
    return min(max(wanted, spec.min_replicas, 0), spec.max_replicas)


def main_inference_type(nodes: Iterable[NodeRecord]) -> str | None:
    counts = Counter(n.gpu_type for n in nodes if n.pool is Pool.INFERENCE)
    if not counts:
        return None
    return min(counts, key=lambda t: (-counts[t], t))


def server_size(nodes: Iterable[NodeRecord], gpu_type: str) -> int:
    """GPUs per server of ``gpu_type`` in the inference pool (the smallest, to be safe), 0 if it has none."""
    return min((n.gpus for n in nodes if n.pool is Pool.INFERENCE and n.gpu_type == gpu_type), default=0)


def servers_for(replica_gpus: Iterable[int], server_gpus: int) -> int:
    """Servers of ``server_gpus`` GPUs that hold replicas of the given sizes, first-fit decreasing."""
    if server_gpus <= 0:
        return 0
    free: list[int] = []
    for size in sorted(replica_gpus, reverse=True):
        if size > server_gpus:
            raise ValueError(f"a replica of {size} GPUs does not fit on a server of {server_gpus}")
        for slot, room in enumerate(free):
            if room >= size:
                free[slot] -= size
                break
        else:
            free.append(server_gpus - size)
    return len(free)


def servers_needed(demands: Mapping[str, list[int]], nodes: tuple[NodeRecord, ...]) -> dict[str, int]:
    """Servers needed per GPU type, from each type's replica sizes."""
    return {t: servers_for(sizes, server_size(nodes, t)) for t, sizes in sorted(demands.items())}
