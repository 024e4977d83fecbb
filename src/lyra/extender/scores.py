"""Each node's ``prioritize`` score, kept current as the node changes, so that a request only looks names up.

kube-scheduler calls ``prioritize`` inside every GPU pod's scheduling cycle, with the names of the nodes that passed
its filters (``nodeCacheCapable``): a millisecond there is a millisecond of every cycle. A node's score
(:func:`lyra.core.placement.score_nodes`) depends on the node, on the highest reclaim rank among all the loaned
nodes of the view (a loaned node's safety is its place in the whole reclaim order, so its score does not depend on
which other nodes kube-scheduler happened to send), and on three things of the request only: the pod's role, the
GPUs it asks for and the GPU types its job was allocated. So :class:`ScoreTables` keeps, per such key, a table of
every node of the view that scores above 0. A table is built the first time a key is asked for, and from then on
each node event rescores that one node in every table (:meth:`ScoreTables.node_changed`, called by
:class:`~lyra.extender.view.LiveView` under its lock), so an event costs a few microseconds per table and a request a
lookup per name. When the highest rank moves (a server lent or taken back, then the ranks refreshed), the tables are
dropped and rebuilt on demand. The only part that depends on the pod itself, the nodes where its job already runs,
is scored per request: a handful of nodes, looked up before the table.

**The answer is relative to the lowest score among the nodes named** (:func:`relative`). kube-scheduler adds the
extender's score to each node's total and picks the highest total; a node the answer leaves out gets nothing. So
taking the same amount off every named node's score changes no choice, and the answer lists only the nodes above the
lowest, with their score minus it. While pods land, most of the nodes a request names share the lowest score (the
empty servers, or the ones a pod may use but should not prefer): in the scheduling benchmark at 500 nodes a request
named 196 nodes, 117 scored above 0 and 40 above the lowest, so the answer kube-scheduler decodes and merges in
every cycle is a third of what it was.

**Most answers are joined from encoded entries.** When any node named scores 0 (a name the table lacks: most
requests name an empty server or one the pod may not use), the lowest is 0 and the answer is the table's nodes
among the names, each at its own score. So each table keeps, beside a node's score, its ``HostPriority`` already
encoded (:func:`entry`), and such an answer is one lookup per name and one join, with no per-name Python code: at
5,000 names the decision and its encoding took a third of the CPU they took when each score was looked up, the lowest
found and each entry encoded per request (docs/benchmarks.md, "Scheduler extender"). Only when every node named
scores above 0 is the lowest taken off each score as before.

The answer is the same as scoring the candidates from scratch and taking the lowest off
(``tests/unit/extender/test_scores.py`` checks it after random events): request order, nodes at the lowest score
and names the view does not know (they score 0) left out, duplicates kept.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping, Sequence
from itertools import repeat
from types import MappingProxyType
from typing import TypeAlias

from lyra.core.model import LoanState
from lyra.core.placement import NodeView, PodRequest, PodRole, last_loaned_rank, score_nodes

#: Tables kept at once (one per role, GPU count and allowed GPU types asked for); past it the oldest is dropped and
#: rebuilt when asked for again. A cluster's pods ask for a few kinds; a table takes about 300 bytes per node that
#: scores above 0 (its score and its encoded entry), and each kept table adds a rescoring of one node to every node
#: event.
MAX_TABLES = 32

#: Encoded entries kept: a node name and a score each, 11 scores per node of a 15,000-node cluster fit.
MAX_ENTRIES = 11 * 15_000
Key: TypeAlias = tuple[PodRole, int, frozenset[str] | None]
_TRAINING = (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE)
_EMPTY: Mapping[str, int] = MappingProxyType({})


@functools.lru_cache(maxsize=MAX_ENTRIES)
def entry(name: str, score: int) -> bytes:
    """One ``HostPriority`` as JSON (the name escaped by ``json``: a node name sent by the API server is trusted
    no more than any other input). Kept: a request's answer is made of them."""
    return b'{"Host":%s,"Score":%d}' % (json.dumps(name).encode(), score)


def relative(scores: Sequence[int]) -> int:
    """What is taken off every score of an answer over nodes scoring ``scores`` (every node named, 0 for a node
    that scores nothing): the lowest of them, so that the nodes at it are left out and no choice of
    kube-scheduler's changes (see the module's docstring)."""
    return min(scores, default=0)


def encode(names: Sequence[str], scores: Sequence[int]) -> bytes:
    """The ``HostPriorityList`` for nodes ``names`` scoring ``scores``, relative to the lowest (:func:`relative`),
    in request order."""
    low = relative(scores)
    return (
        b"["
        + b",".join([entry(name, score - low) for name, score in zip(names, scores, strict=True) if score > low])
        + b"]"
    )


def _rank_moved(old: NodeView | None, new: NodeView | None) -> bool:
    """Whether a node's change may move the highest reclaim rank among the loaned nodes."""
    loaned = LoanState.LOANED
    was_loaned = old is not None and old.state is loaned
    is_loaned = new is not None and new.state is loaned
    return was_loaned != is_loaned or (
        is_loaned and old is not None and new is not None and old.reclaim_rank != new.reclaim_rank
    )


def _put(table: dict[str, int], encoded: dict[str, bytes], name: str, score: int) -> None:
    """Node ``name``'s score in ``table`` and its entry in ``encoded``; a node scoring 0 has neither."""
    if score > 0:
        table[name] = score
        encoded[name] = entry(name, score)
    else:
        table.pop(name, None)
        encoded.pop(name, None)


