"""The fluid model of elastic jobs: how long everything takes if an allocation is kept until jobs finish.

This is the yardstick the allocator scores its candidates with, and the model its proofs are measured in.
It follows the poster's worked examples:

* linear scaling: a job with ``w`` workers progresses at ``w`` worker-seconds per second;
* allocations change only when a job completes. Its GPUs then go, in this order,
  1. to queued jobs, whole base gang or nothing, by priority then shortest time at base (the allocator's phase 1),
  2. to running jobs in order of shortest remaining time, each up to its ``max_workers``.

Between completions every running job's remaining time falls at the same rate, so "shortest remaining time"
is simply "earliest projected finish": two heaps keyed by projected finish give an O(n log n) simulation.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FluidJob:
    """The part of a training job the fluid model needs."""

    work: float
    gpus_per_worker: int
    min_workers: int
    max_workers: int
    priority: int = 0

    @property
    def time_at_base(self) -> float:
        return self.work / self.min_workers


def queue_order(jobs: Sequence[FluidJob]) -> list[int]:
    """Indices of ``jobs`` in start order: higher priority first, then shortest time at base, then index."""
    return sorted(range(len(jobs)), key=lambda i: (-jobs[i].priority, jobs[i].time_at_base, i))


def fluid_completion_times(jobs: Sequence[FluidJob], workers: Sequence[int], capacity: int) -> list[float]:
    """Completion time of every job (``math.inf`` for one that never fits) when starting from ``workers``.

    ``workers[i]`` is job i's initial worker count (0 = queued). The initial allocation must fit ``capacity``.
    """
    n = len(jobs)
    if len(workers) != n:
        raise ValueError(f"{len(workers)} worker counts for {n} jobs")
    gpw = [job.gpus_per_worker for job in jobs]
    cap = [job.max_workers for job in jobs]
    free = capacity - sum(w * g for w, g in zip(workers, gpw, strict=True))
    if free < 0:
        raise ValueError(f"initial allocation uses {capacity - free} GPUs, capacity is {capacity}")

    rate = list(workers)
    finish = [math.inf] * n
    done = [False] * n
    completions: list[tuple[float, int]] = []
    growable: list[tuple[float, int]] = []
    for i, w in enumerate(rate):
        if w > 0:
            finish[i] = jobs[i].work / w
            completions.append((finish[i], i))
            if w < cap[i]:
                growable.append((finish[i], i))
    heapq.heapify(completions)
    heapq.heapify(growable)
    queued = [i for i in queue_order(jobs) if rate[i] == 0]
    smallest_base = min((jobs[i].min_workers * gpw[i] for i in queued), default=math.inf)

    result = [math.inf] * n
    while completions:
        now, i = heapq.heappop(completions)
        if done[i] or now != finish[i]:
            continue
        done[i] = True
        result[i] = now
        free += rate[i] * gpw[i]

        if queued and free >= smallest_base:
            still_queued = []
            for q in queued:
                base = jobs[q].min_workers * gpw[q]
                if base <= free:
                    free -= base
                    rate[q] = jobs[q].min_workers
                    finish[q] = now + jobs[q].work / rate[q]
                    heapq.heappush(completions, (finish[q], q))
                    if rate[q] < cap[q]:
                        heapq.heappush(growable, (finish[q], q))
                else:
                    still_queued.append(q)
            queued = still_queued
            smallest_base = min((jobs[q].min_workers * gpw[q] for q in queued), default=math.inf)

        blocked: list[tuple[float, int]] = []
        while free > 0 and growable:
            entry = heapq.heappop(growable)
            projected, j = entry
            if done[j] or projected != finish[j] or rate[j] >= cap[j]:
                continue
            extra = min(cap[j] - rate[j], free // gpw[j])
            if extra == 0:
                blocked.append(entry)
                continue
            left = (finish[j] - now) * rate[j]
            rate[j] += extra
            free -= extra * gpw[j]
            finish[j] = now + left / rate[j]
            heapq.heappush(completions, (finish[j], j))
            if rate[j] < cap[j]:
                blocked.append((finish[j], j))
        for entry in blocked:
            heapq.heappush(growable, entry)
    return result


def total_completion_time(jobs: Sequence[FluidJob], workers: Sequence[int], capacity: int) -> float:
    """Sum of completion times of the jobs that ever start (the allocator's objective)."""
    return math.fsum(t for t in fluid_completion_times(jobs, workers, capacity) if t != math.inf)


def average_jct(jobs: Sequence[FluidJob], workers: Sequence[int], capacity: int) -> float:
    """Mean completion time over all jobs; ``math.inf`` if some job can never start."""
    times = fluid_completion_times(jobs, workers, capacity)
    return math.fsum(times) / len(times) if times else 0.0
