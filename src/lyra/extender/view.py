"""The extender's picture of the cluster: nodes and pods as the watches deliver them, kept current per event.

A request never calls the API server. It reads the :class:`ClusterView` of a :class:`LiveView`, which the watcher
(:mod:`lyra.extender.watch`) updates one event at a time: a pod event changes its node's used GPUs and free GPUs
and its job's count of workers on that node, a node event that node's entry, and nothing else is touched, so an
event costs the same at 50 nodes as at 5,000. A request only looks entries up by key (a node by name, a pod by UID,
a job's nodes by job); every entry is replaced whole, never changed in place, so a lookup always sees a whole
entry. Two lookups of one request may straddle an event: what they decide (scores, preemption vetoes by role) is
harmless when a fraction of a second old (docs/architecture.md, "Where a pod lands").

What a view knows, per node: its pool and loan state (the labels the operator owns), its GPU product and count, the
GPUs that bound, unfinished pods request, and its rank in the reclaim order (loaned nodes only: the order in which
Lyra's reclaim greedy would take them back, from :func:`lyra.core.reclaim.reclaim_order` over the jobs' workers).
The reclaim order depends on every loaned node and their jobs, so it is not recomputed per event:
:meth:`LiveView.refresh_ranks` recomputes it when an event touched a loaned node or a job on one, and the watcher
calls it at most five times a second, and less on a large cluster (a fiftieth of a core at most). Per pod: its
UID, node, GPUs, role (inference, training base or flexible worker, or unmanaged) and job.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.api import names
from lyra.api.convert import PodFacts, gpus_requested, node_view, pod_facts, pod_job, pod_role
from lyra.api.objects import Node, Pod
from lyra.core.model import ClusterSnapshot, LoanState, Pool, Server, TrainingJob
from lyra.core.placement import NodeView, PodRequest, PodRole, last_loaned_rank
from lyra.core.reclaim import reclaim_order
from lyra.extender.scores import ScoreTables

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Nodes by name (Lyra-managed GPU nodes only), bound pods by UID, each job's workers per node, and the GPUs
    used on each node. Read-only mappings; those of a :class:`LiveView` follow its events."""

    nodes: Mapping[str, NodeView] = field(default_factory=lambda: MappingProxyType({}))
    pods: Mapping[str, PodFacts] = field(default_factory=lambda: MappingProxyType({}))
    job_nodes: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))
    #: GPUs requested by the bound, unfinished pods of every node (Lyra's or not).
    used_gpus: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: Each node's ``prioritize`` answer per kind of pod, kept current with the nodes (``None``: score from scratch).
    scores: ScoreTables | None = None

    def last_rank(self) -> int:
        """The highest reclaim rank among the loaned nodes (at least 1): what a loaned node's safety is scaled by, so
        that its score is its place in the whole reclaim order, not among the nodes one request names."""
        if self.scores is not None:
            return self.scores.last_rank()
        return last_loaned_rank(list(self.nodes.values()))

    def request_for(self, pod: Pod) -> PodRequest:
        role = pod_role(pod)
        job = pod_job(pod) if role in (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE) else None
        product = pod.spec.node_selector.get(names.GPU_PRODUCT_LABEL)
        return PodRequest(
            role=role,
            gpus=gpus_requested(pod),
            job=job,
            job_nodes=self.job_nodes.get(job, _EMPTY) if job else _EMPTY,
            gpu_types=frozenset({product}) if product and role is not PodRole.INFERENCE else None,
        )


