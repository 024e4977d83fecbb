"""``lyra plan --from-cluster``'s view of the cluster (:func:`lyra.operator.decide.live_view`): the snapshot a pass
decides on and the GPUs it holds outside its jobs, so that the what-if planner predicts what the operator does.

Each expected figure is worked out here from the test's own pods and nodes (8 GPUs a server), not read from the
operator: a pod Lyra does not manage holds its GPUs; a cordoned node holds every GPU its jobs' workers leave free.
"""

from __future__ import annotations

from collections import Counter

import pytest

from lyra.core import InferenceDemand, LoanState, allocate_workers, plan_loans
from lyra.operator.decide import OperatorConfig, decide, live_view
from lyra.operator.timestamps import format_time
from lyra.snapshot import PlannerInput

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job
from .test_decide import foreign_gpu_pod
from .test_health import kill_kubelet

CONFIG = OperatorConfig(gang_timeout_s=60)
LENDING = OperatorConfig(gang_timeout_s=60, lend_delay_s=10)


def settle(cluster: FakeCluster) -> None:
    for _ in range(6):
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.finish_terminations()
        cluster.tick(1)


def workers_on(cluster: FakeCluster, job: str) -> dict[str, int]:
    return dict(Counter(p["spec"]["nodeName"] for p in cluster.workers(job)))


def three_servers_one_cordoned() -> FakeCluster:
    """a0 runs another team's pod of 3 GPUs; a2 is cordoned; an elastic job of 1-GPU workers could use all 24."""
    cluster = FakeCluster([node(f"a{i}", "training", A100) for i in range(3)])
    theirs = foreign_gpu_pod("theirs", "a0", 3)
    theirs["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "3"}  # as the API server fills in
    cluster.pods["other/theirs"] = theirs
    cluster.nodes["a2"]["spec"]["unschedulable"] = True
    cluster.add_job(training_job("elastic", 1, 24, gpuTypes=[A100]))
    return cluster


def test_the_view_holds_other_pods_and_a_cordoned_node_and_its_plan_is_the_operators() -> None:
    cluster = three_servers_one_cordoned()
    for allocating in (True, False):
        view = live_view(cluster.world(), CONFIG, allocating=allocating)
        snapshot, held = view.snapshot, view.held
        assert held == {"a0": 3, "a2": 8}
        assert view.cordoned == {"a2"}
        assert [j.name for j in snapshot.jobs] == ["ml/elastic"]
    plan = allocate_workers(snapshot, held=held)
    assert plan.workers["ml/elastic"] == 5 + 8
    assert dict(plan.placement["ml/elastic"]) == {"a0": 5, "a1": 8}
    without = allocate_workers(snapshot)  # what `lyra plan allocate --from-cluster` answered before: onto a2 too
    assert without.workers["ml/elastic"] == 24
    settle(cluster)
    assert workers_on(cluster, "elastic") == {"a0": 5, "a1": 8}, "the operator did what the planner said"


def test_a_cordoned_node_holds_only_what_its_workers_leave_free_and_leaving_workers_hold_theirs() -> None:
    cluster = three_servers_one_cordoned()
    settle(cluster)
    cluster.nodes["a1"]["spec"]["unschedulable"] = True  # its 8 workers stay: nothing of it is free to hold
    view = live_view(cluster.world(), CONFIG, allocating=True)
    assert view.held == {"a0": 3, "a2": 8}
    assert view.cordoned == {"a1", "a2"}
    assert dict(view.snapshot.job("ml/elastic").placement) == {"a0": 5, "a1": 8}
    # `kubectl drain a1`: its workers are evicted and take their grace to leave. The reclaims' view keeps the job
    # where it runs; the allocation's leaves it out until they are gone, every GPU of its workers held.
    for pod in cluster.workers("elastic"):
        if pod["spec"]["nodeName"] == "a1":
            pod["metadata"]["deletionTimestamp"] = format_time(cluster.now)
            pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "Eviction"}]
    reclaims = live_view(cluster.world(), CONFIG, allocating=False)
    assert dict(reclaims.snapshot.job("ml/elastic").placement) == {"a0": 5}
    assert reclaims.held == {"a0": 3, "a1": 8, "a2": 8}
    allocation = live_view(cluster.world(), CONFIG, allocating=True)
    assert allocation.snapshot.jobs == ()
    assert allocation.held == {"a0": 3 + 5, "a1": 8, "a2": 8}


