"""Placement: the extender's filter (hard rules, with reasons) and scores (preferences in 0..10).

Nodes are V100 training servers and T4 inference servers unless a test says otherwise; a training pod may carry the
GPU types its job was allocated, and then runs only on nodes of those types.
"""

from __future__ import annotations

import re

import pytest

from lyra.core import LoanState, NodeView, PodRequest, PodRole, Pool, filter_nodes, reclaim_order, score_nodes

from .builders import T4, V100, NodeBuilder, job, loaned, node, pod, snapshot, training

INFERENCE = PodRole.INFERENCE
BASE = PodRole.TRAINING_BASE
FLEXIBLE = PodRole.TRAINING_FLEXIBLE
UNMANAGED = PodRole.UNMANAGED

KINDS = {
    "training": node("n").training(),
    "serving": node("n").serving(),
    "idle": node("n").idle(),
    "loaned": node("n").loaned(),
    "reclaiming": node("n").reclaiming(),
}

# (role, node kind, None if the pod may run there else the refusal reason's pattern)
FILTER_TABLE = [
    (INFERENCE, "serving", None),
    (INFERENCE, "idle", None),
    (INFERENCE, "loaned", r"inference server loaned to training"),
    (INFERENCE, "reclaiming", r"inference server being reclaimed from training"),
    (INFERENCE, "training", r"training server: inference pods run only on inference servers"),
    (BASE, "training", None),
    (BASE, "loaned", None),
    (BASE, "reclaiming", r"inference server being reclaimed: no new training work"),
    (BASE, "serving", r"inference server serving, not loaned to training"),
    (BASE, "idle", r"inference server idle, not loaned to training"),
    (FLEXIBLE, "training", None),
    (FLEXIBLE, "loaned", None),
    (FLEXIBLE, "reclaiming", r"inference server being reclaimed: no new training work"),
    (FLEXIBLE, "serving", r"not loaned to training"),
    (FLEXIBLE, "idle", r"not loaned to training"),
    (UNMANAGED, "training", None),
    (UNMANAGED, "serving", None),
    (UNMANAGED, "idle", None),
    (UNMANAGED, "loaned", r"inference server loaned: reserved for Lyra training and reclaims"),
    (UNMANAGED, "reclaiming", r"inference server reclaiming: reserved for Lyra training and reclaims"),
]


@pytest.mark.parametrize(
    ("role", "kind", "refusal"),
    FILTER_TABLE,
    ids=[f"{role}-on-{kind}" for role, kind, _ in FILTER_TABLE],
)
def test_filter_rules(role: PodRole, kind: str, refusal: str | None) -> None:
    view = KINDS[kind].build()
    result = filter_nodes(pod(role, gpus=1), [view])
    score = dict(score_nodes(pod(role, gpus=1), [view]))["n"]
    if refusal is None:
        assert result.passed == ("n",)
        assert dict(result.failed) == {}
    else:
        assert result.passed == ()
        assert re.search(refusal, result.failed["n"]), result.failed["n"]
        assert score == 0, "a node the filter refuses scores 0"


@pytest.mark.parametrize(
    ("role", "kind", "refusal"),
    [c for c in FILTER_TABLE if c[0] in (INFERENCE, UNMANAGED)],
    ids=[f"{role}-on-{kind}" for role, kind, _ in FILTER_TABLE if role in (INFERENCE, UNMANAGED)],
)
def test_gpu_types_do_not_change_the_rules_of_other_pods(role: PodRole, kind: str, refusal: str | None) -> None:
    """Only training pods are held to their job's GPU types; inference and unmanaged pods keep their rules."""
    for gpu_type in (V100, T4, "NVIDIA-A100-SXM4-80GB"):
        view = KINDS[kind].type(gpu_type).build()
        result = filter_nodes(pod(role, gpus=1, types=[V100]), [view])
        assert (result.passed == ("n",)) is (refusal is None), (gpu_type, result.failed)


# (id, role, node, GPU types the job was allocated, None if the pod may run there else the refusal's pattern)
TYPE_TABLE = [
    ("base-on-its-type", BASE, node("n").training().type(V100), [V100], None),
    ("base-on-another-type", BASE, node("n").training().type(T4), [V100], r"GPU type T4: the job was allocated V100"),
    ("flexible-on-its-loaned-type", FLEXIBLE, node("n").loaned().type(T4), [T4], None),
    (
        "flexible-on-another-loaned-type",
        FLEXIBLE,
        node("n").loaned().type(T4),
        [V100],
        r"GPU type T4: the job was allocated V100",
    ),
    ("one-of-several-types", BASE, node("n").loaned().type(T4), [V100, T4], None),
    ("any-type", FLEXIBLE, node("n").loaned().type(T4), None, None),
    (
        "node-of-unknown-type",
        BASE,
        node("n").training().type(""),
        [T4, V100],
        r"GPU type unknown: the job was allocated T4, V100",
    ),
    # The state's refusal comes first: a reclaiming node takes no new training work, whatever its type.
    ("reclaiming-of-another-type", BASE, node("n").reclaiming().type(T4), [V100], r"being reclaimed"),
]


