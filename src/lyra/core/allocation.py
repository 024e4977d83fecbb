"""Who runs, and with how many workers: Lyra's two-phase allocation.

Phase 1, base demand by SJF (minimises queuing). Running jobs keep their base gang first (allocation never
preempts a running job while its base still fits); then queued jobs are admitted whole-gang-or-nothing in order of
priority (higher first), shortest estimated time at base (``remaining_work / min_workers``), submit time, name.
A gang that does not fit is skipped and smaller ones behind it may start (backfilling).

Phase 2, flexible demand as a multiple-choice knapsack (minimises running time). Each admitted elastic job is a
group whose items are "k more workers" (cost ``k * gpus_per_worker``). The poster values an item by the job's own
JCT reduction ``T(base) - T(base + k)``. That value misses what happens next: when a short job finishes early its
GPUs flow to the jobs still running. On the poster's first example it picks (A5, B3), average JCT 48.3 s, where
(A2, B6) gives 41.67 s.

Lyra here scores whole candidate allocations instead of items, by the sum of completion times in the fluid model
(:mod:`lyra.core.fluid`: linear scaling, reallocation at completions), which accounts for that flow:

1. candidates: the running jobs' current split (clipped to fit; kept on ties, so a steady cluster is not
   rescaled for nothing), shortest-time-at-max-first filling (right on example 1), and the poster's own-reduction
   knapsack solved greedily by value per GPU, which is exact for its concave values (right on example 2);
2. local search from the best candidate: move one worker between two jobs, or add one where GPUs are left,
   keeping a move only if the fluid objective drops, until no move helps or the search budget is spent.

The budget counts fluid-simulated jobs (one evaluation of an n-job instance costs n), so the search is
deterministic, cheap on big instances and thorough on small ones. On random instances of up to 6 jobs and 16
GPUs it matches brute force within the bounds recorded in ``docs/policies.md``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.core.fluid import FluidJob, fluid_completion_times
from lyra.core.model import InvalidClusterError, TrainingJob

#: Default phase-2 search budget, in fluid-simulated jobs (see module docstring).
DEFAULT_SEARCH_BUDGET = 16_000

#: Stand-in completion time for a job that never starts in the fluid model (1,000 years).
_NEVER = 3.2e10


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    """Worker counts for every job (0 = queued or stopped) and what changed to get there."""

    workers: Mapping[str, int]
    started: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()
    resized: tuple[str, ...] = ()
    gpus_used: int = 0
    capacity_gpus: int = 0
    fluid_average_jct: float = 0.0
    evaluations: int = 0
    notes: tuple[str, ...] = field(default=())


def _admission_key(job: TrainingJob) -> tuple[int, float, float, str]:
    return (-job.priority, job.time_at(job.min_workers), job.submit_time, job.name)


def allocate_workers(
    jobs: Sequence[TrainingJob],
    capacity_gpus: int,
    *,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
    allow_deferral: bool = True,
) -> AllocationPlan:
    """Decide every job's worker count on ``capacity_gpus`` GPUs. Pure and deterministic."""
    if not isinstance(capacity_gpus, int) or capacity_gpus < 0:
        raise InvalidClusterError(f"capacity_gpus must be an integer >= 0, got {capacity_gpus!r}")
    if search_budget < 0:
        raise InvalidClusterError(f"search_budget must be >= 0, got {search_budget!r}")
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise InvalidClusterError("duplicate job names in allocation input")

    free = capacity_gpus
    base: dict[str, int] = {}
    preempted: list[str] = []
    # Phase 1a: running jobs keep their base gang while it fits.
    for job in sorted((j for j in jobs if j.is_running), key=_admission_key):
        need = job.min_workers * job.gpus_per_worker
        if need <= free:
            base[job.name] = job.min_workers
            free -= need
        else:
            preempted.append(job.name)
    # Phase 1b: queued jobs by SJF, whole gang or nothing, with backfilling.
    started: list[str] = []
    for job in sorted((j for j in jobs if not j.is_running), key=_admission_key):
        need = job.min_workers * job.gpus_per_worker
        if need <= free:
            base[job.name] = job.min_workers
            free -= need
            started.append(job.name)

    search = _PhaseTwoSearch(jobs, base, capacity_gpus, search_budget, allow_deferral=allow_deferral)
    chosen = search.run()
    started = [j.name for j in jobs if not j.is_running and chosen.get(j.name, 0) > 0]

    workers = {job.name: 0 for job in jobs}
    workers.update(chosen)
    resized = tuple(sorted(j.name for j in jobs if j.is_running and workers[j.name] not in (0, j.workers)))
    used = sum(workers[j.name] * j.gpus_per_worker for j in jobs)
    return AllocationPlan(
        workers=MappingProxyType(dict(sorted(workers.items()))),
        started=tuple(sorted(started)),
        preempted=tuple(sorted(preempted)),
        resized=resized,
        gpus_used=used,
        capacity_gpus=capacity_gpus,
        fluid_average_jct=search.best_average_jct,
        evaluations=search.evaluations,
    )


