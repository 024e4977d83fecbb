"""A scenario of three GPU types (A100 and V100 training servers, T4 inference servers on smaller servers) run end
to end, checked after every placement change and at every instant by an oracle that shares no code with the engine:
it derives each server's GPU type and size from the scenario text by its own reading of the naming rule, derives
each job's worker size from its trace width by the documented rule (the largest divisor up to the smallest server
the job may use), counts GPUs per type and per server from the jobs' placements (workers whole on one server, so a
layout packs when no server holds more GPUs than it has), and recomputes each job's pace as its workers times the
speed of its slowest GPU type (synchronous data parallelism: speeds never add across types)."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

import pytest
import yaml

from lyra.sim.cluster import split_demand
from lyra.sim.engine import Simulation
from lyra.sim.jobs import SimJob, Status
from lyra.sim.load import LoadSeries
from lyra.sim.scenario import Scenario, parse_scenario
from lyra.sim.schemes import SCHEMES
from lyra.sim.traces import Trace, TraceFormat, TraceJob
from lyra.sim.workload import Window, build_workload
from tests.unit.sim.builders import TINY, stepped_load

SPEEDS = {"A100": 1.5, "V100": 1.0, "T4": 0.4, "L4": 0.5}
TRAINING_GROUPS = [
    {"gpu_type": "V100", "servers": 2, "gpus_per_server": 8},
    {"gpu_type": "A100", "servers": 1, "gpus_per_server": 8},
]
INFERENCE_GROUPS = [{"gpu_type": "T4", "servers": 3, "gpus_per_server": 4}]
#: A fourth type: two inference GPU types, demand split over them by their servers.
TWO_INFERENCE_GROUPS = [
    {"gpu_type": "T4", "servers": 2, "gpus_per_server": 4},
    {"gpu_type": "L4", "servers": 1, "gpus_per_server": 8},
]


def three_types(inference: list[dict[str, Any]] = INFERENCE_GROUPS, **overrides: Any) -> Scenario:
    document = yaml.safe_load(TINY)
    document["training"] = {"groups": TRAINING_GROUPS}
    document["inference"] = {"groups": inference, "req_per_server": 100.0, "headroom_share": 0}
    document["speed"] = SPEEDS
    document["memory"] = {"inference_fit_share": 0.7}
    document["elasticity"] = {"share": 0.6, "min_factor": 0.5, "max_factor": 2, "mixing_share": 0.5}
    document["scheduler"]["decision_interval_s"] = 30
    document["scheduler"]["rebalance_interval_s"] = 300
    document.update(overrides)
    return parse_scenario(yaml.safe_dump(document), "<three types>")


def oracle_servers(inference: list[dict[str, Any]] = INFERENCE_GROUPS) -> dict[str, tuple[str, int]]:
    """Server name -> (GPU type, GPUs), read off the groups above: ``train-NNNN`` and ``infer-NNNN`` numbered
    through each pool's groups in order."""
    servers: dict[str, tuple[str, int]] = {}
    for prefix, groups in (("train", TRAINING_GROUPS), ("infer", inference)):
        number = 0
        for group in groups:
            for _ in range(group["servers"]):
                servers[f"{prefix}-{number:04d}"] = (group["gpu_type"], group["gpus_per_server"])
                number += 1
    return servers


def random_trace(seed: int, jobs: int = 70) -> Trace:
    draw = random.Random(seed)
    rows = [
        TraceJob(
            f"job-{i:03d}",
            draw.uniform(0, 20_000),
            draw.uniform(300, 9_000),
            draw.choice((1, 1, 2, 3, 4, 6, 8, 12, 16)),
        )
        for i in range(jobs)
    ]
    return Trace("<three types>", TraceFormat.GENERIC, tuple(sorted(rows, key=lambda j: (j.submit_s, j.name))))


