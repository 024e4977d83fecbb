"""Proof: the allocator against brute force on typed GPUs and real servers, on the hard cases too.

Random instances, generated from fixed seeds: two GPU types (``V100`` at speed 1.0 with 32 GiB, ``T4`` at 0.4 with
16 GiB), 2-5 servers of 2, 4, 6 or 8 GPUs each, 2-5 jobs with 1, 2 or 4 GPUs per worker and ranges up to 6 workers;
some jobs may only use V100s (``gpu_types``), some need 24 GiB per GPU (so no T4). Four families:

* under-subscribed: queued jobs only, every base fits at once (so every job starts);
* over-subscribed: queued jobs only, not every base fits;
* running: one to three jobs already running (kept on their type, their base where it runs), a quarter of the
  servers with GPUs held by work outside the decision;
* migration: the same with a restart cost of 1-30 s, most running jobs on T4s they could leave for V100s (a move
  charged as that many seconds without progress, only to a type faster for the job).

The oracle (``oracles.py``: :class:`PlanSpace`, :func:`brute_force_plan`) shares no code with the allocator: its own
fluid model, its own exact bin packing (every way a running job keeps its base where it runs), and exhaustive search
over every GPU type and worker count of every job. Two optima per instance:

* the best plan that starts the **same queued jobs** as the allocator: what phase 2 (widths, types, migrations)
  could reach given phase 1's admissions. Asserted in every family: mean gap <= 1%, worst <= 20%;
* the best plan over **every admitted set** that leaves no base waiting that fits (base demand first-class): figures
  only, except when every base fits (then the two coincide: mean <= 0.5%, worst <= 5%). The rest of that gap is
  *which* queued jobs start: phase 1 admits them in the queue's order (priority, shortest time at base on the
  fastest type, backfilling), the order users are shown, and phase 2 never revisits the set; the optimum picks the
  set by the objective (``test_the_queue_order_is_kept_where_another_admitted_set_scores_better`` is a small case).
  At most 1% of plans may leave waiting a base the exact packing could still fit (phase 1 packs heuristically).

Every plan must bin-pack and stay in the oracle's space, and the allocator's own figure of its plan
(``fluid_average_jct``) must equal the oracle's evaluation of it, restart costs included: two independent
implementations of the fluid model agree, instance by instance.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

from lyra.core import (
    AllocationPlan,
    ClusterSnapshot,
    GpuCatalog,
    GpuType,
    Pool,
    Server,
    TrainingJob,
    allocate_workers,
)

from .conftest import Figures
from .oracles import PlanSpace, brute_force_plan, plan_problems

WORK = [10, 20, 50, 100, 200, 300, 500]
CATALOG = GpuCatalog.of(GpuType("V100", 1.0, 32.0), GpuType("T4", 0.4, 16.0))


@dataclass(frozen=True)
class Instance:
    """A snapshot, the GPUs held outside the decision, and the restart cost (``None``: no migration)."""

    snapshot: ClusterSnapshot
    held: Mapping[str, int]
    restart_cost_s: float | None


def _servers(rng: random.Random) -> list[Server]:
    servers = [
        Server(f"{kind}{i}", Pool.TRAINING, "V100" if kind == "v" else "T4", rng.choice([2, 4, 6, 8]))
        for i, kind in enumerate(rng.choice("vt") for _ in range(rng.randint(2, 5)))
    ]
    if len({s.gpu_type for s in servers}) == 1:  # two types in every instance
        other = "T4" if servers[0].gpu_type == "V100" else "V100"
        servers.append(Server(f"{other[0].lower()}x", Pool.TRAINING, other, rng.choice([2, 4, 6, 8])))
    return servers


def _job(rng: random.Random, name: str, placement: Mapping[str, int] | None = None) -> TrainingJob:
    low = rng.randint(1, 3)
    restriction = rng.random()
    return TrainingJob(
        name=name,
        gpus_per_worker=rng.choice([1, 1, 1, 2, 2, 4]),
        min_workers=low,
        max_workers=min(6, low + rng.randint(0, 4)),
        remaining_work=rng.choice(WORK) * rng.uniform(0.5, 2.0),
        gpu_types=frozenset({"V100"}) if restriction < 0.15 else None,
        gpu_memory_gib=24.0 if 0.15 <= restriction < 0.3 else None,
        placement=placement or {},
    )


def random_instance(rng: random.Random) -> Instance:
    """Queued jobs only."""
    servers = _servers(rng)
    jobs = [_job(rng, f"j{i}") for i in range(rng.randint(2, 5))]
    return Instance(ClusterSnapshot(tuple(servers), tuple(jobs), CATALOG), {}, None)


def running_instance(rng: random.Random, *, migration: bool) -> Instance:
    """One to three running jobs (each placed at a random width on servers of one type it may use, most of them on
    T4s when they may migrate), the other jobs queued, and a quarter of the servers with some GPUs held."""
    servers = _servers(rng)
    held = {s.name: rng.randint(1, s.gpus // 2) for s in servers if rng.random() < 0.25}
    free = {s.name: s.gpus - held.get(s.name, 0) for s in servers}
    count = rng.randint(2, 5)
    runners = rng.randint(1, min(3, count))
    jobs = []
    for i in range(count):
        job = _job(rng, f"j{i}")
        if i < runners:
            types = sorted({s.gpu_type for s in servers if job.may_use(CATALOG[s.gpu_type])})
            gpu_type = "T4" if migration and "T4" in types and rng.random() < 0.8 else rng.choice(types)
            width = rng.randint(job.min_workers, job.max_workers)
            placement: dict[str, int] = {}
            hosts = [s for s in servers if s.gpu_type == gpu_type]
            for server in rng.sample(hosts, k=len(hosts)):
                while sum(placement.values()) < width and free[server.name] >= job.gpus_per_worker:
                    placement[server.name] = placement.get(server.name, 0) + 1
                    free[server.name] -= job.gpus_per_worker
            if sum(placement.values()) >= job.min_workers:
                job = dataclasses.replace(job, placement=placement)
            else:
                for server_name, n in placement.items():
                    free[server_name] += n * job.gpus_per_worker
        jobs.append(job)
    restart = rng.uniform(1.0, 30.0) if migration else None
    return Instance(ClusterSnapshot(tuple(servers), tuple(jobs), CATALOG), held, restart)


def every_base_fits(space: PlanSpace) -> bool:
    """Whether every job's base fits at once (running jobs at their bases where they run)."""
    options = [
        [(t, job.min_workers) for t in sorted(job.speeds) if t in space.capacity]
        if job.name not in space.running
        else [(space.running[job.name][0], job.min_workers)]
        for job in space.jobs
    ]
    names = [job.name for job in space.jobs]
    return any(space.packs(dict(zip(names, bases, strict=True))) for bases in itertools.product(*options))


