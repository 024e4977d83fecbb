"""Decide: one pass from a :class:`~lyra.operator.world.World` to a :class:`~lyra.operator.actions.Decision`.

Pure: no API calls, no clock (``world.now``). A pass decides with the GPU catalogue of :func:`observed_gpus` (the
configured one, completed by the memory nodes report) and runs these steps in order, each reading what the previous ones
decided (docs/architecture.md, "A pass"):

1. **Jobs' own lives**: a job with a failed worker fails; one whose workers all finished succeeds; a gang whose base
   could not be placed in time is rolled back and re-queued; a running job that lost its base is re-queued.
2. **Inference**: each service's replicas (spec or load) and the servers of each GPU type they need; an inference
   node with replicas is ``serving``, one without is ``idle``.
3. **Loans** (:mod:`lyra.operator.loans`, one turn of :func:`lyra.core.loan_cycle.plan_loan_cycle`): per GPU
   type, ``plan_loans``; servers to call back are chosen by ``plan_reclaim`` and marked ``reclaiming``; idle surplus
   that has been idle for the lend delay is lent.
4. **Draining** (the same turn): training work on ``reclaiming`` servers leaves, by scale-in where the job keeps its
   base, by preemption where it does not; an emptied server returns to ``serving``; past the deadline the rest is
   forced. A service whose replicas wait for a reclaim records since when; once they all run, it reports how long
   (``ReclaimServed``).
5. **Allocation**, when nothing is in flight: ``allocate_workers`` on the settled snapshot sets every job's intent
   (phase, target workers, planned placement, GPU type), written to its status.
6. **Converging pods to intents**: missing workers are created (a new gang whole), extra flexible ones deleted, and
   roles relabelled so that the lowest-indexed live workers are the base.

Everything the next pass needs is in the API (labels, taints, annotations, statuses), so a new operator picks up
where a killed one stopped. Applying a decision and deciding again yields no action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lyra.api import conditions, names
from lyra.api.resources import Condition, ConditionStatus, JobPhase, wire
from lyra.core.gpus import GpuCatalog, MemoryDisagreement
from lyra.core.model import ClusterSnapshot, LoanState
from lyra.operator.actions import ACTION_ORDER, Decision, PatchStatus
from lyra.operator.changes import Changes
from lyra.operator.config import OperatorConfig
from lyra.operator.isolation import Failure
from lyra.operator.jobs import JobBook
from lyra.operator.loans import LoanBook
from lyra.operator.services import ServiceBook
from lyra.operator.timestamps import format_time
from lyra.operator.world import World

__all__ = ["LiveView", "OperatorConfig", "decide", "live_snapshot", "live_view", "observed_gpus", "report_unreadable"]


def decide(
    world: World, config: OperatorConfig | None = None, failures: Mapping[str, Failure] | None = None
) -> Decision:
    """One pass of the operator over ``world`` (see the module docstring). ``failures``: the objects whose last writes
    the API refused (:class:`lyra.operator.isolation.Backoff`), reported in their statuses."""
    config = config or OperatorConfig()
    config = replace(config, gpus=observed_gpus(world, config.gpus)[0])
    changes = Changes(world.now, failures, [*(j.ref for j in world.jobs), *(s.ref for s in world.services)])
    jobs = JobBook(world, config, changes)
    jobs.lives()
    services = ServiceBook(world, changes, scheduler_name=config.scheduler_name, caps=config.inference_gpu_caps)
    demand = services.plan()
    loans = LoanBook(world, config, changes, jobs, demand, users=services.users)
    loans.turn()
    services.follow_reclaims(loans.reclaims_under_way())
    if loans.settled and jobs.settled():
        jobs.allocate(loans.states)
    jobs.converge()
    jobs.write_statuses()
    services.write_statuses()
    report_unreadable(world, changes)
    changes.report = replace(changes.report, loans=loans.report, loans_error=loans.error)
    actions = [*loans.node_actions(), *changes.actions]
    ordered = sorted(actions, key=lambda a: ACTION_ORDER.index(type(a)))
    return Decision(tuple(ordered), changes.report)


def observed_gpus(world: World, catalog: GpuCatalog) -> tuple[GpuCatalog, tuple[MemoryDisagreement, ...]]:
    """The GPU catalogue a pass decides with: ``catalog`` (``--gpu-catalog``) completed by the memory the nodes report
    (``nvidia.com/gpu.memory``, the smallest of each type's nodes), and where the two disagree (the catalogue wins)."""
    reported: dict[str, float] = {}
    for node in world.nodes:
        if node.gpu_memory_mib is not None:
            gib = node.gpu_memory_mib / 1024
            reported[node.gpu_type] = min(gib, reported.get(node.gpu_type, gib))
    return catalog.with_reported_memory(reported)


def report_unreadable(world: World, changes: Changes) -> None:
    """A TrainingJob or InferenceService Lyra cannot read says so in its status (a job fails), once. (A node or pod
    left out is logged and, for a node, given an Event by the runner: neither has a status of Lyra's.)"""
    for item in world.unreadable:
        if item.ref.kind not in (names.TRAINING_JOB_KIND, names.INFERENCE_SERVICE_KIND) or item.status is None:
            continue
        kind = conditions.RUNNING if item.ref.kind == names.TRAINING_JOB_KIND else conditions.READY
        message = f"the spec cannot be read: {item.reason}"
        present = [c for c in item.status.get("conditions") or [] if isinstance(c, dict)]
        if any(c.get("type") == kind and c.get("reason") == conditions.INVALID_SPEC and c.get("message") == message
               for c in present):  # fmt: skip
            continue
        condition = Condition(
            type=kind,
            status=ConditionStatus.FALSE,
            reason=conditions.INVALID_SPEC,
            message=message,
            last_transition_time=format_time(world.now),
        )
        status: dict[str, Any] = {"conditions": [wire(condition)]}
        if item.ref.kind == names.TRAINING_JOB_KIND:
            status["phase"] = JobPhase.FAILED.value
        changes.actions.append(PatchStatus(item.ref, status, ("conditions",)))
        changes.emit(item.ref, conditions.INVALID_SPEC, message, warning=True)


def live_snapshot(world: World, config: OperatorConfig | None = None) -> ClusterSnapshot:
    """The core's snapshot of ``world`` as a pass's reclaims see it before deciding."""
    return live_view(world, config, allocating=False).snapshot


@dataclass(frozen=True)
class LiveView:
    """The cluster as a pass sees it before deciding (``lyra plan --from-cluster``): the core's snapshot, the GPUs held
    on each server by work outside its jobs (inference replicas, other GPU pods, leaving workers, the free GPUs of a
    cordoned or unhealthy node; servers with none left out), the cordoned and the unhealthy servers (NotReady, not
    heard from, GPUs gone or misread, within the grace: a lost one is in no plan), and the servers inference needs
    now per GPU type, as the pass sizes the InferenceServices (every inference GPU type named, 0 if none). A
    cordoned inference server the loan cycle leaves out (it serves no replica) is ``idle`` in it, or ``loaned`` if
    lent: never ``serving``; one it leaves out because pods Lyra does not manage hold its GPUs is not in it. Each
    idle server of the loan cycle has been idle for ``idle_seconds`` (from its ``idle-since`` annotation; 0 without
    one, as the cycle takes it to be idle from this pass on)."""

    snapshot: ClusterSnapshot
    held: dict[str, int]
    cordoned: frozenset[str]
    demand: dict[str, int]
    unhealthy: frozenset[str]
    idle_seconds: dict[str, float]


def live_view(world: World, config: OperatorConfig | None = None, *, allocating: bool) -> LiveView:
    """:class:`LiveView` of ``world``. ``allocating``: the allocation's view (a job whose workers are still leaving
    left out, its GPUs held), else the reclaims' (every job where it runs)."""
    config = config or OperatorConfig()
    config = replace(config, gpus=observed_gpus(world, config.gpus)[0])
    changes = Changes(world.now)
    jobs = JobBook(world, config, changes)
    loans = LoanBook(world, config, changes, jobs, {})
    snapshot, held, _ = jobs.snapshot(loans.states, allocating=allocating)
    cordoned = frozenset(n.name for n in world.nodes if n.unschedulable) & {s.name for s in snapshot.servers}
    out_of_cycle = {
        s.name
        for s in snapshot.servers
        if s.name in cordoned and s.state is LoanState.SERVING and s.name not in loans.states
    }
    if out_of_cycle:  # it serves nothing: idle, not room for inference (the operator does not count it either)
        servers = tuple(replace(s, state=LoanState.IDLE) if s.name in out_of_cycle else s for s in snapshot.servers)
        snapshot = replace(snapshot, servers=servers)
    # The other inference servers the loan cycle leaves out (pods Lyra does not manage hold their GPUs, and they run
    # no replica) are neither room for inference, nor lent, nor reclaimed, and take no training work: left out here
    # too, unless a job's workers are still on one.
    placed = {where for job in snapshot.jobs for where in job.placement}
    foreign = {
        s.name
        for s in snapshot.servers
        if s.state is LoanState.SERVING
        and s.name not in loans.states
        and s.name not in cordoned
        and s.name not in placed
        and loans.others_on.get(s.name)
    }
    if foreign:
        snapshot = replace(snapshot, servers=tuple(s for s in snapshot.servers if s.name not in foreign))
        held = {name: gpus for name, gpus in held.items() if name not in foreign}
    services = ServiceBook(world, changes, scheduler_name=config.scheduler_name, caps=config.inference_gpu_caps)
    unhealthy = frozenset(jobs.training.unhealthy_nodes) & {s.name for s in snapshot.servers}
    held = {name: gpus for name, gpus in held.items() if gpus}
    shown = {s.name for s in snapshot.servers if s.state is LoanState.IDLE}
    idle_seconds = {
        s.name: max(world.now - s.idle_since, 0.0) if s.idle_since is not None else 0.0
        for s in loans.servers
        if s.state is LoanState.IDLE and s.name in shown
    }
    return LiveView(snapshot, held, cordoned, services.plan(), unhealthy, idle_seconds)