def _joined(encoded: Mapping[str, bytes], names: Sequence[str]) -> bytes | None:
    """The answer over ``names`` when one of them has no entry in ``encoded`` (it scores 0, so the lowest is 0 and
    every entry stands as it is), else ``None``."""
    parts = list(filter(None, map(encoded.get, names)))
    if len(parts) == len(names):
        return None  # every node named scores above 0: the lowest is taken off each
    return b"[" + b",".join(parts) + b"]"


class ScoreTables:
    """Per-key tables of scores over the nodes of a :class:`~lyra.extender.view.LiveView` (see the
    module's docstring). Writers hold the view's lock; a request reads the tables without it (each table entry is
    replaced whole) and takes it only to build a table or to drop them all."""

    def __init__(self, nodes: Mapping[str, NodeView], lock: threading.Lock) -> None:
        self._nodes = nodes
        self._lock = lock
        self._tables: dict[Key, dict[str, int]] = {}
        #: Per key, the ``HostPriority`` of each node of its table, encoded (:func:`entry`).
        self._encoded: dict[Key, dict[str, bytes]] = {}
        self._requests: dict[Key, PodRequest] = {}
        #: The highest reclaim rank among the view's loaned nodes (at least 1); ``None`` once a change may move it.
        self._last_rank: int | None = 1
        #: The highest rank the kept tables were scored with.
        self._tables_rank = 1
        self.builds = 0

    def last_rank(self) -> int:
        """The highest reclaim rank among the view's loaned nodes (at least 1): the scale of a loaned node's safety."""
        rank = self._last_rank
        if rank is None:
            with self._lock:
                rank = self._last_rank = last_loaned_rank(list(self._nodes.values()))
        return rank

    def node_changed(self, name: str, old: NodeView | None, new: NodeView | None) -> None:
        """Rescore node ``name`` (now ``new``, or gone) in every table. Called with the view's lock held."""
        if _rank_moved(old, new):
            self._last_rank = None
        rank = self._tables_rank
        for key, table in self._tables.items():
            score = score_nodes(self._requests[key], [new], rank)[0][1] if new is not None else 0
            _put(table, self._encoded[key], name, score)

    def ranks_changed(self, changed: Sequence[NodeView]) -> None:
        """Rescore the nodes ``changed`` (nodes still in the view whose reclaim rank moved) in every table: one
        :func:`score_nodes` call per table for all of them. A refresh of the reclaim order moves the rank of most
        loaned nodes at once (a rank is a position), and rescoring them one call per node and table was most of
        the extender's CPU while pods landed on loaned nodes. Called with the view's lock held."""
        if not changed:
            return
        self._last_rank = None
        rank = self._tables_rank
        for key, table in self._tables.items():
            encoded = self._encoded[key]
            for name, score in score_nodes(self._requests[key], changed, rank):
                _put(table, encoded, name, score)

    def answer(self, pod: PodRequest, names: Sequence[str]) -> bytes:
        """The ``HostPriorityList`` for ``pod`` over the nodes ``names``, encoded (relative to the lowest score)."""
        rank = self.last_rank()
        if rank != self._tables_rank:
            self._rescaled(rank)
        key: Key = (pod.role, pod.gpus, pod.gpu_types)
        kept, kept_encoded = self._tables.get(key), self._encoded.get(key)
        table, encoded = self._build(key) if kept is None or kept_encoded is None else (kept, kept_encoded)
        mine = self._job_scores(pod, self._tables_rank) if pod.role in _TRAINING and pod.job_nodes else None
        if mine:  # the job's own nodes at their scores for this pod, over the table's (a copy: other requests read it)
            encoded = encoded.copy()
            for name, score in mine.items():
                if score > 0:
                    encoded[name] = entry(name, score)
                else:
                    encoded.pop(name, None)
        joined = _joined(encoded, names)
        if joined is not None:
            return joined
        get = table.get
        if mine:
            return encode(names, [mine[name] if name in mine else get(name, 0) for name in names])
        return encode(names, list(map(get, names, repeat(0))))

    def _rescaled(self, rank: int) -> None:
        """Drop every table: the highest rank moved, so every loaned node's safety did."""
        with self._lock:
            if self._last_rank == rank and self._tables_rank != rank:
                self._tables.clear()
                self._encoded.clear()
                self._requests.clear()
                self._tables_rank = rank

    def _build(self, key: Key) -> tuple[dict[str, int], dict[str, bytes]]:
        role, gpus, gpu_types = key
        request = PodRequest(role=role, gpus=gpus, job=None, job_nodes=_EMPTY, gpu_types=gpu_types)
        with self._lock:
            views = list(self._nodes.values())
            rank = self._tables_rank
            table = {name: score for name, score in score_nodes(request, views, rank) if score > 0}
            encoded = {name: entry(name, score) for name, score in table.items()}
            while len(self._tables) >= MAX_TABLES:
                oldest = next(iter(self._tables))
                del self._tables[oldest], self._encoded[oldest], self._requests[oldest]
            self._requests[key] = request
            self._tables[key] = table
            self._encoded[key] = encoded
            self.builds += 1
        return table, encoded

    def _job_scores(self, pod: PodRequest, rank: int) -> dict[str, int]:
        """The scores of the nodes where the pod's job runs, rescored for it (a worker there scores higher)."""
        known = self._nodes
        hosts = [view for view in map(known.get, pod.job_nodes) if view is not None]
        if not hosts:
            return {}
        return dict(score_nodes(pod, hosts, rank))