class _PhaseTwoSearch:
    """Phase 2: extra workers for admitted elastic jobs, and which just-admitted gangs to start later.

    The decision is one worker count per admitted job. Running jobs stay in ``[min_workers, max_workers]``;
    jobs admitted by this round's phase 1 may also be *deferred* (0 workers): in the linear fluid model, starting
    a long gang now can cost more JCT than widening shorter jobs and starting it when they finish.
    """

    def __init__(
        self,
        jobs: Sequence[TrainingJob],
        base: Mapping[str, int],
        capacity: int,
        budget: int,
        *,
        allow_deferral: bool,
    ) -> None:
        ordered = sorted(jobs, key=lambda j: j.name)
        self.fluid_jobs = [
            FluidJob(j.remaining_work, j.gpus_per_worker, j.min_workers, j.max_workers, j.priority) for j in ordered
        ]
        index = {j.name: i for i, j in enumerate(ordered)}
        # Admitted jobs, and queued ones if they may be traded against them, shortest time at max first:
        # the order receivers are tried in.
        self.members = sorted(
            (j for j in ordered if j.name in base or (allow_deferral and not j.is_running)),
            key=lambda j: (j.time_at(j.max_workers), j.name),
        )
        self.initial = [base.get(j.name, 0) for j in self.members]
        self.slot = [index[j.name] for j in self.members]
        self.low = [j.min_workers for j in self.members]
        self.high = [j.max_workers for j in self.members]
        self.gpw = [j.gpus_per_worker for j in self.members]
        self.deferrable = [allow_deferral and not j.is_running for j in self.members]
        self.priority = [j.priority for j in self.members]
        self._start_order = sorted(range(len(self.members)), key=lambda k: (-self.priority[k], k))
        self.current = [j.workers for j in self.members]
        self.capacity = capacity
        self.budget = budget
        self.evaluations = 0
        self.best_average_jct = 0.0

    def run(self) -> dict[str, int]:
        if not self.members:
            self.best_average_jct = math.inf if self.fluid_jobs else 0.0
            return {}
        bases = self.initial
        candidates = [
            self._fill(bases, self._clipped_current()),
            self._fill(bases, self.high),
            self._own_reduction_knapsack(bases),
        ]
        if any(self.deferrable):
            by_area = self._admit_by_gpu_time()
            only_running = [0 if d else w for w, d in zip(bases, self.deferrable, strict=True)]
            candidates += [
                self._fill(by_area, self.high),
                self._own_reduction_knapsack(by_area),
                self._shortest_first_gangs(only_running),
            ]
        scored: list[tuple[float, int, list[int]]] = []
        seen: set[tuple[int, ...]] = set()
        for index, vector in enumerate(candidates):
            if tuple(vector) not in seen:
                seen.add(tuple(vector))
                scored.append((self._objective(vector), index, vector))
        scored.sort(key=lambda item: (item[0], item[1]))
        best_value, _, best = scored[0]
        # Local search from every candidate, best first, while the budget lasts: the fluid objective has
        # several basins (one wide job vs several narrower ones), and candidates start in different ones.
        for value, _, vector in scored:
            if self.budget <= 0:
                break
            found, found_value = self._local_search(vector, value)
            if found_value < best_value * (1 - 1e-12):
                best, best_value = found, found_value
        self.best_average_jct = best_value / len(self.fluid_jobs) if best_value < _NEVER else math.inf
        return {j.name: w for j, w in zip(self.members, best, strict=True) if w}

    def _shortest_first_gangs(self, start: list[int], skip: int = -1, min_priority: float = -math.inf) -> list[int]:
        """Start and widen waiting jobs one at a time, shortest time at max first (SRPT with gangs).

        Only jobs of at least ``min_priority`` start: a deferred gang is never replaced by a lower-priority one.
        """
        vector = list(start)
        left = self._left(vector)
        for k in self._start_order:
            if k == skip or vector[k] or not self.deferrable[k] or self.low[k] * self.gpw[k] > left:
                continue
            if self.priority[k] < min_priority:
                continue
            vector[k] = min(self.high[k], left // self.gpw[k])
            left -= vector[k] * self.gpw[k]
        return vector

    def _admit_by_gpu_time(self) -> list[int]:
        """Phase 1 again, ordered by remaining GPU-time instead of time at base (SRPT on the GPU pool)."""
        vector = [lo if not d else 0 for lo, d in zip(self.initial, self.deferrable, strict=True)]
        left = self._left(vector)
        order = sorted(
            (k for k in range(len(self.members)) if self.deferrable[k]),
            key=lambda k: (-self.members[k].priority, self.members[k].remaining_work * self.gpw[k], k),
        )
        for k in order:
            need = self.low[k] * self.gpw[k]
            if need <= left:
                vector[k] = self.low[k]
                left -= need
        return vector

    def _left(self, vector: Sequence[int]) -> int:
        return self.capacity - sum(w * g for w, g in zip(vector, self.gpw, strict=True))

    def _objective(self, vector: Sequence[int]) -> float:
        full = [0] * len(self.fluid_jobs)
        for slot, workers in zip(self.slot, vector, strict=True):
            full[slot] = workers
        self.evaluations += 1
        self.budget -= len(self.fluid_jobs)
        times = fluid_completion_times(self.fluid_jobs, full, self.capacity)
        # A job that never starts costs more than any finite completion time.
        return math.fsum(t if t != math.inf else _NEVER for t in times)

    def _clipped_current(self) -> list[int]:
        return [max(lo, min(cur, hi)) for lo, cur, hi in zip(self.low, self.current, self.high, strict=True)]

    def _fill(self, start: Sequence[int], target: Sequence[int]) -> list[int]:
        """Raise admitted jobs from ``start`` towards ``target``, shortest first, while GPUs are left."""
        vector = list(start)
        left = self._left(vector)
        for k, wanted in enumerate(target):
            if vector[k] == 0:
                continue
            extra = max(0, min(wanted - vector[k], left // self.gpw[k]))
            vector[k] += extra
            left -= extra * self.gpw[k]
        return vector

    def _own_reduction_knapsack(self, start: Sequence[int]) -> list[int]:
        """The poster's item values, solved greedily by value per GPU (exact for these concave values)."""
        vector = list(start)
        left = self._left(vector)
        heap: list[tuple[float, str, int]] = []

        def push(k: int) -> None:
            job = self.members[k]
            if 0 < vector[k] < self.high[k]:
                gain = job.time_at(vector[k]) - job.time_at(vector[k] + 1)
                heapq.heappush(heap, (-gain / self.gpw[k], job.name, k))

        for k in range(len(self.members)):
            push(k)
        while heap and left > 0:
            _, _, k = heapq.heappop(heap)
            if self.gpw[k] <= left:
                vector[k] += 1
                left -= self.gpw[k]
                push(k)
        return vector

    def _local_search(self, vector: list[int], value: float) -> tuple[list[int], float]:
        improved = True
        while improved and self.budget > 0:
            improved = False
            for trial in self._neighbours(vector):
                if self.budget <= 0:
                    break
                trial_value = self._objective(trial)
                if trial_value < value * (1 - 1e-12):
                    vector, value = trial, trial_value
                    improved = True
                    break
        return vector, value

    def _squeeze_in(self, vector: Sequence[int], start: int, width: int) -> list[int] | None:
        """Start job ``start`` with ``width`` workers, taking flexible workers from the longest jobs first."""
        trial = list(vector)
        trial[start] = width
        short = -self._left(trial)
        for k in reversed(range(len(trial))):
            if short <= 0:
                break
            if k == start or trial[k] <= self.low[k]:
                continue
            take = min(trial[k] - self.low[k], -(-short // self.gpw[k]))
            trial[k] -= take
            short -= take * self.gpw[k]
        return trial if short <= 0 else None

    def _refill(self, vector: list[int], min_priority: float) -> list[int]:
        """Start waiting gangs that fit (priority, then shortest time at max), then widen jobs shortest first."""
        left = self._left(vector)
        for k in self._start_order:
            if self.priority[k] < min_priority:
                continue
            if vector[k] == 0 and self.deferrable[k] and self.low[k] * self.gpw[k] <= left:
                vector[k] = self.low[k]
                left -= self.low[k] * self.gpw[k]
        return self._fill(vector, self.high)

    def _neighbours(self, vector: list[int]) -> Iterator[list[int]]:
        """Single-worker additions, then transfers, then deferring, starting or swapping gangs (shortest first).

        Gang moves keep priority: a gang is deferred only if no started gang has a lower priority, and a gang
        starts only if no waiting gang has a higher one (phase 1's backfilling stays as it decided).
        """
        n = len(vector)
        left = self._left(vector)
        for give in range(n):
            if 0 < vector[give] < self.high[give] and self.gpw[give] <= left:
                trial = list(vector)
                trial[give] += 1
                yield trial
        for give in range(n):
            if not 0 < vector[give] < self.high[give]:
                continue
            for take in reversed(range(n)):
                if take != give and vector[take] > self.low[take] and self.gpw[give] <= left + self.gpw[take]:
                    trial = list(vector)
                    trial[give] += 1
                    trial[take] -= 1
                    yield trial
        started = [k for k in range(n) if self.deferrable[k] and vector[k] > 0]
        waiting = [k for k in range(n) if self.deferrable[k] and vector[k] == 0]
        lowest_started = min((self.priority[k] for k in started), default=0)
        highest_waiting = max((self.priority[k] for k in waiting), default=0)
        for k in reversed(started):
            if self.priority[k] == lowest_started:
                trial = list(vector)
                trial[k] = 0
                yield self._fill(trial, self.high)
                yield self._refill(list(trial), self.priority[k])
                yield self._shortest_first_gangs(trial, skip=k, min_priority=self.priority[k])
        for d in waiting:
            if self.priority[d] == highest_waiting and self.low[d] * self.gpw[d] <= left:
                trial = list(vector)
                trial[d] = self.low[d]
                yield trial
        for d in waiting:
            if self.priority[d] == highest_waiting:
                for width in range(self.low[d], self.high[d] + 1):
                    squeezed = self._squeeze_in(vector, d, width)
                    if squeezed is not None:
                        yield squeezed
        for k in reversed(started):
            if self.priority[k] != lowest_started:
                continue
            for d in waiting:
                if (
                    self.priority[d] == highest_waiting
                    and self.priority[d] >= self.priority[k]
                    and self.low[d] * self.gpw[d] <= left + vector[k] * self.gpw[k]
                ):
                    trial = list(vector)
                    trial[k] = 0
                    trial[d] = self.low[d]
                    yield self._fill(trial, self.high)
                    trial[d] = 0
                    yield self._shortest_first_gangs(trial, skip=k, min_priority=self.priority[k])
