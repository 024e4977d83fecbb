"""The operator and the simulator run one loan cycle: fed the same sequence of loads, the operator's loan step
(:class:`lyra.operator.loans.LoanBook` over a World) and the simulator's (:class:`lyra.sim.loans.LoanKeeper`) make
the same transitions at the same times. The operator's World is an in-memory cluster whose node writes are applied
between passes; the simulator starts from a settled pool, so the operator's nodes start idle for the whole delay."""

from __future__ import annotations

import pytest

from lyra.api import names
from lyra.operator.actions import Decision
from lyra.operator.changes import Changes
from lyra.operator.config import OperatorConfig
from lyra.operator.jobs import JobBook
from lyra.operator.loans import LoanBook
from lyra.operator.timestamps import format_time
from lyra.sim.engine import Simulation
from lyra.sim.schemes import SCHEMES
from lyra.sim.workload import Window, build_workload
from tests.unit.operator.fake_cluster import T4, FakeCluster, node
from tests.unit.sim.builders import flat_load, scenario, trace

LEND_DELAY_S = 900.0
STEP_S = 300.0
START = 1_000_000.0
SERVERS = 4

#: Servers inference needs at each step: a dip, a wobble shorter than the lend delay, a rise that calls servers
#: back, a drop, and demand beyond the pool.
LOADS = [
    [4, 2, 2, 2, 2, 3, 2, 2, 2, 2, 0, 0, 0, 0, 4, 1, 1, 1, 1, 5, 0, 0, 0, 0],
    [0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 3, 3, 0, 0, 0, 0, 2, 2, 2, 2, 4, 4],
]


def operator_transitions(loads: list[int], headroom: int) -> list[tuple[int, str, str]]:
    config = OperatorConfig(headroom=headroom, lend_delay_s=LEND_DELAY_S)
    nodes = [node(f"infer-{i:04d}", "inference", T4) for i in range(SERVERS)]
    for body in nodes:
        body["metadata"]["labels"][names.STATE_LABEL] = "idle"
        body["metadata"]["annotations"][names.IDLE_SINCE_ANNOTATION] = format_time(START - LEND_DELAY_S)
        body["spec"]["taints"] = [{"key": names.STATE_TAINT, "value": "idle", "effect": "NoSchedule"}]
    cluster = FakeCluster(nodes, now=START)
    seen = []
    for step, demand in enumerate(loads):
        world = cluster.world()
        changes = Changes(world.now)
        loans = LoanBook(world, config, changes, JobBook(world, config, changes), {T4: demand})
        loans.turn()
        assert loans.cycle is not None
        seen += [(step, c.server, c.transition.value) for c in loans.cycle.changes]
        cluster.apply(Decision(tuple(loans.node_actions())))
        cluster.tick(STEP_S)
    return seen


def simulator_transitions(loads: list[int], headroom: int) -> list[tuple[int, str, str]]:
    setup = scenario(
        f"inference: {{servers: {SERVERS}, gpu_type: {T4}, headroom_share: {headroom / SERVERS}}}\n"
        f"speed: {{V100: 1.0, {T4}: 0.4}}\nloaning: {{lend_hysteresis_s: {LEND_DELAY_S}}}"
    )
    assert setup.inference.headroom_servers == headroom
    workload = build_workload(trace(), setup, Window(0.0, STEP_S * len(loads)))
    sim = Simulation(workload, setup, SCHEMES["lyra"], flat_load(0.0))
    keeper = sim.loans
    assert keeper is not None
    seen = []
    for step, demand in enumerate(loads):
        t = step * STEP_S
        sim.advance(t)
        sim.cluster.set_demand(demand)
        keeper.load_changed(t)
        keeper.adjust(t)
        assert keeper.cycle is not None
        seen += [(step, c.server, c.transition.value) for c in keeper.cycle.changes]
    return seen


@pytest.mark.parametrize("headroom", [0, 1])
@pytest.mark.parametrize("loads", LOADS, ids=["dip-and-rise", "wobble"])
def test_the_operator_and_the_simulator_make_the_same_transitions(loads: list[int], headroom: int) -> None:
    expected = operator_transitions(loads, headroom)
    assert {t for _, _, t in expected} >= {"lend", "reclaim", "return", "idle", "serve"}, "the loads exercise it all"
    assert simulator_transitions(loads, headroom) == expected
