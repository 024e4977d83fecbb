"""The day ``lyra demo`` plays on the local cluster and ``lyra simulate`` replays: its inputs, built once.

* **Load**: one day of the shipped ServeGen language load (:data:`LOAD_DAY`, a day with a quiet night and a busy
  morning and evening), as requests per second every 10 minutes. Inference needs ``ceil(rate / req_per_server)``
  servers (the simulator's rule); the InferenceService gets ``ceil(rate / req_per_replica)`` replicas of one GPU,
  ``req_per_replica = req_per_server / GPUs per server``, which packs onto exactly that many servers. The busiest
  10 minutes of the day need all inference servers but one.
* **Jobs**: ``jobs`` jobs drawn from the shipped Philly trace (seeded): a size class (1, 2, 4, 8 or 16 GPUs) uniformly,
  then a job of that size that ran one to six hours; it is submitted at its Philly time of day, squeezed into the first
  90 % of the day so that the last ones can finish. The simulator's own workload rule (:func:`lyra.sim.workload.
  build_workload`, with the scenario's seed) then makes each one elastic or not, and says which fit a T4's memory;
  the others may only use A100s. The same :class:`~lyra.sim.workload.JobSpec` becomes the live TrainingJob and the
  simulator's job, so both runs see one set of inputs.
* **Time**: the cluster runs the day ``speed_up`` times faster than the trace. Every setting the cluster has in wall
  seconds (the lend delay, the workers' grace period, the rendezvous timeouts, the operator's resync) is a cost in
  the simulator's scenario of that many wall seconds times ``speed_up`` (:func:`scenario_for`).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from lyra.api import names
from lyra.localcluster.profile import ClusterProfile
from lyra.operator.runner import MIN_PASS_INTERVAL_S
from lyra.sim.load import LoadSeries, read_load
from lyra.sim.scenario import Scenario
from lyra.sim.traces import Trace, TraceFormat, TraceJob, read_trace
from lyra.sim.workload import JobSpec, Window, build_workload

DAY_S = 86_400.0
#: The ServeGen day the demo plays (0-based): low from 2 to 8 h, rising at 9 h, busiest at 20 h.
LOAD_DAY = 4
#: Philly jobs the demo draws from: one to six hours long, of these sizes (GPUs).
SIZES = (1, 2, 4, 8, 16)
SHORTEST_S, LONGEST_S = 3_600.0, 6 * 3_600.0
SUBMIT_SHARE = 0.9
SERVICE = "chat"
TRAINING_POOL, INFERENCE_POOL = "training", "inference"


class DayError(ValueError):
    """The day cannot be built from the inputs given (a trace or load file, a profile); the message says why."""


@dataclass(frozen=True, slots=True)
class Timing:
    """The live cluster's settings, in wall seconds; the simulator charges each of them times the speed-up."""

    #: How often the emulator advances the jobs, and the operator's resync.
    emulate_interval_s: float = 0.2
    resync_s: float = 1.0
    lend_delay_s: float = 4.0
    reclaim_deadline_s: float = 8.0
    #: The workers' grace period (whole seconds in the CRD).
    grace_s: int = 1
    #: torchrun's rendezvous in the workers (``PET_RDZV_CONF``): a leaver is found dead after
    #: ``keep_alive_s x attempts``, a round short of ``maxWorkers`` waits ``last_call_s``.
    keep_alive_s: float = 0.25
    keep_alive_attempts: int = 2
    last_call_s: float = 0.5

    @property
    def rendezvous_conf(self) -> str:
        return (
            f"keep_alive_interval={self.keep_alive_s:g},keep_alive_max_attempt={self.keep_alive_attempts},"
            f"last_call_timeout={self.last_call_s:g}"
        )


@dataclass(frozen=True, slots=True)
class Day:
    """Everything one run of the day needs, on the cluster and in the simulator."""

    seconds: float
    speed_up: float
    seed: int
    timing: Timing
    trace: Trace
    load: LoadSeries
    scenario: Scenario
    jobs: tuple[JobSpec, ...]
    training_type: str
    inference_type: str
    inference_gpus_per_server: int

    @property
    def wall_s(self) -> float:
        return self.seconds / self.speed_up

    @property
    def req_per_replica(self) -> float:
        return self.scenario.inference.req_per_server / self.inference_gpus_per_server

    def replicas_at(self, t: float) -> int:
        """Replicas inference needs at trace time ``t`` (seconds since the day's midnight)."""
        return max(1, math.ceil(self.load.rate_at(t) / self.req_per_replica - 1e-9))

    def servers_at(self, t: float) -> int:
        return max(1, math.ceil(self.load.rate_at(t) / self.scenario.inference.req_per_server - 1e-9))


