"""Kubernetes objects as the policy core's values: one reading of nodes and pods, shared by the scheduler extender
and the operator. A node is Lyra's when it has the pool label and GPUs; a pod's role and job come from its labels
(:mod:`lyra.api.names`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from lyra.api import names
from lyra.api.objects import Node, Pod
from lyra.api.resources import TrainingJobSpec
from lyra.core.model import LoanState, Pool, TrainingJob
from lyra.core.placement import NodeView, PodRole

_ROLES = {
    names.ROLE_BASE: PodRole.TRAINING_BASE,
    names.ROLE_FLEXIBLE: PodRole.TRAINING_FLEXIBLE,
    names.ROLE_INFERENCE: PodRole.INFERENCE,
}


def gpus_requested(pod: Pod) -> int:
    """GPUs the pod holds while it runs: the sum over its containers, or the largest init container if larger
    (Kubernetes' effective request). A container without a request but with a limit requests the limit."""

    def of(container_requests: Mapping[str, object], container_limits: Mapping[str, object]) -> int:
        value = container_requests.get(names.GPU_RESOURCE, container_limits.get(names.GPU_RESOURCE, 0))
        return _whole(value)

    running = sum(of(c.resources.requests, c.resources.limits) for c in pod.spec.containers)
    init = max((of(c.resources.requests, c.resources.limits) for c in pod.spec.init_containers), default=0)
    return max(running, init)


def _whole(value: object) -> int:
    """An extended-resource quantity: a whole number (``"2"``, ``2``); anything else counts as 0 GPUs."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() and value > 0 else 0
    if isinstance(value, str) and value.isdigit() and len(value) <= 6:
        return int(value)
    return 0


def pod_role(pod: Pod) -> PodRole:
    return _ROLES.get(pod.metadata.labels.get(names.ROLE_LABEL, ""), PodRole.UNMANAGED)


def pod_job(pod: Pod) -> str | None:
    """The job a training pod belongs to, as ``namespace/name`` (jobs are namespaced)."""
    job = pod.metadata.labels.get(names.JOB_LABEL)
    return f"{pod.metadata.namespace}/{job}" if job else None


@dataclass(frozen=True, slots=True)
class PodFacts:
    uid: str
    namespace: str
    name: str
    node: str
    gpus: int
    role: PodRole
    job: str | None


def node_gpus(node: Node) -> int:
    """The node's GPUs: allocatable, else capacity (a whole number; anything else counts as none)."""
    return _whole(node.status.allocatable.get(names.GPU_RESOURCE, node.status.capacity.get(names.GPU_RESOURCE, 0)))


def node_capacity_gpus(node: Node) -> int:
    """The node's GPUs as its capacity says (healthy or not; allocatable drops while a device plugin restarts)."""
    return _whole(node.status.capacity.get(names.GPU_RESOURCE, 0))


#: The largest ``nvidia.com/gpu.memory`` read, in MiB (a million GiB, the core's bound on a GPU's memory).
_MAX_MEMORY_MIB = 1024 * 1_000_000


def node_gpu_memory_mib(node: Node) -> int | None:
    """The memory of each of the node's GPUs in MiB, as GPU feature discovery labels it (``nvidia.com/gpu.memory``);
    ``None`` when the label is absent or not a whole number of MiB in range (the catalogue or defaults then apply)."""
    value = node.metadata.labels.get(names.GPU_MEMORY_LABEL, "")
    if not (value.isascii() and value.isdigit()) or len(value) > 10:
        return None
    mib = int(value)
    return mib if 0 < mib <= _MAX_MEMORY_MIB else None


def node_pool(labels: Mapping[str, str]) -> Pool | None:
    """The pool a node's labels put it in, or ``None`` for a node outside Lyra's pools."""
    pool_label = labels.get(names.POOL_LABEL)
    if pool_label == names.POOL_TRAINING:
        return Pool.TRAINING
    if pool_label == names.POOL_INFERENCE:
        return Pool.INFERENCE
    return None


def node_gpu_type(labels: Mapping[str, str]) -> str:
    """A node's GPU type (its product label), ``""`` when it has none."""
    return labels.get(names.GPU_PRODUCT_LABEL, "")


def node_view(node: Node, used_gpus: int) -> NodeView | None:
    """The core's view of a node, or ``None`` for a node Lyra does not manage (no pool label or no GPUs)."""
    labels = node.metadata.labels
    pool = node_pool(labels)
    if pool is None:
        return None
    gpus = node_gpus(node)
    if gpus <= 0:
        return None
    state: LoanState | None = None
    if pool is Pool.INFERENCE:
        try:
            state = LoanState(labels.get(names.STATE_LABEL, LoanState.SERVING.value))
        except ValueError:
            state = LoanState.RECLAIMING  # an unknown state is treated as the most restrictive one
    return NodeView(
        name=node.metadata.name,
        pool=pool,
        state=state,
        gpus=gpus,
        free_gpus=max(gpus - used_gpus, 0),
        gpu_type=node_gpu_type(labels),
    )


def pod_facts(pod: Pod) -> PodFacts | None:
    """What the view keeps of a pod, or ``None`` if it holds nothing (not bound to a node, or finished). The watcher
    computes this once per event, so a rebuild does not parse pods again."""
    host = pod.spec.node_name
    if not host or pod.status.phase in names.FINISHED_POD_PHASES:
        return None
    role = pod_role(pod)
    job = pod_job(pod) if role in (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE) else None
    uid = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
    return PodFacts(uid, pod.metadata.namespace, pod.metadata.name, host, gpus_requested(pod), role, job)


def training_job(name: str, spec: TrainingJobSpec, *, submit_time: float = 0.0) -> TrainingJob:
    """A TrainingJob's spec as the core's job, queued (no placement) and with no work left; callers set those
    with :func:`dataclasses.replace`. Raises :class:`lyra.core.errors.InvalidClusterError` for a spec the core
    cannot run."""
    return TrainingJob(
        name=name,
        gpus_per_worker=spec.gpus_per_worker,
        min_workers=spec.min_workers,
        max_workers=spec.max_workers,
        remaining_work=0.0,
        submit_time=submit_time,
        priority=spec.priority,
        gpu_types=frozenset(spec.gpu_types) if spec.gpu_types else None,
        gpu_memory_gib=spec.gpu_memory_gib,
        speeds=dict(spec.speeds or {}),
        mix_gpu_types=spec.mix_gpu_types,
        scaling_overhead=spec.scaling_overhead,
    )
