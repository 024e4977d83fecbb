"""The operator's knobs, shared by the parts of a pass (``lyra operator --help`` documents each)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lyra.core.allocation import DEFAULT_SEARCH_BUDGET
from lyra.core.gpus import GpuCatalog
from lyra.operator.sizing import InferenceGpuCaps


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    headroom: int = 0
    lend_delay_s: float = 60.0
    reclaim_deadline_s: float = 300.0
    gang_timeout_s: float = 120.0
    #: A node unhealthy (NotReady, unreachable, GPUs below capacity) this long is lost: out of every plan, its workers
    #: gone. Shorter, it only takes no new work (hysteresis: a blip scales nothing in).
    node_grace_s: float = 60.0
    #: A started job whose workers do not all run this long after it started is re-queued (Kueue's waitForPodsReady).
    start_timeout_s: float = 300.0
    search_budget: int = DEFAULT_SEARCH_BUDGET
    gpus: GpuCatalog = field(default_factory=GpuCatalog)
    #: The scheduler of the pods the operator makes (``schedulerName``); empty: the cluster's default scheduler.
    scheduler_name: str = ""
    #: The GPUs each namespace's InferenceServices may claim (``--inference-gpu-cap``); none: no cap.
    inference_gpu_caps: InferenceGpuCaps = field(default_factory=InferenceGpuCaps)
