"""One turn of the loan cycle: serve or idle, lend after the lend delay, reclaim at once, drain, return, force."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import pytest

from lyra.core import ClusterSnapshot, InvalidClusterError, LoanState
from lyra.core.loan_cycle import (
    InferenceServer,
    LoanCycle,
    LoanSettings,
    Transition,
    plan_loan_cycle,
)
from lyra.core.reclaim import plan_reclaim

from .builders import T4, V100, JobBuilder, cluster, job, training

SERVING, IDLE, LOANED, RECLAIMING = LoanState.SERVING, LoanState.IDLE, LoanState.LOANED, LoanState.RECLAIMING
SETTINGS = LoanSettings(headroom=0, lend_delay_s=60.0, reclaim_deadline_s=300.0)


def server(name: str, state: LoanState, **fields: object) -> InferenceServer:
    return InferenceServer(name, T4, 8, state, **fields)  # type: ignore[arg-type]


def no_training() -> ClusterSnapshot:
    raise AssertionError("the training side is read only when a server is reclaimed or reclaiming")


def turn(
    servers: Sequence[InferenceServer],
    demand: int,
    *,
    now: float = 1000.0,
    settings: LoanSettings = SETTINGS,
    jobs: Sequence[JobBuilder] | None = None,
) -> LoanCycle:
    """One turn; ``jobs=None``: the training side must not be read."""

    def training_side() -> ClusterSnapshot:
        return cluster(training("t0", gpu_type=T4), *(s.view for s in servers)).jobs(*(jobs or ())).build()

    return plan_loan_cycle(
        servers, {T4: demand}, no_training if jobs is None else training_side, now=now, settings=settings
    )


def moves(cycle: LoanCycle) -> list[tuple[str, str]]:
    return [(c.server, c.transition.value) for c in cycle.changes]


def states(cycle: LoanCycle) -> Mapping[str, str]:
    return {name: state.value for name, state in cycle.states().items()}


# ------------------------------------------------------------------------------------------------ serve or idle


def test_replicas_serve_then_the_demand_keeps_serving_servers_before_idle_ones() -> None:
    # a runs replicas; demand 3 keeps two empty servers too: b (already serving) first, then the idle one that is
    # lent last (d: the reverse of the lend order, which takes c first).
    servers = [server("a", IDLE, replicas=2), server("b", SERVING), server("c", IDLE), server("d", IDLE)]
    cycle = turn(servers, 3)
    assert moves(cycle) == [("a", "serve"), ("d", "serve")]
    assert states(cycle) == {"a": "serving", "b": "serving", "c": "idle", "d": "serving"}


def test_a_server_inference_gives_up_is_idle_since_now() -> None:
    cycle = turn([server("a", SERVING), server("b", SERVING)], 1, now=500.0)
    assert moves(cycle) == [("a", "idle")]  # b stays: the reverse of the lend order
    assert {s.name: s.idle_since for s in cycle.servers} == {"a": 500.0, "b": None}


# ------------------------------------------------------------------------------------------- lend: the lend delay


@pytest.mark.parametrize(("idle_since", "lent"), [(950.0, False), (940.0, True), (None, False)])
def test_an_idle_server_is_lent_only_after_the_lend_delay(idle_since: float | None, lent: bool) -> None:
    cycle = turn([server("a", SERVING), server("b", IDLE, idle_since=idle_since)], 1, now=1000.0)
    assert (("b", "lend") in moves(cycle)) is lent
    if idle_since is None:  # seen idle for the first time: idle since now
        assert cycle.servers[1].idle_since == 1000.0


def test_an_unhealthy_idle_server_is_never_lent() -> None:
    servers = [server("a", IDLE, idle_since=0.0, healthy=False), server("b", IDLE, idle_since=0.0)]
    assert turn(servers, 0).changed(Transition.LEND) == ("b",)


def test_a_wobbling_load_does_not_lend_and_reclaim_the_same_server() -> None:
    # Demand 2, 1, 2, 1 over 100 s with a 60 s delay: the server given up twice is never idle for 60 s at a time.
    servers: Sequence[InferenceServer] = [server("a", SERVING), server("b", SERVING)]
    seen = []
    for now, demand in [(0.0, 2), (30.0, 1), (50.0, 2), (70.0, 1), (120.0, 1), (130.0, 1)]:
        cycle = turn(servers, demand, now=now)
        seen += [(now, *m) for m in moves(cycle)]
        servers = cycle.servers
    assert seen == [(30.0, "a", "idle"), (50.0, "a", "serve"), (70.0, "a", "idle"), (130.0, "a", "lend")]


def test_headroom_and_most_gpus_first() -> None:
    servers = [server("a", SERVING, replicas=1), InferenceServer("b", T4, 4, IDLE, idle_since=0.0)]
    servers += [server("c", IDLE, idle_since=0.0), server("d", IDLE, idle_since=0.0)]
    cycle = turn(servers, 1, settings=LoanSettings(headroom=1, lend_delay_s=60.0))
    assert cycle.changed(Transition.LEND) == ("c", "d")  # 8 GPUs before 4; one spare server (b) kept
    balance = cycle.balances[T4].loans
    assert (balance.needed, balance.held, balance.shortfall) == (2, 4, 0)


# ------------------------------------------------------------------------------------------------------ reclaim


def test_a_reclaim_never_waits_and_an_empty_loaned_server_returns_in_the_same_turn() -> None:
    cycle = turn([server("a", SERVING), server("l1", LOANED), server("l2", LOANED)], 2, jobs=[])
    assert moves(cycle) == [("l1", "reclaim"), ("l1", "return")]
    assert states(cycle) == {"a": "serving", "l1": "serving", "l2": "loaned"}
    assert cycle.settled
    assert cycle.reclaiming_since == {"l1": 1000.0}


def test_a_loaned_server_that_runs_a_replica_is_called_back_and_serves_again() -> None:
    # A replica scheduled onto l1 in the moment it was lent. Without training on it, it serves again in the same
    # turn; with training, that leaves first (scaled in here), then it returns. Demand 1 is met by a alone: the call
    # back is not inference asking for servers, and l2 stays lent.
    cycle = turn([server("a", SERVING), server("l1", LOANED, replicas=1), server("l2", LOANED)], 1, jobs=[])
    assert moves(cycle) == [("l1", "reclaim"), ("l1", "return")]
    assert states(cycle) == {"a": "serving", "l1": "serving", "l2": "loaned"}
    assert cycle.settled
    busy = [server("a", SERVING), server("l1", LOANED, replicas=1, hosts_training=True), server("l2", LOANED)]
    cycle = turn(busy, 1, jobs=[job("e").gpus(1).workers(1, 4).on({"t0": 1, "l1": 2})])
    assert moves(cycle) == [("l1", "reclaim")]
    assert states(cycle)["l1"] == "reclaiming"
    assert {k: dict(v) for k, v in cycle.evictions.scaled_in.items()} == {"e": {"l1": 2}}
    after = [server("a", SERVING), server("l1", RECLAIMING, replicas=1, reclaim_started=1000.0), server("l2", LOANED)]
    assert moves(turn(after, 1, now=1005.0)) == [("l1", "return")]


def test_a_replica_on_a_reclaiming_server_changes_nothing_and_an_empty_loaned_server_stays_lent() -> None:
    cycle = turn(
        [
            server("a", SERVING),
            server("r1", RECLAIMING, replicas=1, reclaim_started=990.0, hosts_training=True),
            server("l2", LOANED),
        ],
        1,
        jobs=[],
    )
    assert moves(cycle) == []
    assert states(cycle) == {"a": "serving", "r1": "reclaiming", "l2": "loaned"}


def test_demand_beyond_the_pool_is_a_shortfall() -> None:
    cycle = turn([server("a", SERVING), server("l1", LOANED)], 4, jobs=[])
    loans = cycle.balances[T4].loans
    assert (loans.reclaim, loans.shortfall) == (1, 2)


def test_evictions_scale_in_jobs_that_keep_their_base_and_preempt_the_others() -> None:
    # l1 and l2 are loaned, busy; inference needs 2 more servers. Job "e" (base 2) has 2 workers on t0 and 2 on l1:
    # it keeps its base (scale-in). Job "p" (base 2) has 1 worker on l2 and 1 on t0: it would keep 1 (preempted).
    servers = [server("a", SERVING)] + [server(n, LOANED, hosts_training=True) for n in ("l1", "l2")]
    jobs = [
        job("e").gpus(1).workers(2, 6).on({"t0": 2, "l1": 2}),
        job("p").gpus(1).workers(2).on({"t0": 1, "l2": 1}),
    ]
    cycle = turn(servers, 3, jobs=jobs)
    assert moves(cycle) == [("l1", "reclaim"), ("l2", "reclaim")]  # their workers leave first: no return yet
    assert {k: dict(v) for k, v in cycle.evictions.scaled_in.items()} == {"e": {"l1": 2}}
    assert cycle.evictions.preempted == ("p",)
    assert not cycle.settled
    reclaim = cycle.balances[T4].reclaim
    assert reclaim is not None
    assert (dict(reclaim.scaled_in), reclaim.preempted) == ({"e": 2}, ("p",))  # the same as plan_reclaim's


def test_a_loaned_server_the_cycle_is_not_given_stays_lent_even_where_it_is_the_cheapest_reclaim() -> None:
    # The training side holds l1 and l2, both loaned; the cycle is given l2 only (the operator leaves out a cordoned
    # server: inference could not use it). Reclaiming l1 would cost a scale-in, l2 a preemption; l2 is reclaimed.
    servers = [server("a", SERVING, replicas=1), server("l2", LOANED, hosts_training=True)]
    jobs = [job("e").gpus(1).workers(2, 6).on({"t0": 2, "l1": 2}), job("p").gpus(1).workers(2).on({"t0": 1, "l2": 1})]

    def training_side() -> ClusterSnapshot:
        l1 = server("l1", LOANED).view
        return cluster(training("t0", gpu_type=T4), *(s.view for s in servers), l1).jobs(*jobs).build()

    cycle = plan_loan_cycle(servers, {T4: 2}, training_side, now=1000.0, settings=SETTINGS)
    assert moves(cycle) == [("l2", "reclaim")]
    assert cycle.evictions.preempted == ("p",)
    everywhere = plan_reclaim(training_side(), 1, gpu_type=T4)
    assert everywhere.servers == ("l1",), "without the bound, the cheaper l1 is chosen"
    assert plan_reclaim(training_side(), 1, gpu_type=T4, among=("a", "l2")).servers == ("l2",)


def test_a_server_whose_workers_are_gone_returns_and_an_overdue_one_is_forced() -> None:
    servers = [
        server("a", SERVING),
        server("r1", RECLAIMING, reclaim_started=900.0),  # nothing left on it
        server("r2", RECLAIMING, reclaim_started=600.0, hosts_training=True),  # 400 s > 300 s deadline
        server("r3", RECLAIMING, reclaim_started=800.0, hosts_training=True),  # within the deadline
    ]
    cycle = turn(servers, 1, jobs=[])
    assert moves(cycle) == [("r1", "return"), ("r2", "force")]
    assert {s.name: s.reclaim_started for s in cycle.servers if s.state is RECLAIMING} == {"r2": 600.0, "r3": 800.0}
    assert not cycle.settled


def test_the_training_side_is_not_read_for_a_reclaiming_server_without_training() -> None:
    cycle = turn([server("a", SERVING), server("r1", RECLAIMING, reclaim_started=990.0)], 1)  # jobs=None: not read
    assert moves(cycle) == [("r1", "return")]


def test_workers_still_running_on_a_reclaiming_server_are_evicted_again() -> None:
    # A reclaim of an earlier turn whose job was not yet scaled in (its workers still count as live).
    servers = [server("a", SERVING), server("r1", RECLAIMING, reclaim_started=990.0, hosts_training=True)]
    cycle = turn(servers, 1, jobs=[job("e").gpus(1).workers(1, 4).on({"t0": 1, "r1": 2})])
    assert moves(cycle) == []
    assert {k: dict(v) for k, v in cycle.evictions.scaled_in.items()} == {"e": {"r1": 2}}


def test_the_cycles_evictions_agree_with_plan_reclaim() -> None:
    # Oracle: plan_reclaim's own accounting of the servers it picks.
    layouts = [
        {"a": {"l1": 1, "t0": 1}, "b": {"l1": 2, "l2": 2}, "c": {"l3": 3}},
        {"a": {"l1": 4}, "b": {"l2": 1, "l3": 1, "t0": 2}, "c": {"l2": 1, "l1": 1}},
    ]
    for placements in layouts:
        jobs = [job(n).gpus(1).workers(2, 8).on(p) for n, p in placements.items()]
        servers = [server(f"l{i}", LOANED, hosts_training=True) for i in (1, 2, 3)]
        for count in (1, 2, 3):
            cycle = turn(servers, count, jobs=jobs)
            snapshot = cluster(training("t0", gpu_type=T4), *(s.view for s in servers)).jobs(*jobs).build()
            plan = plan_reclaim(snapshot, count, gpu_type=T4)
            scaled = {k: sum(v.values()) for k, v in cycle.evictions.scaled_in.items()}
            assert (scaled, cycle.evictions.preempted) == (dict(plan.scaled_in), plan.preempted)


# ------------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: LoanSettings(headroom=-1), "headroom"),
        (lambda: LoanSettings(lend_delay_s=math.inf), "lend_delay_s"),
        (lambda: LoanSettings(reclaim_deadline_s=0), "reclaim_deadline_s"),
        (lambda: server("a", IDLE, idle_since=math.nan), "idle_since"),
        (lambda: server("a", IDLE, replicas=-1), "replicas"),
        (lambda: turn([server("a", IDLE), server("a", IDLE)], 0), "duplicate"),
        (lambda: turn([server("a", IDLE)], -1), "demand"),
        (lambda: turn([server("a", IDLE)], 0, now=math.inf), "now"),
    ],
)
def test_bad_input_is_refused_with_its_name(build: object, message: str) -> None:
    with pytest.raises(InvalidClusterError, match=message):
        build()  # type: ignore[operator]


def test_headroom_is_kept_among_the_servers_idle_for_the_delay() -> None:
    # Demand 3 of 4 servers, then 1: the two servers given up ("b", "c") are not idle for the delay yet, and "a", the
    # only one that is, is kept as the headroom (demand 1 + headroom 1 would leave 2 to lend; the peak of the delay,
    # 3, plus the headroom leave none).
    servers: Sequence[InferenceServer] = [server("a", IDLE, idle_since=0.0)] + [server(n, SERVING) for n in "bcd"]
    settings = LoanSettings(headroom=1, lend_delay_s=60.0)
    cycle = turn(servers, 3, now=100.0, settings=settings)
    cycle = turn(cycle.servers, 1, now=110.0, settings=settings)
    assert cycle.changed(Transition.LEND) == ()
    cycle = turn(cycle.servers, 1, now=170.0, settings=settings)
    assert cycle.changed(Transition.LEND) == ("a", "b")  # all idle for 60 s: "c", lent last, is the headroom


def window_rule(loads: Sequence[int], servers: int, headroom: int, delay: float, step: float) -> list[int]:
    """The oracle: servers loaned after each load step by the rule "keep max(demand, peak) + headroom", where the peak
    is the highest demand in force over [now - delay, now] (none before time 0); reclaim what demand + headroom
    lacks."""
    loaned = 0
    seen: list[int] = []
    for k, demand in enumerate(loads):
        now = k * step
        in_force_at_start = max((i for i in range(k + 1) if i * step <= now - delay), default=None)
        first = in_force_at_start if in_force_at_start is not None else 0
        peak = max(loads[first : k + 1])
        held = servers - loaned
        if demand + headroom > held:
            loaned -= min(demand + headroom - held, loaned)
        else:
            loaned += max(0, held - max(demand, peak) - headroom)
        seen.append(loaned)
    return seen


def test_the_lend_delay_lends_what_the_peak_of_the_delay_leaves_idle() -> None:
    # Servers of one size without replicas: the per-server rule and the window rule agree at every step.
    rng = random.Random(18)
    for _ in range(200):
        size, headroom = rng.randint(2, 10), rng.randint(0, 2)
        delay, step = rng.choice([0.0, 300.0, 600.0, 900.0, 1000.0]), 300.0
        loads = [rng.randint(0, size + 1) for _ in range(30)]
        servers: Sequence[InferenceServer] = [server(f"s{i:02d}", IDLE, idle_since=-delay) for i in range(size)]
        settings = LoanSettings(headroom=headroom, lend_delay_s=delay)
        loaned = []
        for k, demand in enumerate(loads):
            cycle = turn(servers, demand, now=k * step, settings=settings, jobs=[])
            servers = cycle.servers
            loaned.append(sum(s.state is LOANED for s in servers))
        assert loaned == window_rule(loads, size, headroom, delay, step), (size, headroom, delay, loads)


def test_lending_switched_off_lends_nothing() -> None:
    idle = [server("a", SERVING, replicas=1), server("b", IDLE, idle_since=0.0), server("c", IDLE, idle_since=0.0)]
    assert turn(idle, 1, settings=LoanSettings(lend_delay_s=60.0, lending=False)).changed(Transition.LEND) == ()
    assert turn(idle, 1, settings=LoanSettings(lend_delay_s=60.0)).changed(Transition.LEND) == ("b", "c")


def test_gpu_types_turn_apart_and_the_order_servers_come_in_changes_nothing() -> None:
    # Servers of two types and two sizes, in every state, with replicas here and there: a turn over both types is the
    # two turns over each type's servers alone, and shuffling the servers changes nothing.
    rng = random.Random(29)
    settings = LoanSettings(headroom=1, lend_delay_s=60.0, reclaim_deadline_s=math.inf)

    def turn_of(given: Sequence[InferenceServer], demand: Mapping[str, int], side: ClusterSnapshot) -> LoanCycle:
        return plan_loan_cycle(given, demand, lambda: side, now=1000.0, settings=settings)

    def by_type(cycle: LoanCycle, gpu_type: str) -> tuple[object, ...]:
        names = {s.name for s in cycle.servers if s.gpu_type == gpu_type}
        return (
            tuple(s for s in cycle.servers if s.name in names),
            tuple(c for c in cycle.changes if c.server in names),
            cycle.balances.get(gpu_type),
        )

    for _ in range(300):
        servers = []
        for i in range(12):
            state = rng.choice([SERVING, IDLE, LOANED])
            servers.append(
                InferenceServer(
                    f"s{i:02d}",
                    rng.choice([T4, V100]),
                    rng.choice([4, 8]),
                    state,
                    idle_since=rng.choice([None, 0.0, 990.0]) if state is IDLE else None,
                    replicas=rng.choice([0, 0, 0, 1]) if state is not LOANED else 0,
                    healthy=rng.random() < 0.9,
                )
            )
        demand = {T4: rng.randint(0, 8), V100: rng.randint(0, 8)}
        empty = cluster(training("t0"), *(s.view for s in servers)).build()  # no training job: a reclaim evicts none
        both = turn_of(servers, demand, empty)
        assert turn_of(rng.sample(servers, len(servers)), demand, empty) == both
        for gpu_type in (T4, V100):
            one = turn_of([s for s in servers if s.gpu_type == gpu_type], {gpu_type: demand[gpu_type]}, empty)
            assert by_type(one, gpu_type) == by_type(both, gpu_type), (servers, demand)
        assert sum(len(c.lend) for c in (b.loans for b in both.balances.values())) == len(both.changed(Transition.LEND))
