"""The extender's picture of the cluster: an immutable view built from the nodes and pods that watches deliver.

A request never calls the API server. It reads the current :class:`ClusterView`, which the watcher
(:mod:`lyra.extender.watch`) replaces whole whenever a node or pod changes; a view is never modified after it is
built, so a request sees one consistent cluster even while a new view is being built.

What a view knows, per node: its pool and loan state (the labels the operator owns), its GPU product and count, the
GPUs that bound, unfinished pods request, and its rank in the reclaim order (loaned nodes only: the order in which
Lyra's reclaim greedy would take them back, from :func:`lyra.core.reclaim.reclaim_order` over the jobs' workers).
Per pod: its UID, node, GPUs, role (inference, training base or flexible worker, or unmanaged) and job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.api import names
from lyra.core.model import ClusterSnapshot, LoanState, Pool, Server, TrainingJob
from lyra.core.placement import NodeView, PodRequest, PodRole
from lyra.core.reclaim import reclaim_order
from lyra.extender.wire import Node, Pod

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
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


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Nodes by name (Lyra-managed GPU nodes only), bound pods by UID, and each job's workers per node."""

    nodes: Mapping[str, NodeView] = field(default_factory=lambda: MappingProxyType({}))
    pods: Mapping[str, PodFacts] = field(default_factory=lambda: MappingProxyType({}))
    job_nodes: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))
    #: GPUs requested by the bound, unfinished pods of every node (Lyra's or not).
    used_gpus: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: Nodes the watcher saw that Lyra does not manage (no pool label or no GPUs).
    other_nodes: frozenset[str] = frozenset()

    def request_for(self, pod: Pod) -> PodRequest:
        role = pod_role(pod)
        job = pod_job(pod) if role in (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE) else None
        product = pod.spec.node_selector.get(names.GPU_PRODUCT_LABEL)
        return PodRequest(
            role=role,
            gpus=gpus_requested(pod),
            job=job,
            job_nodes=self.job_nodes.get(job, MappingProxyType({})) if job else MappingProxyType({}),
            gpu_types=frozenset({product}) if product and role is not PodRole.INFERENCE else None,
        )


def node_view(node: Node, used_gpus: int) -> NodeView | None:
    """The core's view of a node, or ``None`` for a node Lyra does not manage (no pool label or no GPUs)."""
    labels = node.metadata.labels
    pool_label = labels.get(names.POOL_LABEL)
    if pool_label not in (names.POOL_TRAINING, names.POOL_INFERENCE):
        return None
    gpus = _whole(node.status.allocatable.get(names.GPU_RESOURCE, node.status.capacity.get(names.GPU_RESOURCE, 0)))
    if gpus <= 0:
        return None
    pool = Pool.TRAINING if pool_label == names.POOL_TRAINING else Pool.INFERENCE
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
        gpu_type=labels.get(names.GPU_PRODUCT_LABEL, ""),
    )


def pod_facts(pod: Pod) -> PodFacts | None:
    """What the view keeps of a pod, or ``None`` if it holds nothing (not bound to a node, or finished). The watcher
    computes this once per event, so a rebuild does not parse pods again."""
    host = pod.spec.node_name
    if not host or pod.status.phase in _FINISHED_PHASES:
        return None
    role = pod_role(pod)
    job = pod_job(pod) if role in (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE) else None
    uid = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
    return PodFacts(uid, pod.metadata.namespace, pod.metadata.name, host, gpus_requested(pod), role, job)


def build_view(nodes: Iterable[Node], pods: Iterable[Pod]) -> ClusterView:
    """A view of ``nodes`` and ``pods``; pods not bound to a node, or finished, hold nothing."""
    return view_of(nodes, (facts for facts in map(pod_facts, pods) if facts is not None))


