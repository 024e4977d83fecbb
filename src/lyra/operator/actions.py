"""What one decision asks of the API: frozen actions, in the order :mod:`lyra.operator.commit` applies them.

The order is what makes a crash at any point harmless (docs/architecture.md, "Restarts"): nodes change state
(label and taint together) before pods are placed on or taken off them; a job's status (its intent: phase, target
workers, planned placement) is written before its pods are created or deleted, so the next pass completes whatever
a crash interrupted; a job's headless Service exists before the workers whose DNS names it gives; Events come
last. Every action is idempotent: creating what exists or deleting what is gone is success.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lyra.api.objects import Taint
from lyra.core.model import LoanState
from lyra.operator.observe import ObjectRef


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
    """Workers are interchangeable: after a scale-in the lowest-indexed live workers carry the base role."""

    ref: ObjectRef
    role: str
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
    """Create an InferenceService's Deployment, or set its replicas (``create`` False)."""

    ref: ObjectRef
    manifest: Mapping[str, Any]
    create: bool


@dataclass(frozen=True, slots=True)
class Emit:
    """A Kubernetes Event on ``ref`` (type Normal or Warning)."""

    ref: ObjectRef
    type: str
    reason: str
    message: str


Action = SetNodeState | PatchStatus | DeletePod | SetPodRole | CreateService | CreatePod | ApplyDeployment | Emit

#: The order of application (see the module docstring).
ACTION_ORDER: tuple[type, ...] = (
    SetNodeState,
    PatchStatus,
    DeletePod,
    SetPodRole,
    CreateService,
    CreatePod,
    ApplyDeployment,
    Emit,
)


@dataclass(frozen=True, slots=True)
class Decision:
    """The actions of one pass, in application order, and a summary of the plans behind them (for logs, Events and
    ``--dry-run``)."""

    actions: tuple[Action, ...]
    summary: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_noop(self) -> bool:
        return not self.actions

    def of(self, kind: type) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if isinstance(a, kind))