@dataclass(frozen=True)
class Gaps:
    """Relative gaps per instance: to the best plan that starts the same queued jobs (``same_set``), and to the best
    plan that starts any set of bases that leaves no base waiting that fits (``optimum``; plans that leave one
    waiting, ``missed_bases``, are outside that set and not compared). Every plan packs and stays in the oracle's
    space: :func:`measure` asserts it instance by instance."""

    same_set: tuple[float, ...]
    optimum: tuple[float, ...]
    missed_bases: int
    worst_same_set: str
    worst_optimum: str


def _describe(instance: Instance, plan: AllocationPlan, value: float, best: float, vector: object) -> str:
    snapshot = instance.snapshot
    described = ", ".join(
        f"{j.name}(gpw {j.gpus_per_worker}, w {j.min_workers}..{j.max_workers}, work {j.remaining_work:.1f}"
        f"{', V100 only' if j.gpu_types else ''}{', 24 GiB' if j.gpu_memory_gib else ''}"
        f"{f', on {dict(j.placement)}' if j.placement else ''})"
        for j in snapshot.jobs
    )
    servers = ", ".join(f"{s.name}:{s.gpu_type}x{s.gpus}" for s in snapshot.servers)
    extra = f"; held {dict(instance.held)}" if instance.held else ""
    if instance.restart_cost_s is not None:
        extra += f"; restart {instance.restart_cost_s:.1f} s"
    return (
        f"servers {servers}{extra}; jobs {described}; lyra {dict(plan.workers)} {dict(plan.gpu_types)} "
        f"{value:.2f} s, optimum {vector} {best:.2f} s"
    )


FAMILIES = ("under-subscribed", "over-subscribed", "running", "migration")
SEEDS = {"under-subscribed": 20261122, "over-subscribed": 20261123, "running": 20261124, "migration": 20261125}
#: Instances per family: the whole file runs in about 40 s on one core (brute force is most of it).
INSTANCES = {"under-subscribed": 500, "over-subscribed": 300, "running": 300, "migration": 300}


