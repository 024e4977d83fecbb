"""What the training side of a pass shares: each TrainingJob of the pass with the status it will leave it with
(:class:`JobState`), the core's model of each, the nodes' health as the jobs see it, and the jobs whose specs the
core refuses. The parts that act on it, one responsibility each: :mod:`lyra.operator.job_work` (work accounting),
:mod:`lyra.operator.job_life` (a job's life), :mod:`lyra.operator.job_intent` (the allocation's intent) and
:mod:`lyra.operator.worker_pods` (pods made to match the intent); :class:`lyra.operator.jobs.JobBook` runs them."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from lyra.api import conditions
from lyra.api.resources import JobPhase, TrainingJobStatus, WorkerCounts, wire
from lyra.core.model import TrainingJob
from lyra.operator.actions import PatchStatus
from lyra.operator.changes import Changes, changed_fields
from lyra.operator.conditions import set_applied, set_condition
from lyra.operator.config import OperatorConfig
from lyra.operator.isolation import key_of
from lyra.operator.timestamps import format_time
from lyra.operator.world import JobRecord, PodRecord, World

FINISHED_PHASES = (JobPhase.SUCCEEDED, JobPhase.FAILED)
#: A worker's name (:func:`lyra.operator.manifests.worker_name`): its job's name and index.
_WORKER_NAME = re.compile(r"(.+)-w(\d+)")

#: Why a pass preempts a job, by the names the training side uses (:class:`lyra.api.conditions.PreemptionCause`
#: is the one enumeration; the report's ``preempted`` names its member).
PREEMPTED_BY_RECLAIM = conditions.PreemptionCause.RECLAIM
PREEMPTED_BY_ALLOCATION = conditions.PreemptionCause.ALLOCATION
PREEMPTED_LOST_BASE = conditions.PreemptionCause.LOST_BASE
PREEMPTED_NODE_LOST = conditions.PreemptionCause.NODE_LOST
PREEMPTED_BY_DISRUPTION = conditions.PreemptionCause.DISRUPTION


@dataclass(slots=True)
class JobState:
    """A job during the pass: its record, its pods, the status this pass will leave it with, and what the parts of
    the training side read about it, worked out once when the pass starts (its pods and the nodes' health do not
    change during a pass), so that no part calls back into the pass for them."""

    record: JobRecord
    pods: tuple[PodRecord, ...]
    status: TrainingJobStatus
    #: ``namespace/name``.
    key: str
    #: The pods that count as its workers (not terminating, not finished), and those of them bound to a node.
    live: tuple[PodRecord, ...]
    bound_live: tuple[PodRecord, ...]
    #: A worker has completed (:attr:`PodRecord.completed`): the job is ending (the others follow); it is neither
    #: resized nor restarted.
    finishing: bool
    #: Its live workers on lost or gone nodes, each with why the node is out (:meth:`TrainingPass.node_lost`).
    on_lost_nodes: tuple[tuple[PodRecord, str], ...]
    #: A bound worker is on a node nothing says the size of (:attr:`TrainingPass.unknown_nodes`).
    on_unknown_node: bool
    #: Workers of it are still terminating on a healthy node (a cordoned one included: its kubelet ends them): the
    #: allocation leaves the job as it is (not started, resized or preempted by it) until they are gone. Pods stuck
    #: terminating on an unhealthy node (its kubelet cannot confirm) do not hold it: that node takes no new work
    #: anyway, and its GPUs stay counted as held.
    leaving: bool
    #: The API refused its writes and its retry is not due yet (:mod:`lyra.operator.isolation`).
    held_back: bool

    def update(self, **changes: Any) -> None:
        self.status = self.status.model_copy(update=changes)


class TrainingPass:
    """The jobs of one pass and what every part of the training side reads (see the module docstring)."""

    def __init__(self, world: World, config: OperatorConfig, changes: Changes) -> None:
        self.world = world
        self.config = config
        self.changes = changes
        now = changes.now
        #: Nodes in no plan: lost (unhealthy past the grace), and gone ones (neither read nor left out as unreadable).
        self.lost_nodes = {n.name: n.health for n in world.nodes if n.lost(now, config.node_grace_s)}
        #: Unhealthy nodes, with why: their kubelets may not confirm that a pod has ended.
        self.unhealthy_nodes = {n.name: n.health for n in world.nodes if not n.healthy}
        #: Nodes whose reading is malformed and that this operator never read well: in no plan, and their workers
        #: kept, until they read well or the grace has passed (then they are lost).
        self.unknown_nodes: set[str] = set()
        for misread in world.misread:
            if misread.held:
                continue  # in world.nodes with its last good reading, unhealthy
            self.unhealthy_nodes[misread.ref.name] = misread.why
            if misread.lost(now, config.node_grace_s):
                self.lost_nodes[misread.ref.name] = misread.why
            else:
                self.unknown_nodes.add(misread.ref.name)
        #: Nodes that take no new work, with why: every unhealthy one, and every cordoned one (``kubectl cordon``, or
        #: ``drain``: kube-scheduler places nothing there, so a plan that counted its free GPUs would leave a gang
        #: pending). Their workers stay; their free GPUs are held.
        self.closed_nodes = {
            **{n.name: "cordoned" for n in world.nodes if n.unschedulable},
            **self.unhealthy_nodes,
        }
        self.known_nodes = (
            {n.name for n in world.nodes}
            | {u.ref.name for u in world.unreadable if u.ref.kind == "Node"}
            | {m.ref.name for m in world.misread}
        )
        self.jobs = {
            j.ref.key: self.job_state(j, world.pods_of(j.ref.key))
            for j in world.jobs
            if not (j.status.phase in FINISHED_PHASES and not any(p.is_live for p in world.pods_of(j.ref.key)))
            and not j.deleting  # the garbage collector removes (or orphans) its pods; nothing is decided for it
        }
        self.refused: list[JobState] = []
        #: Worker indices whose names are still taken by pods that are not the job's (an earlier run's, or any pod
        #: of that name Lyra does not manage, such as a worker orphaned by a deletion): not reused meanwhile.
        self.stale_indices: dict[str, set[int]] = defaultdict(set)
        for pod in world.stale:
            if pod.owner is not None and pod.index is not None:
                self.stale_indices[pod.owner].add(pod.index)
        for pod in world.pods:
            named = _WORKER_NAME.fullmatch(pod.ref.name) if pod.owner is None else None
            if named is not None and f"{pod.ref.namespace}/{named[1]}" in self.jobs:
                self.stale_indices[f"{pod.ref.namespace}/{named[1]}"].add(int(named[2]))
        #: Each job as the core models it (read with its object: :attr:`JobRecord.model`).
        self.models: dict[str, TrainingJob] = {}
        for key, job in list(self.jobs.items()):
            if job.record.model is None or job.record.refusal:
                del self.jobs[key]
                self.refuse(job, job.record.refusal)
            else:
                model = self.bounded(job, job.record.model)
                if not self.config.elasticity and model.max_workers > model.min_workers:
                    model = replace(model, max_workers=model.min_workers)  # --elasticity off: the base gang only
                self.models[key] = model

    def job_state(self, record: JobRecord, pods: tuple[PodRecord, ...]) -> JobState:
        """The job as the pass starts with it, with what the parts read about it worked out (:class:`JobState`)."""
        live = tuple(p for p in pods if p.is_live)
        bound_live = tuple(p for p in live if p.node)
        on_lost = tuple((p, why) for p in bound_live if (why := self.node_lost(p.node)) is not None)
        failure = self.changes.failures.get(key_of(record.ref))
        return JobState(
            record,
            pods,
            record.status,
            key=record.ref.key,
            live=live,
            bound_live=bound_live,
            finishing=any(p.completed for p in pods),
            on_lost_nodes=on_lost,
            on_unknown_node=any(p.node in self.unknown_nodes for p in bound_live),
            leaving=any(p.terminating and p.holds_gpus and self.confirms_exits(p.node) for p in pods),
            held_back=failure is not None and self.changes.now < failure.retry_at,
        )

    def bounded(self, job: JobState, model: TrainingJob) -> TrainingJob:
        """The job as the queue orders it: at most its namespace's priority bound (``--max-priority``), and the
        ``PriorityBounded`` condition saying so (removed once it no longer applies)."""
        bound = self.config.priority_bounds.bound_of(job.record.ref.namespace)
        if bound is None or model.priority <= bound:
            if any(c.type == conditions.PRIORITY_BOUNDED for c in job.status.conditions):
                job.update(conditions=[c for c in job.status.conditions if c.type != conditions.PRIORITY_BOUNDED])
            return model
        job.status = set_condition(
            job.status,
            conditions.PRIORITY_BOUNDED,
            True,
            conditions.NAMESPACE_BOUND,
            f"spec.priority {model.priority} is above {bound}, the highest namespace {job.record.ref.namespace} may "
            f"use (--max-priority): the queue orders the job at {bound}",
            now=self.changes.now,
            generation=job.record.generation,
        )
        return replace(model, priority=bound)

    def refuse(self, job: JobState, message: str) -> None:
        """Fail a job whose spec the core cannot run (its pace cannot be computed either), and stop its workers."""
        for pod in job.live:
            self.changes.delete(pod, job.record.spec.preemption.grace_period_seconds, conditions.INVALID_SPEC)
        job.update(
            phase=JobPhase.FAILED, workers=WorkerCounts(), placements={}, finished_at=format_time(self.changes.now)
        )
        job.status = set_condition(
            job.status,
            conditions.RUNNING,
            False,
            conditions.INVALID_SPEC,
            message,
            now=self.changes.now,
            generation=job.record.generation,
        )
        self.changes.emit(job.record.ref, conditions.INVALID_SPEC, message, warning=True)
        self.refused.append(job)

    def drop(self, job: JobState, message: str) -> None:
        """Take ``job`` out of the rest of the pass and fail it alone (``InvalidSpec``, ``message`` its error)."""
        self.jobs.pop(job.key, None)
        self.models.pop(job.key, None)
        self.refuse(job, message)

    def confirms_exits(self, node: str) -> bool:
        """Whether a pod leaving ``node`` will be seen gone: the node is known and healthy (a cordoned node's kubelet
        still ends its pods)."""
        return node in self.known_nodes and node not in self.unhealthy_nodes

    def node_lost(self, node: str) -> str | None:
        """Why the workers on ``node`` are gone (it is lost, or deleted), or ``None``."""
        if node in self.lost_nodes:
            return f"node {node} lost ({self.lost_nodes[node]}, past the {self.config.node_grace_s:g} s grace)"
        if node and node not in self.known_nodes:
            return f"node {node} is gone"
        return None

    def write_status(self, job: JobState) -> None:
        status = job.status.model_copy(update={"observed_generation": job.record.generation})
        failure = self.changes.failures.get(key_of(job.record.ref))
        status = set_applied(status, failure, now=self.changes.now, generation=job.record.generation)
        if status != job.record.status:
            written = wire(status)
            self.changes.actions.append(
                PatchStatus(job.record.ref, written, changed_fields(job.record.status, written))
            )
