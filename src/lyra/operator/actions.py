"""What one decision asks of the API: frozen actions, in the order :mod:`lyra.operator.commit` applies them.

The order is what makes a crash at any point harmless (docs/architecture.md, "Restarts"): nodes change state
(label and taint together) before pods are placed on or taken off them; a job's status (its intent: phase, target
workers, planned placement) is written before its pods are created or deleted, so the next pass completes whatever
a crash interrupted; a job's headless Service exists before the workers whose DNS names it gives; Events come
last. An inference replica's deletion cost is written before its Deployment is scaled, so a scale-down in the same
pass deletes by it. A service's PodDisruptionBudget is applied after its Deployment. Every action is idempotent:
creating what exists or deleting what is gone is success.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lyra.api.objects import Taint
from lyra.core.model import LoanState
from lyra.operator.world import ObjectRef


@dataclass(frozen=True, slots=True)
class SetNodeState:
    """Label, taint and annotations of an inference node, written together (they always agree)."""

    node: str
    state: LoanState
    taints: tuple[Taint, ...]
    annotations: Mapping[str, str | None]
    resource_version: str
    reason: str


@dataclass(frozen=True, slots=True)
class PatchStatus:
    """A merge patch of a custom resource's status subresource."""

    ref: ObjectRef
    status: Mapping[str, Any]
    changed: tuple[str, ...] = ()  # the status fields that differ from what was read (for reports)


@dataclass(frozen=True, slots=True)
class DeletePod:
    """``owner``: the job or service the pod belongs to (``None``: nobody's); ``node``: where it runs ("" unbound).
    Both say which failures the deletion waits for (:mod:`lyra.operator.isolation`)."""

    ref: ObjectRef
    grace_seconds: int
    reason: str
    owner: ObjectRef | None = None
    node: str = ""


@dataclass(frozen=True, slots=True)
class SetPodRole:
    """Workers are interchangeable: after a scale-in the lowest-indexed live workers carry the base role. The job
    label (``owner``'s name) is written with the role, so a worker whose labels a tenant edited gets them back."""

    ref: ObjectRef
    role: str
    owner: ObjectRef | None = None
    node: str = ""


@dataclass(frozen=True, slots=True)
class SetDeletionCost:
    """An inference replica's ``controller.kubernetes.io/pod-deletion-cost``: which of its service's replicas a
    scale-down of the Deployment deletes first (:mod:`lyra.operator.services`). ``owner``: the service."""

    ref: ObjectRef
    cost: int
    owner: ObjectRef | None = None
    node: str = ""


@dataclass(frozen=True, slots=True)
class CreateService:
    """A TrainingJob's headless Service (:func:`lyra.operator.manifests.rendezvous_service`), made with every batch of
    its workers: one that exists is left as it is, one deleted by hand comes back with the next worker."""

    ref: ObjectRef
    manifest: Mapping[str, Any]
    owner: ObjectRef


@dataclass(frozen=True, slots=True)
class CreatePod:
    """``node``: the node the allocation planned for the pod ("" none)."""

    ref: ObjectRef
    manifest: Mapping[str, Any]
    owner: ObjectRef | None = None
    node: str = ""


@dataclass(frozen=True, slots=True)
class ApplyDeployment:
    """Create an InferenceService's Deployment (``create``), or bring the existing one to ``manifest``: its replicas,
    and with ``roll`` its pod template and template hash too (the Deployment then rolls its replicas), written over
    the Deployment's ``resource_version`` as the pass read it (refused if it changed since)."""

    ref: ObjectRef
    manifest: Mapping[str, Any]
    create: bool
    roll: bool = False
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class ApplyDisruptionBudget:
    """Bring an InferenceService's PodDisruptionBudget (``ref``, named after it) to ``manifest`` (server-side apply:
    created if missing, the operator's fields forced), or delete it (``manifest`` ``None``); ``max_unavailable`` is
    the value applied ("" for none). Its own subject: a budget the API refuses holds back neither the service's
    replicas nor its status."""

    ref: ObjectRef
    manifest: Mapping[str, Any] | None
    max_unavailable: str


@dataclass(frozen=True, slots=True)
class Emit:
    """A Kubernetes Event on ``ref`` (type Normal or Warning)."""

    ref: ObjectRef
    type: str
    reason: str
    message: str


Action = (
    SetNodeState
    | PatchStatus
    | DeletePod
    | SetPodRole
    | SetDeletionCost
    | CreateService
    | CreatePod
    | ApplyDeployment
    | ApplyDisruptionBudget
    | Emit
)

#: The order of application (see the module docstring).
ACTION_ORDER: tuple[type, ...] = (
    SetNodeState,
    PatchStatus,
    DeletePod,
    SetPodRole,
    SetDeletionCost,
    CreateService,
    CreatePod,
    ApplyDeployment,
    ApplyDisruptionBudget,
    Emit,
)


