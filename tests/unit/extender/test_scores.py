"""The precomputed ``prioritize`` answers (:class:`lyra.extender.scores.ScoreTables`) are, after any sequence of
node and pod events, exactly what scoring the named nodes from scratch gives, relative to the lowest score among
them: same hosts, scores and order. And an answer relative to the lowest changes none of kube-scheduler's choices."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from lyra.api.convert import pod_facts
from lyra.api.objects import Node, Pod
from lyra.core.model import LoanState
from lyra.core.placement import PodRequest, PodRole, score_nodes
from lyra.extender.scores import MAX_TABLES, ScoreTables, entry
from lyra.extender.view import ClusterView, LiveView
from tests.unit.extender.test_app import A100, T4, node
from tests.unit.extender.test_live_view import random_cluster_events

JOBS = ("ns/a", "ns/b", "ns/c", "ns/none")


def highest_rank(view: ClusterView) -> int:
    """The highest reclaim rank among every loaned node of the view (at least 1)."""
    return max((v.reclaim_rank for v in view.nodes.values() if v.state is LoanState.LOANED), default=0) or 1


def apply(live: LiveView, kind: str, key: str, raw: dict[str, Any] | None) -> None:
    """One of :func:`random_cluster_events`' events, parsed and given to the view."""
    if kind == "node":
        live.set_node(key, Node.model_validate(raw) if raw else None)
    else:
        live.set_pod(key, pod_facts(Pod.model_validate(raw)) if raw else None)


def with_training_nodes(count: int) -> LiveView:
    live = LiveView()
    for index in range(count):
        live.set_node(f"t{index}", Node.model_validate(node(f"t{index}", "training", A100)))
    return live


def settled_view(seed: int, events: int) -> ClusterView:
    """Three training nodes, then ``events`` random cluster events (from ``seed``), the reclaim ranks refreshed."""
    live = with_training_nodes(3)
    for kind, key, raw in random_cluster_events(random.Random(seed), events):
        apply(live, kind, key, raw)
    live.refresh_ranks()
    return live.view


def from_scratch(view: ClusterView, pod: PodRequest, names: list[str]) -> list[dict[str, object]]:
    """Each named node scored alone (0 for a name the view does not know), its safety over the highest rank among
    every loaned node of the view; then the lowest of those scores taken off each, and the nodes left at 0 dropped."""
    last = highest_rank(view)
    absolute = []
    for name in names:
        known = view.nodes.get(name)
        absolute.append((name, score_nodes(pod, [known], last)[0][1] if known is not None else 0))
    low = min((score for _, score in absolute), default=0)
    return [{"Host": name, "Score": score - low} for name, score in absolute if score > low]


def requests(view: ClusterView, rng: random.Random) -> list[PodRequest]:
    made = []
    for role in PodRole:
        for gpus in (0, 1, 4):
            job = rng.choice(JOBS) if role in (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE) else None
            types = rng.choice([None, frozenset({T4}), frozenset({A100}), frozenset({T4, A100})])
            job_nodes = view.job_nodes.get(job, {}) if job else {}
            made.append(PodRequest(role, gpus, job, job_nodes, types if role is not PodRole.INFERENCE else None))
    return made


def some_names(view: ClusterView, rng: random.Random) -> list[str]:
    """Names as kube-scheduler sends them: a subset in any order, here also with unknown names and duplicates."""
    names = [name for name in view.nodes if rng.random() < 0.7] + ["unknown", "t-gone"]
    names += rng.sample(names, k=min(2, len(names)))
    rng.shuffle(names)
    return names


def assert_same_answers(view: ClusterView, rng: random.Random) -> None:
    assert view.scores is not None
    for pod in requests(view, rng):
        for names in (list(view.nodes), some_names(view, rng)):
            assert json.loads(view.scores.answer(pod, names)) == from_scratch(view, pod, names), (pod, names)


@pytest.mark.parametrize("seed", range(20))
def test_answers_kept_current_event_by_event_match_scoring_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    live = with_training_nodes(3)
    for step, (kind, key, raw) in enumerate(random_cluster_events(random.Random(seed + 1000), 200)):
        apply(live, kind, key, raw)
        if live.ranks_stale and rng.random() < 0.3:
            live.refresh_ranks()
        if step % 25 == 0:  # tables built early, then kept current by the events that follow
            assert_same_answers(live.view, rng)
    live.refresh_ranks()
    assert_same_answers(live.view, rng)


