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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.api import names
from lyra.api.convert import PodFacts, gpus_requested, node_view, pod_facts, pod_job, pod_role
from lyra.api.objects import Node, Pod
from lyra.core.model import ClusterSnapshot, LoanState, Pool, Server, TrainingJob
from lyra.core.placement import NodeView, PodRequest, PodRole
from lyra.core.reclaim import reclaim_order


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
