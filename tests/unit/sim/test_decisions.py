"""The driver's decisions against the core: migration, elasticity, and the two shortcuts of :mod:`lyra.sim.decisions`
(the everyone-fits answer and the view's server subset) checked against :func:`allocate_workers` on random small
states that real simulations reach."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from lyra.core.allocation import AllocationPlan, allocate_workers
from lyra.core.gpus import GpuCatalog, GpuType
from lyra.core.model import ClusterSnapshot, LoanState, Pool, Server, TrainingJob
from lyra.sim import decisions
from lyra.sim.decisions import CoreDecisions
from lyra.sim.engine import Simulation, SimulationResult
from lyra.sim.jobs import SimJob
from lyra.sim.load import LoadSeries
from lyra.sim.metrics import summarise
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import SCHEMES
from lyra.sim.traces import Trace
from lyra.sim.workload import Window, build_workload
from tests.unit.sim.builders import scenario, simulate, stepped_load, trace

# ------------------------------------------------------------------------------------------------- migration

#: A (8 GPUs, 1200 s) fills the V100 server; B (8 GPUs, 2000 s: 16000 reference worker-seconds) arrives at 1 s and
#: starts on a loaned T4 server at pace 8 x 0.4 = 3.2. At 1200 s A ends and a periodic rebalance is due (every 600 s).
V100_BUSY_THEN_FREE = trace((0, 1200, 8), (1, 2000, 8))
MIGRATION = scenario("preemption: {restart_cost_s: 60}\nscheduler: {rebalance_interval_s: 600, migration: true}")


def records(result: SimulationResult) -> dict[str, Any]:
    return {r.name: r for r in result.records}


def test_a_job_started_on_t4_moves_to_the_v100s_when_they_free_up() -> None:
    result = simulate("lyra", V100_BUSY_THEN_FREE, setup=MIGRATION, length_s=6000)
    b = records(result)["job-1"]
    # At 1200 s B has done 1199 x 3.2 = 3836.8, so 12163.2 are left: 3801 s more on the T4s, 1520.4 s on the V100s
    # plus the restart (60 s at the new pace 8: 480 worker-seconds). Moving pays: 12643.2 / 8 = 1580.4 s.
    assert b.migrations == 1
    assert result.migrations == 1
    assert b.finish_s == pytest.approx(1200 + 1580.4)
    assert b.jct_s == pytest.approx(2779.4)
    assert b.preemptions == 0


def test_a_job_that_would_not_gain_the_restart_back_stays() -> None:
    # B (8 GPUs, 480 s: 3840) on T4s has 3840 - 1199 x 3.2 = 3.2 left at 1200 s: 1 s on the T4s, against
    # 0.4 s + 60 s of restart on the V100s. It stays and ends at 1201 s.
    result = simulate("lyra", trace((0, 1200, 8), (1, 480, 8)), setup=MIGRATION, length_s=6000)
    b = records(result)["job-1"]
    assert (b.migrations, b.finish_s) == (0, pytest.approx(1201))


@pytest.mark.parametrize(
    ("scheme", "setup"),
    [
        ("lyra", scenario("preemption: {restart_cost_s: 60}\nscheduler: {migration: false}")),
        ("basic", MIGRATION),
    ],
    ids=["migration-off", "basic"],
)
def test_without_migration_the_job_stays_on_t4(scheme: str, setup: Scenario) -> None:
    result = simulate(scheme, V100_BUSY_THEN_FREE, setup=setup, length_s=6000)
    b = records(result)["job-1"]
    # 16000 at pace 3.2 from 1 s: 5000 s.
    assert (b.migrations, b.finish_s) == (0, pytest.approx(5001))
    assert result.migrations == 0


def test_a_job_on_t4_moves_to_the_v100s_by_displacing_flexible_workers() -> None:
    """Asked about B running on T4s, the allocator moves it to the V100s, scaling A in (a migration that pays for
    its restart). In the simulator B never lands on the T4s: at its start the allocator's second opinion already
    takes the V100s from A's flexible workers, since a slow GPU for B's whole life is worse. The everyone-fits
    shortcut must not answer for it (nothing is free on the V100s)."""
    # Every job elastic. A (4 GPUs x 10000 s = 40000; w_min 2, w_max 8) takes all 8 V100s. B (1 GPU x 2000 s =
    # 2000; w_min 1, w_max 2) arrives at 1 s: 2 free T4s would run it at pace 0.8 (2500 s), 2 V100s at pace 2.
    setup = scenario("elasticity: {share: 1}\npreemption: {restart_cost_s: 60}")
    # What the allocator answers with B on 2 T4s since 1 s (at 600 s B has 2000 - 599 x 0.8 = 1520.8 left, A
    # 40000 - 600 x 8 = 35200): B on 2 V100s, A scaled in to 6.
    servers = (
        Server("infer-0000", Pool.INFERENCE, "T4", 8, LoanState.LOANED),
        Server("train-0000", Pool.TRAINING, "V100", 8),
    )
    both = frozenset({"T4", "V100"})
    a = TrainingJob("job-0", 1, 2, 8, 35_200, placement={"train-0000": 8}, gpu_types=both)
    b = TrainingJob("job-1", 1, 1, 2, 1520.8, submit_time=1, placement={"infer-0000": 2}, gpu_types=both)
    catalog = GpuCatalog.of(GpuType("T4", 0.4), GpuType("V100", 1.0))
    plan = allocate_workers(ClusterSnapshot(servers, (a, b), catalog), search_budget=8, restart_cost_s=60)
    assert dict(plan.placement) == {"job-0": {"train-0000": 6}, "job-1": {"train-0000": 2}}
    result = simulate("lyra", trace((0, 10_000, 4), (1, 2000, 1)), setup=setup, length_s=8000)
    started = records(result)["job-1"]
    # B starts at 1 s on 2 V100s (A scaled in to 6) and runs 2000 / 2 = 1000 s, never migrating.
    assert (started.first_start_s, started.migrations) == (1.0, 0)
    assert started.finish_s == pytest.approx(1001)


# -------------------------------------------------------------------------------------------- decision delay


@pytest.mark.parametrize("scheme", ["baseline", "lyra"])
def test_a_change_is_decided_the_decision_delay_after_it_and_changes_meanwhile_with_it(scheme: str) -> None:
    """With ``decision_delay_s: 90``, A (arriving at 1 s) starts at 91 s, and B (at 50 s, while A's decision is
    pending) with it; C (at 400 s, after both ended) at 490 s. Without it, each starts when it arrives."""
    jobs = trace((1, 100, 1), (50, 100, 1), (400, 100, 1))
    delayed = simulate(scheme, jobs, setup=scenario("scheduler: {decision_delay_s: 90}"), length_s=600)
    assert [r.first_start_s for r in delayed.records] == [91, 91, 490]
    at_once = simulate(scheme, jobs, setup=scenario("scheduler: {decision_interval_s: 0}"), length_s=600)
    assert [r.first_start_s for r in at_once.records] == [1, 50, 400]


def test_a_first_start_costs_start_cost_s() -> None:
    """``start_cost_s: 30``: a 100 s job that starts at once ends at 130 s; without it, at 100 s."""
    charged = simulate("baseline", trace((0, 100, 1)), setup=scenario("preemption: {start_cost_s: 30}"))
    assert [(r.first_start_s, r.finish_s) for r in charged.records] == [(0, 130)]
    free = simulate("baseline", trace((0, 100, 1)))
    assert [(r.first_start_s, r.finish_s) for r in free.records] == [(0, 100)]


# ------------------------------------------------------------------------------------------- multi-GPU workers


def test_a_base_whose_workers_do_not_pack_waits_without_calling_the_allocator() -> None:
    """Two 4-GPU V100 servers each run a 3-GPU worker: 2 GPUs are free, one on each, so the 2-GPU worker of C does
    not pack. The queue's check counts whole workers, so no decision calls the allocator for it; C starts when A
    ends and leaves a server whole."""
    setup = scenario("training: {servers: 2, gpus_per_server: 4}\ninference: {gpus_per_server: 4}")
    result = simulate("baseline", trace((0, 100, 3), (0, 300, 3), (1, 50, 2)), setup=setup)
    starts = {r.name: (r.gpus_per_worker, r.first_start_s, r.finish_s) for r in result.records}
    assert starts == {"job-0": (3, 0, 100), "job-1": (3, 0, 300), "job-2": (2, 100, 150)}
    assert result.allocator_calls == 0


# ------------------------------------------------------------------------------------------------ elasticity


def test_lyra_scales_an_elastic_job_to_its_maximum_when_alone() -> None:
    # 2 GPUs x 100 s: one worker of 2 GPUs, w_min = ceil(1 x 0.5) = 1, w_max = 1 x 2 = 2; 100 worker-seconds on 2
    # workers (4 V100s) take 50 s (it starts on the V100s, the fastest type with room, though both T4 servers are
    # lent).
    result = simulate("lyra", trace((0, 100, 2)), setup=scenario("elasticity: {share: 1}"))
    record = result.records[0]
    assert (record.gpus_per_worker, record.min_workers, record.max_workers) == (2, 1, 2)
    assert (record.first_start_s, record.finish_s, record.resizes) == (0, 50, 0)


@pytest.mark.parametrize(("resize_cost_s", "finish_s"), [(0, 4402), (20, 4422)])
def test_lyra_scales_in_rather_than_preempts_on_a_reclaim(resize_cost_s: float, finish_s: float) -> None:
    # Two 8-GPU V100 servers and w_min = n: an 8-GPU elastic job has w_min 8 and w_max 16. A (16 GPUs: w_min 16, so
    # nothing to scale in) takes all 16 V100s; B (2000 s: 16000) starts at 1 s on both lent T4 servers with 16
    # workers (pace 16 x 0.4 = 6.4). At 600 s inference needs one server: the reclaim takes one of B's servers and
    # B goes on with 8 workers (pace 3.2).
    setup = scenario(
        f"training: {{servers: 2}}\nelasticity: {{share: 1, min_factor: 1}}\nscheduler: {{migration: false}}\n"
        f"preemption: {{resize_cost_s: {resize_cost_s}}}"
    )
    result = simulate(
        "lyra", trace((0, 20_000, 16), (1, 2000, 8)), load=stepped_load(0, 100), setup=setup, length_s=8000
    )
    b = records(result)["job-1"]
    assert (b.preemptions, b.resizes) == (0, 1)
    # 599 x 6.4 = 3833.6 done by 600 s; 12166.4 left at 3.2: 3802 s, plus the resize: 20 s at the new pace.
    assert b.finish_s == pytest.approx(finish_s)
    metrics = summarise(result)
    assert (metrics.preemption_ratio, metrics.reclaimed_servers) == (0.0, 1)


@pytest.mark.parametrize(
    ("rendezvous", "a_finish_s", "b_finish_s"),
    [("{}", 1004, 1507.5), ("{leave_detection_s: 30, last_call_s: 10}", 1044, 1527.5)],
)
def test_a_resize_pays_the_rendezvous_by_its_direction(rendezvous: str, a_finish_s: float, b_finish_s: float) -> None:
    # Two 8-GPU V100 servers, min_factor 1: each 8-GPU job runs 1 to 2 workers of 8 GPUs; inference keeps both T4
    # servers. A (1000 worker-seconds) takes both servers at 0 s; B arrives at 1 s and A scales in to 1 worker to
    # start B's base: a worker left and A is below its maximum, so it pays resize_cost_s (5 s) plus the leaver's
    # detection and the last call; 998 left at pace 1: 1 + 998 + 5 (+ 40). When A ends, B (2000) has done 1003
    # (1043) and grows to 2 workers, its maximum: nobody left and the round is full, so it pays only the 5 s at pace 2.
    setup = scenario(
        "training: {servers: 2}\nelasticity: {share: 1, min_factor: 1}\nscheduler: {migration: false}\n"
        f"preemption: {{resize_cost_s: 5, rendezvous: {rendezvous}}}"
    )
    result = simulate("lyra", trace((0, 1000, 8), (1, 2000, 8)), load=stepped_load(200), setup=setup, length_s=8000)
    a, b = records(result)["job-0"], records(result)["job-1"]
    assert (a.max_workers, b.max_workers, a.resizes, b.resizes, a.preemptions, b.preemptions) == (2, 2, 1, 1, 0, 0)
    assert (a.finish_s, b.finish_s) == (pytest.approx(a_finish_s), pytest.approx(b_finish_s))


# ----------------------------------------------------------------------------------- random simulated states


@dataclass
class World:
    jobs: Trace
    load: LoadSeries
    setup: Scenario
    scheme: str


def random_world(rng: random.Random, whole: int = 0) -> World:
    """A small random simulation; ``whole``: its ``whole_cluster_jobs`` (0: views only, which the view's checks
    below need)."""
    jobs = trace(
        *(
            (rng.uniform(0, 6000), rng.uniform(60, 4000), rng.choice((1, 1, 2, 3, 4, 8)))
            for _ in range(rng.randint(3, 14))
        )
    )
    load = stepped_load(*(rng.choice((0, 0, 50, 100, 150, 250)) for _ in range(16)))
    setup = scenario(
        f"training: {{servers: {rng.randint(1, 2)}, gpus_per_server: {rng.choice((4, 8))}}}\n"
        f"inference: {{servers: {rng.randint(1, 3)}, gpus_per_server: {rng.choice((4, 8))}}}\n"
        f"speed: {{T4: {rng.choice((0.3, 0.4, 0.7))}}}\n"
        f"memory: {{inference_fit_share: {rng.choice((0, 0.5, 1))}}}\n"
        f"scaling: {{overhead: {rng.choice((0, 0.05))}}}\n"
        f"elasticity: {{share: {rng.choice((0.5, 1))}, mixing_share: {rng.choice((0, 0.5))}}}\n"
        f"preemption: {{restart_cost_s: {rng.choice((0, 60))}, resize_cost_s: {rng.choice((0, 20))}}}\n"
        f"scheduler: {{decision_interval_s: {rng.choice((0, 30))}, migration: {rng.choice(('true', 'false'))}, "
        f"whole_cluster_jobs: {whole}}}\n"
        f"seed: {rng.randint(0, 1000)}\n"
    )
    return World(
        jobs,
        load,
        setup,
        rng.choice(("lyra", "lyra", "lyra-exact-free", "basic", "lyra-no-elasticity", "lyra-no-loaning")),
    )


def worlds(count: int, seed: int) -> Iterator[World]:
    rng = random.Random(seed)
    for _ in range(count):
        yield random_world(rng)


def build(world: World) -> Simulation:
    workload = build_workload(world.jobs, world.setup, Window(0.0, 8000.0))
    return Simulation(workload, world.setup, SCHEMES[world.scheme], world.load)


def counts_and_types(sim: Simulation, placement: Mapping[int, int]) -> tuple[int, tuple[str, ...]]:
    cluster = sim.cluster
    return sum(placement.values()), tuple(sorted({cluster.type_names[cluster.type_of[s]] for s in placement}))


@dataclass
class Checked:
    cases: int = 0
    failures: list[str] = field(default_factory=list)


def test_the_everyone_fits_shortcut_agrees_with_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whenever the driver skips the call because free GPUs hold every offered job at its maximum, the allocator
    on the same view gives every job the same worker count and GPU types."""
    original = CoreDecisions._everyone_fits
    checked = Checked()

    def spy(self: CoreDecisions, running: list[int], queued: list[int]) -> dict[SimJob, dict[int, int]] | None:
        shortcut = original(self, running, queued)
        if shortcut is None:
            return None
        sim = self.sim
        members = [sim.jobs[i] for i in running] + [sim.jobs[i] for i in queued]
        snapshot, held = self.snapshot(members, sim.now)
        restart = sim.restart_cost if self.migrate else None
        budget = self.search_evaluations * len(members)
        plan = allocate_workers(snapshot, held=held, search_budget=budget, restart_cost_s=restart)
        checked.cases += 1
        for job in members:
            want = counts_and_types(sim, shortcut.get(job, job.placement))
            got = (plan.workers.get(job.name, 0), tuple(sorted(plan.gpu_types.get(job.name, ()))))
            if want != got:
                checked.failures.append(f"t={sim.now:g} {job.name}: shortcut {want}, allocator {got}")
        return shortcut

    monkeypatch.setattr(CoreDecisions, "_everyone_fits", spy)
    for world in worlds(60, seed=11):
        build(world).run()
    assert checked.cases >= 100  # the shortcut is common: the check saw enough of it
    assert checked.failures == []