class Observed:
    """What the oracle saw over a run."""

    def __init__(self) -> None:
        self.checks = 0
        self.types_used: set[str] = set()
        self.mixed_jobs: set[str] = set()
        self.peak_gpus: dict[str, int] = {}
        #: GPUs per worker seen among running jobs, and jobs seen with workers on several servers.
        self.worker_sizes: set[int] = set()
        self.multi_server_jobs: set[str] = set()
        self.full_servers = 0


class CheckedSimulation(Simulation):
    """The engine, with the oracle run after every placement change and at the end of every instant."""

    observed: Observed
    servers: dict[str, tuple[str, int]]
    #: Each job's GPUs at its trace width, and whether its memory fits the inference GPUs (the workload's draw).
    trace_gpus: dict[str, int]
    fits: dict[str, bool]

    def apply(self, changes: Any, t: float) -> None:
        super().apply(changes, t)
        self.check()

    def decide(self, t: float) -> None:
        super().decide(t)
        self.check()

    def check(self) -> None:
        names = self.cluster.names
        capacity: dict[str, int] = {}
        for gpu_type, gpus in self.servers.values():
            capacity[gpu_type] = capacity.get(gpu_type, 0) + gpus
        used_of_type: dict[str, int] = {}
        used_of_server: dict[str, int] = {}
        for job in self.jobs:
            if job.status is Status.LEAVING:  # its workers still hold their GPUs during the grace period
                for server, count in job.placement.items():
                    used_of_server[names[server]] = used_of_server.get(names[server], 0) + count * job.gpus_per_worker
            if job.status is not Status.RUNNING:
                continue
            self.check_job(job, names, used_of_type)
            for server, count in job.placement.items():
                used_of_server[names[server]] = used_of_server.get(names[server], 0) + count * job.gpus_per_worker
        for server, used in used_of_server.items():
            size = self.servers[server][1]
            assert used <= size, f"server {server}: {used} GPUs used, it has {size}"
            self.observed.full_servers += used == size
        for gpu_type, used in used_of_type.items():
            assert used <= capacity[gpu_type], f"{used} {gpu_type} GPUs used, {capacity[gpu_type]} exist"
            self.observed.peak_gpus[gpu_type] = max(self.observed.peak_gpus.get(gpu_type, 0), used)
        self.observed.checks += 1

    def check_job(self, job: SimJob, names: list[str], used_of_type: dict[str, int]) -> None:
        per_worker = self.oracle_worker_size(job)
        assert job.gpus_per_worker == per_worker, f"{job.name}: workers of {job.gpus_per_worker}, not {per_worker}"
        types_here: set[str] = set()
        workers = 0
        for server, count in job.placement.items():
            gpu_type, size = self.servers[names[server]]
            assert isinstance(count, int)
            assert count > 0
            assert count * per_worker <= size, f"{job.name}: {count} workers of {per_worker} GPUs on {size}"
            assert gpu_type in job.gpu_types, f"{job.name} runs on {gpu_type}, may use {sorted(job.gpu_types)}"
            used_of_type[gpu_type] = used_of_type.get(gpu_type, 0) + count * per_worker
            types_here.add(gpu_type)
            workers += count
        assert workers == job.workers
        assert job.wmin <= workers <= job.wmax
        self.observed.worker_sizes.add(per_worker)
        if len(job.placement) > 1:
            self.observed.multi_server_jobs.add(job.name)
        if len(types_here) > 1:
            assert job.mixes, f"{job.name} spans {sorted(types_here)} without opting in to mixing"
            self.observed.mixed_jobs.add(job.name)
        self.observed.types_used |= types_here
        slowest = min(SPEEDS[t] for t in types_here)
        assert job.rate == pytest.approx(workers * slowest), f"{job.name}: pace {job.rate}, {workers} x {slowest}"

    def oracle_worker_size(self, job: SimJob) -> int:
        """The largest divisor of the job's GPUs up to the smallest server whose type its memory allows."""
        gpus, fits = self.trace_gpus[job.name], self.fits[job.name]
        smallest = min(size for name, (_, size) in self.servers.items() if fits or name.startswith("train-"))
        return max(d for d in range(1, min(gpus, smallest) + 1) if gpus % d == 0)


