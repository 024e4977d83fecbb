"""The simulator on real trace windows (Philly and openb, a few days each), checked after every event by an oracle
that shares no code with the engine or the workload builder.

The oracle reads the scenario file itself (``yaml``, not :mod:`lyra.sim.scenario`) and derives, from the trace rows
(as :mod:`lyra.sim.traces` reads them) and the seeding that :mod:`lyra.sim.workload` documents:

* each job's draws: ``u`` and ``z`` from ``random.Random(seed)``, ``m`` and ``x`` from
  ``random.Random(f"{seed}/gpus")``, two per trace row in trace order whether the row is in the window or not;
  elastic when ``u < share``, fits a T4 when ``m < fit_share * n ** -size_exponent``, mixes when elastic and
  ``x < mixing_share``;
* its worker size (the largest divisor of its GPUs up to the smallest server it may use), its elastic bounds
  (``ceil(w * min_factor)`` and ``w * max_factor`` workers, clamped to the training servers' workers), its work
  (``d * w * e(w)``) and the GPU types it may use (the inference type only if the scheme lends and it fits);
* the servers: ``train-NNNN`` and ``infer-NNNN``, their types and sizes.

After every event (an arrival, a completion, a preemption, a grace period's end, a load step, a placement change, a
scheduling decision with its turn of the loan cycle) it checks:

* **loan states**: no training worker on an inference server that serves or is idle, whose GPUs are all held for
  inference; a reclaiming server holds every GPU its leaving workers do not, and no running job's worker; a loaned
  server holds none for inference; a scheme that does not lend never lends; the cluster's loan counts agree;
* **the layout against the job records**: every job the layout places is a running or leaving job with exactly
  those workers on those servers, no server holds more GPUs than it has, and each job's workers and GPU types are
  what the oracle derived;
* **one GPU type per job** (no job here mixes) and **each job's pace**: its workers times its GPU type's speed over
  ``1 + o (w - 1)``, the slowest type's if several (speeds never add across types).

At the end every job is done and no job finished faster than alone at its best pace (:mod:`lyra.sim.bound`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from lyra.sim.bound import jct_bound
from lyra.sim.bursts import with_bursts
from lyra.sim.cluster import INFERENCE_HOLD
from lyra.sim.engine import Simulation
from lyra.sim.jobs import SimJob, Status
from lyra.sim.load import read_load
from lyra.sim.metrics import summarise
from lyra.sim.scenario import Scenario, parse_scenario
from lyra.sim.schemes import SCHEMES
from lyra.sim.traces import Trace, read_trace
from lyra.sim.workload import DAY_S, Window, Workload, build_workload

ROOT = Path(__file__).resolve().parents[3]
TRACES = ROOT / ".." / "shared" / "traces"
SCENARIOS = ROOT / "src" / "lyra" / "sim" / "scenarios"


@dataclass(frozen=True)
class RealWindow:
    name: str
    trace: Path
    scenario: str
    start_s: float
    days: float
    #: From the trace's first submit if ``start_from_first``, else on the trace clock.
    start_from_first: bool
    #: The scenario's sizes for this window: training servers, inference servers, requests per server.
    sizes: tuple[int, int, float]


#: Philly from 2017-10-03 (the poster's window), 2 days (2,641 jobs), the reclaim-stressing scenario on a training
#: cluster about half the calibrated one (40 servers, the inference pool 5/3 of it, its rate per server scaled to
#: keep the calibrated utilisation): at the calibrated 76 servers these two days leave loans idle and no reclaim
#: meets training work, so the checks of reclaims would not bite. openb's days 5 to 12 (800 jobs) on one-GPU
#: servers, at the sizes --calibrate chose for its reclaim-stress run (docs/evaluation.md).
WINDOWS = {
    "philly": RealWindow("philly", TRACES / "philly" / "philly.csv", "reclaim-stress.yaml", 1_506_988_800.0, 2.0, False,
                         (40, 67, 112.9)),
    "openb": RealWindow("openb", TRACES / "openb" / "openb_pod_list_default.csv",
                        "reclaim-stress-small-servers.yaml", 5 * DAY_S, 7.0, True, (4, 7, 1259.13)),
}  # fmt: skip


@dataclass(frozen=True)
class Expected:
    """What the oracle derives for one job."""

    gpus_per_worker: int
    wmin: int
    wmax: int
    work: float
    gpu_types: frozenset[str]
    mixes: bool


class Oracle:
    """The scenario as the oracle reads it, and each job as it derives it."""

    def __init__(self, document: dict[str, Any], rows: Trace, window: Window, *, lends: bool, elastic: bool) -> None:
        training, inference = document["training"], document["inference"]
        self.training_type, self.inference_type = training["gpu_type"], inference["gpu_type"]
        self.speed: dict[str, float] = document["speed"]
        self.overhead: float = document["scaling"]["overhead"]
        self.servers: dict[str, tuple[str, int]] = {}
        for prefix, pool in (("train", training), ("infer", inference)):
            for i in range(pool["servers"]):
                self.servers[f"{prefix}-{i:04d}"] = (pool["gpu_type"], pool["gpus_per_server"])
        self.expected: dict[str, Expected] = {}
        seed = document["seed"]
        draws, gpu_draws = random.Random(seed), random.Random(f"{seed}/gpus")
        rule, memory = document["elasticity"], document["memory"]
        end = window.start_s + window.length_s
        for row in rows.jobs:
            u = draws.random()
            draws.gauss(0.0, 1.0)
            m, x = gpu_draws.random(), gpu_draws.random()
            if not window.start_s <= row.submit_s < end:
                continue
            n = row.num_gpus
            fits = m < memory["inference_fit_share"] * n ** -memory["size_exponent"]
            smallest = training["gpus_per_server"]
            if fits:
                smallest = min(smallest, inference["gpus_per_server"])
            gpus = min(n, training["servers"] * training["gpus_per_server"])
            g = max(d for d in range(1, min(gpus, smallest) + 1) if gpus % d == 0)
            most = training["servers"] * (training["gpus_per_server"] // g)
            w = min(gpus // g, most)
            drawn_elastic = u < rule["share"]
            low = max(1, math.ceil(w * rule["min_factor"]))
            high = max(min(most, w * rule["max_factor"]), low)
            is_elastic = elastic and drawn_elastic
            trace_workers = n / g
            self.expected[row.name] = Expected(
                gpus_per_worker=g,
                wmin=low if is_elastic else w,
                wmax=high if is_elastic else w,
                work=row.duration_s * trace_workers / (1 + self.overhead * (trace_workers - 1)),
                gpu_types=frozenset({self.training_type, self.inference_type} if lends and fits else
                                    {self.training_type}),
                mixes=is_elastic and x < rule["mixing_share"],
            )  # fmt: skip


class Seen:
    """What the oracle saw, so that a test can show its checks bit."""

    def __init__(self) -> None:
        self.checks = 0
        self.on_loans = 0
        self.reclaiming_with_leavers = 0
        self.full_servers = 0
        self.types: set[str] = set()
        self.worker_sizes: set[int] = set()


class CheckedSimulation(Simulation):
    oracle: Oracle
    seen: Seen
    lends: bool
    by_name: dict[str, SimJob]
    #: Servers as (index, name, GPUs), by the oracle's reading of the scenario, per pool.
    training_servers: list[tuple[int, str, int]]
    inference_servers: list[tuple[int, str, int]]
    verified: dict[str, tuple[float, int, int, int]]

    # Every event ends in one of these: the oracle runs after each, and looks at the event's job first.
    def enqueue(self, job: SimJob, t: float, *, waiting_since: float | None = None) -> None:
        super().enqueue(job, t, waiting_since=waiting_since)
        self.check(job)

    def complete(self, job: SimJob, t: float) -> None:
        super().complete(job, t)
        self.check(job)

    def preempt(self, job: SimJob, t: float) -> None:
        super().preempt(job, t)
        self.check(job)

    def requeue(self, job: SimJob, t: float) -> None:
        super().requeue(job, t)
        self.check(job)

    def apply(self, changes: Any, t: float) -> None:
        super().apply(changes, t)
        self.check(*changes)

    def load_step(self, t: float) -> None:
        super().load_step(t)
        self.check()

    def decide(self, t: float) -> None:
        super().decide(t)
        self.check()

    def check(self, *event_jobs: SimJob) -> None:
        """The oracle's checks. Jobs that hold workers are those the layout places, those the engine counts as
        running and those of the event; each of the event's jobs holds workers exactly when it runs or leaves."""
        seen, cluster = self.seen, self.cluster
        layout = cluster.layout
        names = cluster.names
        held = layout.jobs.get(INFERENCE_HOLD, {})
        holders = {self.by_name[name] for name in layout.jobs if name != INFERENCE_HOLD}
        holders.update(self.jobs[i] for i in self.running)
        for job in event_jobs:
            if job.status in (Status.RUNNING, Status.LEAVING):
                holders.add(job)
            else:
                assert not job.placement, f"{job.name} ({job.status.name}) holds {job.placement}"
                assert job.name not in layout.jobs, f"the layout places {job.name} ({job.status.name})"
        used: dict[int, int] = {}
        running: set[int] = set()  # servers with a running job's worker
        leaving: set[int] = set()
        for job in holders:
            assert job.status in (Status.RUNNING, Status.LEAVING), f"{job.name} ({job.status.name}) holds workers"
            assert layout.jobs.get(job.name, {}) == job.placement, (
                f"{job.name}: the layout places {layout.jobs.get(job.name)}, its record {job.placement}"
            )
            for server, count in job.placement.items():
                used[server] = used.get(server, 0) + count * job.gpus_per_worker
                (running if job.status is Status.RUNNING else leaving).add(server)
            if job.status is Status.RUNNING and self.verified.get(job.name) != (
                job.rate,
                job.workers,
                id(job.placement),
                len(job.placement),
            ):
                self.check_job(job, names)
        free = layout.free
        for index, name, size in self.training_servers:
            assert held.get(index, 0) == 0, f"training server {name} held for inference"
            assert free[index] >= 0, f"{name}: {free[index]} GPUs free"
            assert used.get(index, 0) + free[index] == size, f"{name}: GPUs do not add up"
            seen.full_servers += free[index] == 0
        loaned = reclaiming = 0
        for index, name, size in self.inference_servers:
            hold = held.get(index, 0)
            assert free[index] >= 0, f"{name}: {free[index]} GPUs free"
            assert used.get(index, 0) + hold + free[index] == size, f"{name}: GPUs do not add up"
            if cluster.is_loaned(index):
                loaned += 1
                assert self.lends, f"{name} lent under {self.scheme.name}, which does not lend"
                assert hold == 0, f"loaned {name}: {hold} GPUs held for inference"
                seen.on_loans += index in running
            elif cluster.is_reclaiming(index):
                reclaiming += 1
                assert index not in running, f"reclaiming {name} runs a running job's worker"
                assert free[index] == 0, f"reclaiming {name}: {free[index]} GPUs neither held nor used"
                seen.reclaiming_with_leavers += index in leaving
            else:
                assert index not in running, f"training on serving or idle server {name}"
                assert index not in leaving, f"training on serving or idle server {name}"
                assert hold == size, f"serving or idle {name}: {hold} of its {size} GPUs held for inference"
        assert (loaned, reclaiming) == (cluster.loaned, cluster.reclaiming)
        seen.checks += 1

    def check_job(self, job: SimJob, names: list[str]) -> None:
        oracle = self.oracle
        expected = oracle.expected[job.name]
        assert (job.gpus_per_worker, job.wmin, job.wmax) == (expected.gpus_per_worker, expected.wmin, expected.wmax), (
            f"{job.name}: workers of {job.gpus_per_worker} GPUs, {job.wmin}-{job.wmax}; the oracle says {expected}"
        )
        assert job.gpu_types == expected.gpu_types, f"{job.name} may use {set(job.gpu_types)}, not {expected}"
        assert not job.mixes
        assert not expected.mixes
        types = {oracle.servers[names[server]][0] for server in job.placement}
        assert len(types) == 1, f"{job.name} runs on {sorted(types)}: one GPU type per job"
        assert types <= expected.gpu_types, f"{job.name} runs on {types}, may use {set(expected.gpu_types)}"
        workers = sum(job.placement.values())
        assert workers == job.workers
        assert expected.wmin <= workers <= expected.wmax
        for server, count in job.placement.items():
            assert count * job.gpus_per_worker <= oracle.servers[names[server]][1]
        slowest = min(oracle.speed[t] for t in types)
        pace = workers * slowest / (1 + oracle.overhead * (workers - 1))
        assert math.isclose(job.rate, pace, rel_tol=1e-12), f"{job.name}: pace {job.rate}, the oracle says {pace}"
        # Checked: until its pace, workers or placement change, the job is what the oracle derived.
        self.verified[job.name] = (job.rate, job.workers, id(job.placement), len(job.placement))
        self.seen.types |= types
        self.seen.worker_sizes.add(job.gpus_per_worker)


