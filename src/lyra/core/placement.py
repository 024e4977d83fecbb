"""Where a GPU pod should land, so that loaning and reclaiming stay cheap (what the scheduler extender serves).

Filter (hard rules):

* inference pods run only on inference servers that are ``serving`` or ``idle``, never on loaned or reclaiming
  ones, and never on training servers;
* training pods run on training servers or on loaned inference servers, never on reclaiming ones, and only on the
  GPU type their job was allocated (a job on one type runs at that type's pace; a worker on a slower type would
  slow the whole job to it);
* other GPU pods (not managed by Lyra) stay off loaned and reclaiming servers, which training and the reclaim
  plans own;
* a node without the GPUs the pod asks for fails with the numbers in the reason.

Score (0..10, higher is better; kube-scheduler multiplies by the extender weight and adds its own scores):

* inference pods prefer servers that already run pods, fullest first (best fit), then empty ``serving`` servers,
  then empty ``idle`` ones, so the fewest servers serve and the others stay lendable. An ``idle`` server with a
  replica on it serves from the operator's next pass on; were it scored as idle, the next replica could go to an
  empty server kept serving and leave both serving (seen when a replica was bound in the moment between a pass and
  the next, which kept a server serving for it);
* within the GPU type its job was allocated, a training base worker prefers training servers and a flexible
  worker loaned ones (where an inference pool has the same type as training servers), so a reclaim scales
  jobs in instead of preempting them;
* within the preferred kind: servers already hosting the job first (fewer loaned servers per job means a lower
  server fraction spread and cheaper reclaims), then fuller servers (packing keeps other loaned servers empty,
  and empty ones are reclaimed first at no cost), then servers late in the reclaim order (least likely to be
  reclaimed next; :func:`lyra.core.reclaim.reclaim_order` gives that order, rule 1 of the reclaim policy).

``reclaim_order`` is computed once per cluster change by the caller; scoring a pod is a single pass over the
nodes with no allocation per node beyond the result.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from lyra.core.model import LoanState, Pool

#: The extender protocol's score range (kube-scheduler's MaxExtenderPriority).
MAX_SCORE = 10


class PodRole(enum.StrEnum):
    INFERENCE = "inference"
    TRAINING_BASE = "training-base"
    TRAINING_FLEXIBLE = "training-flexible"
    UNMANAGED = "unmanaged"


#: The roles of a TrainingJob's workers.
WORKER_ROLES: Final = frozenset({PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE})


@dataclass(frozen=True, slots=True)
class NodeView:
    """What placement needs to know of one node.

    ``reclaim_rank`` is the node's position in the reclaim order among loaned servers (0 = reclaimed first);
    it is ignored for nodes that are not loaned.
    """

    name: str
    pool: Pool
    state: LoanState | None
    gpus: int
    free_gpus: int
    reclaim_rank: int = 0
    gpu_type: str = ""


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod to place: its role, the GPUs it asks for, where its job's other workers already run, and (training
    pods) the GPU types its job was allocated (``None``: any)."""

    role: PodRole
    gpus: int
    job: str | None = None
    job_nodes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    gpu_types: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class FilterResult:
    """``failed`` has a reason per refused node; ``unresolvable`` names those that no preemption can open to the pod
    (a rule refuses them, not a lack of free GPUs)."""

    passed: tuple[str, ...]
    failed: Mapping[str, str]
    unresolvable: frozenset[str] = frozenset()


def _refusal(pod: PodRequest, node: NodeView) -> str | None:
    role = pod.role
    if role is PodRole.INFERENCE:
        if node.pool is not Pool.INFERENCE:
            return "training server: inference pods run only on inference servers"
        if node.state is LoanState.LOANED:
            return "inference server loaned to training"
        if node.state is LoanState.RECLAIMING:
            return "inference server being reclaimed from training"
        return None
    if role is PodRole.UNMANAGED:
        if node.state in (LoanState.LOANED, LoanState.RECLAIMING):
            return f"inference server {node.state}: reserved for Lyra training and reclaims"
        return None
    if node.pool is Pool.TRAINING or node.state is LoanState.LOANED:
        if pod.gpu_types is not None and node.gpu_type not in pod.gpu_types:
            allocated = ", ".join(sorted(pod.gpu_types))
            return f"GPU type {node.gpu_type or 'unknown'}: the job was allocated {allocated}"
        return None
    if node.state is LoanState.RECLAIMING:
        return "inference server being reclaimed: no new training work"
    return f"inference server {node.state}, not loaned to training"