def test_cordoned_inference_servers_that_serve_no_replica_are_idle_or_loaned_never_serving() -> None:
    """The loan cycle leaves out a cordoned inference server without replicas: the view shows it idle (a drained
    serving one too: it serves nothing), or loaned if lent, with ``cordoned``, so that the planner leaves it out of
    reclaims and loans as the operator does. One that still serves replicas stays serving."""
    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(4)], now=1_000_000.0)
    cluster.add_service(inference_service("chat", 1))
    cluster.add_job(training_job("elastic", 1, 32, gpuTypes=[T4]))
    for _ in range(8):
        cluster.apply(decide(cluster.world(), LENDING))
        cluster.finish_terminations()
        cluster.tick(20)
    states = {name: cluster.state(name) for name in ("t0", "t1", "t2", "t3")}
    serving = next(name for name, state in states.items() if state == "serving")
    loaned = sorted(name for name, state in states.items() if state == "loaned")
    assert len(loaned) == 3, states
    for name in (serving, loaned[0]):
        cluster.nodes[name]["spec"]["unschedulable"] = True
    view = live_view(cluster.world(), LENDING, allocating=False)
    assert view.cordoned == {serving, loaned[0]}
    assert view.snapshot.server(serving).state is LoanState.SERVING, "it serves the replica: in the cycle"
    for pod in list(cluster.pods.values()):  # `kubectl drain`: the replica is evicted, and made again elsewhere
        if pod["spec"].get("nodeName") == serving:
            del cluster.pods[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"]
    view = live_view(cluster.world(), LENDING, allocating=False)
    assert view.snapshot.server(serving).state is LoanState.IDLE
    assert view.snapshot.server(loaned[0]).state is LoanState.LOANED


def test_the_view_carries_what_inference_needs_of_each_gpu_type() -> None:
    """``lyra plan loans --from-cluster`` balances each GPU type against what the services need, as the pass does:
    chat's 10 one-GPU replicas fill 2 T4 servers of 8 GPUs (8 + 2); embed's 3 four-GPU replicas fill 2 A100 servers
    (two a server). A type no service asks for needs 0 servers (here none: both are named)."""
    cluster = FakeCluster(
        [node(f"t{i}", "inference", T4) for i in range(4)] + [node(f"a{i}", "inference", A100) for i in range(3)],
        now=1_000_000.0,
    )
    cluster.add_service(inference_service("chat", 10, gpuType=T4))
    cluster.add_service(inference_service("embed", 3, 4, gpuType=A100))
    view = live_view(cluster.world(), CONFIG, allocating=False)
    assert view.demand == {T4: 2, A100: 2}
    assert decide(cluster.world(), CONFIG).report.inference_servers_needed == view.demand
    quiet = FakeCluster([node(f"t{i}", "inference", T4) for i in range(2)], now=1_000_000.0)
    assert live_view(quiet.world(), CONFIG, allocating=False).demand == {T4: 0}


def test_an_unhealthy_idle_server_is_room_for_inference_that_the_plan_never_lends() -> None:
    """t1 stops reporting (within the grace): the view marks it unhealthy, and a loan plan on the view lends t0
    alone (both idle, no replica needed), as the operator's passes do once the lend delay has passed. Unmarked, the
    plan would lend both."""
    config = OperatorConfig(gang_timeout_s=60, lend_delay_s=10, node_grace_s=300)
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4)], now=1_000_000.0)
    cluster.add_service(inference_service("chat", 0))
    kill_kubelet(cluster, "t1", since=cluster.now)
    view = live_view(cluster.world(), config, allocating=False)
    assert view.unhealthy == {"t1"}
    given = PlannerInput(view.snapshot, view.held, view.cordoned, view.demand, view.unhealthy)
    plan = plan_loans(
        given.snapshot, InferenceDemand(view.demand[T4]), among=given.loan_cycle(), unlendable=given.unlendable()
    )
    assert (plan.lend, plan.held) == (("t0",), 2)
    assert plan_loans(given.snapshot, InferenceDemand(0)).lend == ("t0", "t1")
    for _ in range(3):
        cluster.tick(config.lend_delay_s + 1)
        for _ in range(4):
            cluster.apply(decide(cluster.world(), config))
            cluster.finish_terminations(except_on=frozenset({"t1"}))
    assert (cluster.state("t0"), cluster.state("t1")) == ("loaned", "idle")


