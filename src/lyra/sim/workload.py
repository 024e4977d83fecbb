"""From trace rows to simulated jobs: the time window, elasticity and the scheduler's duration estimates.

Rules (all seeded, so one seed gives one workload for every scheme):

* The window is ``[start, start + days)`` of submit times; times become seconds since the window start.
* Workers (the trace records GPU counts, not workers): a job of ``n`` GPUs runs as ``n / g`` workers of ``g``
  GPUs, each worker on one server, ``g`` being the largest divisor of ``n`` that is at most ``S``, the smallest
  server among the groups whose GPU type the job may use by memory (the training groups, and the inference groups
  if it fits their memory): ``min(n, S)`` when ``n`` is at most a server or a multiple of ``S`` (Philly's 1, 2,
  4, 8, 16, ... GPUs on 8-GPU servers), else the largest whole split (12 GPUs on 8-GPU servers: two workers of 6;
  a prime ``n`` above ``S``: one-GPU workers). The job keeps exactly its ``n`` GPUs and every worker fits on every
  server it may use. ``S`` depends on the scenario and the job's memory draw, never on the scheme.
* The trace ran each job on its own GPUs, which the simulator takes as reference GPUs (speed 1.0): a job that ran
  ``n`` GPUs (``w = n / g`` workers) for ``d`` seconds has ``d * w * e(w)`` reference worker-seconds of work, ``e``
  being the scenario's scaling efficiency over workers, so that at its trace width on reference GPUs it takes
  exactly ``d``. A job asking for more GPUs than one training GPU type has (a job runs on one type at a time) is
  clamped to the largest type's group, and to the workers of ``g`` GPUs its servers hold, with its work kept (it
  runs longer), and counted in ``clamped``.
* Two draws per job, in trace order, from ``random.Random(seed)``: ``u`` (uniform) makes the job elastic when
  ``u < elasticity.share``, and ``z`` (standard normal) gives the estimate error ``exp(sigma * z)``. Both are
  drawn for every job whatever the scenario says, so changing one knob does not reshuffle the others.
* Two more per job from a second stream (``random.Random(f"{seed}/gpus")``), also drawn for every job: ``m``
  (uniform) lets a job of ``n`` GPUs use the inference GPU type when
  ``m < memory.inference_fit_share * n ** -memory.size_exponent`` (its memory fits; larger jobs fit less often
  when the exponent is above 0; it always may if every inference GPU type is also a training one), and ``x``
  (uniform) makes an
  elastic job mix GPU types when ``x < elasticity.mixing_share``.
* An elastic job that ran as ``w`` workers gets ``w_min = ceil(w * min_factor)`` and ``w_max = w * max_factor``
  workers of its ``g`` GPUs (clamped to the workers the largest training type holds). Schemes without elasticity
  run every job at exactly ``w`` workers.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lyra.sim.scenario import DurationKnowledge, Scenario
from lyra.sim.traces import Trace

DAY_S = 86_400.0
#: The longest window a run accepts (ten years): beyond it a run could not finish in any useful time, and a window
#: of ``inf`` or ``1e300`` days would never end.
MAX_WINDOW_DAYS = 3_650.0


@dataclass(frozen=True, slots=True)
class Window:
    """Absolute start (trace clock, seconds) and length of the simulated submit window."""

    start_s: float
    length_s: float

    @staticmethod
    def of(trace: Trace, start_s: float | None, days: float | None) -> Window:
        """``start_s=None``: the first submit; ``days=None``: through the last submit. A window that is not a
        finite length in (0, :data:`MAX_WINDOW_DAYS`] days is refused with a :class:`ValueError` naming the
        option."""
        if start_s is not None and not math.isfinite(start_s):
            raise ValueError(f"--start must be a finite time, got {start_s:g}")
        start = trace.first_submit_s if start_s is None else start_s
        if days is None:
            length = max(trace.last_submit_s - start + 1.0, 1.0)
            if length > MAX_WINDOW_DAYS * DAY_S:
                raise ValueError(
                    f"the trace spans {length / DAY_S:.3g} days from the window start, more than the "
                    f"{MAX_WINDOW_DAYS:g} a run accepts: choose a window with --start and --days"
                )
        else:
            if not math.isfinite(days) or days <= 0:
                raise ValueError(f"--days must be a finite number > 0, got {days:g}")
            if days > MAX_WINDOW_DAYS:
                raise ValueError(f"--days must be at most {MAX_WINDOW_DAYS:g} (ten years), got {days:g}")
            length = days * DAY_S
        return Window(start, length)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as the simulator runs it. ``work`` is true; ``estimate_factor`` scales what the scheduler sees."""

    name: str
    submit_s: float
    #: GPUs at the trace width: ``workers * gpus_per_worker``.
    num_gpus: int
    #: Reference worker-seconds (workers of ``gpus_per_worker`` GPUs).
    work: float
    #: Workers an elastic job may run with.
    elastic_min: int
    elastic_max: int
    drawn_elastic: bool
    estimate_factor: float
    fits_inference_gpu: bool = True
    mixes_gpu_types: bool = False
    gpus_per_worker: int = 1

    @property
    def workers(self) -> int:
        """Workers at the trace width."""
        return self.num_gpus // self.gpus_per_worker