def build_checked(window_name: str, scheme: str) -> tuple[CheckedSimulation, Workload, Scenario]:
    real = WINDOWS[window_name]
    if not real.trace.exists():
        pytest.fail(f"{real.trace} is missing: the shared traces are needed (../shared/traces/README.md)")
    document = yaml.safe_load((SCENARIOS / real.scenario).read_text(encoding="utf-8"))
    training, inference, rate = real.sizes
    document["training"]["servers"] = training
    document["inference"]["servers"] = inference
    document["inference"]["req_per_server"] = rate
    scenario = parse_scenario(yaml.safe_dump(document), real.scenario)
    rows = read_trace(real.trace)
    start = real.start_s + (rows.first_submit_s if real.start_from_first else 0.0)
    window = Window(start, real.days * DAY_S)
    workload = build_workload(rows, scenario, window)
    load = with_bursts(read_load(TRACES / "servegen" / "derived_language_total_rate_10min.csv"), scenario.bursts,
                       scenario.seed)  # fmt: skip
    chosen = SCHEMES[scheme]
    simulation = CheckedSimulation(workload, scenario, chosen, load)
    simulation.lends = chosen.loaning
    simulation.oracle = Oracle(document, rows, window, lends=chosen.loaning, elastic=chosen.elastic)
    simulation.seen = Seen()
    simulation.by_name = {job.name: job for job in simulation.jobs}
    simulation.verified = {}
    servers = [(i, name, simulation.oracle.servers[name][1]) for i, name in enumerate(simulation.cluster.names)]
    assert sorted(simulation.oracle.servers) == simulation.cluster.names
    simulation.training_servers = [s for s in servers if s[1].startswith("train-")]
    simulation.inference_servers = [s for s in servers if s[1].startswith("infer-")]
    assert set(simulation.oracle.expected) == {job.name for job in simulation.jobs}
    for job in simulation.jobs:  # every job's work before it runs
        assert job.remaining == pytest.approx(simulation.oracle.expected[job.name].work, rel=1e-12), job.name
    return simulation, workload, scenario


