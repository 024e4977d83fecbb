"""Lyra's policy core: pure functions from frozen cluster snapshots to plans.

Nothing here talks to Kubernetes, the network or the clock; an import-linter contract keeps it so. The
operator, the scheduler extender, the simulator and the what-if planner are adapters around these functions.
"""

from lyra.core.allocation import AllocationPlan, allocate_workers
from lyra.core.loaning import LoanPlan, plan_loans
from lyra.core.model import (
    ClusterSnapshot,
    InferenceDemand,
    InvalidClusterError,
    LoanState,
    Pool,
    Server,
    SpeedFactors,
    TrainingJob,
)
from lyra.core.placement import FilterResult, NodeView, PodRequest, PodRole, filter_nodes, score_nodes
from lyra.core.reclaim import ReclaimError, ReclaimPlan, ReclaimStrategy, plan_reclaim, reclaim_order

__all__ = [
    "AllocationPlan",
    "ClusterSnapshot",
    "FilterResult",
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
    "SpeedFactors",
    "TrainingJob",
    "allocate_workers",
    "filter_nodes",
    "plan_loans",
    "plan_reclaim",
    "reclaim_order",
    "score_nodes",
]
