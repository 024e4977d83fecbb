"""Plans as JSON documents (camelCase, deterministic key order), for the planner CLI and the operator's status."""

from __future__ import annotations

import math
from typing import Any

from lyra.core.allocation import AllocationPlan
from lyra.core.loaning import LoanPlan
from lyra.core.reclaim import ReclaimPlan


def _seconds(value: float) -> float | None:
    """JSON has no infinity: a time that never comes is ``null``."""
    return round(value, 6) if math.isfinite(value) else None


def reclaim_plan_document(plan: ReclaimPlan) -> dict[str, Any]:
    return {
        "servers": list(plan.servers),
        "preempted": list(plan.preempted),
        "scaledIn": dict(plan.scaled_in),
        "lostGpuSeconds": round(plan.lost_gpu_seconds, 6),
        "evictions": {server: dict(jobs) for server, jobs in plan.evictions.items()},
        "strategy": plan.strategy.value,
    }


def allocation_plan_document(plan: AllocationPlan) -> dict[str, Any]:
    return {
        "workers": dict(plan.workers),
        "started": list(plan.started),
        "preempted": list(plan.preempted),
        "resized": list(plan.resized),
        "gpusUsed": plan.gpus_used,
        "capacityGpus": plan.capacity_gpus,
        "fluidAverageJctSeconds": _seconds(plan.fluid_average_jct),
    }


def loan_plan_document(plan: LoanPlan) -> dict[str, Any]:
    return {
        "lend": list(plan.lend),
        "reclaim": plan.reclaim,
        "shortfall": plan.shortfall,
        "neededServers": plan.needed,
        "heldServers": plan.held,
    }