def run_checked(window_name: str, scheme: str) -> tuple[CheckedSimulation, Seen, Any]:
    simulation, workload, scenario = build_checked(window_name, scheme)
    result = simulation.run()
    return simulation, simulation.seen, (workload, scenario, result)


@pytest.mark.parametrize("window_name", ["philly", "openb"])
@pytest.mark.parametrize("scheme", ["baseline", "basic", "lyra", "lyra-no-elasticity"])
def test_real_windows_hold_the_oracle_after_every_event(window_name: str, scheme: str) -> None:
    simulation, seen, (workload, scenario, result) = run_checked(window_name, scheme)
    assert all(job.status is Status.DONE for job in simulation.jobs)
    assert seen.checks > 5_000
    assert seen.full_servers > 0, "the packing check bites: some server was full"
    metrics = summarise(result)
    if SCHEMES[scheme].loaning:
        assert seen.on_loans > 0, "training ran on loaned servers"
        assert result.reclaims.window > 0
        assert seen.reclaiming_with_leavers > 0, "a reclaim met training workers"
        assert metrics.preemptions + result.scale_ins.window > 0
        assert {"V100", "T4"} <= seen.types
    else:
        assert seen.types == {"V100"}
    if window_name == "philly":
        assert {1, 8} <= seen.worker_sizes
    # No job finishes faster than alone at its best pace, so no mean beats the bound.
    bound = jct_bound(workload, scenario)
    for record, alone in zip(result.records, bound.alone_s, strict=True):
        assert record.jct_s >= alone * (1 - 1e-9), f"{record.name}: JCT {record.jct_s} below {alone} alone"
    assert metrics.jct_mean_s >= bound.mean_jct_s