class LiveView:
    """A :class:`ClusterView` kept current one event at a time (see the module docstring). Writers (the watch
    threads) take a lock; readers (requests) do not."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeView] = {}
        self._pods: dict[str, PodFacts] = {}  # by UID
        self._pod_uids: dict[str, str] = {}  # pod key (namespace/name) -> UID, to find what a pod event replaces
        self._job_nodes: dict[str, Mapping[str, int]] = {}
        self._used: dict[str, int] = {}
        self._ranks: dict[str, int] = {}
        self._ranks_stale = False
        self.scores = ScoreTables(self._nodes, self._lock)
        self.view = ClusterView(
            nodes=MappingProxyType(self._nodes),
            pods=MappingProxyType(self._pods),
            job_nodes=MappingProxyType(self._job_nodes),
            used_gpus=MappingProxyType(self._used),
            scores=self.scores,
        )

    @property
    def ranks_stale(self) -> bool:
        """An event touched a loaned node or a job with a worker on one since the reclaim order was computed."""
        return self._ranks_stale

    def set_node(self, name: str, node: Node | None) -> None:
        """A node was added or changed (``node``) or deleted (``None``)."""
        with self._lock:
            old = self._nodes.get(name)
            new = node_view(node, self._used.get(name, 0)) if node is not None else None
            if new is None:
                self._nodes.pop(name, None)
            else:
                new = self._nodes[name] = dataclasses.replace(new, reclaim_rank=self._ranks.get(name, 0))
            self.scores.node_changed(name, old, new)
            if LoanState.LOANED in (old.state if old else None, new.state if new else None):
                self._ranks_stale = True

    def set_pod(self, key: str, facts: PodFacts | None) -> None:
        """A pod (``namespace/name``) now holds ``facts``, or nothing (deleted, finished or not bound). A change that
        leaves the facts as they were (a pod's status: started, ready) changes nothing: no node is rescored and the
        reclaim order is not marked stale."""
        with self._lock:
            if facts is not None and self._pods.get(self._pod_uids.get(key, "")) == facts:
                return
            uid = self._pod_uids.pop(key, None)
            old = self._pods.pop(uid, None) if uid is not None else None
            if old is not None:
                self._count(old, -1)
            if facts is not None:
                self._pod_uids[key] = facts.uid
                self._pods[facts.uid] = facts
                self._count(facts, +1)

    def _count(self, pod: PodFacts, sign: int) -> None:
        host = pod.node
        used = self._used.get(host, 0) + sign * pod.gpus
        if used:
            self._used[host] = used
        else:
            self._used.pop(host, None)
        known = self._nodes.get(host)
        if known is not None:
            changed = self._nodes[host] = dataclasses.replace(known, free_gpus=max(known.gpus - used, 0))
            self.scores.node_changed(host, known, changed)
        if pod.job is None:
            return
        hosts = dict(self._job_nodes.get(pod.job, _EMPTY))  # a new mapping: readers may hold the old one
        count = hosts.get(host, 0) + sign
        if count > 0:
            hosts[host] = count
        else:
            hosts.pop(host, None)
        if hosts:
            self._job_nodes[pod.job] = MappingProxyType(dict(sorted(hosts.items())))
        else:
            self._job_nodes.pop(pod.job, None)
        if (known is not None and known.state is LoanState.LOANED) or any(
            self._nodes.get(h) is not None and self._nodes[h].state is LoanState.LOANED for h in hosts
        ):
            self._ranks_stale = True

    def refresh_ranks(self) -> None:
        """Recompute the reclaim order of the loaned nodes and set each node's rank."""
        with self._lock:
            self._ranks_stale = False
            views = dict(self._nodes)
            facts = dict(self._pods)
            job_nodes = dict(self._job_nodes)
        ranks = _reclaim_ranks(views, facts, job_nodes)
        with self._lock:
            moved = []
            for name in sorted(self._ranks.keys() | ranks.keys()):
                known = self._nodes.get(name)
                rank = ranks.get(name, 0)
                if known is not None and known.reclaim_rank != rank:
                    changed = self._nodes[name] = dataclasses.replace(known, reclaim_rank=rank)
                    moved.append(changed)
            self.scores.ranks_changed(moved)
            self._ranks = ranks


def build_view(nodes: Iterable[Node], pods: Iterable[Pod]) -> ClusterView:
    """A view of ``nodes`` and ``pods``; pods not bound to a node, or finished, hold nothing."""
    return view_of(nodes, (facts for facts in map(pod_facts, pods) if facts is not None))


def view_of(nodes: Iterable[Node], pods: Iterable[PodFacts]) -> ClusterView:
    """A view of ``nodes`` and of the pods' facts (:func:`pod_facts`), as the events of each would leave it."""
    live = LiveView()
    for node in sorted(nodes, key=lambda n: n.metadata.name):
        live.set_node(node.metadata.name, node)
    for pod in pods:
        live.set_pod(f"{pod.namespace}/{pod.name}", pod)
    live.refresh_ranks()
    return live.view


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
        _server(v.name, v.pool, v.gpu_type or "unknown", v.gpus, v.state if v.pool is Pool.INFERENCE else None)
        for name in sorted(servers_used)
        for v in (views[name],)
    ]
    return reclaim_order(ClusterSnapshot(servers=tuple(servers), jobs=tuple(jobs)))


#: Servers kept made (a 15,000-node cluster fits): a refresh of the ranks at 5,000 nodes with 1,000 loaned made a
#: thousand of them, checked field by field, for nodes that had not changed since the last one.
MAX_SERVERS = 15_000


@functools.lru_cache(maxsize=MAX_SERVERS)
def _server(name: str, pool: Pool, gpu_type: str, gpus: int, state: LoanState | None) -> Server:
    """The core's server for a node of the view: what a node's labels and GPUs make, the same from one refresh of
    the ranks to the next until those change."""
    return Server(name, pool, gpu_type, gpus, state)