def run_checked(
    scheme: str, seed: int, load: LoadSeries, inference: list[dict[str, Any]] = INFERENCE_GROUPS
) -> tuple[CheckedSimulation, Observed]:
    setup = three_types(inference, seed=seed)
    rows = random_trace(seed)
    workload = build_workload(rows, setup, Window(0.0, 30_000.0))
    simulation = CheckedSimulation(workload, setup, SCHEMES[scheme], load)
    simulation.observed = Observed()
    simulation.servers = oracle_servers(inference)
    simulation.trace_gpus = {row.name: row.num_gpus for row in rows.jobs}
    simulation.fits = {spec.name: spec.fits_inference_gpu for spec in workload.jobs}
    simulation.run()
    return simulation, simulation.observed


#: No inference demand for the first hour and a half, then all of it, then none: servers are lent and reclaimed.
LOAD = stepped_load(*([0] * 9), *([300] * 6), *([0] * 30))


@pytest.mark.parametrize(
    "scheme",
    ["baseline", "basic", "lyra", "lyra-no-loaning", "lyra-no-elasticity", "lyra-exact-free", "fifo", "sjf", "las"],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_gpu_types_never_oversubscribed_and_a_job_runs_at_its_slowest_type(scheme: str, seed: int) -> None:
    simulation, observed = run_checked(scheme, seed, LOAD)
    assert all(job.status is Status.DONE for job in simulation.jobs)
    assert observed.checks > 50
    assert {1, 4, 6, 8} <= observed.worker_sizes  # one-GPU workers, T4-sized workers, 12-GPU jobs split in two
    assert observed.multi_server_jobs, "some job's workers span servers"
    assert observed.full_servers > 0, "the packing check bites: some server was full"
    assert {"A100", "V100"} <= observed.types_used
    if SCHEMES[scheme].loaning:
        assert "T4" in observed.types_used
        assert simulation.loans is not None
        assert simulation.loans.reclaims.total > 0
    else:
        assert "T4" not in observed.types_used


@pytest.mark.parametrize("scheme", ["basic", "lyra", "lyra-no-elasticity"])
def test_two_inference_gpu_types_are_both_lent_and_reclaimed_under_the_oracle(scheme: str) -> None:
    simulation, observed = run_checked(scheme, 0, LOAD, TWO_INFERENCE_GROUPS)
    assert all(job.status is Status.DONE for job in simulation.jobs)
    assert {"A100", "V100", "T4", "L4"} <= observed.types_used
    assert simulation.loans is not None
    assert simulation.loans.reclaims.total > 0
    # 300 req/s at 100 per server: 3 servers, split 2 T4 + 1 L4 by their servers, so none is short once reclaimed.
    cluster = simulation.cluster
    assert simulation.demand_at(5_400.0) == 3
    assert dict(zip(cluster.type_names, split_demand(3, cluster.inference_servers_of_type), strict=True)) == {
        "A100": 0,
        "L4": 1,
        "T4": 2,
        "V100": 0,
    }


@pytest.mark.parametrize(
    ("servers", "of_type", "split"),
    [
        (0, [3], [0]),
        (5, [3], [5]),
        (3, [2, 1], [2, 1]),
        (4, [2, 1], [3, 1]),  # 8/3 and 4/3: the larger remainder (2/3) takes the extra server
        (5, [1, 1, 1], [2, 2, 1]),  # equal remainders: the lower type indices
        (7, [0, 5, 2], [0, 5, 2]),
        (100, [3, 0, 4], [43, 0, 57]),  # 300/7 and 400/7: remainders 6/7 and 1/7
    ],
)
def test_demand_splits_in_proportion_to_the_servers_of_each_type(
    servers: int, of_type: list[int], split: list[int]
) -> None:
    """Whole servers per type, summing to the demand, each within one server of its exact share (an oracle by
    fractions); the largest remainders get the extra servers, ties to the lower type index."""
    shares = split_demand(servers, of_type)
    assert shares == split
    assert sum(shares) == servers
    total = sum(of_type)
    for share, count in zip(shares, of_type, strict=True):
        exact = Fraction(servers * count, total)
        assert exact - 1 < share < exact + 1
        assert count or share == 0


def test_jobs_that_opt_in_to_mixing_span_types_at_the_slowest_pace() -> None:
    spans = set()
    for seed in range(3):
        _, observed = run_checked("lyra", seed, LOAD)
        spans |= observed.mixed_jobs
    assert spans, "some mixing job spans GPU types, so the slowest-type rule is exercised"


def checked_by_hand(*, trace_gpus: int, fits: bool) -> CheckedSimulation:
    """A three-type simulation whose jobs a test places by hand before asking the oracle: every job of
    ``trace_gpus`` GPUs in the trace, fitting the inference GPUs' memory or not."""
    setup = three_types()
    workload = build_workload(random_trace(0), setup, Window(0.0, 30_000.0))
    simulation = CheckedSimulation(workload, setup, SCHEMES["lyra"], LOAD)
    simulation.observed = Observed()
    simulation.servers = oracle_servers()
    simulation.trace_gpus = {job.name: trace_gpus for job in simulation.jobs}
    simulation.fits = {job.name: fits for job in simulation.jobs}
    return simulation


def test_the_oracle_catches_speeds_that_add_across_types() -> None:
    """The oracle is not vacuous: a pace that adds each type's speed fails it."""
    simulation = checked_by_hand(trace_gpus=1, fits=True)
    job = simulation.jobs[0]
    names = simulation.cluster.names
    a100 = names.index("train-0002")
    v100 = names.index("train-0000")
    job.status = Status.RUNNING
    job.gpus_per_worker, job.wmin, job.wmax = 1, 1, 9
    job.placement = {a100: 2, v100: 2}
    job.workers = 4
    job.mixes = True
    job.gpu_types = frozenset(SPEEDS)
    job.rate = 2 * 1.5 + 2 * 1.0
    with pytest.raises(AssertionError, match="pace"):
        simulation.check()
    job.rate = 4 * 1.0
    simulation.check()
    job.placement = {a100: 9}
    job.workers = 9
    job.rate = 9 * 1.5
    with pytest.raises(AssertionError, match="9 workers of 1 GPUs on 8"):
        simulation.check()


def test_the_oracle_catches_a_layout_that_does_not_pack() -> None:
    """Two 6-GPU workers on one 8-GPU server, and 6-GPU workers on two servers where one of them is full."""
    simulation = checked_by_hand(trace_gpus=12, fits=False)
    first, second = simulation.jobs[:2]
    names = simulation.cluster.names
    v0, v1 = names.index("train-0000"), names.index("train-0001")
    for job in (first, second):
        job.status = Status.RUNNING
        job.gpus_per_worker = 6
        job.wmin, job.wmax = 1, 2
        job.gpu_types = frozenset({"V100"})
        job.rate = 2.0
    first.placement, first.workers = {v0: 2}, 2
    second.status = Status.QUEUED
    with pytest.raises(AssertionError, match="2 workers of 6 GPUs on 8"):
        simulation.check()
    first.placement = {v0: 1, v1: 1}
    second.status, second.placement, second.workers, second.rate = Status.RUNNING, {v1: 1}, 1, 1.0
    with pytest.raises(AssertionError, match="server train-0001: 12 GPUs used, it has 8"):
        simulation.check()
    second.placement = {v0: 1}
    with pytest.raises(AssertionError, match="server train-0000: 12 GPUs used, it has 8"):
        simulation.check()
    second.status = Status.QUEUED
    simulation.check()


def test_a_job_larger_than_any_one_training_type_is_clamped_to_the_largest() -> None:
    workload = build_workload(
        Trace("<t>", TraceFormat.GENERIC, (TraceJob("big", 0.0, 100.0, 24),)), three_types(), Window(0.0, 10.0)
    )
    (job,) = workload.jobs
    assert (job.num_gpus, workload.clamped) == (16, 1)  # the V100 group's 16 GPUs; the A100 group has 8