def placed_by_hand(window_name: str = "openb") -> tuple[CheckedSimulation, SimJob]:
    """A lending simulation before its first event, with one queued one-GPU job started by hand on a V100 by the
    engine's own :meth:`apply` (so the layout and the record agree): the oracle passes; each test then breaks one
    thing it checks."""
    simulation, _, _ = build_checked(window_name, "lyra")
    job = next(j for j in simulation.jobs if j.gpus == 1 and j.wmin == j.wmax == 1 and "T4" in j.gpu_types)
    simulation.enqueue(job, job.submit)
    simulation.apply({job: {simulation.cluster.layout.index["train-0000"]: 1}}, job.submit)
    simulation.check()
    return simulation, job


def test_the_oracle_catches_training_on_a_serving_server() -> None:
    simulation, job = placed_by_hand()
    cluster = simulation.cluster
    serving = cluster.layout.index["infer-0000"]
    cluster.layout.add(INFERENCE_HOLD, serving, -1, 1)  # the worker moves where inference held every GPU
    cluster.move(job.name, cluster.layout.index["train-0000"], -1, 1)
    cluster.move(job.name, serving, 1, 1)
    job.placement = {serving: 1}
    job.rate = 0.4
    with pytest.raises(AssertionError, match="training on serving or idle server infer-0000"):
        simulation.check()