def test_tables_past_the_limit_are_dropped_oldest_first_and_rebuilt_when_asked_again() -> None:
    live = LiveView()
    live.set_node("t0", Node.model_validate(node("t0", "training", A100)))
    tables = live.scores
    for gpus in range(MAX_TABLES + 1):
        tables.answer(PodRequest(PodRole.UNMANAGED, gpus), ["t0"])
    assert tables.builds == MAX_TABLES + 1
    tables.answer(PodRequest(PodRole.UNMANAGED, MAX_TABLES), ["t0"])  # the newest is kept
    assert tables.builds == MAX_TABLES + 1
    assert tables.answer(PodRequest(PodRole.UNMANAGED, 0), ["t0"]) == b"[]"  # nothing to fill: scores 0
    assert tables.builds == MAX_TABLES + 2


def test_a_name_that_needs_escaping_is_escaped() -> None:
    assert json.loads(entry('n"\\\u2028', 3)) == {"Host": 'n"\\\u2028', "Score": 3}


def test_a_view_without_tables_is_scored_from_scratch() -> None:
    assert ClusterView().scores is None
    assert isinstance(LiveView().view.scores, ScoreTables)


def test_a_loaned_nodes_score_does_not_depend_on_the_other_nodes_named() -> None:
    """Its safety is its place in the whole reclaim order: kube-scheduler sends a different sample of nodes to
    each request, and a node must not score higher for being named beside nodes reclaimed earlier."""
    live = LiveView()
    for index in range(4):
        live.set_node(f"i{index}", Node.model_validate(node(f"i{index}", "inference", T4, state="loaned")))
    live.refresh_ranks()
    ranks = {name: view.reclaim_rank for name, view in live.view.nodes.items()}
    first, last = min(ranks, key=ranks.__getitem__), max(ranks, key=ranks.__getitem__)
    assert live.view.last_rank() == ranks[last] == 3
    tables = live.scores
    flexible = PodRequest(PodRole.TRAINING_FLEXIBLE, 1, gpu_types=frozenset({T4}))
    # A name the view does not know scores 0, so the answers' lowest is 0 and the scores are whole.
    alone = json.loads(tables.answer(flexible, [first, "unknown"]))
    beside_earlier = json.loads(tables.answer(flexible, [first, last, "unknown"]))
    assert alone == beside_earlier[:1]
    assert beside_earlier[0]["Score"] < beside_earlier[1]["Score"]


@pytest.mark.parametrize("seed", range(20))
def test_an_answer_relative_to_the_lowest_changes_no_choice(seed: int) -> None:
    """kube-scheduler adds the extender's score (times its weight) to each node's total from its own plugins and
    picks a node with the highest total; a node left out of the answer gets nothing. Whatever those totals, the nodes
    it may pick are the same with the relative answer as with every node's whole score."""
    rng = random.Random(seed)
    view = settled_view(seed + 1000, 100)
    assert view.scores is not None
    last = highest_rank(view)
    for pod in requests(view, rng):
        names = list(view.nodes)
        whole = {name: score_nodes(pod, [view.nodes[name]], last)[0][1] for name in names}
        relative = {e["Host"]: e["Score"] for e in json.loads(view.scores.answer(pod, names))}
        for weight in (1, 5):
            own = {name: rng.randrange(0, 300) for name in names}  # kube-scheduler's plugins' total for each node

            def best(extender: dict[str, int], own: dict[str, int] = own, weight: int = weight) -> set[str]:
                totals = {name: total + weight * 10 * extender.get(name, 0) for name, total in own.items()}
                top = max(totals.values(), default=0)
                return {name for name, total in totals.items() if total == top}

            assert best(relative) == best(whole), (pod, weight)


@pytest.mark.parametrize("seed", range(10))
def test_answers_over_only_nodes_that_score_match_scoring_from_scratch(seed: int) -> None:
    """Two ways of answering meet here: when every node named scores above 0, the lowest is taken off each score;
    one name more that scores 0 (the answer joined from the encoded entries) leaves every score whole."""
    rng = random.Random(seed)
    view = settled_view(seed + 2000, 150)
    assert view.scores is not None
    last = highest_rank(view)
    all_above_zero = 0
    for pod in requests(view, rng):
        scoring = [name for name in view.nodes if score_nodes(pod, [view.nodes[name]], last)[0][1] > 0]
        rng.shuffle(scoring)
        for names in (scoring, [*scoring, "unknown"], ["unknown", *scoring, *scoring[:1]]):
            assert json.loads(view.scores.answer(pod, names)) == from_scratch(view, pod, names), (pod, names)
        all_above_zero += bool(scoring)
    assert all_above_zero > 0  # the first way was taken
