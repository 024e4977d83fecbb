"""Reclaim: which loaned servers go back to inference, criterion by criterion, plus the poster's example.

Loaned servers are T4 inference servers and training servers V100s, so a job on both opts in to mixing types.
Jobs an earlier reclaim already left below their base (doomed) cost a plan nothing: they are reported in
``already_preempted``, never as new preemptions.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from lyra.core import ClusterSnapshot, LoanState, ReclaimError, ReclaimStrategy, Server, plan_reclaim, reclaim_order

from .builders import JobBuilder, cluster, job, loaned, reclaiming, serving, snapshot, training
from .plan_checks import reclaim_outcome


def min_preemptions(snap: ClusterSnapshot, count: int) -> int:
    """The exact minimum number of new preemptions over every choice of ``count`` loaned servers."""
    loaned_servers = [s.name for s in snap.servers if s.state is LoanState.LOANED]
    return min(len(reclaim_outcome(snap, chosen).preempted) for chosen in itertools.combinations(loaned_servers, count))


def poster_example() -> tuple[list[Server], list[JobBuilder]]:
    """The poster's 2-server reclaim table: jobs a, b, c, p co-hosted by 2, 1, 2, 2 servers (per-server values
    0.5, 1, 0.5, 0.5). The poster prints only the table; this layout is one that matches it:
    s1 = {a, b}, s2 = {a, c}, s3 = {c, p}, s4 = {p}; every job inelastic, so any reclaim preempts."""
    servers = [loaned("s1"), loaned("s2"), loaned("s3"), loaned("s4")]
    jobs = [
        job("a").workers(2).on({"s1": 1, "s2": 1}),
        job("b").workers(2).on({"s1": 2}),
        job("c").workers(2).on({"s2": 1, "s3": 1}),
        job("p").workers(2).on({"s3": 1, "s4": 1}),
    ]
    return servers, jobs


def test_poster_reclaim_example() -> None:
    servers, jobs = poster_example()
    snap = snapshot(servers, jobs)
    fractions = {j.name: 1 / len(j.placement) for j in snap.jobs}
    assert fractions == {"a": 0.5, "b": 1.0, "c": 0.5, "p": 0.5}, "the poster's per-server values"
    values = {s.name: sum(fractions[j.name] for j in snap.jobs if s.name in j.placement) for s in servers}
    assert values == {"s1": 1.5, "s2": 1.0, "s3": 1.0, "s4": 0.5}

    assert min_preemptions(snap, 2) == 2
    for strategy in (ReclaimStrategy.LYRA, ReclaimStrategy.POSTER):
        plan = plan_reclaim(snap, 2, strategy=strategy)
        # s4 first (0.5); preempting p drops s3 to 0.5 (c only), so s3 next: c and p, the optimum.
        assert plan.servers == ("s3", "s4"), strategy
        assert plan.preempted == ("c", "p"), strategy
    assert reclaim_order(snap)[:2] == ("s4", "s3")

    # Without step (c), updating the values, s2 would tie s3 at 1.0 and win by name: a, c and p preempted.
    static = sorted(values, key=lambda s: (values[s], s))[:2]
    assert static == ["s4", "s2"]
    assert reclaim_outcome(snap, static).preempted == {"a", "c", "p"}
    # Least GPUs used: s4 (1 GPU), then s2 and s3 (2 each) by name: the same needless third preemption.
    naive = plan_reclaim(snap, 2, strategy=ReclaimStrategy.LEAST_GPUS_USED)
    assert naive.servers == ("s2", "s4")
    assert naive.preempted == ("a", "c", "p")


# (id, servers, jobs, count, expected servers, expected preempted, expected scaled_in)
SCENARIOS: list[tuple[str, list[Server], list[JobBuilder], int, tuple[str, ...], tuple[str, ...], dict[str, int]]] = [
    (
        "idle-loaned-servers-first",
        [loaned("l0"), loaned("l1"), loaned("l2")],
        [job("x").on({"l0": 1}), job("y").workers(1, 2).on({"l1": 1, "l0": 1})],
        1,
        ("l2",),
        (),
        {},
    ),
    (
        "flexible-only-server-is-free",
        [loaned("l0"), loaned("l1"), training("t0")],
        [job("e").workers(1, 2).mixing().on({"t0": 1, "l0": 1}), job("x").on({"l1": 1})],
        1,
        ("l0",),
        (),
        {"e": 1},
    ),
    (
        "scale-in-up-to-the-flexible-workers",
        [loaned("l0"), loaned("l1"), loaned("l2")],
        [job("e").workers(2, 6).on({"l0": 2, "l1": 2, "l2": 2}), job("x").on({"l2": 1})],
        2,
        ("l0", "l1"),
        (),
        {"e": 4},
    ),
    (
        "beyond-the-flexible-workers-preempts",
        [loaned("l0"), loaned("l1"), loaned("l2")],
        [job("e").workers(4, 6).on({"l0": 2, "l1": 2, "l2": 2})],
        2,
        ("l0", "l1"),
        ("e",),
        {},
    ),
    (
        "workers-already-reclaiming-use-up-the-slack",
        [loaned("l0"), loaned("l1"), reclaiming("r0")],
        [job("e").workers(2, 3).on({"r0": 1, "l0": 2}).checkpointed(600), job("x").on({"l1": 1})],
        1,
        ("l1",),
        ("x",),
        {},
    ),
    (
        "lost-work-breaks-preemption-ties",
        [loaned("l0"), loaned("l1")],
        [job("old").gpus(2).on({"l0": 1}).checkpointed(600), job("fresh").gpus(2).on({"l1": 1}).checkpointed(60)],
        1,
        ("l1",),
        ("fresh",),
        {},
    ),
    (
        "fewer-scaled-workers-breaks-ties",
        [loaned("l0"), loaned("l1"), training("t0")],
        [
            job("e").workers(1, 4).mixing().on({"l0": 2, "t0": 1}),
            job("f").workers(1, 4).mixing().on({"l1": 1, "t0": 1}),
        ],
        1,
        ("l1",),
        (),
        {"f": 1},
    ),
    (
        "names-break-remaining-ties",
        [loaned("l1"), loaned("l0"), loaned("l2")],
        [job("x").on({"l0": 1}), job("y").on({"l1": 1}), job("z").on({"l2": 1})],
        2,
        ("l0", "l1"),
        ("x", "y"),
        {},
    ),
    (
        # y spans two loaned servers (0.5 each); x has one loaned server and two training ones. Its fraction counts
        # loaned servers only (1.0): preempting x frees just l0, so taking y's pair costs one job for two servers.
        "fraction-counts-loaned-servers-only",
        [loaned("l0"), loaned("l1"), loaned("l2"), training("t0"), training("t1")],
        [job("x").workers(3).mixing().on({"l0": 1, "t0": 1, "t1": 1}), job("y").workers(2).on({"l1": 1, "l2": 1})],
        2,
        ("l1", "l2"),
        ("y",),
        {},
    ),
    (
        # The greedy takes l0 first (j1's two workers there are flexible), which spends j1's slack; then l1 or l2
        # preempts both jobs. The swap l0 -> l2 preempts only j0 and scales j1 in by 2.
        "local-search-repairs-the-greedy",
        [loaned("l0"), loaned("l1"), loaned("l2")],
        [job("j0").workers(3).on({"l1": 2, "l2": 1}), job("j1").workers(2, 4).on({"l0": 2, "l1": 1, "l2": 1})],
        2,
        ("l1", "l2"),
        ("j0",),
        {"j1": 2},
    ),
    (
        "nothing-to-reclaim",
        [loaned("l0")],
        [job("x").on({"l0": 1})],
        0,
        (),
        (),
        {},
    ),
    (
        "every-loaned-server",
        [loaned("l0"), loaned("l1"), serving("s0")],
        [job("x").workers(1, 3).on({"l0": 1, "l1": 1})],
        2,
        ("l0", "l1"),
        ("x",),
        {},
    ),
]


@pytest.mark.parametrize(
    ("snap", "count", "servers_out", "preempted", "scaled_in"),
    [(snapshot(servers, jobs), *rest) for _, servers, jobs, *rest in SCENARIOS],
    ids=[c[0] for c in SCENARIOS],
)
def test_reclaim_scenarios(
    snap: ClusterSnapshot,
    count: int,
    servers_out: tuple[str, ...],
    preempted: tuple[str, ...],
    scaled_in: dict[str, int],
) -> None:
    plan = plan_reclaim(snap, count)
    assert (plan.servers, plan.preempted, dict(plan.scaled_in)) == (servers_out, preempted, scaled_in)
    assert plan.strategy is ReclaimStrategy.LYRA
    assert len(plan.preempted) == min_preemptions(snap, count)
    assert plan.already_preempted == ()


def test_greedy_alone_misses_what_the_local_search_finds() -> None:
    servers = [loaned("l0"), loaned("l1"), loaned("l2")]
    jobs = [job("j0").workers(3).on({"l1": 2, "l2": 1}), job("j1").workers(2, 4).on({"l0": 2, "l1": 1, "l2": 1})]
    snap = snapshot(servers, jobs)
    assert reclaim_order(snap)[0] == "l0"
    assert len(plan_reclaim(snap, 2, strategy=ReclaimStrategy.POSTER).preempted) == 2
    assert len(plan_reclaim(snap, 2).preempted) == 1


# (id, servers, jobs, count, expected servers, new preemptions, already preempted, evictions)
DOOMED: list[
    tuple[
        str,
        list[Server],
        list[JobBuilder],
        int,
        tuple[str, ...],
        tuple[str, ...],
        tuple[str, ...],
        dict[str, dict[str, int]],
    ]
] = [
    (
        # d keeps 1 of its 2 base workers once r0 is back: doomed. l0 holds only d, so it costs nothing.
        "a-doomed-job-costs-nothing",
        [loaned("l0"), loaned("l1"), reclaiming("r0")],
        [job("d").workers(2).on({"r0": 1, "l0": 1}), job("x").on({"l1": 1})],
        1,
        ("l0",),
        (),
        ("d",),
        {"l0": {"d": 1}},
    ),
    (
        # d is doomed by r0, so l1 costs one preemption (b, no work lost), l0 one with 600 GPU-seconds lost (a).
        # (Counting d as a new preemption on l1 would make l0 the cheaper server.)
        "doomed-job-does-not-make-a-server-dearer",
        [loaned("l0"), loaned("l1"), reclaiming("r0")],
        [
            job("a").on({"l0": 1}).checkpointed(600),
            job("b").on({"l1": 1}),
            job("d").workers(2).on({"r0": 1, "l1": 1}),
        ],
        1,
        ("l1",),
        ("b",),
        ("d",),
        {"l1": {"b": 1, "d": 1}},
    ),
    (
        # l0 (empty) and l1 (only the doomed d) both cost nothing; the name decides, and d is not on l0.
        "doomed-job-on-servers-not-taken-is-not-reported",
        [loaned("l0"), loaned("l1"), loaned("l2"), reclaiming("r0")],
        [job("d").workers(3).checkpointed(600).on({"r0": 2, "l1": 1}), job("x").on({"l2": 1})],
        1,
        ("l0",),
        (),
        (),
        {"l0": {}},
    ),
    (
        "every-server-with-a-doomed-job",
        [loaned("l0"), loaned("l1"), reclaiming("r0")],
        [job("d").gpus(2).workers(4, 5).checkpointed(600).on({"r0": 2, "l0": 1, "l1": 2})],
        2,
        ("l0", "l1"),
        (),
        ("d",),
        {"l0": {"d": 1}, "l1": {"d": 2}},
    ),
]


@pytest.mark.parametrize(
    ("snap", "count", "servers_out", "preempted", "already", "evictions"),
    [(snapshot(servers, jobs), *rest) for _, servers, jobs, *rest in DOOMED],
    ids=[c[0] for c in DOOMED],
)
def test_jobs_an_earlier_reclaim_preempted(
    *,
    snap: ClusterSnapshot,
    count: int,
    servers_out: tuple[str, ...],
    preempted: tuple[str, ...],
    already: tuple[str, ...],
    evictions: dict[str, dict[str, int]],
) -> None:
    plan = plan_reclaim(snap, count)
    assert (plan.servers, plan.preempted, plan.already_preempted) == (servers_out, preempted, already)
    assert {s: dict(e) for s, e in plan.evictions.items()} == evictions, "evictions list every worker leaving"
    assert plan.lost_gpu_seconds == sum(j.gpus * j.seconds_since_checkpoint for j in snap.jobs if j.name in preempted)
    for strategy in ReclaimStrategy:
        other = plan_reclaim(snap, count, strategy=strategy)
        assert set(other.already_preempted).isdisjoint(other.preempted), strategy


def test_plan_details() -> None:
    snap = snapshot(
        [loaned("l0"), loaned("l1"), training("t0")],
        [
            job("a").gpus(2).workers(2).mixing().on({"l0": 1, "t0": 1}).checkpointed(100),
            job("b").gpus(1).workers(1, 3).mixing().on({"l0": 1, "t0": 2}),
            job("c").on({"l1": 1}).checkpointed(5),
        ],
    )
    plan = plan_reclaim(snap, 1)
    assert plan.servers == ("l1",)
    plan = plan_reclaim(snap, 2)
    assert plan.servers == ("l0", "l1")
    assert plan.preempted == ("a", "c")
    assert dict(plan.scaled_in) == {"b": 1}
    assert {s: dict(e) for s, e in plan.evictions.items()} == {"l0": {"a": 1, "b": 1}, "l1": {"c": 1}}
    assert plan.lost_gpu_seconds == 4 * 100 + 1 * 5, "GPUs of the whole job times seconds since checkpoint"
    assert (plan.cost.preempted, plan.cost.lost_gpu_seconds, plan.cost.scaled_in_workers) == (2, 405.0, 1)


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (3, r"cannot reclaim 3 servers: only 2 are loaned \(l0, l1\)"),
        (-1, r"the number of servers to reclaim must be an integer >= 0"),
        (1.0, r"the number of servers to reclaim must be an integer >= 0"),
    ],
    ids=["more-than-loaned", "negative", "float"],
)
def test_reclaim_refuses_impossible_requests(count: Any, message: str) -> None:
    snap = snapshot([loaned("l0"), loaned("l1"), reclaiming("r0"), serving("s0"), training("t0")])
    with pytest.raises(ReclaimError, match=message):
        plan_reclaim(snap, count)


def test_reclaim_error_lists_no_names_on_large_clusters() -> None:
    snap = snapshot([loaned(f"l{i:02d}") for i in range(11)])
    with pytest.raises(ReclaimError, match=r"only 11 are loaned$"):
        plan_reclaim(snap, 12)


def test_random_strategy_is_reproducible_from_its_seed() -> None:
    snap = snapshot([loaned(f"l{i}") for i in range(10)])
    plans = {plan_reclaim(snap, 3, strategy=ReclaimStrategy.RANDOM, seed=s).servers for s in range(20)}
    assert len(plans) > 1, "different seeds pick different servers"
    for seed in range(5):
        first = plan_reclaim(snap, 3, strategy=ReclaimStrategy.RANDOM, seed=seed)
        assert plan_reclaim(snap, 3, strategy=ReclaimStrategy.RANDOM, seed=seed) == first


def test_reclaim_order_covers_every_loaned_server_once() -> None:
    servers, jobs = poster_example()
    snap = snapshot([*servers, loaned("s5"), reclaiming("r0"), training("t0")], jobs)
    order = reclaim_order(snap)
    assert sorted(order) == ["s1", "s2", "s3", "s4", "s5"]
    assert order[0] == "s5", "the empty loaned server comes first"
    assert reclaim_order(snapshot([training("t0")])) == ()


def test_a_gpu_type_limits_the_candidates_to_its_loaned_servers() -> None:
    snap = (
        cluster(loaned("t4-a"), loaned("t4-b"), loaned("v-a", gpu_type="V100"))
        .jobs(job("busy").workers(1).on({"t4-a": 1}), job("on-v100").workers(1).on({"v-a": 1}).types("V100"))
        .build()
    )
    plan = plan_reclaim(snap, 1, gpu_type="T4")
    assert plan.servers == ("t4-b",)
    assert plan.preempted == ()
    assert plan_reclaim(snap, 1, gpu_type="V100").preempted == ("on-v100",)
    with pytest.raises(ReclaimError, match="cannot reclaim 3 T4 servers: only 2 are loaned"):
        plan_reclaim(snap, 3, gpu_type="T4")