def filter_nodes(pod: PodRequest, nodes: Sequence[NodeView]) -> FilterResult:
    """Split ``nodes`` into those the pod may run on and those it may not (with a reason each)."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: set[str] = set()
    # A rule's refusal depends only on the node's pool, state and GPU type: decided once per distinct kind.
    refusals: dict[tuple[Pool, LoanState | None, str], str | None] = {}
    want = pod.gpus
    for node in nodes:
        kind = (node.pool, node.state, node.gpu_type)
        if kind in refusals:
            reason = refusals[kind]
        else:
            reason = refusals[kind] = _refusal(pod, node)
        if reason is not None:
            unresolvable.add(node.name)
        elif node.free_gpus >= want:
            passed.append(node.name)
            continue
        elif node.gpus < want:
            reason = f"needs {want} nvidia.com/gpu, the node has {node.gpus}"
            unresolvable.add(node.name)
        else:
            reason = f"needs {want} nvidia.com/gpu, {node.free_gpus} of {node.gpus} free"
        failed[node.name] = reason
    return FilterResult(tuple(passed), MappingProxyType(failed), frozenset(unresolvable))


def last_loaned_rank(nodes: Sequence[NodeView]) -> int:
    """The highest reclaim rank among the loaned ``nodes`` (at least 1): a loaned node's safety is its rank over it."""
    return max((n.reclaim_rank for n in nodes if n.state is LoanState.LOANED), default=0) or 1


def score_nodes(pod: PodRequest, nodes: Sequence[NodeView], last_rank: int | None = None) -> list[tuple[str, int]]:
    """Score every node 0..10 for ``pod`` (nodes it may not use score 0). Order follows ``nodes``.

    ``last_rank`` scales a loaned node's safety (its reclaim rank over ``last_rank``); by default it is
    :func:`last_loaned_rank` of ``nodes``. The extender passes that of every loaned node it knows, so that a node's
    score is its place in the whole reclaim order, whichever other nodes kube-scheduler sent, and can be kept
    current as the node changes."""
    role = pod.role
    want = pod.gpus
    job_nodes = pod.job_nodes
    if last_rank is None:
        last_rank = last_loaned_rank(nodes)
    training_role = role in (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE)
    flexible = role is PodRole.TRAINING_FLEXIBLE
    loaned = LoanState.LOANED
    training_pool = Pool.TRAINING
    allowed = pod.gpu_types
    scores: list[tuple[str, int]] = []
    append = scores.append
    for node in nodes:
        free_after = node.free_gpus - want
        if free_after < 0 or node.gpus <= 0:
            append((node.name, 0))
            continue
        fill = 1.0 - free_after / node.gpus
        if training_role:
            if allowed is not None and node.gpu_type not in allowed:
                append((node.name, 0))
                continue
            if node.pool is training_pool:
                preferred = not flexible
                safety = 1.0
            elif node.state is loaned:
                preferred = flexible
                safety = node.reclaim_rank / last_rank
            else:
                append((node.name, 0))
                continue
            together = 1.0 if node.name in job_nodes else 0.0
            quality = 0.5 * together + 0.3 * fill + 0.2 * safety
            score = (6 if preferred else 1) + int(quality * 4 + 0.5)
        elif role is PodRole.INFERENCE:
            if node.pool is training_pool or node.state is loaned or node.state is LoanState.RECLAIMING:
                append((node.name, 0))
                continue
            if node.free_gpus < node.gpus:  # runs pods already: fullest first
                score = 7 + int(fill * 3 + 0.5)
            elif node.state is LoanState.SERVING:  # empty, kept serving
                score = 4 + int(fill * 2 + 0.5)
            else:  # empty and idle: lendable while it stays empty
                score = 1 + int(fill * 2 + 0.5)
        else:
            if node.state is loaned or node.state is LoanState.RECLAIMING:
                append((node.name, 0))
                continue
            score = int(fill * MAX_SCORE + 0.5)
        append((node.name, score))
    return scores
