"""The discrete-event driver: a simulated clock over the core's pure policies.

Nothing here decides like Lyra; it asks :mod:`lyra.core` and applies the plans, and keeps the books (progress,
placement, usage). The context policies (``fifo``, ``sjf``, ``las``) are the exception: they are not Lyra's
policy and are written here.

The loop, per instant ``t`` (events at the same instant are processed together, in this order):

1. completions (a job's finish event is valid only if its version is current: every change of a job's rate
   bumps the version and pushes a new event, so stale ones are skipped; no O(jobs) rescans);
2. arrivals (from the trace, pre-sorted; never in the heap);
3. a load step (every ``step_s`` of the load series): inference demand is recomputed; with loaning, idle
   inference servers are lent or loaned ones reclaimed (:func:`lyra.core.reclaim.plan_reclaim`);
4. one scheduling decision for everything that changed.

Scheduling decisions with the core allocator (:func:`lyra.core.allocation.allocate_workers`) are made on a
*view*, so that a decision costs what it touches, not the size of the cluster:

* queued jobs: for each base size ``b``, the first ``A // b`` queued jobs of that size in the allocator's own
  admission order, where ``A`` is the GPUs their bases could get (free GPUs plus flexible workers). Within one
  size the allocator admits a prefix of that order, so this is a superset of whom it can admit;
* running elastic jobs: when a queued base needs flexible workers, the ones holding the most flexible workers
  (enough to cover the need, at least ``view_jobs``); when only free GPUs are left over, the ``view_jobs``
  jobs that could grow with the shortest estimated remaining time (the fluid model grows those first);
* capacity: the free GPUs plus the GPUs the offered running jobs hold. Jobs outside the view keep their workers.

Every ``rebalance_interval_s`` (if anything changed) the view is every running elastic job: a full rebalance.
The allocator is not called at all when nothing could change: no queued base fits in the free GPUs plus the
flexible workers, and no free GPU could grow an elastic job.

Placement (whole GPUs; one worker = one GPU; no locality constraint) follows the core's placement aims with a
fast rule: base workers go to training servers first, then to loaned ones; flexible workers go to loaned servers
first (those already hosting the job, then the fullest), then to training servers; within a group the fullest
server that has room comes first (packing), then the lowest index. Scale-in removes workers from loaned servers
first, emptiest server first, so loaned servers drain and are cheap to reclaim.

Costs: a preemption loses the work since the job's last checkpoint (every ``checkpoint_interval_s`` of a run
segment; a start or a resize is a checkpoint) and the job pays ``restart_cost_s`` when it starts again; a
resize pays ``resize_cost_s``. A cost of ``c`` seconds is charged as ``c`` seconds of work at the job's new rate.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import MappingProxyType

from lyra.core.allocation import allocate_workers
from lyra.core.loaning import plan_loans
from lyra.core.model import ClusterSnapshot, InferenceDemand, LoanState, Pool, Server, TrainingJob
from lyra.core.reclaim import plan_reclaim
from lyra.sim.load import LoadSeries
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import Admission, Scheme
from lyra.sim.workload import Workload

_QUEUED, _RUNNING, _DONE, _FUTURE = 0, 1, 2, 3
_COMPLETION, _LOAD_STEP = 0, 1

#: A queue entry: two ordering keys, the job name (tie-break), the job index.
_Entry = tuple[float, float, str, int]
ProgressCallback = Callable[[float], None]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job. ``queue_s`` is all the time it waited with no worker (also after preemptions)."""

    name: str
    submit_s: float
    num_gpus: int
    min_workers: int
    max_workers: int
    first_start_s: float
    finish_s: float
    queue_s: float
    preemptions: int
    resizes: int

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.submit_s


