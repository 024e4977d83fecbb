"""From trace rows to simulated jobs: the time window, elasticity and the scheduler's duration estimates.

Rules (all seeded, so one seed gives one workload for every scheme):

* The window is ``[start, start + days)`` of submit times; times become seconds since the window start.
* One worker is one GPU (the trace records GPU counts, not workers). The trace ran each job on its own GPUs, which
  the simulator takes as reference GPUs (speed 1.0, the training pool's type): a job that ran ``n`` GPUs for ``d``
  seconds has ``d * n * e(n)`` reference worker-seconds of work, ``e`` being the scenario's scaling efficiency, so
  that at its trace width on training GPUs it takes exactly ``d``. A job asking for more GPUs than the training
  cluster has is clamped to the cluster's size with its work kept (it runs longer), and counted in ``clamped``;
  with several training GPU types, the size of the largest type's group (a job runs on one type at a time).
* Two draws per job, in trace order, from ``random.Random(seed)``: ``u`` (uniform) makes the job elastic when
  ``u < elasticity.share``, and ``z`` (standard normal) gives the estimate error ``exp(sigma * z)``. Both are
  drawn for every job whatever the scenario says, so changing one knob does not reshuffle the others.
* Two more per job from a second stream (``random.Random(f"{seed}/gpus")``), also drawn for every job: ``m``
  (uniform) lets a job of ``n`` GPUs use the inference GPU type when
  ``m < memory.inference_fit_share * n ** -memory.size_exponent`` (its memory fits; larger jobs fit less often
  when the exponent is above 0; it always may if every inference GPU type is also a training one), and ``x``
  (uniform) makes an
  elastic job mix GPU types when ``x < elasticity.mixing_share``.
* An elastic job that ran on ``n`` GPUs gets ``w_min = ceil(n * min_factor)`` and ``w_max = n * max_factor``
  (clamped to the training cluster). Schemes without elasticity run every job at exactly ``n``.
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
    num_gpus: int
    work: float
    elastic_min: int
    elastic_max: int
    drawn_elastic: bool
    estimate_factor: float
    fits_inference_gpu: bool = True
    mixes_gpu_types: bool = False


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
        gpus = row.num_gpus
        if gpus > cluster_gpus:
            gpus = cluster_gpus
            clamped += 1
        elastic = u < rule.share
        low = max(1, math.ceil(gpus * rule.min_factor))
        high = min(cluster_gpus, gpus * rule.max_factor)
        jobs.append(
            JobSpec(
                name=row.name,
                submit_s=row.submit_s - window.start_s,
                num_gpus=gpus,
                work=row.duration_s * row.num_gpus / (1.0 + overhead * (row.num_gpus - 1)),
                elastic_min=low if elastic else gpus,
                elastic_max=max(high, low) if elastic else gpus,
                drawn_elastic=elastic,
                estimate_factor=math.exp(sigma * z),
                fits_inference_gpu=same_type or m < memory.inference_fit_share * row.num_gpus**-memory.size_exponent,
                mixes_gpu_types=elastic and x < rule.mixing_share,
            )
        )
    return Workload(tuple(jobs), window, clamped)
