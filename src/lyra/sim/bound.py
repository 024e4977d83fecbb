"""A lower bound on the mean JCT any scheme can reach on a workload, under the simulator's own model.

Two bounds on when each job can finish, combined (the derivation, step by step, is in docs/evaluation.md, "A lower
bound on mean JCT"):

* **Alone.** A job submitted at ``a`` with ``W`` reference worker-seconds of work can never progress faster than
  its best feasible pace: on the GPU type it may use (by memory) that gives the most, with as many workers as it
  may have (``w_max`` if drawn elastic, else its trace width) and the type's servers hold, at
  ``w * s / (1 + o (w - 1))``; a job that mixes types runs at its slowest type's speed, bounded here by the fastest
  type's speed over the workers all its types hold. So it finishes no earlier than ``a + W / best``.
* **Capacity.** A running job of ``g`` GPUs per worker consumes at least ``g`` speed-weighted GPU-seconds per unit
  of work (its workers' GPUs times their speeds, at least the slowest speed times the workers, at least the pace
  times ``g``), and the cluster has ``C`` speed-weighted GPUs in all (training and inference, as if every inference
  server were lent all the time). Any schedule is therefore a schedule of jobs of sizes ``W * g`` on one machine
  of speed ``C``, where SRPT (shortest remaining work first, preemptive) completes at least as many jobs by every
  time as any other schedule (Schrage 1968).

By every time ``t``, a schedule has completed at most ``min(N_alone(t), N_srpt(t))`` jobs, so the sum of completion
times is at least ``sum_k max(A_(k), S_(k))``, the two lists of completion times sorted ascending. The bound
ignores every cost (restart, resize, grace, lost work, the decision interval), the inference demand and packing,
so it is reachable by no scheme; it is a floor, not a target.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from lyra.sim.scenario import Scenario
from lyra.sim.workload import JobSpec, Workload


@dataclass(frozen=True, slots=True)
class JctBound:
    """The bound on the mean JCT over the window's jobs, and its two parts (each alone a valid, weaker bound)."""

    mean_jct_s: float
    #: Mean over jobs of ``W / best pace``: every job alone on the cluster from its arrival.
    alone_mean_s: float
    #: Mean JCT of SRPT on one machine of the cluster's speed-weighted GPUs.
    capacity_mean_s: float
    #: The cluster's speed-weighted GPUs (V100-equivalents).
    capacity_gpus: float
    #: Each job's earliest finish minus its submit time (``W / best pace``), in the workload's order.
    alone_s: tuple[float, ...]

    def as_dict(self) -> dict[str, float]:
        return {
            "mean_jct_s": self.mean_jct_s,
            "alone_mean_s": self.alone_mean_s,
            "capacity_mean_s": self.capacity_mean_s,
            "capacity_gpus": self.capacity_gpus,
        }


def best_pace(spec: JobSpec, scenario: Scenario) -> float:
    """The fastest a job can progress, in reference worker-seconds per second, under any scheme."""
    training = set(scenario.training.gpu_types)
    allowed = training | set(scenario.inference.gpu_types) if spec.fits_inference_gpu else training
    g = spec.gpus_per_worker
    capacity: dict[str, int] = {}
    for group in (*scenario.training.groups, *scenario.inference.groups):
        if group.gpu_type in allowed:
            capacity[group.gpu_type] = capacity.get(group.gpu_type, 0) + group.servers * (group.gpus_per_server // g)
    most = max(spec.elastic_max, spec.workers)
    overhead = scenario.scaling.overhead

    def pace(workers: int, speed: float) -> float:
        # w s / (1 + o (w - 1)) is monotone in w (its slope has the sign of 1 - o): its best is at an end.
        return max(speed * w / (1.0 + overhead * (w - 1)) for w in {1, workers}) if workers >= 1 else 0.0

    if spec.mixes_gpu_types:
        fastest = max(scenario.speed_of(t) for t in capacity)
        return pace(min(most, sum(capacity.values())), fastest)
    return max(pace(min(most, workers), scenario.speed_of(t)) for t, workers in capacity.items())


def jct_bound(workload: Workload, scenario: Scenario) -> JctBound:
    jobs = workload.jobs
    if not jobs:
        return JctBound(0.0, 0.0, 0.0, 0.0, ())
    capacity = math.fsum(
        group.servers * group.gpus_per_server * scenario.speed_of(group.gpu_type)
        for group in (*scenario.training.groups, *scenario.inference.groups)
    )
    alone = tuple(spec.work / best_pace(spec, scenario) for spec in jobs)
    finish_alone = sorted(spec.submit_s + d for spec, d in zip(jobs, alone, strict=True))
    finish_srpt = sorted(srpt_finish_times([(s.submit_s, s.work * s.gpus_per_worker) for s in jobs], capacity))
    submitted = math.fsum(spec.submit_s for spec in jobs)
    n = len(jobs)
    combined = math.fsum(max(a, s) for a, s in zip(finish_alone, finish_srpt, strict=True))
    return JctBound(
        mean_jct_s=(combined - submitted) / n,
        alone_mean_s=math.fsum(alone) / n,
        capacity_mean_s=(math.fsum(finish_srpt) - submitted) / n,
        capacity_gpus=capacity,
        alone_s=alone,
    )


def srpt_finish_times(jobs: list[tuple[float, float]], speed: float) -> list[float]:
    """Completion times of SRPT on one machine of ``speed`` for jobs ``(arrival, size)``, in no particular order."""
    arrivals = sorted(jobs)
    finished: list[float] = []
    waiting: list[float] = []  # remaining sizes (a heap)
    now = 0.0
    i = 0
    while i < len(arrivals) or waiting:
        if not waiting:
            now = max(now, arrivals[i][0])
        while i < len(arrivals) and arrivals[i][0] <= now:
            heapq.heappush(waiting, arrivals[i][1])
            i += 1
        next_arrival = arrivals[i][0] if i < len(arrivals) else math.inf
        shortest = waiting[0]
        done_at = now + shortest / speed
        if done_at <= next_arrival:
            heapq.heappop(waiting)
            now = done_at
            finished.append(now)
        else:
            heapq.heapreplace(waiting, shortest - (next_arrival - now) * speed)
            now = next_arrival
    return finished