def test_an_inference_server_held_by_pods_lyra_does_not_manage_is_no_room_for_inference() -> None:
    """Another team's pod holds t1's GPUs, and no replica runs there: the loan cycle leaves t1 out, so chat's one
    server of demand keeps t0 (never lent). The view leaves t1 out too, so a loan plan on it lends nothing; shown as
    serving, t1 would have counted as that server, and t0 would have been lent."""
    config = OperatorConfig(gang_timeout_s=60, lend_delay_s=10)
    cluster = FakeCluster([node("t0", "inference", T4), node("t1", "inference", T4)], now=1_000_000.0)
    cluster.pods["other/theirs"] = foreign_gpu_pod("theirs", "t1", 2)
    cluster.add_service(inference_service("chat", 1))
    view = live_view(cluster.world(), config, allocating=False)
    assert [s.name for s in view.snapshot.servers] == ["t0"]
    assert view.demand == {T4: 1}
    given = PlannerInput(view.snapshot, view.held, view.cordoned, view.demand, view.unhealthy)
    plan = plan_loans(given.snapshot, InferenceDemand(1), among=given.loan_cycle(), unlendable=given.unlendable())
    assert (plan.lend, plan.held) == ((), 1)
    for _ in range(3):
        cluster.tick(config.lend_delay_s + 1)
        cluster.apply(decide(cluster.world(), config))
        cluster.finish_terminations()
    assert cluster.state("t0") != "loaned"
    assert cluster.state("t1") != "loaned"
    assert cluster.state("t0") == "serving", "kept for chat's replica"
    assert [s.name for s in live_view(cluster.world(), config, allocating=True).snapshot.servers] == ["t0"]


def test_the_view_says_how_long_each_idle_server_has_been_idle_and_the_plan_waits_the_lend_delay() -> None:
    """chat stops needing t1 and t2 at the same pass: the view says both have been idle since then (the
    ``idle-since`` the pass wrote), and a loan plan with the operator's lend delay lends neither until the delay has
    passed, then what the operator's next pass lends; without the delay it would have lent them at once. Each plan
    is checked against the operator's own next pass."""
    config = OperatorConfig(gang_timeout_s=60, lend_delay_s=100)
    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(3)], now=1_000_000.0)
    cluster.add_service(inference_service("chat", 24, gpus=1, gpuType=T4))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), config))
    assert [cluster.state(f"t{i}") for i in range(3)] == ["serving"] * 3
    cluster.services["serve/chat"]["spec"]["replicas"] = 8
    for _ in range(3):
        cluster.apply(decide(cluster.world(), config))
        cluster.finish_terminations()
    idle = sorted(n for n in ("t0", "t1", "t2") if cluster.state(n) == "idle")
    assert len(idle) == 2
    for waited, idle_for, lent in ((40.0, 40.0, ()), (61.0, 101.0, tuple(idle))):
        cluster.tick(waited)
        view = live_view(cluster.world(), config, allocating=False)
        assert view.idle_seconds == dict.fromkeys(idle, pytest.approx(idle_for))
        given = PlannerInput(view.snapshot, view.held, view.cordoned, view.demand, view.unhealthy, view.idle_seconds)
        plan = plan_loans(
            given.snapshot,
            InferenceDemand(view.demand[T4]),
            among=given.loan_cycle(),
            unlendable=given.unlendable(config.lend_delay_s),
        )
        assert plan.lend == lent
        unwaited = plan_loans(given.snapshot, InferenceDemand(view.demand[T4]), unlendable=given.unlendable())
        assert unwaited.lend == tuple(idle), "without the delay, both at once"
        cluster.apply(decide(cluster.world(), config))
        assert tuple(n for n in idle if cluster.state(n) == "loaned") == lent, "the operator's next pass"