def _pool_types(profile: ClusterProfile, pool: str) -> tuple[str, int, int]:
    groups = [g for g in profile.node_groups if g.pool == pool and g.gpu is not None]
    types = {g.gpu.product for g in groups if g.gpu is not None}
    if len(types) != 1:
        raise DayError(
            f"cluster profile {profile.name}: the demo needs GPU servers of exactly one type in the {pool} pool, "
            f"found {sorted(types) or 'none'}"
        )
    shapes = {(g.gpu.count if g.gpu else 0) for g in groups}
    if len(shapes) != 1:
        raise DayError(f"cluster profile {profile.name}: the {pool} servers must all have the same number of GPUs")
    return types.pop(), sum(g.count for g in groups), shapes.pop()


def day_load(path: Path) -> LoadSeries:
    """Day :data:`LOAD_DAY` of a load series (or its first day, if shorter), starting at midnight."""
    series = read_load(path)
    per_day = round(DAY_S / series.step_s)
    if per_day < 1 or len(series.rates) < per_day:
        raise DayError(f"{path}: the load must cover at least one day in steps of at most a day")
    days = len(series.rates) // per_day
    day = LOAD_DAY if days > LOAD_DAY else 0
    return replace(series, rates=series.rates[day * per_day : (day + 1) * per_day])


def sample_jobs(trace: Trace, count: int, seed: int, seconds: float) -> tuple[TraceJob, ...]:
    """``count`` jobs of :data:`SIZES`, one to six hours long, at their time of day squeezed into the window."""
    by_size: dict[int, list[TraceJob]] = {size: [] for size in SIZES}
    for job in trace.jobs:
        if job.num_gpus in by_size and SHORTEST_S <= job.duration_s <= LONGEST_S:
            by_size[job.num_gpus].append(job)
    sizes = [size for size in SIZES if by_size[size]]
    if not sizes:
        raise DayError(f"{trace.path}: no job of {SIZES} GPUs ran between one and six hours")
    rng = random.Random(f"lyra-demo/{seed}")
    chosen = []
    for _ in range(count):
        row = rng.choice(by_size[rng.choice(sizes)])
        submit = (row.submit_s % DAY_S) / DAY_S * seconds * SUBMIT_SHARE
        chosen.append((round(submit, 3), row.duration_s, row.num_gpus))
    return tuple(TraceJob(f"job-{i:03d}", *row) for i, row in enumerate(sorted(chosen)))


def scenario_for(
    profile: ClusterProfile, load: LoadSeries, speed_up: float, seed: int, timing: Timing
) -> tuple[Scenario, str, str, int]:
    """The simulator's scenario of the live cluster: its servers, and its wall-second settings as costs."""
    training_type, training_servers, training_gpus = _pool_types(profile, TRAINING_POOL)
    inference_type, inference_servers, inference_gpus = _pool_types(profile, INFERENCE_POOL)
    if inference_servers < 3:
        raise DayError(f"cluster profile {profile.name}: the demo needs at least 3 inference servers")
    peak = max(load.rates)
    k = speed_up
    data: dict[str, Any] = {
        "training": {"groups": [{"gpu_type": training_type, "servers": training_servers,
                                 "gpus_per_server": training_gpus}]},
        "inference": {
            "groups": [{"gpu_type": inference_type, "servers": inference_servers, "gpus_per_server": inference_gpus}],
            "req_per_server": round(peak / (inference_servers - 1) * 1.001, 4),
            "headroom_share": 0.0,
        },
        "speed": {},
        "loaning": {"lend_hysteresis_s": timing.lend_delay_s * k, "drain_s": 0.0},
        "memory": {"inference_fit_share": 0.6, "size_exponent": 0.5},
        "scaling": {"overhead": 0.0},
        "elasticity": {"share": 0.5, "min_factor": 0.5, "max_factor": 2, "mixing_share": 0.0},
        "preemption": {
            # A preempted job's workers are recreated, scheduled and bound: about one resync.
            "restart_cost_s": timing.resync_s * k,
            "checkpoint_interval_s": DAY_S * 365,
            # The emulator keeps a job's work across preemptions (the grace period is the checkpoint).
            "saves_on_signal": True,
            # The emulator advances the workers every emulate_interval_s: a job's first progress waits for its next
            # step after the workers run, and its end for the step after its work is done (half a step each).
            "start_cost_s": timing.emulate_interval_s * k,
            # A resize pauses the job for its rendezvous only (the emulator's, as torchrun's): the leaver's
            # keep-alives if a worker left, the last call if the job is below maxWorkers after it.
            "resize_cost_s": 0.0,
            "rendezvous": {
                "leave_detection_s": timing.keep_alive_s * timing.keep_alive_attempts * k,
                "last_call_s": timing.last_call_s * k,
            },
            "checkpoint_grace_s": timing.grace_s * k,
        },
        "durations": {"knowledge": "exact"},
        # The operator never moves a running job to another GPU type (it calls the allocator without a restart
        # cost), so the simulator must not either. It decides on every change, at most every MIN_PASS_INTERVAL_S (it
        # coalesces a burst of events into one pass), and at least every resync. Busy with the day's events, it
        # passes every MIN_PASS_INTERVAL_S, so a change waits half of one on average for the pass that acts on it (the
        # pass itself is added from the run's measurement: demo_summary.simulate_day).
        "scheduler": {
            "decision_interval_s": MIN_PASS_INTERVAL_S * k,
            "decision_delay_s": MIN_PASS_INTERVAL_S / 2 * k,
            "rebalance_interval_s": timing.resync_s * k,
            "migration": False,
        },
        "seed": seed,
    }  # fmt: skip
    return Scenario.model_validate(data), training_type, inference_type, inference_gpus


