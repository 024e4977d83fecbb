"""Lyra's policy core: pure functions from frozen cluster snapshots to plans.

Nothing here talks to Kubernetes, the network or the clock; an import-linter contract keeps it so. The
operator, the scheduler extender, the simulator and the what-if planner are adapters around these functions.
"""

from lyra.core.allocation import AllocationPlan, allocate_workers
from lyra.core.errors import InvalidClusterError
from lyra.core.gpus import GpuCatalog, GpuType, default_gpu_type
from lyra.core.loaning import LoanPlan, plan_loans
from lyra.core.model import (
    MAX_GPUS_PER_SERVER,
    MAX_WORKERS,
    ClusterSnapshot,
    InferenceDemand,
    LoanState,
    Pool,
    Server,
    TrainingJob,
)
from lyra.core.placement import FilterResult, NodeView, PodRequest, PodRole, filter_nodes, score_nodes
from lyra.core.reclaim import ReclaimError, ReclaimPlan, ReclaimStrategy, plan_reclaim, reclaim_order

__all__ = [
    "MAX_GPUS_PER_SERVER",
    "MAX_WORKERS",
    "AllocationPlan",
    "ClusterSnapshot",
    "FilterResult",
    "GpuCatalog",
    "GpuType",
    "InferenceDemand",
    "InvalidClusterError",
    "LoanPlan",
    "LoanState",
    "NodeView",
    "PodRequest",
    "PodRole",
    "Pool",
    "ReclaimError",
    "ReclaimPlan",
    "ReclaimStrategy",
    "Server",
    "TrainingJob",
    "allocate_workers",
    "default_gpu_type",
    "filter_nodes",
    "plan_loans",
    "plan_reclaim",
    "reclaim_order",
    "score_nodes",
]
