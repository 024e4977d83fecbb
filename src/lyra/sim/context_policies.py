"""Context policies: how common schedulers do on the same separate training cluster (no loaning, no elasticity).

They are not Lyra's policy, so they live in the driver, but they place workers by the core's placement rule
(:class:`lyra.core.packing.Layout`), like everything else here.

* ``fifo``: arrival order, head-of-line blocking, no backfilling;
* ``sjf``: shortest estimated job first with backfilling. It is the same rule as ``baseline`` written
  independently of the core's allocator, so it cross-checks the driver;
* ``las``: Tiresias-style discretised least attained service: duration-agnostic and preemptive. Jobs queue by
  attained GPU-seconds (thresholds ``las_thresholds_gpu_s``), FIFO inside a queue; as GPUs free up, the best
  head that fits starts; every ``rebalance_interval_s`` (if anything changed) running and queued jobs are
  re-ranked together and running jobs that no longer make the cut are preempted.
"""

from __future__ import annotations

import heapq

from lyra.sim.driver import Decider, Driver
from lyra.sim.jobs import QueueEntry, SimJob, Status
from lyra.sim.queueing import BucketKey
from lyra.sim.schemes import Admission


def context_policy(sim: Driver, admission: Admission) -> Decider:
    if admission is Admission.LAS:
        return LeastAttainedService(sim)
    return GreedyAdmission(sim, fifo=admission is Admission.FIFO)


def start_on_training_gpus(sim: Driver, job: SimJob, t: float) -> bool:
    """Start a queued job with its base on the training pool's GPUs, placed by the core's rule, on the fastest
    training GPU type that holds it (then the type's name)."""
    cluster = sim.cluster
    layout = cluster.layout
    for gpu_type in cluster.training_types_fastest_first:
        moves = layout.place(job.name, job.gpus_per_worker, gpu_type, job.wmin)
        if moves is not None:
            break
    else:
        return False
    layout.undo(job.name, moves, job.gpus_per_worker)
    placement: dict[int, int] = {}
    for server, count in moves:
        placement[server] = placement.get(server, 0) + count
    sim.apply({job: placement}, t)
    return True


def most_free_on_one_training_type(sim: Driver) -> int:
    """The free GPUs of the training GPU type with the most (a job that does not mix runs on one type)."""
    free = sim.cluster.layout.free_of_type
    return max(free[t] for t in sim.cluster.training_types)


def packs_on_training_gpus(sim: Driver, key: BucketKey) -> bool:
    """True if a base of the bucket ``key`` packs onto the free GPUs of one training GPU type."""
    _, gpus_per_worker, base = key
    layout = sim.cluster.layout
    return any(layout.room(t, gpus_per_worker) >= base for t in sim.cluster.training_types)


class GreedyAdmission:
    """``fifo`` (the head or nobody) and ``sjf`` (the best head that fits, repeatedly: backfilling)."""

    allocator_calls = 0

    def __init__(self, sim: Driver, *, fifo: bool) -> None:
        self.sim = sim
        self.fifo = fifo

    def mark_dirty(self) -> None:
        """Greedy admission has no periodic work."""

    def decide(self, t: float) -> None:
        sim = self.sim
        while most_free_on_one_training_type(sim) > 0:
            entry = sim.queue.head() if self.fifo else sim.queue.best_fit(lambda key: packs_on_training_gpus(sim, key))
            if entry is None or not start_on_training_gpus(sim, sim.jobs[entry[3]], t):
                return


class LeastAttainedService:
    allocator_calls = 0

    def __init__(self, sim: Driver) -> None:
        self.sim = sim
        self.dirty = False
        self.next_full = 0.0
        self.interval = sim.scenario.scheduler.rebalance_interval_s

    def mark_dirty(self) -> None:
        self.dirty = True

    def decide(self, t: float) -> None:
        sim = self.sim
        if not (self.dirty and t >= self.next_full):
            while most_free_on_one_training_type(sim) > 0:
                entry = sim.queue.best_fit(lambda key: packs_on_training_gpus(sim, key))
                if entry is None or not start_on_training_gpus(sim, sim.jobs[entry[3]], t):
                    return
            return
        self.dirty = False
        self.next_full = t + self.interval
        running: list[QueueEntry] = []
        for i in sim.running:
            job = sim.jobs[i]
            job.progress(t)
            running.append((float(sim.las_level(job.attained)), job.submit, job.name, i))
        running.sort()
        left = sim.cluster.training_gpus
        keep: set[int] = set()
        for entry in heapq.merge(running, sim.queue.ordered()):
            job = sim.jobs[entry[3]]
            if job.wmin * job.gpus_per_worker <= left:
                keep.add(entry[3])
                left -= job.wmin * job.gpus_per_worker
                if left == 0:
                    break
        for entry in running:
            if entry[3] not in keep:
                sim.preempt(sim.jobs[entry[3]], t)
        starts = sorted((sim.jobs[i] for i in keep if sim.jobs[i].status is Status.QUEUED), key=lambda j: j.name)
        for job in starts:
            start_on_training_gpus(sim, job, t)