@pytest.mark.parametrize(
    ("role", "builder", "types", "refusal"), [c[1:] for c in TYPE_TABLE], ids=[c[0] for c in TYPE_TABLE]
)
def test_training_pods_run_only_on_their_jobs_gpu_types(
    role: PodRole, builder: NodeBuilder, types: list[str] | None, refusal: str | None
) -> None:
    view = builder.build()
    request = pod(role, gpus=1, job="j", on={"n": 1}, types=types)
    result = filter_nodes(request, [view])
    score = dict(score_nodes(request, [view]))["n"]
    if refusal is None:
        assert result.passed == ("n",)
        assert score >= 1
    else:
        assert result.passed == ()
        assert re.search(refusal, result.failed["n"]), result.failed["n"]
        assert score == 0, "a node of a type the job was not allocated scores 0"


def test_a_node_of_the_jobs_type_wins_over_a_better_node_of_another_type() -> None:
    views = [
        node("t4").loaned(rank=9).type(T4).free(1).build(),
        node("v100").loaned(rank=0).type(V100).build(),
    ]
    for role in (BASE, FLEXIBLE):
        scores = dict(score_nodes(pod(role, gpus=1, job="j", on={"t4": 3}, types=[V100]), views))
        assert scores["t4"] == 0 < scores["v100"], (role, scores)
        assert filter_nodes(pod(role, gpus=1, types=[V100]), views).passed == ("v100",)


@pytest.mark.parametrize("role", list(PodRole), ids=str)
def test_filter_refuses_nodes_without_enough_free_gpus(role: PodRole) -> None:
    kind = "serving" if role in (INFERENCE, UNMANAGED) else "training"
    view = KINDS[kind].free(2).build()
    result = filter_nodes(pod(role, gpus=4), [view])
    assert result.passed == ()
    assert result.failed["n"] == "needs 4 nvidia.com/gpu, 2 of 8 free"
    assert score_nodes(pod(role, gpus=4), [view]) == [("n", 0)]


def test_filter_keeps_input_order_and_reports_every_refusal() -> None:
    views = [node("b").loaned().build(), node("a").serving().build(), node("c").training().free(0).build()]
    result = filter_nodes(pod(FLEXIBLE, gpus=1), views)
    assert result.passed == ("b",)
    assert set(result.failed) == {"a", "c"}


# Pairwise preferences: with both nodes (and any context nodes) scored together, ``better`` must score strictly
# higher than ``worse``. (id, role, pod GPUs, job nodes, better, worse, context)
PREFERENCES: list[tuple[str, PodRole, int, dict[str, int], NodeBuilder, NodeBuilder, list[NodeBuilder]]] = [
    ("inference-serving-over-idle", INFERENCE, 1, {}, node("a").serving(), node("b").idle(), []),
    # A replica bound to an idle server before the operator's pass marked another server serving for it: the next
    # replica joins it, so one server serves both and the empty one goes back to idle, to be lent.
    (
        "inference-a-server-running-a-replica-over-an-empty-serving-one",
        INFERENCE,
        1,
        {},
        node("a").idle().free(7),
        node("b").serving(),
        [],
    ),
    ("inference-best-fit-among-serving", INFERENCE, 1, {}, node("a").serving().free(1), node("b").serving(), []),
    ("inference-best-fit-among-busy", INFERENCE, 1, {}, node("a").serving().free(3), node("b").idle().free(6), []),
    ("inference-best-fit-among-idle", INFERENCE, 2, {}, node("a").idle().free(2), node("b").idle(), []),
    (
        "base-prefers-training-server",
        BASE,
        1,
        {"b": 3},
        node("a").training(),
        node("b").loaned(rank=9).free(1),
        [],
    ),
    (
        "flexible-prefers-loaned-server",
        FLEXIBLE,
        1,
        {"b": 3},
        node("a").loaned(rank=0),
        node("b").training().free(1),
        [node("z").loaned(rank=9)],
    ),
    (
        "locality-among-loaned",
        FLEXIBLE,
        1,
        {"a": 2},
        node("a").loaned(rank=3),
        node("b").loaned(rank=3),
        [node("z").loaned(rank=9)],
    ),
    (
        "locality-among-training",
        BASE,
        1,
        {"a": 2},
        node("a").training(),
        node("b").training(),
        [],
    ),
    (
        "packing-among-loaned",
        FLEXIBLE,
        1,
        {},
        node("a").loaned(rank=3).free(1),
        node("b").loaned(rank=3),
        [node("z").loaned(rank=9)],
    ),
    (
        "packing-among-training",
        BASE,
        2,
        {},
        node("a").training().free(2),
        node("b").training(),
        [],
    ),
    (
        "safety-among-loaned",
        FLEXIBLE,
        1,
        {},
        node("a").loaned(rank=9),
        node("b").loaned(rank=0),
        [],
    ),
    (
        "unmanaged-best-fit",
        UNMANAGED,
        1,
        {},
        node("a").training().free(1),
        node("b").training(),
        [],
    ),
]


