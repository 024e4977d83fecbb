"""Plans as JSON documents (camelCase, deterministic key order), for the planner CLI and the operator's status.

Every number is finite: JSON has no infinity, so a time that never comes is ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from lyra.core import AllocationPlan, ClusterSnapshot, LoanPlan, ReclaimPlan


def _seconds(value: float) -> float | None:
    """JSON has no infinity: a time that never comes is ``null``."""
    return round(value, 6) if math.isfinite(value) else None


def reclaim_plan_document(plan: ReclaimPlan) -> dict[str, Any]:
    return {
        "servers": list(plan.servers),
        "preempted": list(plan.preempted),
        "alreadyPreempted": list(plan.already_preempted),
        "scaledIn": dict(plan.scaled_in),
        "lostGpuSeconds": _seconds(plan.lost_gpu_seconds),
        "evictions": {server: dict(jobs) for server, jobs in plan.evictions.items()},
        "strategy": plan.strategy.value,
    }


def allocation_plan_document(plan: AllocationPlan) -> dict[str, Any]:
    """Every job's workers (0: waits); for each job that runs after the plan, running ones included, its GPU
    types and its placement ``{server: workers}``; for each job that waits, why."""
    return {
        "workers": dict(plan.workers),
        "gpuTypes": {job: list(types) for job, types in plan.gpu_types.items() if types},
        "placement": {job: dict(servers) for job, servers in plan.placement.items()},
        "started": list(plan.started),
        "preempted": list(plan.preempted),
        "resized": list(plan.resized),
        "migrated": list(plan.migrated),
        "queued": dict(plan.queued),
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


def loan_plans_document(plans: Mapping[str, tuple[int, LoanPlan]]) -> dict[str, Any]:
    """The loan plan of each GPU type (as the operator balances its pool: each type alone), with the demand in
    servers it was planned for, by GPU type name."""
    return {
        "gpuTypes": {
            gpu_type: {"demandServers": demand, **loan_plan_document(plan)}
            for gpu_type, (demand, plan) in sorted(plans.items())
        }
    }


def migration_plan_document(
    snapshot: ClusterSnapshot,
    moving: AllocationPlan,
    staying: AllocationPlan,
    *,
    restart_cost_s: float,
    min_gain_s: float = 0.0,
) -> dict[str, Any]:
    """Which running jobs move to a GPU type faster for them, from ``moving`` (the allocation that may migrate,
    with ``restart_cost_s`` charged per move) against ``staying`` (the one where running jobs keep their types).

    The gain is the sum of the jobs' completion times saved in the fluid model, net of the restarts (``null``
    when unknown; 0 when nothing moves). Moves that
    gain less than ``min_gain_s`` in all are declined, and so are moves whose gain is unknown (some job never
    finishes in the fluid model) when ``min_gain_s`` is above 0. ``allocation`` is the plan to apply: ``moving``
    if the moves are made, else ``staying``.
    """
    jobs = len(snapshot.jobs)
    before, after = staying.fluid_average_jct, moving.fluid_average_jct
    gain = jobs * (before - after) if math.isfinite(before) and math.isfinite(after) else None
    declined: str | None = None
    if moving.migrated:
        names = ", ".join(moving.migrated)
        if gain is not None and gain <= 0:
            declined = f"moving {names} gains nothing over the plan without moves"
        elif gain is not None and gain < min_gain_s:
            declined = f"moving {names} gains {gain:.1f} s in all, less than --min-gain {min_gain_s:g} s"
        elif gain is None and min_gain_s > 0:
            declined = (
                f"the gain of moving {names} is unknown (a job never finishes in the fluid model), "
                f"so --min-gain {min_gain_s:g} s cannot be met"
            )
    accepted = bool(moving.migrated) and declined is None
    servers = {s.name: s for s in snapshot.servers}
    migrations = []
    if accepted:
        for name in moving.migrated:
            job = snapshot.job(name)
            migrations.append(
                {
                    "job": name,
                    "fromGpuTypes": sorted({servers[s].gpu_type for s in job.placement}),
                    "toGpuTypes": list(moving.gpu_types[name]),
                    "from": dict(job.placement),
                    "to": dict(moving.placement.get(name, {})),
                }
            )
    return {
        "migrations": migrations,
        "gainSeconds": (_seconds(gain) if gain is not None else None) if accepted else 0.0,
        "declined": declined,
        "restartCostSeconds": restart_cost_s,
        "minGainSeconds": min_gain_s,
        "allocation": allocation_plan_document(moving if accepted else staying),
    }