def full_snapshot(sim: Simulation, view: ClusterSnapshot) -> tuple[ClusterSnapshot, dict[str, int]]:
    """The view's jobs on every server of the cluster, with the GPUs of every other job held."""
    cluster = sim.cluster
    used: dict[str, int] = {}
    for job in view.jobs:
        for server, count in job.placement.items():
            used[server] = used.get(server, 0) + count * job.gpus_per_worker
    held: dict[str, int] = {}
    for s in range(cluster.count):
        name = cluster.names[s]
        others = cluster.gpus[s] - cluster.layout.free[s] - used.get(name, 0)
        if others:
            held[name] = others
    servers = tuple(cluster.server_view(s) for s in range(cluster.count))
    return ClusterSnapshot(servers, view.jobs, view.gpus), held


def test_the_views_server_subset_never_changes_the_worker_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator given the view's servers and the allocator given every server agree on every job's workers."""
    checked = Checked()
    current: list[Simulation] = []

    def spy(
        snapshot: ClusterSnapshot, *, held: Mapping[str, int], search_budget: int, restart_cost_s: float | None
    ) -> AllocationPlan:
        plan = allocate_workers(snapshot, held=held, search_budget=search_budget, restart_cost_s=restart_cost_s)
        sim = current[-1]
        everything, all_held = full_snapshot(sim, snapshot)
        full = allocate_workers(everything, held=all_held, search_budget=search_budget, restart_cost_s=restart_cost_s)
        checked.cases += 1
        for job in snapshot.jobs:
            if plan.workers.get(job.name, 0) != full.workers.get(job.name, 0):
                checked.failures.append(
                    f"t={sim.now:g} {job.name}: view {plan.workers.get(job.name, 0)} workers, "
                    f"every server {full.workers.get(job.name, 0)}"
                )
        return plan

    monkeypatch.setattr(decisions, "allocate_workers", spy)
    for world in worlds(60, seed=12):
        sim = build(world)
        current.append(sim)
        sim.run()
    assert checked.cases >= 50
    assert checked.failures == []


def test_a_small_cluster_is_decided_whole_as_the_operator_decides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """While few jobs run or wait (``whole_cluster_jobs``), each call of an elastic scheme's allocator is given every
    running and every queued job of the simulation, and on its servers only GPUs no job holds are held (which
    servers: as views choose them, checked against every server above)."""
    checked = Checked()
    current: list[Simulation] = []

    def spy(
        snapshot: ClusterSnapshot, *, held: Mapping[str, int], search_budget: int, restart_cost_s: float | None
    ) -> AllocationPlan:
        sim = current[-1]
        checked.cases += 1
        present = {sim.jobs[i].name for i in sim.running} | {sim.jobs[e[3]].name for e in sim.queue.ordered()}
        if {job.name for job in snapshot.jobs} != present:
            checked.failures.append(f"t={sim.now:g}: offered {sorted(j.name for j in snapshot.jobs)}, not {present}")
        cluster = sim.cluster
        by_jobs: dict[str, int] = {}
        for i in sim.running:
            job = sim.jobs[i]
            for server, count in job.placement.items():
                by_jobs[cluster.names[server]] = by_jobs.get(cluster.names[server], 0) + count * job.gpus_per_worker
        for s in (cluster.layout.index[server.name] for server in snapshot.servers):
            name = cluster.names[s]
            if held.get(name, 0) != cluster.gpus[s] - cluster.layout.free[s] - by_jobs.get(name, 0):
                checked.failures.append(f"t={sim.now:g}: {name} holds {held.get(name, 0)} GPUs of no job's")
        return allocate_workers(snapshot, held=held, search_budget=search_budget, restart_cost_s=restart_cost_s)

    monkeypatch.setattr(decisions, "allocate_workers", spy)
    rng = random.Random(13)
    for _ in range(30):
        world = random_world(rng, whole=64)
        if not SCHEMES[world.scheme].elastic:
            continue
        sim = build(world)
        current.append(sim)
        sim.run()
    assert checked.cases >= 50
    assert checked.failures == []


def test_servers_of_a_type_no_offered_job_may_use_do_not_change_the_plan() -> None:
    """The view leaves out servers of types its jobs may not use, on the ground that "more could not change the
    plan's counts" (``CoreDecisions.snapshot``). Three V100-only jobs, 4 GPUs of v0 held by jobs outside the
    view, the simulator's budget (4 evaluations per job): adding a lent T4 server none of them may use must not
    change their workers."""

    def v100_job(name: str, low: int, high: int, work: float, placement: dict[str, int]) -> TrainingJob:
        return TrainingJob(
            name, 1, low, high, work, placement=placement, gpu_types=frozenset({"V100"}), scaling_overhead=0.05
        )

    jobs = (
        v100_job("a", 2, 6, 5000, {}),
        v100_job("b", 4, 16, 8700, {"v1": 6}),
        v100_job("c", 2, 6, 4000, {"v0": 4, "v1": 2}),
    )
    catalog = GpuCatalog.of(GpuType("T4", 0.4), GpuType("V100", 1.0))
    training = (Server("v0", Pool.TRAINING, "V100", 8), Server("v1", Pool.TRAINING, "V100", 8))
    lent_t4 = Server("t0", Pool.INFERENCE, "T4", 8, LoanState.LOANED)
    view = allocate_workers(ClusterSnapshot(training, jobs, catalog), held={"v0": 4}, search_budget=12)
    wider = allocate_workers(ClusterSnapshot((*training, lent_t4), jobs, catalog), held={"v0": 4}, search_budget=12)
    assert dict(wider.workers) == dict(view.workers)