@dataclass(frozen=True, slots=True)
class ReclaimReport:
    """A reclaim the loan cycle starts for one GPU type: its servers, the jobs it preempts and scales in (workers lost
    per job), and the GPU-seconds of training work it costs."""

    servers: tuple[str, ...]
    preempted: tuple[str, ...]
    scaled_in: Mapping[str, int]
    lost_gpu_seconds: float

    def as_json(self) -> dict[str, Any]:
        return {
            "servers": list(self.servers),
            "preempted": list(self.preempted),
            "scaled_in": dict(self.scaled_in),
            "lost_gpu_seconds": round(self.lost_gpu_seconds, 1),
        }


@dataclass(frozen=True, slots=True)
class LoanReport:
    """One GPU type's balance: the servers inference needs and holds, those lent, the shortfall, the reclaim."""

    needed: int
    held: int
    lend: tuple[str, ...] = ()
    shortfall: int = 0
    reclaim: ReclaimReport | None = None

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"needed": self.needed, "held": self.held}
        if self.lend:
            entry["lend"] = list(self.lend)
        if self.shortfall:
            entry["shortfall"] = self.shortfall
        if self.reclaim is not None:
            entry["reclaim"] = self.reclaim.as_json()
        return entry


@dataclass(frozen=True, slots=True)
class AllocationReport:
    """The allocation of the pass: workers per job, the jobs it starts and resizes, why the others wait."""

    workers: Mapping[str, int]
    started: tuple[str, ...]
    resized: tuple[str, ...]
    queued: Mapping[str, str]
    gpus_used: int
    capacity_gpus: int
    fluid_average_jct_s: float

    def as_json(self) -> dict[str, Any]:
        return {
            "workers": dict(self.workers),
            "started": list(self.started),
            "resized": list(self.resized),
            "queued": dict(self.queued),
            "gpus_used": self.gpus_used,
            "capacity_gpus": self.capacity_gpus,
            "fluid_average_jct_s": round(self.fluid_average_jct_s, 1),
        }


@dataclass(frozen=True, slots=True)
class ReclaimWaitReport:
    """A service whose replicas all run again, and how long they waited for a reclaim of its GPU type."""

    service: str
    gpu_type: str
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {"service": self.service, "gpu_type": self.gpu_type, "seconds": self.seconds}


@dataclass(frozen=True, slots=True)
class PassReport:
    """What one pass planned, beside its actions (for the metrics, the logs and ``--dry-run``). ``loans`` per GPU type,
    or ``loans_error`` when the loan cycle could not be planned; ``allocation`` when the pass allocated (it waits for
    a settled cluster), or ``allocation_error``; ``left_out``: jobs the allocation leaves out and why; ``preempted``:
    each job the pass re-queues from Running and the cause (a ``PREEMPTED_*`` of :mod:`lyra.operator.jobs`);
    ``disrupted``: each job the pass scales in by workers Kubernetes took (evicted or disrupted, or gone from a node
    that takes no new work), per GPU type: no deletion of Lyra's counts them."""

    inference_servers_needed: Mapping[str, int] = field(default_factory=dict)
    loans: Mapping[str, LoanReport] = field(default_factory=dict)
    loans_error: str | None = None
    allocation: AllocationReport | None = None
    allocation_error: str | None = None
    left_out: Mapping[str, str] = field(default_factory=dict)
    preempted: Mapping[str, str] = field(default_factory=dict)
    disrupted: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    reclaim_waits: tuple[ReclaimWaitReport, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The report as JSON, in the order the pass plans (inference, allocation, loans); empty entries left out, a
        loan cycle's error under ``loans`` as ``error``."""
        loans: dict[str, Any] = {t: loan.as_json() for t, loan in self.loans.items()}
        if self.loans_error is not None:
            loans["error"] = self.loans_error
        report: dict[str, Any] = {"inference_servers_needed": dict(self.inference_servers_needed)}
        if self.preempted:
            report["preempted"] = dict(self.preempted)
        if self.disrupted:
            report["disrupted"] = {job: dict(types) for job, types in self.disrupted.items()}
        if self.reclaim_waits:
            report["reclaim_waits"] = [wait.as_json() for wait in self.reclaim_waits]
        if self.left_out:
            report["left_out"] = dict(self.left_out)
        if self.allocation is not None:
            report["allocation"] = self.allocation.as_json()
        if self.allocation_error is not None:
            report["allocation_error"] = self.allocation_error
        report["loans"] = loans
        return report


@dataclass(frozen=True, slots=True)
class Decision:
    """The actions of one pass, in application order, and the report of the plans behind them (for the metrics, the
    logs and ``--dry-run``)."""

    actions: tuple[Action, ...]
    report: PassReport = field(default_factory=PassReport)

    @property
    def is_noop(self) -> bool:
        return not self.actions

    def of(self, kind: type) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if isinstance(a, kind))