def _draw(family: str, rng: random.Random) -> tuple[Instance, PlanSpace]:
    """The next instance of ``family``: queued jobs whose bases all fit, or not; running jobs; running jobs on a
    type slower than one they may use, with a restart cost."""
    while True:
        if family in ("under-subscribed", "over-subscribed"):
            instance = random_instance(rng)
        else:
            instance = running_instance(rng, migration=family == "migration")
        space = PlanSpace(instance.snapshot, instance.held, instance.restart_cost_s)
        queued = [job for job in space.jobs if job.name not in space.running]
        if not all(any(space.packs({job.name: choice}) for choice in space.choices(job)[1:]) for job in queued):
            continue  # a queued job whose base fits nowhere even alone: every plan waits for ever
        if family == "under-subscribed" and not every_base_fits(space):
            continue
        if family == "over-subscribed" and every_base_fits(space):
            continue
        if family == "migration" and not any(
            len(space.choices(j)) > j.max_workers - j.min_workers + 1 for j in space.jobs if j.name in space.running
        ):
            continue
        return instance, space


@functools.cache
def measure(family: str) -> Gaps:
    rng = random.Random(SEEDS[family])
    same: list[float] = []
    optimum: list[float] = []
    worst_same = worst_optimum = (-1.0, "")
    missed = 0
    for _ in range(INSTANCES[family]):
        instance, space = _draw(family, rng)
        snapshot = instance.snapshot
        plan = allocate_workers(snapshot, held=instance.held, restart_cost_s=instance.restart_cost_s)
        placement = {job: dict(hosts) for job, hosts in plan.placement.items()}
        problems = plan_problems(snapshot, plan.workers, placement, held=instance.held) + space.problems(placement)
        assert not problems, f"the plan does not realise on the servers: {problems}"
        vector = space.vector_of(placement)
        value = space.average_jct(vector)
        assert plan.fluid_average_jct == pytest.approx(value, rel=1e-9), "two fluid models disagree on a plan"
        admitted = [j.name for j in snapshot.jobs if not j.placement and plan.workers[j.name]]
        best_same, same_vector = brute_force_plan(
            snapshot, held=instance.held, restart_cost_s=instance.restart_cost_s, admitted=admitted
        )
        assert value >= best_same * (1 - 1e-9), "the allocator beat brute force: the oracle is wrong"
        same.append(value / best_same - 1)
        if same[-1] > worst_same[0]:
            worst_same = (same[-1], _describe(instance, plan, value, best_same, same_vector))
        if not space.bases_first(vector):
            # Phase 1 is a heuristic packing: it left waiting a base the oracle can still fit next to the others.
            # Such a plan is outside the oracle's base-first set, so it is counted apart, not compared.
            missed += 1
            continue
        if family == "under-subscribed":
            best, best_vector = best_same, same_vector  # every base fits: base-first plans start every job
        else:
            best, best_vector = brute_force_plan(snapshot, held=instance.held, restart_cost_s=instance.restart_cost_s)
        assert value >= best * (1 - 1e-9), "the allocator beat brute force: the oracle is wrong"
        optimum.append(value / best - 1)
        if optimum[-1] > worst_optimum[0]:
            worst_optimum = (optimum[-1], _describe(instance, plan, value, best, best_vector))
    return Gaps(tuple(same), tuple(optimum), missed, worst_same[1], worst_optimum[1])


def _summary(gaps: Sequence[float]) -> str:
    return (
        f"mean gap {100 * statistics.fmean(gaps):.3f}%, worst {100 * max(gaps):.2f}%, "
        f"optimal on {100 * sum(g < 1e-9 for g in gaps) / len(gaps):.1f}%"
    )


@pytest.mark.proof
@pytest.mark.timeout(600)
@pytest.mark.parametrize("family", FAMILIES)
def test_allocation_against_brute_force(family: str, figures: Figures) -> None:
    """Against the best plan that starts the same queued jobs: mean gap <= 1%, worst <= 20%, in every family.
    Against the unrestricted optimum: figures only (and at most 1% of plans leave waiting a base that fits), except
    when every base fits, where the two are the same and the gap is held to mean <= 0.5%, worst <= 5%."""
    gaps = measure(family)
    title = f"Allocation, {INSTANCES[family]} {family} instances (fluid average JCT vs brute force)"
    figures.record(title, f"vs the best plan admitting the same queued jobs: {_summary(gaps.same_set)}")
    figures.record(title, f"vs the optimum over admitted sets: {_summary(gaps.optimum)}; every plan bin-packs")
    if gaps.missed_bases:
        figures.record(title, f"plans that left waiting a base the oracle could fit: {gaps.missed_bases}")
    figures.record(title, f"worst vs the same set: {gaps.worst_same_set}")
    figures.record(title, f"worst vs the optimum: {gaps.worst_optimum}")
    assert statistics.fmean(gaps.same_set) <= 0.01
    assert max(gaps.same_set) <= 0.20
    assert gaps.missed_bases <= INSTANCES[family] // 100
    if family == "under-subscribed":
        assert statistics.fmean(gaps.optimum) <= 0.005
        assert max(gaps.optimum) <= 0.05


