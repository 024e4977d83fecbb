"""The condition types and reasons Lyra writes, spelled once.

A reason names what happened in three places: the ``reason`` of a status condition, the ``reason`` of an Event
(``kubectl get events``), and why the operator deleted a pod (its log and metrics). Many reasons serve more than one
of these; each is listed once under the object it concerns. Kubernetes' own conditions and reasons (a node's
``Ready``, a pod's ``DisruptionTarget``) are in :mod:`lyra.api.names`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

# Condition types.
#: A TrainingJob's: True while its workers run; False with the reason it waits, stopped or failed.
RUNNING: Final = "Running"
#: An InferenceService's: True while all its replicas are ready.
READY: Final = "Ready"
#: Whether the API took the operator's last writes for an object (jobs and services; absent until a write fails).
APPLIED: Final = "Applied"
#: An InferenceService's: whether its namespace's cap on inference GPUs cut its replicas (absent where no cap applies).
CAPPED: Final = "Capped"
#: A TrainingJob's: its spec.priority is above its namespace's bound (--max-priority), which orders it (absent if not).
PRIORITY_BOUNDED: Final = "PriorityBounded"
#: An InferenceService's that asks for a PodDisruptionBudget (spec.disruptionBudget): True while the budget is the one
#: asked for; False while it is being applied or waits for one being deleted (absent for a service that asks for none).
#: Also the reason of the Event on the budget each time it is applied with another maxUnavailable, or deleted.
DISRUPTION_BUDGET: Final = "DisruptionBudget"

# Reasons on TrainingJobs (conditions and Events) and on the deletion of their workers.
QUEUED: Final = "Queued"
TOO_LARGE: Final = "TooLarge"
STARTED: Final = "Started"
RESIZED: Final = "Resized"
PREEMPTED: Final = "Preempted"
#: A flexible worker's deletion (and the job's Event) when its job is scaled in.
SCALED_IN: Final = "ScaledIn"
WORKER_FAILED: Final = "WorkerFailed"
COMPLETED: Final = "Completed"
GANG_TIMEOUT: Final = "GangTimeout"
#: The health rules: base workers that do not run in time, workers Kubernetes disrupted, pods of an earlier run.
START_TIMEOUT: Final = "StartTimeout"
DISRUPTED: Final = "Disrupted"
STALE_RUN: Final = "StaleRun"
#: Pod deletions only: the workers of a finished job, of a re-queued job, a flexible worker that found no node.
JOB_FINISHED: Final = "JobFinished"
REQUEUED: Final = "Requeued"
FLEXIBLE_WORKER_UNPLACED: Final = "FlexibleWorkerUnplaced"
#: A job ordered at its namespace's priority bound rather than its own spec.priority.
NAMESPACE_BOUND: Final = "NamespaceBound"
#: A job or service whose spec cannot be read or built (condition False, Warning Event; a job fails).
INVALID_SPEC: Final = "InvalidSpec"

# Reasons on InferenceServices.
NO_SERVERS: Final = "NoServers"
REPLICAS_READY: Final = "ReplicasReady"
REPLICAS_PENDING: Final = "ReplicasPending"
NAMESPACE_CAP: Final = "NamespaceCap"
WITHIN_CAP: Final = "WithinCap"
SCALED: Final = "Scaled"
#: The service's rendered pod template changed (its template, gpuType, or what the operator derives): the Deployment's
#: template is written and the Deployment rolls the replicas.
TEMPLATE_CHANGED: Final = "TemplateChanged"
#: The ``DisruptionBudget`` condition's: the budget is the one asked for; the operator is applying it (missing or
#: different); the one found is being deleted and the operator applies the one asked for once it is gone (a Warning
#: Event when finalizers other than Kubernetes' own hold it).
BUDGET_IN_PLACE: Final = "BudgetInPlace"
BUDGET_APPLYING: Final = "BudgetApplying"
BUDGET_BEING_DELETED: Final = "BudgetBeingDeleted"
#: Every replica that needed a reclaim's servers runs (the Event says how long they waited).
RECLAIM_SERVED: Final = "ReclaimServed"

# Reasons on inference nodes (Events; the pods a forced reclaim deletes).
RECLAIMING: Final = "Reclaiming"
RETURNED: Final = "Returned"
RECLAIM_FORCED: Final = "ReclaimForced"
#: The deletion of training pods on a reclaimed node whose job is neither scaled in nor preempted (not running).
RECLAIMED: Final = "Reclaimed"
#: A node the operator could not read and leaves out of its pass.
LEFT_OUT: Final = "LeftOut"
#: A node whose reading is malformed (no whole number of GPUs, no GPU type), held as unhealthy.
MISREAD: Final = "Misread"

# Reasons on any object the operator writes: the API refused a write (Warning Event), and the ``Applied`` condition
# True again once writes go through.
APPLY_FAILED: Final = "ApplyFailed"
WRITES_APPLIED: Final = "Applied"


class PreemptionCause(StrEnum):
    """Why a pass preempts a TrainingJob (stops and re-queues it from Running): the one closed set that the
    operator's report, its Events and the ``reason`` label of ``lyra_preemptions_total`` read. Every member is
    exported at zero from the operator's start, so the first preemption of each kind is visible to ``rate()``."""

    #: Its servers were reclaimed for inference and its base could not be kept.
    RECLAIM = "reclaim"
    #: The allocation gave its GPUs to other jobs.
    ALLOCATION = "allocation"
    #: It lost base workers (a worker failed or vanished) and was re-queued.
    LOST_BASE = "lost_base"
    #: Its workers were on a node the health rules declared lost.
    NODE_LOST = "node_lost"
    #: Kubernetes evicted or disrupted its workers.
    DISRUPTION = "disruption"