def test_the_oracle_catches_a_serving_server_not_fully_held() -> None:
    simulation, _ = placed_by_hand()
    cluster = simulation.cluster
    cluster.layout.add(INFERENCE_HOLD, cluster.layout.index["infer-0001"], -1, 1)
    with pytest.raises(AssertionError, match="serving or idle infer-0001: 0 of its 1 GPUs held"):
        simulation.check()


def test_the_oracle_catches_a_layout_that_disagrees_with_the_job_record() -> None:
    simulation, job = placed_by_hand()
    job.placement = {simulation.cluster.layout.index["train-0001"]: 1}
    with pytest.raises(AssertionError, match="the layout places"):
        simulation.check()


def test_the_oracle_catches_two_gpu_types_and_added_speeds() -> None:
    simulation, job = placed_by_hand()
    cluster = simulation.cluster
    loaned = cluster.layout.index["infer-0002"]
    cluster.lend(loaned)
    cluster.move(job.name, loaned, 1, 1)
    job.placement = {**job.placement, loaned: 1}
    job.workers = 2
    job.wmax = 2
    job.rate = 1.0 + 0.4
    simulation.oracle.expected[job.name] = replace(simulation.oracle.expected[job.name], wmax=2)
    with pytest.raises(AssertionError, match="one GPU type per job"):
        simulation.check()


def test_the_oracle_catches_a_pace_not_of_the_slowest_type() -> None:
    simulation, job = placed_by_hand()
    job.rate = 1.4
    with pytest.raises(AssertionError, match=r"pace 1\.4, the oracle says 1\.0"):
        simulation.check()


def test_the_oracle_catches_a_fit_draw_or_worker_size_it_did_not_derive() -> None:
    simulation, job = placed_by_hand("philly")
    expected = simulation.oracle.expected[job.name]
    simulation.oracle.expected[job.name] = replace(expected, gpu_types=frozenset({"V100"}))
    simulation.verified.clear()
    with pytest.raises(AssertionError, match="may use"):
        simulation.check()
    simulation.oracle.expected[job.name] = replace(expected, gpus_per_worker=2)
    with pytest.raises(AssertionError, match="the oracle says"):
        simulation.check()
