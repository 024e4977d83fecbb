"""The discrete-event driver: a simulated clock over the core's pure policies.

Nothing here decides like Lyra; :mod:`lyra.sim.decisions` asks :mod:`lyra.core` and applies the plans,
:mod:`lyra.sim.loans` lends and reclaims inference servers, :mod:`lyra.sim.context_policies` holds the comparison
policies that are not Lyra's. This module owns the clock and each job's life, and charges what a real cluster
charges:

* **Pace.** A job with ``w`` workers whose slowest worker's GPU type has speed ``s`` progresses at
  ``w * s * e(w)`` reference worker-seconds per second (:meth:`lyra.core.model.TrainingJob.pace`): speeds never
  add across GPU types. Jobs run on one type unless they opt in to mixing.
* **Preemption.** The job's workers get SIGTERM and ``checkpoint_grace_s`` to exit; it re-enters the queue when
  the grace ends. Unless jobs save on the signal, the work since its last checkpoint (every
  ``checkpoint_interval_s`` of a run segment; a start, resize or migration is a checkpoint) is lost. Restarting
  costs ``restart_cost_s``.
* **Resize** (elastic scale-out or scale-in): ``resize_cost_s`` without progress, plus the rendezvous's pauses by
  what it did: ``leave_detection_s`` if a worker left, ``last_call_s`` if the job is below its maximum after it.
* **Migration** to another GPU type: a checkpoint and a restart, ``restart_cost_s``, no lost work.
* A cost of ``c`` seconds is charged as ``c`` seconds of work at the job's new pace.
* **Reclaim takes time** (:mod:`lyra.sim.loans`): a reclaimed server serves inference only after its training
  workers' grace and a drain; inference demand not met meanwhile is counted.

The loop, per instant ``t`` (events at the same instant are processed together, in this order): completions
(an event is valid only if its version is current: every change of a job's pace bumps the version and pushes a
new event, so stale ones are skipped without rescans), servers back from a reclaim, preempted jobs whose grace
ended, arrivals (from the trace, pre-sorted; never in the heap), a load step (every ``step_s`` of the load
series: demand is recomputed and loans adjusted), then one scheduling decision for everything that changed.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lyra.core.fluid import QUEUED, SPREAD
from lyra.core.model import TrainingJob, pace
from lyra.core.ordering import queue_key
from lyra.sim.cluster import SimCluster
from lyra.sim.context_policies import context_policy
from lyra.sim.decisions import CoreDecisions
from lyra.sim.driver import Decider
from lyra.sim.jobs import JobRecord, QueueEntry, SimJob, Status, record_of
from lyra.sim.load import LoadSeries
from lyra.sim.loans import LoanKeeper, WindowCount
from lyra.sim.queueing import BucketKey, JobQueue
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import Admission, Scheme
from lyra.sim.workload import Workload

_COMPLETION, _SERVER_READY, _REQUEUE, _LOAD_STEP, _DECIDE = 0, 1, 2, 3, 4

ProgressCallback = Callable[[float], None]


@dataclass(frozen=True, slots=True)
class Timeline:
    """Samples at every load step inside the window, for the plots."""

    time_s: tuple[float, ...]
    inference_demand: tuple[int, ...]
    loaned_servers: tuple[int, ...]
    reclaiming_servers: tuple[int, ...]
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
    #: Inference demand not met, in server-seconds: while servers were reclaiming, and beyond the whole pool.
    short_server_s: float
    structural_short_server_s: float
    demand_server_s: float
    timeline: Timeline
    allocator_calls: int
    #: Loan-cycle counts inside the submit window and after it (the tail, while the last jobs finish).
    reclaims: WindowCount
    reclaimed_servers: WindowCount
    #: Jobs scaled in (not preempted) because servers they ran on were reclaimed, one per job and reclaim.
    scale_ins: WindowCount
    migrations: int
    wall_seconds: float


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
        self.progress_callback = progress
        self.window = workload.window
        self.cluster = SimCluster(scenario)
        self.cluster.window_s = self.window.length_s
        cluster = self.cluster
        only_training = frozenset(scenario.training.gpu_types)
        both = frozenset(scenario.gpu_types)
        self.jobs = [
            SimJob(
                i,
                spec,
                elastic=scheme.elastic,
                exact=scheme.exact_durations,
                gpu_types=both if scheme.loaning and spec.fits_inference_gpu else only_training,
            )
            for i, spec in enumerate(workload.jobs)
        ]
        self.n = len(self.jobs)
        self.overhead = scenario.scaling.overhead
        #: The speed of the fastest GPU type each set of GPU types a job may use holds (the admission order's).
        self.best_speed = {
            types: max(scenario.speed_of(t) for t in types) for types in {job.gpu_types for job in self.jobs}
        }
        self.queue = JobQueue()

        cost = scenario.preemption
        free_costs = scheme.free_preemption
        self.restart_cost = 0.0 if free_costs else cost.restart_cost_s
        self.resize_cost = 0.0 if free_costs else cost.resize_cost_s
        self.leave_detection = 0.0 if free_costs else cost.rendezvous.leave_detection_s
        self.last_call = 0.0 if free_costs else cost.rendezvous.last_call_s
        self.start_cost = 0.0 if free_costs else cost.start_cost_s
        self.grace = 0.0 if free_costs else cost.checkpoint_grace_s
        self.lose_work = not free_costs and not cost.saves_on_signal
        self.checkpoint_interval = cost.checkpoint_interval_s

        # Running totals the deciders read instead of scanning jobs, per GPU type index (flexible: in GPUs).
        types = len(cluster.type_names)
        self.flexible = [0] * types
        self.growable = [0] * types
        self.running: set[int] = set()
        self.running_elastic: set[int] = set()
        self.kind = [QUEUED] * self.n  # not running, on several types (SPREAD), else its one type's index
        self.on_type: list[set[int]] = [set() for _ in range(types)]
        #: Each running elastic job's contribution to ``flexible`` and ``growable`` (to take it back exactly).
        self.elastic_counted: dict[int, tuple[int, int]] = {}

        self.decision_interval = scenario.scheduler.decision_interval_s
        self.decision_delay = scenario.scheduler.decision_delay_s
        self.next_decision = 0.0
        self.decision_due = False
        self.decision_pending = False
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.sequence = 0
        self.now = 0.0
        self.done = 0
        self.migrations = 0
        self.samples: list[tuple[float, int, int, int, int, int, int]] = []
        self.decider: Decider = (
            CoreDecisions(self) if scheme.admission is Admission.CORE else context_policy(self, scheme.admission)
        )
        self.loans = LoanKeeper(self) if scheme.loaning else None

    # ----------------------------------------------------------------------------------------------- the loop

    def run(self) -> SimulationResult:
        started = time.perf_counter()
        window = self.window.length_s
        step = self.load.step_s
        offset = math.fmod(self.window.start_s, step)
        first_step = 0.0 if offset == 0 else step - offset
        self.cluster.set_demand(self.demand_at(0.0))
        if self.loans is not None:
            self.loans.load_changed(0.0)
        self.push(first_step if first_step > 0 else step, _LOAD_STEP, -1)
        arrivals = 0
        events = 0
        report_every = max(1, self.n // 200)
        self.decide(0.0)
        jobs = self.jobs
        while self.done < self.n or self.now < window:
            next_arrival = jobs[arrivals].submit if arrivals < self.n else math.inf
            t = min(next_arrival, self.heap[0][0] if self.heap else math.inf)
            if t == math.inf:
                raise RuntimeError("the simulation stalled: jobs are queued but nothing can ever free GPUs")
            self.advance(t)
            while self.heap and self.heap[0][0] == t:
                _, _, kind, subject, version = heapq.heappop(self.heap)
                if kind == _COMPLETION:
                    job = jobs[subject]
                    if version == job.version and job.status is Status.RUNNING:
                        self.complete(job, t)
                        events += 1
                        if self.progress_callback is not None and events % report_every == 0:
                            self.progress_callback(self.done / self.n)
                elif kind == _SERVER_READY:  # its workers are gone: the next turn of the loan cycle returns it
                    if self.loans is not None:
                        self.loans.load_changed(t)
                elif kind == _REQUEUE:
                    self.requeue(jobs[subject], t)
                elif kind == _DECIDE:
                    self.decision_due = True
                else:
                    self.load_step(t)
                    self.push(t + step, _LOAD_STEP, -1)
            while arrivals < self.n and jobs[arrivals].submit == t:
                self.enqueue(jobs[arrivals], t)
                arrivals += 1
            self.decide(t)
        if self.progress_callback is not None:
            self.progress_callback(1.0)
        return self._result(time.perf_counter() - started)

    def push(self, t: float, kind: int, subject: int, version: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, (t, self.sequence, kind, subject, version))

    def advance(self, t: float) -> None:
        self.cluster.advance(t)
        self.now = t

    def demand_at(self, t: float) -> int:
        rate = self.load.rate_at(self.window.start_s + t)
        servers = math.ceil(rate / self.scenario.inference.req_per_server - 1e-9)
        return max(0, servers)

    def load_step(self, t: float) -> None:
        cluster = self.cluster
        demand = self.demand_at(t)
        if demand != cluster.demand:
            cluster.set_demand(demand)
        if self.loans is not None:
            self.loans.load_changed(t)
        if t < self.window.length_s:
            self.samples.append(
                (
                    t,
                    cluster.demand,
                    cluster.loaned,
                    cluster.reclaiming,
                    self.queue.size,
                    cluster.busy_training,
                    cluster.busy_loaned,
                )
            )

    def decide(self, t: float) -> None:
        """Loans are balanced at once (inference never waits for the scheduler); scheduling decisions happen at
        most every ``decision_interval_s``, batching the events in between, as an operator's reconcile loop
        does, and ``decision_delay_s`` after the change that calls for them (the operator acts a pass later)."""
        if self.loans is not None:
            self.loans.adjust(t)
        if self.decision_due or (t >= self.next_decision and not self.decision_delay):
            self.decision_due = False
            self.decision_pending = False
            self.next_decision = t + self.decision_interval
            self.decider.decide(t)
        elif not self.decision_pending and (self.queue.size or self.running):  # else there is nothing to decide
            self.decision_pending = True
            self.push(max(self.next_decision, t + self.decision_delay), _DECIDE, -1)

    def server_ready_at(self, server: int, t: float) -> None:
        self.push(t, _SERVER_READY, server)

    # ----------------------------------------------------------------------------------------- job lifecycle

    def queue_key(self, job: SimJob) -> BucketKey:
        return (job.gpu_types, job.gpus_per_worker, job.wmin)

    def entry_of(self, job: SimJob) -> QueueEntry:
        admission = self.scheme.admission
        if admission is Admission.FIFO:
            return (job.submit, 0.0, job.name, job.index)
        if admission is Admission.LAS:
            return (float(self.las_level(job.attained)), job.submit, job.name, job.index)
        # The core's admission order (lyra.core.ordering.queue_key): every simulated job has priority 0, so its
        # entry is the rest of the key, the time at base on the fastest type the job may use first.
        speed = self.best_speed[job.gpu_types]
        _, at_base, submitted, name = queue_key(
            0, job.estimate / pace(job.wmin, speed, self.overhead), job.submit, job.name
        )
        return (at_base, submitted, name, job.index)

    def las_level(self, attained: float) -> int:
        return bisect_left(self.scenario.scheduler.las_thresholds_gpu_s, attained)

    def enqueue(self, job: SimJob, t: float, *, waiting_since: float | None = None) -> None:
        job.status = Status.QUEUED
        job.queued_since = t if waiting_since is None else waiting_since
        job.entry = self.entry_of(job)
        self.queue.push(self.queue_key(job), job.entry)
        self.decider_dirty()

    def decider_dirty(self) -> None:
        self.decider.mark_dirty()

    def dequeue(self, job: SimJob, t: float) -> None:
        if job.entry is None:
            raise RuntimeError(f"job {job.name} is not queued")
        self.queue.remove(self.queue_key(job), job.entry)
        job.entry = None
        job.view = None
        job.queue_s += t - job.queued_since

    def pace(self, job: SimJob, workers: int, speed: float) -> float:
        """The core's pace (:func:`lyra.core.model.pace`) with the scenario's scaling overhead."""
        return pace(workers, speed, self.overhead)

    def _reschedule(self, job: SimJob, t: float) -> None:
        job.version += 1
        if job.workers:
            self.push(t + job.remaining / job.rate, _COMPLETION, job.index, job.version)

    def apply(self, changes: Mapping[SimJob, Mapping[int, int]], t: float) -> None:
        """Give every job in ``changes`` its new placement (server -> workers) at once: all removals, then all
        additions, so that workers moving between jobs on a full server never overbook it. A queued job starts;
        a running job is resized (its workers change), migrated (its GPU types change: a checkpoint and a
        restart, no lost work) or left as it is. Stopping a job is :meth:`preempt`'s, not this."""
        cluster = self.cluster
        before: dict[int, tuple[dict[int, int], frozenset[int]]] = {}
        for job, placement in changes.items():
            if job.status is Status.RUNNING:
                job.progress(t)
                before[job.index] = (job.placement, frozenset(cluster.type_of[s] for s in job.placement))
            elif job.status is not Status.QUEUED or not placement:
                raise RuntimeError(f"job {job.name} ({job.status.name}) cannot be placed at {dict(placement)}")
        for job, placement in changes.items():
            for server, count in job.placement.items():
                wanted = placement.get(server, 0)
                if wanted < count:
                    cluster.move(job.name, server, wanted - count, job.gpus_per_worker)
        for job, placement in changes.items():
            for server, wanted in placement.items():
                count = job.placement.get(server, 0)
                if wanted > count:
                    cluster.move(job.name, server, wanted - count, job.gpus_per_worker)
        for job, placement in changes.items():
            job.placement = {s: n for s, n in placement.items() if n}
            job.workers = sum(job.placement.values())
            if not job.workers:
                raise RuntimeError(f"job {job.name}: a placement change may not stop it")
            job.speed = min(cluster.speed_of_type[cluster.type_of[s]] for s in job.placement)
            job.rate = self.pace(job, job.workers, job.speed)
            self._track(job)
            if job.index not in before:
                self._started(job, t)
            else:
                previous, types = before[job.index]
                if types != frozenset(cluster.type_of[s] for s in job.placement):
                    job.migrations += 1
                    self.migrations += 1
                    job.remaining += self.restart_cost * job.rate
                elif job.placement != previous:
                    job.resizes += 1
                    job.remaining += self.resize_pause(job, previous) * job.rate
                else:
                    continue
            job.checkpoint = t
            self._reschedule(job, t)
        self.decider_dirty()

    def resize_pause(self, job: SimJob, previous: Mapping[int, int]) -> float:
        """Seconds without progress for ``job``'s resize from the workers per server in ``previous`` to its
        placement now: ``resize_cost_s``, plus the rendezvous's pauses for what the resize did."""
        pause = self.resize_cost
        if any(job.placement.get(server, 0) < count for server, count in previous.items()):
            pause += self.leave_detection
        if job.workers < job.wmax:
            pause += self.last_call
        return pause

    def _started(self, job: SimJob, t: float) -> None:
        self.dequeue(job, t)
        if math.isnan(job.first_start):
            job.first_start = t
            job.remaining += self.start_cost * job.rate
        job.status = Status.RUNNING
        self.running.add(job.index)
        job.last = t
        if job.restart_due:
            job.remaining += self.restart_cost * job.rate
            job.restart_due = False

    def _stop(self, job: SimJob) -> None:
        for server, count in job.placement.items():
            self.cluster.release(job.name, server, count, job.gpus_per_worker)
        job.placement = {}
        job.workers = 0
        job.rate = 0.0
        job.speed = 0.0
        self._track(job)
        self.running.discard(job.index)
        job.version += 1

    def complete(self, job: SimJob, t: float) -> None:
        job.progress(t)
        self._stop(job)
        job.remaining = 0.0
        job.status = Status.DONE
        job.finish = t
        self.done += 1
        self.decider_dirty()

    def preempt(self, job: SimJob, t: float) -> None:
        """Stop the job everywhere. Its workers exit during the grace period: no progress, their GPUs still taken;
        when it ends they are freed and the job re-enters the queue (its queuing time counts from now)."""
        job.progress(t)
        inside = t < self.window.length_s
        if self.lose_work:
            lost = self.since_checkpoint(job, t)
            job.remaining += lost * job.rate
            job.lost_gpu_s += lost * job.workers * job.gpus_per_worker
            if inside:
                job.window_lost_gpu_s += lost * job.workers * job.gpus_per_worker
        job.preemptions += 1
        if inside:
            job.window_preemptions += 1
        job.restart_due = True
        if self.grace > 0:
            job.rate = 0.0
            job.version += 1
            self._track(job, leaving=True)
            self.running.discard(job.index)
            job.status = Status.LEAVING
            job.queued_since = t
            self.push(t + self.grace, _REQUEUE, job.index)
        else:
            self._stop(job)
            self.enqueue(job, t)
        self.decider_dirty()

    def requeue(self, job: SimJob, t: float) -> None:
        """A preempted job's grace period is over: its GPUs are free and it waits in the queue again."""
        self._stop(job)
        self.enqueue(job, t, waiting_since=job.queued_since)

    def since_checkpoint(self, job: SimJob, t: float) -> float:
        return math.fmod(max(0.0, t - job.checkpoint), self.checkpoint_interval)

    def core_job(self, job: SimJob, t: float) -> TrainingJob:
        """The core's view of a job at ``t``: its estimated remaining work, its GPU types and, if it runs, its
        workers and the work a preemption would lose."""
        if job.status is Status.RUNNING:
            job.progress(t)
        names = self.cluster.names
        return TrainingJob(
            name=job.name,
            gpus_per_worker=job.gpus_per_worker,
            min_workers=job.wmin,
            max_workers=job.wmax,
            remaining_work=job.estimate,
            submit_time=job.submit,
            placement={names[s]: n for s, n in job.placement.items()},
            gpu_types=job.gpu_types,
            mix_gpu_types=job.mixes,
            scaling_overhead=self.overhead,
            seconds_since_checkpoint=self.since_checkpoint(job, t) if job.workers and self.lose_work else 0.0,
        )

    def _track(self, job: SimJob, *, leaving: bool = False) -> None:
        """Keep the per-type totals (flexible workers, growable elastic jobs, jobs per type) in step. A leaving job
        (its workers exiting) counts nowhere, though its workers still hold their GPUs."""
        old = self.kind[job.index]
        if old >= 0:
            self.on_type[old].discard(job.index)
        elif old == SPREAD:
            for t in range(len(self.on_type)):
                self.on_type[t].discard(job.index)
        if job.elastic:
            self._count_elastic(job, old, -1)
        kinds = set() if leaving else {self.cluster.type_of[s] for s in job.placement}
        new = QUEUED if not kinds else (next(iter(kinds)) if len(kinds) == 1 else SPREAD)
        self.kind[job.index] = new
        for t in kinds:
            self.on_type[t].add(job.index)
        if job.elastic:
            self._count_elastic(job, new, +1)
            if job.workers and not leaving:
                self.running_elastic.add(job.index)
            else:
                self.running_elastic.discard(job.index)

    def _count_elastic(self, job: SimJob, kind: int, sign: int) -> None:
        if kind < 0:
            return
        if sign < 0:
            counted = self.elastic_counted.pop(job.index, None)
            if counted is not None:
                self.flexible[kind] -= counted[0]
                self.growable[kind] -= counted[1]
            return
        flexible = max(0, job.workers - job.wmin) * job.gpus_per_worker
        growable = int(0 < job.workers < job.wmax)
        self.flexible[kind] += flexible
        self.growable[kind] += growable
        self.elastic_counted[job.index] = (flexible, growable)

    # ---------------------------------------------------------------------------------------------- results

    def _result(self, wall: float) -> SimulationResult:
        samples = self.samples
        timeline = Timeline(
            time_s=tuple(s[0] for s in samples),
            inference_demand=tuple(s[1] for s in samples),
            loaned_servers=tuple(s[2] for s in samples),
            reclaiming_servers=tuple(s[3] for s in samples),
            queued_jobs=tuple(s[4] for s in samples),
            training_busy_gpus=tuple(s[5] for s in samples),
            loaned_busy_gpus=tuple(s[6] for s in samples),
        )
        cluster = self.cluster
        loans = self.loans
        return SimulationResult(
            scheme=self.scheme.name,
            records=tuple(record_of(job) for job in self.jobs),
            window_s=self.window.length_s,
            training_gpus=cluster.training_gpus,
            inference_gpus=cluster.inference_gpus,
            inference_servers=cluster.n_inference,
            busy_training_gpu_s=cluster.busy_training_gpu_s,
            busy_loaned_gpu_s=cluster.busy_loaned_gpu_s,
            serving_gpu_s=cluster.serving_gpu_s,
            loaned_gpu_s=cluster.loaned_gpu_s,
            short_server_s=cluster.short_server_s,
            structural_short_server_s=cluster.structural_short_server_s,
            demand_server_s=cluster.demand_server_s,
            timeline=timeline,
            allocator_calls=self.decider.allocator_calls,
            reclaims=loans.reclaims if loans is not None else WindowCount(),
            reclaimed_servers=loans.reclaimed_servers if loans is not None else WindowCount(),
            scale_ins=loans.scale_ins if loans is not None else WindowCount(),
            migrations=self.migrations,
            wall_seconds=wall,
        )