@dataclass(frozen=True, slots=True)
class Workload:
    jobs: tuple[JobSpec, ...]
    window: Window
    clamped: int


def build_workload(trace: Trace, scenario: Scenario, window: Window) -> Workload:
    rng = random.Random(scenario.seed)
    gpu_rng = random.Random(f"{scenario.seed}/gpus")
    same_type = set(scenario.inference.gpu_types) <= set(scenario.training.gpu_types)
    overhead = scenario.scaling.overhead
    # A job runs on one GPU type unless it mixes: the most GPUs one type of the training pool has.
    cluster_gpus = max(group.servers * group.gpus_per_server for group in scenario.training.groups)
    smallest_training = min(group.gpus_per_server for group in scenario.training.groups)
    smallest_anywhere = min(smallest_training, *(group.gpus_per_server for group in scenario.inference.groups))
    sigma = scenario.durations.sigma if scenario.durations.knowledge is DurationKnowledge.NOISY else 0.0
    rule = scenario.elasticity
    memory = scenario.memory
    jobs: list[JobSpec] = []
    clamped = 0
    end = window.start_s + window.length_s
    for row in trace.jobs:
        u = rng.random()
        z = rng.gauss(0.0, 1.0)
        m = gpu_rng.random()
        x = gpu_rng.random()
        if not window.start_s <= row.submit_s < end:
            continue
        fits = same_type or m < memory.inference_fit_share * row.num_gpus**-memory.size_exponent
        gpus = min(row.num_gpus, cluster_gpus)
        per_worker = largest_divisor_at_most(gpus, smallest_anywhere if fits else smallest_training)
        most_workers = max(g.servers * (g.gpus_per_server // per_worker) for g in scenario.training.groups)
        workers = min(gpus // per_worker, most_workers)
        if workers * per_worker < row.num_gpus:
            clamped += 1
        trace_workers = row.num_gpus / per_worker
        elastic = u < rule.share
        low = max(1, math.ceil(workers * rule.min_factor))
        high = min(most_workers, workers * rule.max_factor)
        jobs.append(
            JobSpec(
                name=row.name,
                submit_s=row.submit_s - window.start_s,
                num_gpus=workers * per_worker,
                work=row.duration_s * trace_workers / (1.0 + overhead * (trace_workers - 1)),
                elastic_min=low if elastic else workers,
                elastic_max=max(high, low) if elastic else workers,
                drawn_elastic=elastic,
                estimate_factor=math.exp(sigma * z),
                fits_inference_gpu=fits,
                mixes_gpu_types=elastic and x < rule.mixing_share,
                gpus_per_worker=per_worker,
            )
        )
    return Workload(tuple(jobs), window, clamped)


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` (>= 1) that is at most ``limit`` (>= 1): a job's GPUs per worker."""
    for size in range(min(n, limit), 1, -1):
        if n % size == 0:
            return size
    return 1