@pytest.mark.parametrize(
    ("request_", "better", "worse", "context"),
    [(pod(role, gpus, "j", on), better, worse, context) for _, role, gpus, on, better, worse, context in PREFERENCES],
    ids=[c[0] for c in PREFERENCES],
)
def test_score_preferences(
    request_: PodRequest, better: NodeBuilder, worse: NodeBuilder, context: list[NodeBuilder]
) -> None:
    views = [worse.build(), better.build(), *(c.build() for c in context)]
    scores = dict(score_nodes(request_, views))
    assert scores[views[1].name] > scores[views[0].name] > 0, scores


def test_locality_never_loses_among_loaned() -> None:
    """A loaned node already hosting the job scores at least as high as any other loaned node, however packed
    or safe (scores are quantised to the extender's 0..10, so the best other node may tie)."""
    others = [node(f"o{free}-{rank}").loaned(rank=rank).free(free) for free in range(1, 9) for rank in (0, 5, 9)]
    local = [node(f"j{free}-{rank}").loaned(rank=rank).free(free) for free in range(1, 9) for rank in (0, 5, 9)]
    views = [b.build() for b in others + local]
    job_nodes = {v.name: 1 for v in views if v.name.startswith("j")}
    scores = dict(score_nodes(pod(FLEXIBLE, gpus=1, job="j", on=job_nodes), views))
    assert min(scores[n] for n in job_nodes) >= max(s for n, s in scores.items() if n not in job_nodes)


def test_preferred_kind_always_outranks_the_other() -> None:
    """Base workers: every feasible training node beats every loaned node; flexible workers: the reverse."""
    views = [node(f"t{f}").training().free(f).build() for f in range(1, 9)]
    views += [node(f"l{f}-{r}").loaned(rank=r).free(f).build() for f in range(1, 9) for r in (0, 4, 8)]
    on = {v.name: 1 for v in views}
    for role, preferred in ((BASE, "t"), (FLEXIBLE, "l")):
        scores = score_nodes(pod(role, gpus=1, job="j", on=on), views)
        best_other = max(s for n, s in scores if not n.startswith(preferred))
        worst_preferred = min(s for n, s in scores if n.startswith(preferred))
        assert worst_preferred > best_other, (role, scores)
        assert worst_preferred >= 6
        assert best_other <= 5


def test_scores_follow_input_order_and_stay_in_range() -> None:
    views = [
        node("z").loaned(rank=4).free(3).build(),
        node("a").training().free(8).build(),
        node("m").serving().free(0).build(),
        node("b").idle().free(5).build(),
        node("r").reclaiming().free(8).build(),
    ]
    for role in PodRole:
        for gpus in range(10):
            scores = score_nodes(pod(role, gpus=gpus), views)
            assert [n for n, _ in scores] == [v.name for v in views]
            assert all(0 <= s <= 10 for _, s in scores), (role, gpus, scores)


def test_reclaim_rank_is_ignored_off_loaned_nodes() -> None:
    a = NodeView("a", training("a").pool, None, 8, 8, reclaim_rank=0, gpu_type=V100)
    b = NodeView("b", training("b").pool, None, 8, 8, reclaim_rank=99, gpu_type=V100)
    for role in (BASE, FLEXIBLE, UNMANAGED):
        scores = dict(score_nodes(pod(role, gpus=1), [a, b]))
        assert scores["a"] == scores["b"]


def test_flexible_workers_go_where_reclaim_comes_last() -> None:
    """Placement fed with ``reclaim_order``: a new flexible worker avoids the server the next reclaim takes.

    l1 holds only a flexible worker (free to reclaim), l0 a whole inelastic job: the order is l1 then l0, both
    hold 4 GPUs, so packing ties and the reclaim order decides.
    """
    snap = snapshot(
        [loaned("l0"), loaned("l1"), training("t0")],
        [
            job("p").gpus(4).workers(1).on({"l0": 1}),
            job("q").gpus(4).workers(1, 2).mixing().on({"l1": 1, "t0": 1}),
        ],
    )
    order = reclaim_order(snap)
    assert order == ("l1", "l0")
    used = snap.used_gpus()
    views = [
        NodeView(name, snap.server(name).pool, snap.server(name).state, 8, 8 - used[name], rank, T4)
        for rank, name in enumerate(order)
    ]
    scores = dict(score_nodes(pod(FLEXIBLE, gpus=2, job="new"), views))
    assert scores["l0"] > scores["l1"], scores


def test_filter_marks_rule_refusals_unresolvable_and_full_nodes_resolvable() -> None:
    nodes = [
        NodeView("t", Pool.TRAINING, None, 8, 2, gpu_type="A100"),
        NodeView("small", Pool.TRAINING, None, 2, 2, gpu_type="A100"),
        NodeView("s", Pool.INFERENCE, LoanState.SERVING, 8, 8, gpu_type="T4"),
    ]
    result = filter_nodes(PodRequest(PodRole.TRAINING_BASE, 4, gpu_types=frozenset({"A100"})), nodes)
    assert result.passed == ()
    assert set(result.failed) == {"t", "small", "s"}
    assert result.unresolvable == {"small", "s"}  # preemption can free GPUs on t, not grow small or open s
