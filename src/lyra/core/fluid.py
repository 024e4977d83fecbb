"""The fluid model of elastic jobs on typed GPUs: how long everything takes if an allocation is kept until jobs
finish. This is the yardstick the allocator scores its candidates with, and the model its proofs are measured in.

The model (``docs/policies.md``, "The fluid model"; the proofs' oracle implements the same rules independently):

* GPU types are indexed ``0 .. T-1`` (the caller sorts them by name); ``capacity[t]`` is the GPUs of type ``t``
  the decision may use, counted as a pool (the future is not bin-packed; the allocation it starts from is).
* A job's start is its worker count per type (all zero: queued). With ``W`` workers whose slowest type has the
  job's speed ``s``, it progresses at ``pace = W * s * e(W)``, ``e(W) = 1 / (1 + overhead * (W - 1))``.
* Allocations change only when a job completes. Completions are processed one at a time, by time and then by
  index; after each, the freed GPUs go
  1. to queued jobs, whole base gang or nothing, in queue order (higher priority, then shorter time at base on
     the job's fastest type, then index), each on its fastest type with room (ties: lower type index);
  2. then, type by type, to running single-type jobs below ``max_workers``, earliest projected finish first
     (ties: index), each taking as many workers as fit. Jobs completing at this very instant and jobs on
     several types do not grow.

Between completions every job keeps its pace, so "earliest projected finish" orders are heaps: an evaluation
costs O(n log n).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lyra.core.model import pace
from lyra.core.ordering import queue_key


@dataclass(frozen=True, slots=True)
class FluidJob:
    """The part of a training job the fluid model needs. ``speeds[t]`` is its speed on type ``t``; 0 = excluded."""

    work: float
    gpus_per_worker: int
    min_workers: int
    max_workers: int
    speeds: tuple[float, ...]
    priority: int = 0
    overhead: float = 0.0
    submit_time: float = 0.0

    def pace(self, workers: int, speed: float) -> float:
        return pace(workers, speed, self.overhead)

    @property
    def best_type(self) -> int:
        """The fastest type the job may use (lowest index on ties); -1 if it may use none."""
        best = -1
        for t, speed in enumerate(self.speeds):
            if speed > 0 and (best < 0 or speed > self.speeds[best]):
                best = t
        return best

    @property
    def time_at_base(self) -> float:
        best = self.best_type
        if best < 0:
            return math.inf
        return self.work / self.pace(self.min_workers, self.speeds[best])


def queue_order(jobs: Sequence[FluidJob]) -> list[int]:
    """Indices of ``jobs`` in start order, the admission order (:func:`lyra.core.ordering.queue_key`: higher priority
    first, then shortest time at base, then submit time), the index last (jobs come in name order)."""
    return sorted(
        range(len(jobs)), key=lambda i: queue_key(jobs[i].priority, jobs[i].time_at_base, jobs[i].submit_time, i)
    )


Start = Sequence[Sequence[int]]


def fastest_first(speeds: Sequence[float]) -> list[int]:
    """The type indices with a positive speed, fastest first, then by index."""
    return sorted((t for t, s in enumerate(speeds) if s > 0), key=lambda t: (-speeds[t], t))


#: A job's kind, the one encoding of the allocator's search, the fluid model (:meth:`FluidModel.run`) and the
#: simulator's running totals: queued (not running), on several types (its ``spread``), or its one type's index.
QUEUED = -1
SPREAD = -2


@dataclass(frozen=True, slots=True)
class JobTable:
    """The jobs of one decision as columns, built once: what the fluid model, the allocator's admission and its
    search all read of a job by its index. ``preference[i]`` is the types job ``i`` may use, fastest first (then by
    index): where it starts."""

    work: Sequence[float]
    gpw: Sequence[int]
    low: Sequence[int]
    high: Sequence[int]
    speeds: Sequence[tuple[float, ...]]
    overhead: Sequence[float]
    priority: Sequence[int]
    submit_time: Sequence[float]
    preference: Sequence[tuple[int, ...]]

    @classmethod
    def of(cls, jobs: Sequence[FluidJob]) -> JobTable:
        # Jobs share their speeds by kind, so the preference orders are worked out once per kind.
        orders: dict[tuple[float, ...], tuple[int, ...]] = {}
        preference = []
        for j in jobs:
            order = orders.get(j.speeds)
            if order is None:
                order = orders[j.speeds] = tuple(fastest_first(j.speeds))
            preference.append(order)
        return cls(
            work=[j.work for j in jobs],
            gpw=[j.gpus_per_worker for j in jobs],
            low=[j.min_workers for j in jobs],
            high=[j.max_workers for j in jobs],
            speeds=[j.speeds for j in jobs],
            overhead=[j.overhead for j in jobs],
            priority=[j.priority for j in jobs],
            submit_time=[j.submit_time for j in jobs],
            preference=preference,
        )

    def __len__(self) -> int:
        return len(self.work)


class FluidModel:
    """The fluid model of fixed jobs (a :class:`JobTable`, or the jobs to build it of) and capacities, evaluated for
    many starting allocations (the allocator scores dozens of candidates against the same jobs, so what does not
    depend on the start is computed once)."""

    def __init__(self, jobs: JobTable | Sequence[FluidJob], capacity: Sequence[int]) -> None:
        self.table = table = jobs if isinstance(jobs, JobTable) else JobTable.of(jobs)
        self.capacity = list(capacity)
        self.types = len(capacity)
        n = len(table)
        # Queue order: higher priority, shorter time at base on the fastest type, index; never-starting jobs out.
        at_base = [
            table.work[i] / self._pace(i, table.low[i], table.speeds[i][p[0]]) if p else math.inf
            for i, p in enumerate(table.preference)
        ]
        self.order = sorted(
            (i for i in range(n) if table.preference[i]),
            key=lambda i: queue_key(table.priority[i], at_base[i], table.submit_time[i], i),
        )
        self.position = [0] * n
        for rank, i in enumerate(self.order):
            self.position[i] = rank

    def _pace(self, i: int, workers: int, speed: float) -> float:
        return pace(workers, speed, self.table.overhead[i])

    def completion_times(self, start: Start) -> list[float]:
        """Completion time of every job from ``start[i][t]`` workers of job i on type t."""
        n = len(self.table)
        if len(start) != n:
            raise ValueError(f"{len(start)} allocations for {n} jobs")
        kinds = [QUEUED] * n
        widths = [0] * n
        spreads: dict[int, list[tuple[int, int]]] = {}
        for i, allocation in enumerate(start):
            used = [(t, w) for t, w in enumerate(allocation) if w]
            if len(used) == 1:
                kinds[i], widths[i] = used[0]
            elif used:
                kinds[i] = SPREAD
                widths[i] = sum(w for _, w in used)
                spreads[i] = used
        return self.run(kinds, widths, spreads)

    def run(
        self,
        kinds: Sequence[int],
        widths: Sequence[int],
        spreads: Mapping[int, Sequence[tuple[int, int]]],
        extra_work: Mapping[int, float] | None = None,
    ) -> list[float]:
        """Completion times from each job's kind (:data:`QUEUED`, :data:`SPREAD` with ``spreads[i]`` its
        (type, workers) pairs, or its one type) and width (its workers). ``extra_work`` adds work to started jobs
        (a restart's time without progress, charged at the job's starting pace)."""
        table = self.table
        n = len(table)
        gpw = table.gpw
        high = table.high
        low = table.low
        speeds = table.speeds
        overhead = table.overhead
        work = table.work
        free = list(self.capacity)
        kind = list(kinds)
        width = list(widths)
        rate = [0.0] * n
        finish = [math.inf] * n
        completions: list[tuple[float, int]] = []
        # Jobs that may grow, per type and worker size, each a heap by projected finish: a size larger than the
        # free GPUs is skipped whole instead of popping its jobs one by one.
        growable: list[dict[int, list[tuple[float, int]]]] = [{} for _ in range(self.types)]
        heappush, heappop = heapq.heappush, heapq.heappop
        for i in range(n):
            k = kind[i]
            if k == QUEUED:
                continue
            if k >= 0:
                speed = speeds[i][k]
                if speed <= 0:
                    raise ValueError(f"job {i} starts on type {k}, which it may not use")
                free[k] -= width[i] * gpw[i]
            else:
                speed = math.inf
                for t, w in spreads[i]:
                    if speeds[i][t] <= 0:
                        raise ValueError(f"job {i} starts on type {t}, which it may not use")
                    free[t] -= w * gpw[i]
                    speed = min(speed, speeds[i][t])
            w = width[i]
            rate[i] = w * speed / (1.0 + overhead[i] * (w - 1))
            finish[i] = (work[i] + (extra_work.get(i, 0.0) if extra_work else 0.0)) / rate[i]
            completions.append((finish[i], i))
            if k >= 0 and w < high[i]:
                growable[k].setdefault(gpw[i], []).append((finish[i], i))
        if any(f < 0 for f in free):
            raise ValueError(f"the initial allocation does not fit the capacity {self.capacity}")
        heapq.heapify(completions)
        for by_size in growable:
            for heap in by_size.values():
                heapq.heapify(heap)
        # The queue, grouped by (types in preference order, base GPUs), each group in queue order. Scanning the
        # queue in order and starting whatever fits is the same as repeatedly starting the earliest group head
        # that fits: jobs of one group fit or not alike, and free GPUs only shrink during a scan.
        groups: dict[tuple[tuple[int, ...], int], deque[int]] = {}
        for i in self.order:
            if kind[i] == QUEUED:
                groups.setdefault((table.preference[i], low[i] * gpw[i]), deque()).append(i)
        position = self.position

        result = [math.inf] * n
        done = [False] * n
        types = range(self.types)
        while completions:
            now, i = heappop(completions)
            if done[i] or now != finish[i]:
                continue
            done[i] = True
            result[i] = now
            if kind[i] >= 0:
                free[kind[i]] += width[i] * gpw[i]
            else:
                for t, w in spreads[i]:
                    free[t] += w * gpw[i]

            while groups:
                best = -1
                best_key: tuple[tuple[int, ...], int] | None = None
                for key, members in groups.items():
                    head = members[0]
                    if best >= 0 and position[head] >= position[best]:
                        continue
                    need = key[1]
                    for t in key[0]:
                        if free[t] >= need:
                            best, best_key = head, key
                            break
                if best_key is None:
                    break
                members = groups[best_key]
                members.popleft()
                if not members:
                    del groups[best_key]
                q = best
                need = best_key[1]
                chosen = next(t for t in best_key[0] if free[t] >= need)
                free[chosen] -= need
                kind[q] = chosen
                w = width[q] = low[q]
                rate[q] = w * speeds[q][chosen] / (1.0 + overhead[q] * (w - 1))
                finish[q] = now + work[q] / rate[q]
                heappush(completions, (finish[q], q))
                if w < high[q]:
                    heappush(growable[chosen].setdefault(gpw[q], []), (finish[q], q))

            for t in types:
                by_size = growable[t]
                blocked: list[tuple[float, int]] = []
                while free[t] > 0:
                    # The earliest projected finish among the sizes that fit.
                    best_heap: list[tuple[float, int]] | None = None
                    for size, heap in by_size.items():
                        if size <= free[t] and heap and (best_heap is None or heap[0] < best_heap[0]):
                            best_heap = heap
                    if best_heap is None:
                        break
                    entry = heappop(best_heap)
                    projected, j = entry
                    if done[j] or projected != finish[j]:
                        continue
                    if projected <= now:
                        blocked.append(entry)
                        continue
                    extra = min(high[j] - width[j], free[t] // gpw[j])
                    left = (finish[j] - now) * rate[j]
                    w = width[j] = width[j] + extra
                    free[t] -= extra * gpw[j]
                    rate[j] = w * speeds[j][t] / (1.0 + overhead[j] * (w - 1))
                    finish[j] = now + left / rate[j]
                    heappush(completions, (finish[j], j))
                    if w < high[j]:
                        blocked.append((finish[j], j))
                for entry in blocked:
                    heappush(by_size[gpw[entry[1]]], entry)
        return result


def fluid_completion_times(jobs: Sequence[FluidJob], start: Start, capacity: Sequence[int]) -> list[float]:
    """Completion time of every job (``math.inf`` for one that never starts) from the allocation ``start``.

    ``start[i][t]`` is job i's initial worker count on type t. The initial allocation must fit ``capacity`` and
    use only types the job may use.
    """
    return FluidModel(jobs, capacity).completion_times(start)


def total_completion_time(jobs: Sequence[FluidJob], start: Start, capacity: Sequence[int]) -> float:
    """Sum of completion times of the jobs that ever start."""
    return math.fsum(t for t in fluid_completion_times(jobs, start, capacity) if t != math.inf)


def average_jct(jobs: Sequence[FluidJob], start: Start, capacity: Sequence[int]) -> float:
    """Mean completion time over all jobs; ``math.inf`` if some job can never start."""
    times = fluid_completion_times(jobs, start, capacity)
    return math.fsum(times) / len(times) if times else 0.0