def build_day(
    *,
    profile: ClusterProfile,
    trace_path: Path,
    load_path: Path,
    seconds: float,
    speed_up: float,
    jobs: int,
    seed: int,
    timing: Timing | None = None,
) -> Day:
    timing = timing if timing is not None else Timing()
    trace = read_trace(trace_path)
    load = day_load(load_path)
    scenario, training_type, inference_type, inference_gpus = scenario_for(profile, load, speed_up, seed, timing)
    sampled = Trace(f"{trace.path} (sampled)", TraceFormat.GENERIC, sample_jobs(trace, jobs, seed, seconds))
    workload = build_workload(sampled, scenario, Window(0.0, seconds))
    return Day(
        seconds, speed_up, seed, timing, sampled, load, scenario, workload.jobs,
        training_type, inference_type, inference_gpus,
    )  # fmt: skip


def base_only(jobs: Sequence[JobSpec]) -> tuple[JobSpec, ...]:
    """The jobs as ``--elasticity off`` runs them: every job at its base gang (``minWorkers``)."""
    return tuple(
        replace(j, num_gpus=j.elastic_min * j.gpus_per_worker, elastic_max=j.elastic_min, drawn_elastic=False)
        for j in jobs
    )


def training_job(day: Day, job: JobSpec) -> dict[str, Any]:
    """The TrainingJob of ``job``: its work at the cluster's pace (``expectedDuration`` in wall seconds at
    ``minWorkers`` on a reference GPU), its GPU types (A100 only unless it fits a T4), the demo's rendezvous."""
    expected = job.work / job.elastic_min / day.speed_up
    types = [day.training_type, day.inference_type] if job.fits_inference_gpu else [day.training_type]
    spec: dict[str, Any] = {
        "minWorkers": job.elastic_min,
        "maxWorkers": job.elastic_max,
        "gpusPerWorker": job.gpus_per_worker,
        "expectedDuration": round(expected, 6),
        "gpuTypes": types,
        "preemption": {"gracePeriodSeconds": day.timing.grace_s},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "image": "registry.example.com/philly-job:1.0",
                        "command": ["torchrun", "train.py"],
                        "env": [{"name": names.ENV_TORCHRUN_RDZV_CONF, "value": day.timing.rendezvous_conf}],
                    }
                ]
            }
        },
    }
    if job.fits_inference_gpu:
        spec["gpuMemoryGiB"] = 12
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": names.TRAINING_JOB_KIND,
        "metadata": {"name": job.name},
        "spec": spec,
    }


def inference_service(day: Day) -> dict[str, Any]:
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": names.INFERENCE_SERVICE_KIND,
        "metadata": {"name": SERVICE},
        "spec": {
            "replicas": day.replicas_at(0.0),
            "minReplicas": 1,
            "maxReplicas": day.inference_gpus_per_server * 64,
            "gpusPerReplica": 1,
            "gpuType": day.inference_type,
            "template": {"spec": {"containers": [{"name": "server", "image": "registry.example.com/chat-server:1.0"}]}},
        },
    }


def write_inputs(day: Day, directory: Path) -> None:
    """The day's inputs as files ``lyra simulate`` reads: ``jobs.csv`` (generic trace), ``load.csv``,
    ``scenario.yaml``."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "jobs.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["submit_time", "duration", "num_gpus"])
        for job in day.trace.jobs:
            writer.writerow([f"{job.submit_s:.3f}", f"{job.duration_s:.1f}", job.num_gpus])
    with (directory / "load.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["t_sec", "total_req_per_s"])
        for i, rate in enumerate(day.load.rates):
            writer.writerow([f"{i * day.load.step_s:g}", f"{rate:.4f}"])
    (directory / "scenario.yaml").write_text(
        "# The live cluster of `lyra demo` as a scenario of `lyra simulate` (lyra.cli.demo_day.scenario_for).\n"
        + yaml.safe_dump(day.scenario.model_dump(mode="json"), sort_keys=False)
    )
