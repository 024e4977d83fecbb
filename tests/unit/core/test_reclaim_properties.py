"""Properties of ``plan_reclaim`` and ``reclaim_order`` on random clusters (hypothesis, derandomised)."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lyra.core import (
    ClusterSnapshot,
    LoanState,
    Pool,
    ReclaimError,
    ReclaimStrategy,
    Server,
    TrainingJob,
    plan_reclaim,
    reclaim_order,
)

from .builders import CATALOG
from .plan_checks import doomed, reclaim_outcome
from .strategies import PROPERTY, reclaim_snapshots


def _loaned(snap: ClusterSnapshot) -> list[str]:
    return [s.name for s in snap.servers if s.state is LoanState.LOANED]


@PROPERTY
@given(snap=reclaim_snapshots(), data=st.data(), strategy=st.sampled_from(list(ReclaimStrategy)))
def test_plan_takes_exactly_k_loaned_servers_or_refuses(
    snap: ClusterSnapshot, data: st.DataObject, strategy: ReclaimStrategy
) -> None:
    loaned = _loaned(snap)
    count = data.draw(st.integers(0, len(loaned) + 2), label="count")
    if count > len(loaned):
        with pytest.raises(ReclaimError):
            plan_reclaim(snap, count, strategy=strategy)
        return
    plan = plan_reclaim(snap, count, strategy=strategy)
    assert len(plan.servers) == len(set(plan.servers)) == count
    assert set(plan.servers) <= set(loaned)
    assert list(plan.servers) == sorted(plan.servers)
    assert plan.strategy is strategy


@PROPERTY
@given(snap=reclaim_snapshots(), data=st.data(), strategy=st.sampled_from(list(ReclaimStrategy)))
def test_after_the_plan_no_surviving_job_is_below_its_base(
    snap: ClusterSnapshot, data: st.DataObject, strategy: ReclaimStrategy
) -> None:
    count = data.draw(st.integers(0, len(_loaned(snap))), label="count")
    plan = plan_reclaim(snap, count, strategy=strategy)
    outcome = reclaim_outcome(snap, plan.servers)
    leaving = {s.name for s in snap.servers if s.state is LoanState.RECLAIMING}
    assert set(plan.preempted) == outcome.preempted, "preempted iff it loses more than it can spare"
    assert dict(plan.scaled_in) == outcome.scaled_in
    assert set(plan.already_preempted) == outcome.already_preempted, "doomed jobs are not new preemptions"
    for spec in snap.jobs:
        if spec.name in plan.scaled_in:
            staying = spec.workers - sum(n for s, n in spec.placement.items() if s in leaving | set(plan.servers))
            assert staying >= spec.min_workers, (spec.name, staying)
    assert set(plan.scaled_in).isdisjoint(plan.preempted)
    assert set(plan.already_preempted).isdisjoint(plan.preempted)
    assert set(plan.already_preempted) <= doomed(snap)
    assert {s: dict(e) for s, e in plan.evictions.items()} == {
        s: {j.name: j.placement[s] for j in snap.jobs if s in j.placement} for s in plan.servers
    }, "evictions list every worker on the reclaimed servers, doomed jobs' included"
    lost_work = sum(j.gpus * j.seconds_since_checkpoint for j in snap.jobs if j.name in plan.preempted)
    assert plan.lost_gpu_seconds == pytest.approx(lost_work)


@PROPERTY
@given(snap=reclaim_snapshots(), data=st.data(), seed=st.integers(0, 2**16))
def test_same_input_same_plan_in_any_order(snap: ClusterSnapshot, data: st.DataObject, seed: int) -> None:
    count = data.draw(st.integers(0, len(_loaned(snap))), label="count")
    rng = random.Random(seed)
    servers, jobs = list(snap.servers), list(snap.jobs)
    rng.shuffle(servers)
    rng.shuffle(jobs)
    shuffled = ClusterSnapshot(tuple(servers), tuple(jobs), snap.gpus)
    for strategy in ReclaimStrategy:
        plan = plan_reclaim(snap, count, strategy=strategy, seed=seed)
        assert plan_reclaim(snap, count, strategy=strategy, seed=seed) == plan
        assert plan_reclaim(shuffled, count, strategy=strategy, seed=seed) == plan
    assert reclaim_order(shuffled) == reclaim_order(snap)


@PROPERTY
@given(snap=reclaim_snapshots(), data=st.data())
def test_empty_loaned_servers_go_first_and_cost_nothing(snap: ClusterSnapshot, data: st.DataObject) -> None:
    """Servers with no workers, or only workers of jobs an earlier reclaim doomed, cost nothing and go first."""
    gone = doomed(snap)
    busy = {s for j in snap.jobs if j.name not in gone for s in j.placement}
    empty = [s for s in _loaned(snap) if s not in busy]
    count = data.draw(st.integers(0, len(empty)), label="count")
    plan = plan_reclaim(snap, count)
    assert set(plan.servers) <= set(empty)
    assert (plan.preempted, dict(plan.scaled_in), plan.lost_gpu_seconds) == ((), {}, 0.0)
    assert set(plan.already_preempted) == {j for j in gone if set(snap.job(j).placement) & set(plan.servers)}
    order = reclaim_order(snap)
    assert sorted(order) == sorted(_loaned(snap))
    assert set(order[: len(empty)]) == set(empty)


@PROPERTY
@given(snap=reclaim_snapshots())
def test_reclaiming_every_loaned_server_takes_them_all(snap: ClusterSnapshot) -> None:
    loaned = _loaned(snap)
    plan = plan_reclaim(snap, len(loaned))
    assert plan.servers == tuple(sorted(loaned))


#: The smallest cluster on which an old local-search bug showed: d, left below its base by r0, had a negative
#: slack. It is now doomed (``already_preempted``) and costs nothing.
NEGATIVE_SLACK = ClusterSnapshot(
    (
        Server("l0", Pool.INFERENCE, "T4", 8, LoanState.LOANED),
        Server("l1", Pool.INFERENCE, "T4", 8, LoanState.LOANED),
        Server("r0", Pool.INFERENCE, "T4", 8, LoanState.RECLAIMING),
    ),
    (
        TrainingJob("a", 1, 1, 1, 100.0, placement={"l0": 1}, seconds_since_checkpoint=600.0),
        TrainingJob("b", 1, 1, 1, 100.0, placement={"l1": 1}),
        TrainingJob("d", 1, 2, 2, 100.0, placement={"r0": 1, "l1": 1}),
    ),
    CATALOG,
)


@PROPERTY
@example(snap=NEGATIVE_SLACK, count=1)
@given(snap=reclaim_snapshots(), count=st.integers(0, 8))
def test_local_search_never_preempts_more_than_the_greedy(snap: ClusterSnapshot, count: int) -> None:
    """Lyra's plan starts from the greedy's first ``k`` picks (``reclaim_order``) and only accepts swaps that
    lower the cost, preemptions first: it never preempts more jobs than the greedy alone."""
    count = min(count, len(_loaned(snap)))
    greedy = reclaim_outcome(snap, reclaim_order(snap)[:count]).preempted
    assert len(plan_reclaim(snap, count).preempted) <= len(greedy)