# Hand-worked instances (speeds: V100 1.0, T4 0.4; linear scaling; a job's time is its work over its pace).


def _plan_and_optima(instance: Instance) -> tuple[float, float, float]:
    """The allocator's fluid average JCT, the best with the same admitted set, and the optimum over sets."""
    plan = allocate_workers(instance.snapshot, held=instance.held, restart_cost_s=instance.restart_cost_s)
    admitted = [j.name for j in instance.snapshot.jobs if not j.placement and plan.workers[j.name]]
    same, _ = brute_force_plan(
        instance.snapshot, held=instance.held, restart_cost_s=instance.restart_cost_s, admitted=admitted
    )
    best, _ = brute_force_plan(instance.snapshot, held=instance.held, restart_cost_s=instance.restart_cost_s)
    return plan.fluid_average_jct, same, best


def test_a_running_job_scales_in_for_a_queued_one() -> None:
    # One 8-GPU V100 server, 2 GPUs held: 6 to decide over. a runs 4 workers (w 2..4, work 120); b is queued
    # (w 2..4, work 40); b's base must start. a4 b2: b ends at 40/2 = 20, a has 40 left at 4 -> 30: mean 25.
    # a3 b3: b ends at 13.33, a has 80 left, grows to 4 -> 33.33: mean 23.33. a2 b4: b ends at 10, a has 100 left,
    # grows to 4 -> 35: mean 22.5, the optimum (a keeps its base where it runs).
    snapshot = ClusterSnapshot(
        (Server("v0", Pool.TRAINING, "V100", 8),),
        (TrainingJob("a", 1, 2, 4, 120.0, placement={"v0": 4}), TrainingJob("b", 1, 2, 4, 40.0)),
        CATALOG,
    )
    ours, same, best = _plan_and_optima(Instance(snapshot, {"v0": 2}, None))
    assert (ours, same, best) == pytest.approx((22.5, 22.5, 22.5))


@pytest.mark.parametrize(("restart", "average"), [(10.0, 50.0), (70.0, 100.0)])
def test_migration_pays_only_when_the_restart_costs_less_than_it_saves(restart: float, average: float) -> None:
    # a runs 2 workers on T4s (w 2..2, work 80): pace 2 x 0.4 = 0.8, 100 s. Moved to the idle V100s: pace 2, and a
    # restart of r seconds costs 2r more work: (80 + 2r) / 2 = 40 + r, so 50 s with r = 10 (moved) and 110 s with
    # r = 70 (it stays: 100 s).
    snapshot = ClusterSnapshot(
        (Server("t0", Pool.TRAINING, "T4", 4), Server("v0", Pool.TRAINING, "V100", 4)),
        (TrainingJob("a", 1, 2, 2, 80.0, placement={"t0": 2}),),
        CATALOG,
    )
    assert _plan_and_optima(Instance(snapshot, {}, restart)) == pytest.approx((average, average, average))


def test_the_queue_order_is_kept_where_another_admitted_set_scores_better() -> None:
    # 4 V100 and 4 T4 GPUs. a may only use V100s (w 4..4, work 40: 10 s at its base); b may use either (w 4..4,
    # work 48: 12 s on V100s, 30 s on T4s). The queue puts a first (10 s < 12 s): a on the V100s, b on the T4s,
    # mean (10 + 30) / 2 = 20, the best plan that starts both. Starting b alone on the V100s (a's base fits
    # nowhere else, so a may wait) ends b at 12 and a at 12 + 10 = 22: mean 17, the optimum over admitted sets,
    # 17.6% better, and the allocator does not take it: the queue order users are shown is kept.
    snapshot = ClusterSnapshot(
        (Server("v0", Pool.TRAINING, "V100", 4), Server("t0", Pool.TRAINING, "T4", 4)),
        (TrainingJob("a", 1, 4, 4, 40.0, gpu_types=frozenset({"V100"})), TrainingJob("b", 1, 4, 4, 48.0)),
        CATALOG,
    )
    assert _plan_and_optima(Instance(snapshot, {}, None)) == pytest.approx((20.0, 20.0, 17.0))