@dataclass(frozen=True, slots=True)
class Timeline:
    """Samples at every load step inside the window, for the plots."""

    time_s: tuple[float, ...]
    inference_demand: tuple[int, ...]
    loaned_servers: tuple[int, ...]
    queued_jobs: tuple[int, ...]
    training_busy_gpus: tuple[int, ...]
    loaned_busy_gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SimulationResult:
    scheme: str
    records: tuple[JobRecord, ...]
    window_s: float
    training_gpus: int
    inference_gpus: int
    inference_servers: int
    busy_training_gpu_s: float
    busy_loaned_gpu_s: float
    serving_gpu_s: float
    loaned_gpu_s: float
    shortfall_server_s: float
    timeline: Timeline
    allocator_calls: int
    reclaims: int
    reclaimed_servers: int
    wall_seconds: float


class _BucketQueue:
    """Queued jobs grouped by base size (GPUs), each group sorted by an ordering key.

    Base sizes are few (Philly has ten), so "the best head that fits" and "prefix per size" are cheap.
    """

    def __init__(self) -> None:
        self.buckets: dict[int, list[_Entry]] = {}
        self.size = 0

    def push(self, need: int, entry: _Entry) -> None:
        insort(self.buckets.setdefault(need, []), entry)
        self.size += 1

    def remove(self, need: int, entry: _Entry) -> None:
        bucket = self.buckets[need]
        position = bisect_left(bucket, entry)
        if position >= len(bucket) or bucket[position] != entry:
            raise RuntimeError(f"queue entry for job {entry[2]} is missing")
        del bucket[position]
        self.size -= 1

    def min_need(self) -> int | None:
        return min((need for need, bucket in self.buckets.items() if bucket), default=None)

    def prefix(self, available: int) -> list[int]:
        chosen: list[int] = []
        for need in sorted(self.buckets):
            if need > available:
                break
            chosen.extend(entry[3] for entry in self.buckets[need][: available // need])
        return chosen

    def best_fit(self, available: int) -> _Entry | None:
        """The head with the smallest key among sizes that fit ``available``."""
        heads = [bucket[0] for need, bucket in self.buckets.items() if bucket and need <= available]
        return min(heads, default=None)

    def head(self) -> _Entry | None:
        return min((bucket[0] for bucket in self.buckets.values() if bucket), default=None)

    def ordered(self) -> Iterator[_Entry]:
        return heapq.merge(*self.buckets.values())


class Simulation:
    """One scheme over one workload. Build it, call :meth:`run` once."""

    def __init__(
        self,
        workload: Workload,
        scenario: Scenario,
        scheme: Scheme,
        load: LoadSeries,
        *,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.scheme = scheme
        self.scenario = scenario
        self.load = load
        self.progress = progress
        self.window = workload.window
        specs = workload.jobs
        n = len(specs)
        self.n = n
        elastic = scheme.elastic
        self.names = [s.name for s in specs]
        self.submit = [s.submit_s for s in specs]
        self.gpus = [s.num_gpus for s in specs]
        self.wmin = [s.elastic_min if elastic else s.num_gpus for s in specs]
        self.wmax = [s.elastic_max if elastic else s.num_gpus for s in specs]
        self.factor = [1.0 if scheme.exact_durations else s.estimate_factor for s in specs]
        self.remaining = [s.work for s in specs]
        self.status = [_FUTURE] * n
        self.rate = [0.0] * n
        self.workers = [0] * n
        self.place: list[dict[int, int]] = [{} for _ in range(n)]
        self.last = [0.0] * n
        self.version = [0] * n
        self.checkpoint = [0.0] * n
        self.attained = [0.0] * n
        self.first_start = [math.nan] * n
        self.finish = [math.nan] * n
        self.queued_since = [0.0] * n
        self.queue_s = [0.0] * n
        self.preemptions = [0] * n
        self.resizes = [0] * n
        self.restart_due = [False] * n
        self.entry: list[_Entry | None] = [None] * n
        self.view_cache: dict[int, TrainingJob] = {}
        self.server_views: dict[tuple[int, LoanState | None], Server] = {}

        cost = scenario.preemption
        free_costs = scheme.free_preemption
        self.restart_cost = 0.0 if free_costs else cost.restart_cost_s
        self.resize_cost = 0.0 if free_costs else cost.resize_cost_s
        self.lose_work = not free_costs
        self.checkpoint_interval = cost.checkpoint_interval_s

        training, inference = scenario.training, scenario.inference
        self.n_training = training.servers
        self.n_inference = inference.servers
        self.server_names = [f"train-{i:04d}" for i in range(training.servers)] + [
            f"infer-{i:04d}" for i in range(inference.servers)
        ]
        self.server_gpus = [training.gpus_per_server] * training.servers + [
            inference.gpus_per_server
        ] * inference.servers
        self.server_speed = [scenario.speed_of(training.gpu_type)] * training.servers + [
            scenario.speed_of(inference.gpu_type)
        ] * inference.servers
        self.server_free = [training.gpus_per_server] * training.servers + [0] * inference.servers
        self.server_jobs: list[dict[int, int]] = [{} for _ in self.server_names]
        self.loaned = [False] * len(self.server_names)
        self.open_training: set[int] = set(range(training.servers))
        self.open_loaned: set[int] = set()
        self.training_gpus = training.servers * training.gpus_per_server
        self.inference_gpus = inference.servers * inference.gpus_per_server

        self.free_total = self.training_gpus
        self.flexible_total = 0
        self.running_elastic: set[int] = set()
        self.growable = 0
        self.running: set[int] = set()
        self.busy_training = 0
        self.busy_loaned = 0
        self.loaned_count = 0
        self.demand = 0
        self.queue = _BucketQueue()

        self.heap: list[tuple[float, int, int, int, int]] = []
        self.sequence = 0
        self.now = 0.0
        self.done = 0
        self.dirty_full = False
        self.next_full = 0.0
        self.load_changed = False
        self.allocator_calls = 0
        self.reclaims = 0
        self.reclaimed_servers = 0
        self.busy_training_gpu_s = 0.0
        self.busy_loaned_gpu_s = 0.0
        self.serving_gpu_s = 0.0
        self.loaned_gpu_s = 0.0
        self.shortfall_server_s = 0.0
        self.samples: list[tuple[float, int, int, int, int, int]] = []

    # ----------------------------------------------------------------------------------------------- the loop

    def run(self) -> SimulationResult:
        started = time.perf_counter()
        window = self.window.length_s
        step = self.load.step_s
        offset = math.fmod(self.window.start_s, step)
        first_step = 0.0 if offset == 0 else step - offset
        self.demand = self._demand_at(0.0)
        self.load_changed = True
        self._push(first_step if first_step > 0 else step, _LOAD_STEP, -1)
        arrivals = 0
        events = 0
        report_every = max(1, self.n // 200)
        self._decide(0.0)
        while self.done < self.n or self.now < window:
            next_arrival = self.submit[arrivals] if arrivals < self.n else math.inf
            t = min(next_arrival, self.heap[0][0] if self.heap else math.inf)
            if t == math.inf:
                raise RuntimeError("the simulation stalled: jobs are queued but nothing can ever free GPUs")
            self._advance(t)
            while self.heap and self.heap[0][0] == t:
                _, _, kind, job, version = heapq.heappop(self.heap)
                if kind == _COMPLETION:
                    if version == self.version[job] and self.status[job] == _RUNNING:
                        self._complete(job, t)
                        events += 1
                        if self.progress is not None and events % report_every == 0:
                            self.progress(self.done / self.n)
                else:
                    self._load_step(t)
                    self._push(t + step, _LOAD_STEP, -1)
            while arrivals < self.n and self.submit[arrivals] == t:
                self._enqueue(arrivals, t)
                arrivals += 1
            self._decide(t)
        if self.progress is not None:
            self.progress(1.0)
        return self._result(time.perf_counter() - started)

    def _push(self, t: float, kind: int, job: int) -> None:
        self.sequence += 1
        version = self.version[job] if job >= 0 else 0
        heapq.heappush(self.heap, (t, self.sequence, kind, job, version))

    def _advance(self, t: float) -> None:
        """Integrate usage over [now, t] clipped to the window."""
        window = self.window.length_s
        dt = min(t, window) - min(self.now, window)
        if dt > 0:
            self.busy_training_gpu_s += self.busy_training * dt
            self.busy_loaned_gpu_s += self.busy_loaned * dt
            serving = min(self.demand, self.n_inference - self.loaned_count)
            per_server = self.scenario.inference.gpus_per_server
            self.serving_gpu_s += serving * per_server * dt
            self.loaned_gpu_s += self.loaned_count * per_server * dt
            self.shortfall_server_s += max(0, self.demand - serving) * dt
        self.now = t

    def _demand_at(self, t: float) -> int:
        rate = self.load.rate_at(self.window.start_s + t)
        servers = math.ceil(rate / self.scenario.inference.req_per_server - 1e-9)
        return min(self.n_inference, max(0, servers))

    def _load_step(self, t: float) -> None:
        demand = self._demand_at(t)
        if demand != self.demand:
            self.demand = demand
            self.load_changed = True
        if t < self.window.length_s:
            self.samples.append(
                (
                    t,
                    self.demand,
                    self.loaned_count,
                    self.queue.size,
                    self.busy_training,
                    self.busy_loaned,
                )
            )

    # ----------------------------------------------------------------------------------------- job lifecycle

    def _entry(self, job: int) -> _Entry:
        admission = self.scheme.admission
        if admission is Admission.FIFO:
            return (self.submit[job], 0.0, self.names[job], job)
        if admission is Admission.LAS:
            return (float(self._las_level(self.attained[job])), self.submit[job], self.names[job], job)
        estimate = self.remaining[job] * self.factor[job]
        return (estimate / self.wmin[job], self.submit[job], self.names[job], job)

    def _enqueue(self, job: int, t: float) -> None:
        self.status[job] = _QUEUED
        self.queued_since[job] = t
        entry = self._entry(job)
        self.entry[job] = entry
        self.queue.push(self.wmin[job], entry)
        self.dirty_full = True

    def _dequeue(self, job: int, t: float) -> None:
        entry = self.entry[job]
        assert entry is not None
        self.queue.remove(self.wmin[job], entry)
        self.entry[job] = None
        self.view_cache.pop(job, None)
        self.queue_s[job] += t - self.queued_since[job]

    def _progress(self, job: int, t: float) -> None:
        dt = t - self.last[job]
        if dt > 0 and self.workers[job]:
            self.remaining[job] = max(0.0, self.remaining[job] - self.rate[job] * dt)
            self.attained[job] += self.workers[job] * dt
        self.last[job] = t

    def _reschedule(self, job: int, t: float) -> None:
        self.version[job] += 1
        if self.workers[job]:
            self._push(t + self.remaining[job] / self.rate[job], _COMPLETION, job)

    def _start(self, job: int, workers: int, t: float) -> None:
        self._dequeue(job, t)
        if math.isnan(self.first_start[job]):
            self.first_start[job] = t
        self.status[job] = _RUNNING
        self.running.add(job)
        self.last[job] = t
        self.checkpoint[job] = t
        base = self.wmin[job]
        self._place(job, base, flexible=False)
        if workers > base:
            self._place(job, workers - base, flexible=True)
        self._track(job, 0)
        if self.restart_due[job]:
            self.remaining[job] += self.restart_cost * self.rate[job]
            self.restart_due[job] = False
        self._reschedule(job, t)
        self.dirty_full = True

    def _resize(self, job: int, workers: int, t: float) -> None:
        self._progress(job, t)
        before = self.workers[job]
        if workers < before:
            self._remove(job, before - workers, self._drain_order(job))
        else:
            self._place(job, workers - before, flexible=True)
        self._after_resize(job, before, t)

    def _after_resize(self, job: int, before: int, t: float) -> None:
        self._track(job, before)
        self.checkpoint[job] = t
        self.resizes[job] += 1
        self.remaining[job] += self.resize_cost * self.rate[job]
        self._reschedule(job, t)
        self.dirty_full = True

    def _complete(self, job: int, t: float) -> None:
        self._progress(job, t)
        before = self.workers[job]
        self._remove(job, before, list(self.place[job]))
        self._track(job, before)
        self.remaining[job] = 0.0
        self.status[job] = _DONE
        self.running.discard(job)
        self.finish[job] = t
        self.done += 1
        self.version[job] += 1
        self.dirty_full = True

    def _preempt(self, job: int, t: float) -> None:
        self._progress(job, t)
        if self.lose_work:
            since = self._since_checkpoint(job, t)
            self.remaining[job] += since * self.rate[job]
        before = self.workers[job]
        self._remove(job, before, list(self.place[job]))
        self._track(job, before)
        self.running.discard(job)
        self.version[job] += 1
        self.preemptions[job] += 1
        self.restart_due[job] = True
        self._enqueue(job, t)

    def _since_checkpoint(self, job: int, t: float) -> float:
        return math.fmod(max(0.0, t - self.checkpoint[job]), self.checkpoint_interval)

    def _track(self, job: int, before: int) -> None:
        """Keep the running totals (flexible workers, growable and running elastic jobs) in step."""
        after = self.workers[job]
        low, high = self.wmin[job], self.wmax[job]
        if high == low:
            return
        self.flexible_total += max(0, after - low) - max(0, before - low)
        self.growable += (0 < after < high) - (0 < before < high)
        if after:
            self.running_elastic.add(job)
        else:
            self.running_elastic.discard(job)

    # --------------------------------------------------------------------------------------------- placement

    def _place(self, job: int, count: int, *, flexible: bool) -> None:
        free = self.server_free
        hosts = self.place[job]
        training = sorted(self.open_training, key=lambda s: (free[s], s))
        if flexible:
            loaned = sorted(self.open_loaned, key=lambda s: (s not in hosts, free[s], s))
            order = loaned + training
        else:
            order = training + sorted(self.open_loaned, key=lambda s: (free[s], s))
        left = count
        for server in order:
            take = min(left, free[server])
            self._move(job, server, take)
            left -= take
            if left == 0:
                return
        raise RuntimeError(f"job {self.names[job]}: no room for {count} workers (left {left})")

    def _drain_order(self, job: int) -> list[int]:
        free = self.server_free
        return sorted(self.place[job], key=lambda s: (not self.loaned[s], -free[s], s))

    def _remove(self, job: int, count: int, order: Iterable[int]) -> None:
        left = count
        hosts = self.place[job]
        for server in order:
            if left == 0:
                return
            take = min(left, hosts.get(server, 0))
            self._move(job, server, -take)
            left -= take
        if left:
            raise RuntimeError(f"job {self.names[job]}: cannot remove {count} workers")

    def _move(self, job: int, server: int, delta: int) -> None:
        """Add (``delta > 0``) or remove workers of ``job`` on ``server``; keep every total in step."""
        if delta == 0:
            return
        hosts = self.place[job]
        now = hosts.get(server, 0) + delta
        if now:
            hosts[server] = now
            self.server_jobs[server][job] = now
        else:
            del hosts[server]
            del self.server_jobs[server][job]
        self.workers[job] += delta
        self.rate[job] += delta * self.server_speed[server]
        if self.workers[job] == 0:
            self.rate[job] = 0.0
        self.server_free[server] -= delta
        self.free_total -= delta
        if server < self.n_training:
            self.busy_training += delta
            opened = self.open_training
        else:
            self.busy_loaned += delta
            opened = self.open_loaned
        if self.server_free[server] > 0:
            opened.add(server)
        else:
            opened.discard(server)

    # -------------------------------------------------------------------------------------------- decisions

    def _decide(self, t: float) -> None:
        if self.load_changed:
            self.load_changed = False
            if self.scheme.loaning:
                self._adjust_loans(t)
        admission = self.scheme.admission
        if admission is Admission.CORE:
            self._core_decision(t)
        elif admission is Admission.LAS:
            self._las_decision(t)
        else:
            self._greedy_admission(t)

    def _core_decision(self, t: float) -> None:
        free = self.free_total
        flexible = self.flexible_total
        if self.scheme.elastic and self.dirty_full and t >= self.next_full:
            self.dirty_full = False
            self.next_full = t + self.scenario.scheduler.rebalance_interval_s
            running = sorted(self.running_elastic, key=self.names.__getitem__)
            queued = self.queue.prefix(free + flexible)
            if queued or len(running) > 1 or (free > 0 and self.growable):
                self._call_allocator(t, running, queued)
            return
        smallest = self.queue.min_need()
        if smallest is not None and smallest <= free + flexible:
            queued = self.queue.prefix(free + flexible)
            running = self._donors(t, smallest - free) if smallest > free else self._receivers(t)
        elif free > 0 and self.growable:
            queued, running = [], self._receivers(t)
        else:
            return
        self._call_allocator(t, running, queued)

    def _donors(self, t: float, deficit: int) -> list[int]:
        """Running elastic jobs holding the most flexible workers, enough to cover ``deficit`` GPUs."""
        ranked = sorted(
            (j for j in self.running_elastic if self.workers[j] > self.wmin[j]),
            key=lambda j: (self.wmin[j] - self.workers[j], self.names[j]),
        )
        chosen: list[int] = []
        covered = 0
        for job in ranked:
            if len(chosen) >= self.scenario.scheduler.view_jobs and covered >= deficit:
                break
            chosen.append(job)
            covered += self.workers[job] - self.wmin[job]
        return chosen

    def _receivers(self, t: float) -> list[int]:
        """Running elastic jobs below their maximum with the shortest estimated remaining time."""

        def remaining_time(job: int) -> tuple[float, str]:
            left = self.remaining[job] - self.rate[job] * (t - self.last[job])
            return (left * self.factor[job] / self.rate[job], self.names[job])

        growable = (j for j in self.running_elastic if self.workers[j] < self.wmax[j])
        return heapq.nsmallest(self.scenario.scheduler.view_jobs, growable, key=remaining_time)

    def _view(self, job: int, workers: int) -> TrainingJob:
        """The core's view of a job: its estimated remaining work and, if it runs, its worker count."""
        return TrainingJob(
            name=self.names[job],
            gpus_per_worker=1,
            min_workers=self.wmin[job],
            max_workers=self.wmax[job],
            remaining_work=self.remaining[job] * self.factor[job],
            submit_time=self.submit[job],
            placement=MappingProxyType({"pool": workers} if workers else {}),
        )

    def _view_of_queued(self, job: int) -> TrainingJob:
        cached = self.view_cache.get(job)
        if cached is None:
            cached = self.view_cache[job] = self._view(job, 0)
        return cached

    def _view_of_running(self, job: int, t: float) -> TrainingJob:
        self._progress(job, t)
        return self._view(job, self.workers[job])

    def _call_allocator(self, t: float, running: list[int], queued: list[int]) -> None:
        if self._everyone_fits(running, queued):
            for job in queued:
                self._start(job, self.wmax[job], t)
            for job in running:
                if self.workers[job] < self.wmax[job]:
                    self._resize(job, self.wmax[job], t)
            return
        view = [self._view_of_running(j, t) for j in running] + [self._view_of_queued(j) for j in queued]
        capacity = self.free_total + sum(self.workers[j] for j in running)
        budget = self.scenario.scheduler.search_evaluations * len(view)
        plan = allocate_workers(view, capacity, search_budget=budget, allow_deferral=self.scheme.elastic)
        self.allocator_calls += 1
        target = plan.workers
        for job in running:
            wanted = target[self.names[job]]
            if wanted == 0:
                self._preempt(job, t)
            elif wanted < self.workers[job]:
                self._resize(job, wanted, t)
        for job in queued:
            wanted = target[self.names[job]]
            if wanted:
                self._start(job, wanted, t)
        for job in running:
            wanted = target[self.names[job]]
            if wanted > self.workers[job]:
                self._resize(job, wanted, t)

    def _everyone_fits(self, running: list[int], queued: list[int]) -> bool:
        """True when the free GPUs cover every offered job at its maximum: then the allocator's answer is known
        (all admitted, all at ``w_max``: with linear scaling more workers never lengthen a job) and the call is
        skipped. ``tests/unit/sim/test_engine.py`` checks this against :func:`allocate_workers`."""
        wanted = sum(self.wmax[j] for j in queued)
        wanted += sum(self.wmax[j] - self.workers[j] for j in running)
        return wanted <= self.free_total

    def _greedy_admission(self, t: float) -> None:
        """``fifo``: the head or nobody. ``sjf``: the best head that fits, repeatedly (backfilling)."""
        fifo = self.scheme.admission is Admission.FIFO
        while self.free_total > 0:
            entry = self.queue.head() if fifo else self.queue.best_fit(self.free_total)
            if entry is None:
                return
            job = entry[3]
            if self.wmin[job] > self.free_total:
                return
            self._start(job, self.wmin[job], t)

    def _las_level(self, attained: float) -> int:
        return bisect_left(self.scenario.scheduler.las_thresholds_gpu_s, attained)

    def _las_decision(self, t: float) -> None:
        """Tiresias-style: admit by (queue, arrival) as GPUs free up; re-rank with preemption periodically."""
        if not (self.dirty_full and t >= self.next_full):
            while self.free_total > 0:
                entry = self.queue.best_fit(self.free_total)
                if entry is None:
                    return
                self._start(entry[3], self.wmin[entry[3]], t)
            return
        self.dirty_full = False
        self.next_full = t + self.scenario.scheduler.rebalance_interval_s
        running: list[_Entry] = []
        for job in self.running:
            self._progress(job, t)
            running.append((float(self._las_level(self.attained[job])), self.submit[job], self.names[job], job))
        running.sort()
        left = self.training_gpus
        keep: set[int] = set()
        for entry in heapq.merge(running, self.queue.ordered()):
            job = entry[3]
            if self.wmin[job] <= left:
                keep.add(job)
                left -= self.wmin[job]
                if left == 0:
                    break
        for entry in running:
            if entry[3] not in keep:
                self._preempt(entry[3], t)
        starts = [job for job in keep if self.status[job] == _QUEUED]
        for job in sorted(starts, key=self.names.__getitem__):
            self._start(job, self.wmin[job], t)

    # -------------------------------------------------------------------------------------- loans and reclaim

    def _adjust_loans(self, t: float) -> None:
        """Ask :func:`lyra.core.loaning.plan_loans` to balance the inference pool; lend or reclaim as it says.

        Skipped when the pool already holds exactly demand plus headroom (the plan would be empty).
        """
        headroom = self.scenario.inference.headroom_servers
        held = self.n_inference - self.loaned_count
        needed = self.demand + headroom
        if held == needed or (held < needed and self.loaned_count == 0):
            return
        snapshot = ClusterSnapshot(tuple(self._inference_servers()))
        plan = plan_loans(snapshot, InferenceDemand(self.demand), headroom=headroom)
        if plan.reclaim:
            self._reclaim(t, plan.reclaim)
        if plan.lend:
            index = {name: i for i, name in enumerate(self.server_names)}
            self._lend([index[name] for name in plan.lend])

    def _inference_servers(self) -> list[Server]:
        """Inference servers with their loan states: of those not loaned, the lowest indices serve the demand."""
        serving = min(self.demand, self.n_inference - self.loaned_count)
        servers = []
        for server in range(self.n_training, len(self.server_names)):
            if self.loaned[server]:
                state = LoanState.LOANED
            elif serving > 0:
                state = LoanState.SERVING
                serving -= 1
            else:
                state = LoanState.IDLE
            servers.append(self._server_view(server, state))
        return servers

    def _server_view(self, server: int, state: LoanState | None) -> Server:
        key = (server, state)
        view = self.server_views.get(key)
        if view is None:
            name, gpus = self.server_names[server], self.server_gpus[server]
            if state is None:
                view = Server(name, Pool.TRAINING, self.scenario.training.gpu_type, gpus)
            else:
                view = Server(name, Pool.INFERENCE, self.scenario.inference.gpu_type, gpus, state)
            self.server_views[key] = view
        return view

    def _lend(self, servers: list[int]) -> None:
        for server in servers:
            self.loaned[server] = True
            self.loaned_count += 1
            self.server_free[server] = self.server_gpus[server]
            self.free_total += self.server_gpus[server]
            self.open_loaned.add(server)
        self.dirty_full = True

    def _reclaim(self, t: float, count: int) -> None:
        assert self.scheme.reclaim is not None
        servers = [self._server_view(s, None) for s in range(self.n_training)] + self._inference_servers()
        affected = sorted(
            {
                job
                for server in range(self.n_training, len(self.server_names))
                if self.loaned[server]
                for job in self.server_jobs[server]
            }
        )
        jobs = []
        for job in affected:
            self._progress(job, t)
            jobs.append(
                TrainingJob(
                    name=self.names[job],
                    gpus_per_worker=1,
                    min_workers=self.wmin[job],
                    max_workers=self.wmax[job],
                    remaining_work=self.remaining[job] * self.factor[job],
                    submit_time=self.submit[job],
                    placement={self.server_names[s]: n for s, n in self.place[job].items()},
                    seconds_since_checkpoint=self._since_checkpoint(job, t),
                )
            )
        snapshot = ClusterSnapshot(tuple(servers), tuple(jobs))
        plan = plan_reclaim(snapshot, count, strategy=self.scheme.reclaim, seed=self.scenario.seed + self.reclaims)
        self.reclaims += 1
        self.reclaimed_servers += len(plan.servers)
        index = {name: i for i, name in enumerate(self.server_names)}
        by_name = {self.names[j]: j for j in affected}
        for name in plan.preempted:
            self._preempt(by_name[name], t)
        for server_name in plan.servers:
            server = index[server_name]
            for job, count_here in sorted(self.server_jobs[server].items()):
                self._progress(job, t)
                before = self.workers[job]
                if before - count_here < self.wmin[job]:
                    self._preempt(job, t)
                    continue
                self._remove(job, count_here, [server])
                self._after_resize(job, before, t)
            self.loaned[server] = False
            self.loaned_count -= 1
            self.free_total -= self.server_free[server]
            self.server_free[server] = 0
            self.open_loaned.discard(server)
        self.dirty_full = True

    # ---------------------------------------------------------------------------------------------- results

    def _result(self, wall: float) -> SimulationResult:
        records = tuple(
            JobRecord(
                name=self.names[j],
                submit_s=self.submit[j],
                num_gpus=self.gpus[j],
                min_workers=self.wmin[j],
                max_workers=self.wmax[j],
                first_start_s=self.first_start[j],
                finish_s=self.finish[j],
                queue_s=self.queue_s[j],
                preemptions=self.preemptions[j],
                resizes=self.resizes[j],
            )
            for j in range(self.n)
        )
        samples = self.samples
        timeline = Timeline(
            time_s=tuple(s[0] for s in samples),
            inference_demand=tuple(s[1] for s in samples),
            loaned_servers=tuple(s[2] for s in samples),
            queued_jobs=tuple(s[3] for s in samples),
            training_busy_gpus=tuple(s[4] for s in samples),
            loaned_busy_gpus=tuple(s[5] for s in samples),
        )
        return SimulationResult(
            scheme=self.scheme.name,
            records=records,
            window_s=self.window.length_s,
            training_gpus=self.training_gpus,
            inference_gpus=self.inference_gpus,
            inference_servers=self.n_inference,
            busy_training_gpu_s=self.busy_training_gpu_s,
            busy_loaned_gpu_s=self.busy_loaned_gpu_s,
            serving_gpu_s=self.serving_gpu_s,
            loaned_gpu_s=self.loaned_gpu_s,
            shortfall_server_s=self.shortfall_server_s,
            timeline=timeline,
            allocator_calls=self.allocator_calls,
            reclaims=self.reclaims,
            reclaimed_servers=self.reclaimed_servers,
            wall_seconds=wall,
        )