def view_of(nodes: Iterable[Node], pods: Iterable[PodFacts]) -> ClusterView:
    """A view of ``nodes`` and of the pods' facts (:func:`pod_facts`)."""
    facts: dict[str, PodFacts] = {}
    used: dict[str, int] = {}
    job_nodes: dict[str, dict[str, int]] = {}
    for pod in pods:
        facts[pod.uid] = pod
        host = pod.node
        used[host] = used.get(host, 0) + pod.gpus
        job = pod.job
        if job is not None:
            hosts = job_nodes.setdefault(job, {})
            hosts[host] = hosts.get(host, 0) + 1
    views: dict[str, NodeView] = {}
    others: set[str] = set()
    for node in nodes:
        view = node_view(node, used.get(node.metadata.name, 0))
        if view is not None:
            views[view.name] = view
        else:
            others.add(node.metadata.name)
    ranks = _reclaim_ranks(views, facts, job_nodes)
    if ranks:
        views = {
            name: NodeView(v.name, v.pool, v.state, v.gpus, v.free_gpus, ranks.get(name, 0), v.gpu_type)
            for name, v in views.items()
        }
    return ClusterView(
        nodes=MappingProxyType(dict(sorted(views.items()))),
        pods=MappingProxyType(facts),
        job_nodes=MappingProxyType({job: MappingProxyType(dict(sorted(h.items()))) for job, h in job_nodes.items()}),
        used_gpus=MappingProxyType(used),
        other_nodes=frozenset(others),
    )


def _reclaim_ranks(
    views: Mapping[str, NodeView], facts: Mapping[str, PodFacts], job_nodes: Mapping[str, Mapping[str, int]]
) -> dict[str, int]:
    """Each loaned node's position in Lyra's reclaim order (0 = reclaimed first)."""
    loaned = sorted(v.name for v in views.values() if v.state is LoanState.LOANED)
    if not loaned:
        return {}
    try:
        order = _reclaim_order(views, facts, job_nodes)
    except ValueError:
        # Pods that overfill a node (the view races a deletion) or a node beyond the core's limits make no valid
        # snapshot: rank by name instead.
        order = tuple(loaned)
    return {name: rank for rank, name in enumerate(order)}


def _reclaim_order(
    views: Mapping[str, NodeView], facts: Mapping[str, PodFacts], job_nodes: Mapping[str, Mapping[str, int]]
) -> tuple[str, ...]:
    """The core's reclaim order over the jobs' workers as the pods show them: a job's base is its base pods, its
    flexible workers the rest. Only the loaned servers, the jobs with a worker on one and those jobs' other
    servers matter to the order, so only they go into the snapshot."""
    loaned = {name for name, v in views.items() if v.state is LoanState.LOANED}
    involved = {job for job, hosts in job_nodes.items() if not loaned.isdisjoint(hosts)}
    bases: dict[str, int] = {}
    gpw: dict[str, int] = {}
    for pod in facts.values():
        if pod.job not in involved or pod.node not in views:
            continue
        assert pod.job is not None
        if pod.role is PodRole.TRAINING_BASE:
            bases[pod.job] = bases.get(pod.job, 0) + 1
        gpw[pod.job] = max(gpw.get(pod.job, 1), pod.gpus, 1)
    jobs: list[TrainingJob] = []
    servers_used = set(loaned)
    for job in sorted(involved):
        placement = {node: count for node, count in job_nodes[job].items() if node in views}
        workers = sum(placement.values())
        servers_used.update(placement)
        base = min(max(bases.get(job, workers), 1), workers)
        jobs.append(
            TrainingJob(
                name=job,
                min_workers=base,
                max_workers=workers,
                remaining_work=1.0,
                gpus_per_worker=gpw.get(job, 1),
                placement=placement,
                mix_gpu_types=True,
            )
        )
    servers = [
        Server(v.name, v.pool, v.gpu_type or "unknown", v.gpus, v.state if v.pool is Pool.INFERENCE else None)
        for name in sorted(servers_used)
        for v in (views[name],)
    ]
    return reclaim_order(ClusterSnapshot(servers=tuple(servers), jobs=tuple(jobs)))
