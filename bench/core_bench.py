"""Benchmarks of the policy core at production scale: reclaim, allocation, placement scoring.

Every input is generated from a fixed seed in ``setup`` (not timed). Targets are the issue's (medians on the
reference machine); see ``docs/benchmarks.md`` for what each case models.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from bench import Benchmark, Ratio
from lyra.core import (
    ClusterSnapshot,
    GpuCatalog,
    GpuType,
    LoanState,
    NodeView,
    PodRequest,
    PodRole,
    Pool,
    ReclaimStrategy,
    Server,
    TrainingJob,
    allocate_workers,
    filter_nodes,
    plan_reclaim,
    reclaim_order,
    score_nodes,
)
from lyra.core.allocation import DEFAULT_SEARCH_BUDGET

SEED = 20240601

RECLAIM_LOANED = 10_000
RECLAIM_TRAINING = 1_000
RECLAIM_IDLE = 50
RECLAIM_WORKERS = 50_000
ALLOCATION_JOBS = 2_000
ALLOCATION_GPUS = 4_096
SCORING_NODES = 5_000


@functools.cache
def reclaim_cluster(seed: int = SEED) -> ClusterSnapshot:
    """10,000 loaned 8-GPU servers (50 of them idle) and 1,000 training servers running 50,000 workers.

    Job sizes follow a long tail (1 to 32 workers); one job in four uses 2 GPUs per worker; half the jobs are
    elastic (base = half their workers). Workers go out in chunks of 1-4 along a walk over the loaned servers in
    random order: each chunk to the next server with room; after the first lap, one time in ten the walk jumps
    to a random server. So big jobs span neighbouring servers, neighbouring jobs share servers (the dependent
    case the reclaim policy is for), and every loaned server but the idle ones holds workers. One job in five
    starts on a training server and spills onto loaned ones.
    """
    rng = random.Random(seed)
    servers = [Server(f"l{i:05d}", Pool.INFERENCE, "T4", 8, LoanState.LOANED) for i in range(RECLAIM_LOANED)]
    servers += [Server(f"t{i:04d}", Pool.TRAINING, "A100", 8) for i in range(RECLAIM_TRAINING)]
    free = {s.name: s.gpus for s in servers}
    walk = [s.name for s in servers if s.pool is Pool.INFERENCE][RECLAIM_IDLE:]
    rng.shuffle(walk)
    training_open = [s.name for s in servers if s.pool is Pool.TRAINING]
    cursor = 0
    wrapped = False
    jobs: list[TrainingJob] = []
    placed = 0
    while placed < RECLAIM_WORKERS:
        wanted = min(rng.choices([1, 2, 4, 8, 16, 32], weights=[30, 25, 20, 15, 7, 3])[0], RECLAIM_WORKERS - placed)
        gpw = 2 if rng.random() < 0.25 else 1
        placement: dict[str, int] = {}
        left = wanted
        if rng.random() < 0.2:
            name = rng.choice(training_open)
            take = min(left, free[name] // gpw)
            if take:
                placement[name] = take
                free[name] -= take * gpw
                left -= take
        for _ in range(len(walk)):
            if not left:
                break
            if wrapped and rng.random() < 0.1:
                cursor = rng.randrange(len(walk))
            name = walk[cursor]
            cursor = (cursor + 1) % len(walk)
            wrapped = wrapped or cursor == 0
            take = min(left, free[name] // gpw, rng.randint(1, 4))
            if take:
                placement[name] = placement.get(name, 0) + take
                free[name] -= take * gpw
                left -= take
        workers = wanted - left
        if not workers:
            break
        elastic = rng.random() < 0.5
        jobs.append(
            TrainingJob(
                name=f"job-{len(jobs):05d}",
                gpus_per_worker=gpw,
                min_workers=max(1, workers // 2) if elastic else workers,
                max_workers=workers * (2 if elastic else 1),
                remaining_work=rng.expovariate(1 / 3600) * workers,
                placement=placement,
                seconds_since_checkpoint=float(rng.choice([0, 60, 300, 900])),
                mix_gpu_types=any(not s.startswith("l") for s in placement),  # spilled from a training server
            )
        )
        placed += workers
    return ClusterSnapshot(tuple(servers), tuple(jobs))


def _reclaim(count: int, strategy: ReclaimStrategy) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        snapshot = reclaim_cluster()
        return functools.partial(plan_reclaim, snapshot, count, strategy=strategy)

    return setup


def _reclaim_order() -> Callable[[], object]:
    return functools.partial(reclaim_order, reclaim_cluster())


ALLOCATION_TRAINING_SERVERS = 320  # 8 V100 each: 2,560 GPUs
ALLOCATION_LOANED_SERVERS = 192  # 8 T4 each: 1,536 GPUs; 4,096 in all


@functools.cache
def allocation_cluster(seed: int = SEED) -> ClusterSnapshot:
    """2,000 jobs on 4,096 GPUs of two types: 320 training servers of 8 V100s and 192 loaned servers of 8 T4s
    (speed 0.4). 1,000 jobs run (about 2,600 GPUs, some above their base; workers packed onto servers of one
    type, a third of them on T4s), 1,000 are queued; one in three inelastic; 1-4 GPUs per worker; half of the
    jobs may use T4s (the others need more memory than a T4 has), a few are pinned to V100s by name; remaining
    times exponential around an hour at base."""
    rng = random.Random(seed)
    servers = [Server(f"v{i:03d}", Pool.TRAINING, "V100", 8) for i in range(ALLOCATION_TRAINING_SERVERS)]
    servers += [
        Server(f"t{i:03d}", Pool.INFERENCE, "T4", 8, LoanState.LOANED) for i in range(ALLOCATION_LOANED_SERVERS)
    ]
    free = {s.name: s.gpus for s in servers}
    by_type = {
        "V100": [s.name for s in servers if s.gpu_type == "V100"],
        "T4": [s.name for s in servers if s.gpu_type == "T4"],
    }
    jobs = []
    for i in range(ALLOCATION_JOBS):
        gpw = rng.choice([1, 1, 1, 1, 2, 4])
        low = rng.choice([1, 1, 2])
        high = low * rng.choice([1, 2, 4])
        fits_t4 = rng.random() < 0.5
        placement: dict[str, int] = {}
        if i < ALLOCATION_JOBS // 2:
            workers = low + rng.randint(0, (high - low) // 2)
            kind = "T4" if fits_t4 and rng.random() < 0.33 else "V100"
            hosts = by_type[kind]
            start = rng.randrange(len(hosts))
            for step in range(len(hosts)):
                if workers == 0:
                    break
                name = hosts[(start + step) % len(hosts)]
                take = min(workers, free[name] // gpw)
                if take:
                    placement[name] = take
                    free[name] -= take * gpw
                    workers -= take
            if workers:  # this type is full: leave the job queued
                for name, count in placement.items():
                    free[name] += count * gpw
                placement = {}
        jobs.append(
            TrainingJob(
                name=f"job-{i:04d}",
                gpus_per_worker=gpw,
                min_workers=low,
                max_workers=high,
                remaining_work=rng.expovariate(1 / 3600) * low,
                submit_time=rng.uniform(0, 1000),
                priority=1 if rng.random() < 0.05 else 0,
                placement=placement,
                gpu_types=None if fits_t4 else frozenset({"V100"}),
                gpu_memory_gib=None if fits_t4 or rng.random() < 0.5 else 24.0,
            )
        )
    catalog = GpuCatalog.of(GpuType("V100", 1.0, 32.0), GpuType("T4", 0.4, 16.0))
    return ClusterSnapshot(tuple(servers), tuple(jobs), catalog)


def _allocation(
    search_budget: int = DEFAULT_SEARCH_BUDGET, *, restart_cost_s: float | None = None
) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        return functools.partial(
            allocate_workers, allocation_cluster(), search_budget=search_budget, restart_cost_s=restart_cost_s
        )

    return setup


@functools.cache
def scoring_nodes(seed: int = SEED) -> tuple[NodeView, ...]:
    """5,000 nodes: 2,000 training, 2,000 loaned (each with its reclaim rank), 500 serving, 300 idle, 200
    reclaiming; 8 GPUs each, partly used."""
    rng = random.Random(seed)
    kinds = (
        [(Pool.TRAINING, None)] * 2000
        + [(Pool.INFERENCE, LoanState.LOANED)] * 2000
        + [(Pool.INFERENCE, LoanState.SERVING)] * 500
        + [(Pool.INFERENCE, LoanState.IDLE)] * 300
        + [(Pool.INFERENCE, LoanState.RECLAIMING)] * 200
    )
    rng.shuffle(kinds)
    ranks = list(range(2000))
    rng.shuffle(ranks)
    views = []
    for i, (pool, state) in enumerate(kinds):
        rank = ranks.pop() if state is LoanState.LOANED else 0
        views.append(NodeView(f"node-{i:04d}", pool, state, 8, rng.randint(0, 8), rank))
    return tuple(views)


def _pod(role: PodRole) -> PodRequest:
    nodes = scoring_nodes()
    return PodRequest(role, 2, "job-0001", {nodes[i].name: 1 for i in range(0, 5000, 313)})


def _score(role: PodRole) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        return functools.partial(score_nodes, _pod(role), scoring_nodes())

    return setup


def _filter_and_score(role: PodRole) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        pod, nodes = _pod(role), scoring_nodes()

        def call() -> object:
            passed = set(filter_nodes(pod, nodes).passed)
            return score_nodes(pod, [n for n in nodes if n.name in passed])

        return call

    return setup


LYRA = ReclaimStrategy.LYRA
POSTER = ReclaimStrategy.POSTER


def benchmarks() -> list[Benchmark]:
    reclaim_what = "plan_reclaim on 10,000 loaned servers, 50,000 workers"
    return [
        Benchmark("reclaim/lyra/k=100", _reclaim(100, LYRA), f"{reclaim_what}, k=100", 100.0, repeats=21),
        Benchmark("reclaim/lyra/k=1000", _reclaim(1000, LYRA), f"{reclaim_what}, k=1,000", 100.0, repeats=21),
        Benchmark("reclaim/poster/k=100", _reclaim(100, POSTER), f"{reclaim_what}, k=100, poster greedy", repeats=21),
        Benchmark(
            "reclaim/poster/k=1000", _reclaim(1000, POSTER), f"{reclaim_what}, k=1,000, poster greedy", repeats=21
        ),
        Benchmark(
            "reclaim/least-gpus-used/k=1000",
            _reclaim(1000, ReclaimStrategy.LEAST_GPUS_USED),
            f"{reclaim_what}, k=1,000, naive sort",
        ),
        Benchmark("reclaim/order", _reclaim_order, "reclaim_order over the same 10,000 loaned servers", repeats=7),
        Benchmark(
            "allocation/2000-jobs",
            _allocation(),
            "allocate_workers: 2,000 jobs (1,000 running) on 4,096 GPUs of two types, default search budget",
            200.0,
        ),
        Benchmark(
            "allocation/2000-jobs/no-search",
            _allocation(search_budget=0),
            "the same, phase 1 and the candidate allocations only (search_budget=0)",
        ),
        Benchmark(
            "allocation/2000-jobs/migration",
            _allocation(restart_cost_s=60.0),
            "the same, running jobs may move to faster GPUs (restart cost 60 s)",
            200.0,
        ),
        Benchmark(
            "scoring/flexible/5000-nodes",
            _score(PodRole.TRAINING_FLEXIBLE),
            "score_nodes for one flexible training pod over 5,000 nodes",
            5.0,
            repeats=50,
        ),
        Benchmark(
            "scoring/inference/5000-nodes",
            _score(PodRole.INFERENCE),
            "score_nodes for one inference pod over 5,000 nodes",
            5.0,
            repeats=50,
        ),
        Benchmark(
            "scoring/flexible/5000-nodes/filter+score",
            _filter_and_score(PodRole.TRAINING_FLEXIBLE),
            "filter_nodes then score_nodes on the nodes that pass",
            repeats=50,
        ),
    ]


RATIOS = [
    Ratio("reclaim lyra / poster, k=100", "reclaim/lyra/k=100", "reclaim/poster/k=100"),
    Ratio("reclaim lyra / poster, k=1000", "reclaim/lyra/k=1000", "reclaim/poster/k=1000"),
    Ratio("allocation default / no search", "allocation/2000-jobs", "allocation/2000-jobs/no-search"),
    Ratio(
        "filter+score / score, 5,000 nodes",
        "scoring/flexible/5000-nodes/filter+score",
        "scoring/flexible/5000-nodes",
    ),
]


def ratios() -> list[Ratio]:
    return RATIOS
