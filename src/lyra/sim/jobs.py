"""The simulator's job table: one mutable record per job, and what each job's life came to.

A :class:`SimJob` holds everything the driver tracks of one job (its static description from the workload, its
state, progress, placement and counters), replacing parallel lists indexed by job number. Records are plain
slotted objects: the driver reads and writes them millions of times on a whole-trace run.

Counts of a job (``workers``, ``wmin``, ``wmax``, ``placement``) are in workers of ``gpus_per_worker`` GPUs; the
GPU-seconds it attained or lost are in GPUs.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from lyra.sim.workload import JobSpec


class Status(enum.IntEnum):
    FUTURE = 0
    QUEUED = 1
    RUNNING = 2
    DONE = 3
    #: Preempted and still inside its grace period: neither running nor eligible to start.
    LEAVING = 4


#: A queue entry: two ordering keys, the job name (tie-break), the job index.
QueueEntry = tuple[float, float, str, int]


class SimJob:
    """One job as the driver sees it. ``remaining`` is true remaining work (reference worker-seconds);
    ``estimate_factor`` scales what the scheduler is told."""

    __slots__ = (
        "attained",
        "checkpoint",
        "entry",
        "estimate_factor",
        "finish",
        "first_start",
        "gpu_types",
        "gpus",
        "gpus_per_worker",
        "index",
        "last",
        "lost_gpu_s",
        "migrations",
        "mixes",
        "name",
        "placement",
        "preemptions",
        "queue_s",
        "queued_since",
        "rate",
        "remaining",
        "resizes",
        "restart_due",
        "speed",
        "status",
        "submit",
        "version",
        "view",
        "window_lost_gpu_s",
        "window_preemptions",
        "wmax",
        "wmin",
        "workers",
    )

    def __init__(self, index: int, spec: JobSpec, *, elastic: bool, exact: bool, gpu_types: frozenset[str]) -> None:
        self.index = index
        self.name = spec.name
        self.submit = spec.submit_s
        self.gpus = spec.num_gpus
        self.gpus_per_worker = spec.gpus_per_worker
        self.wmin = spec.elastic_min if elastic else spec.workers
        self.wmax = spec.elastic_max if elastic else spec.workers
        self.estimate_factor = 1.0 if exact else spec.estimate_factor
        self.gpu_types = gpu_types
        self.mixes = elastic and spec.mixes_gpu_types
        self.remaining = spec.work
        self.status = Status.FUTURE
        self.rate = 0.0
        self.speed = 0.0
        self.workers = 0
        #: Server index -> workers of this job there.
        self.placement: dict[int, int] = {}
        self.last = 0.0
        self.version = 0
        self.checkpoint = 0.0
        self.attained = 0.0
        self.first_start = math.nan
        self.finish = math.nan
        self.queued_since = 0.0
        self.queue_s = 0.0
        self.preemptions = 0
        #: GPU-seconds of work that preemptions threw away (run since the last checkpoint, then redone).
        self.lost_gpu_s = 0.0
        #: The part of ``preemptions`` and ``lost_gpu_s`` that happened inside the submit window (the rest is the
        #: tail: preemptions of jobs still running after the window closed).
        self.window_preemptions = 0
        self.window_lost_gpu_s = 0.0
        self.resizes = 0
        self.migrations = 0
        self.restart_due = False
        self.entry: QueueEntry | None = None
        #: The core's view of this job while it is queued (built once per queue stay).
        self.view: object = None

    @property
    def elastic(self) -> bool:
        return self.wmax > self.wmin

    @property
    def estimate(self) -> float:
        """Remaining work as the scheduler is told it."""
        return self.remaining * self.estimate_factor

    def progress(self, t: float) -> None:
        """Bring ``remaining`` and ``attained`` up to ``t`` at the current rate."""
        dt = t - self.last
        if dt > 0 and self.workers:
            self.remaining = max(0.0, self.remaining - self.rate * dt)
            self.attained += self.workers * self.gpus_per_worker * dt
        self.last = t


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job. ``queue_s`` is all the time it waited with no worker (also after preemptions);
    ``min_workers`` and ``max_workers`` count workers of ``gpus_per_worker`` GPUs. ``window_preemptions`` and
    ``window_lost_gpu_s`` are the preemptions and the work they lost inside the submit window (``preemptions`` and
    ``lost_gpu_s`` count the tail after it too)."""

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
    migrations: int = 0
    lost_gpu_s: float = 0.0
    gpus_per_worker: int = 1
    window_preemptions: int = 0
    window_lost_gpu_s: float = 0.0

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.submit_s


def record_of(job: SimJob) -> JobRecord:
    return JobRecord(
        name=job.name,
        submit_s=job.submit,
        num_gpus=job.gpus,
        min_workers=job.wmin,
        max_workers=job.wmax,
        first_start_s=job.first_start,
        finish_s=job.finish,
        queue_s=job.queue_s,
        preemptions=job.preemptions,
        resizes=job.resizes,
        migrations=job.migrations,
        lost_gpu_s=job.lost_gpu_s,
        gpus_per_worker=job.gpus_per_worker,
        window_preemptions=job.window_preemptions,
        window_lost_gpu_s=job.window_lost_gpu_s,
    )
