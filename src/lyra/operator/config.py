"""The operator's knobs, shared by the parts of a pass, each defined once: its default, its command-line flag and
the sentence ``lyra operator --help`` says about it live in the field's :func:`lyra.settings.setting` (the CLI
builds its flags from them, and a unit test holds the chart's values to the same defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lyra.core.allocation import DEFAULT_SEARCH_BUDGET
from lyra.core.gpus import GpuCatalog
from lyra.operator.priority_bounds import PriorityBounds
from lyra.operator.sizing import InferenceGpuCaps
from lyra.settings import COUNT, DEFAULT_LEND_DELAY_S, OPTIONAL_OBJECT_NAME, POSITIVE_COUNT, SECONDS, SWITCH, setting


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    headroom: int = setting(0, flag="--headroom", kind=COUNT, help="spare inference servers kept per GPU type")
    lend_delay_s: float = setting(
        DEFAULT_LEND_DELAY_S,
        flag="--lend-delay",
        kind=SECONDS,
        help="an idle inference server is lent only once it has been idle this long",
    )
    reclaim_deadline_s: float = setting(
        300.0,
        flag="--reclaim-deadline",
        kind=SECONDS,
        help="training pods still on a reclaimed server after this long are deleted without grace",
    )
    gang_timeout_s: float = setting(
        120.0,
        flag="--gang-timeout",
        kind=SECONDS,
        help="a base gang not placed whole within this long is rolled back and re-queued",
    )
    #: A node unhealthy (NotReady, unreachable, GPUs below capacity) this long is lost: out of every plan, its workers
    #: gone. Shorter, it only takes no new work (hysteresis: a blip scales nothing in).
    node_grace_s: float = setting(
        60.0,
        flag="--node-grace",
        kind=SECONDS,
        help="a node NotReady, unreachable or short of GPUs takes no new work at once, and is dropped with its "
        "workers only once it has been so this long",
    )
    #: A started job whose workers do not all run this long after it started is re-queued (Kueue's waitForPodsReady).
    start_timeout_s: float = setting(
        300.0,
        flag="--start-timeout",
        kind=SECONDS,
        help="a started job whose base workers are not all running after this long is re-queued",
    )
    #: Loaning and elasticity switched off give the cluster Lyra improves on (separate pools, jobs at their base
    #: size): ``lyra demo`` runs its day both ways through these two settings, never through a second code path.
    lending: bool = setting(
        True,
        flag="--lending",
        kind=SWITCH,
        help="lend idle inference servers to training (off: nothing is lent; what is lent is reclaimed as usual)",
    )
    elasticity: bool = setting(
        True,
        flag="--elasticity",
        kind=SWITCH,
        help="give elastic jobs flexible workers (off: every job runs at minWorkers, as an inelastic job)",
    )
    search_budget: int = setting(
        DEFAULT_SEARCH_BUDGET, flag="--search-budget", kind=POSITIVE_COUNT, help="the allocator's search budget"
    )
    gpus: GpuCatalog = field(default_factory=GpuCatalog)
    #: The scheduler of the pods the operator makes (``schedulerName``); empty: the cluster's default scheduler.
    scheduler_name: str = setting(
        "",
        flag="--scheduler-name",
        kind=OPTIONAL_OBJECT_NAME,
        help="schedulerName of the pods and Deployments the operator makes, e.g. the chart's bundled scheduler "
        "(empty: the cluster's default scheduler)",
    )
    #: The GPUs each namespace's InferenceServices may claim (``--inference-gpu-cap``); none: no cap.
    inference_gpu_caps: InferenceGpuCaps = field(default_factory=InferenceGpuCaps)
    #: The highest priority each namespace's TrainingJobs are ordered at (``--max-priority``); none: their own.
    priority_bounds: PriorityBounds = field(default_factory=PriorityBounds)


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """The running operator's loop: how often it passes without an event, and how long its Lease lasts
    (:class:`lyra.operator.runner.RunOptions` takes its defaults from here)."""

    resync_s: float = setting(10.0, flag="--resync", kind=SECONDS, help="a pass at least this often")
    lease_duration_s: float = setting(
        15.0,
        flag="--lease-duration",
        kind=SECONDS,
        help="a candidate takes the Lease over once it has seen it unrenewed for this long",
    )
