"""What a pass has decided so far: the actions, the pods it deletes, and the report of its plans."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from lyra.api import names
from lyra.api.resources import wire
from lyra.core.placement import PodRole
from lyra.operator.actions import Action, DeletePod, Emit, PassReport
from lyra.operator.isolation import Failure, key_of
from lyra.operator.world import ObjectRef, PodRecord


class Changes:
    """``failures``: the objects whose last writes the API refused (by :func:`lyra.operator.isolation.key_of`), which
    the statuses this pass writes report in their ``Applied`` condition."""

    def __init__(
        self, now: float, failures: Mapping[str, Failure] | None = None, owners: Iterable[ObjectRef] = ()
    ) -> None:
        self.now = now
        self.actions: list[Action] = []
        self.deleted: set[str] = set()
        self._deleted_in_order: list[str] = []  # what :meth:`undo` takes back from ``deleted``
        #: The report of the pass so far (each part replaced as the pass goes).
        self.report = PassReport()
        self.failures: Mapping[str, Failure] = failures or {}
        #: The jobs and services read (with their UIDs, which Events need), by key.
        self.owners = {key_of(ref): ref for ref in owners}

    def mark(self) -> tuple[int, int]:
        """Where the decision stands, to :meth:`undo` back to when deciding about one object fails."""
        return len(self.actions), len(self._deleted_in_order)

    def undo(self, mark: tuple[int, int]) -> None:
        actions, deleted = mark
        del self.actions[actions:]
        self.deleted.difference_update(self._deleted_in_order[deleted:])
        del self._deleted_in_order[deleted:]

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        self.actions.append(Emit(ref, "Warning" if warning else "Normal", reason, message))

    def delete(self, pod: PodRecord, grace: int, reason: str) -> None:
        """Delete ``pod`` once per pass; a pod already terminating is deleted again only to force it (grace 0)."""
        if pod.ref.key in self.deleted or (pod.terminating and grace > 0):
            return
        self.deleted.add(pod.ref.key)
        self._deleted_in_order.append(pod.ref.key)
        owner = owner_of(pod)
        if owner is not None:
            owner = self.owners.get(key_of(owner), owner)
        self.actions.append(DeletePod(pod.ref, grace, reason, owner, pod.node))

    def deletes(self) -> bool:
        return any(isinstance(a, DeletePod) for a in self.actions)


def changed_fields(before: BaseModel, after: BaseModel | Mapping[str, Any]) -> tuple[str, ...]:
    """The wire names of the fields that differ between two statuses (for reports); ``after`` may be given as
    :func:`~lyra.api.resources.wire` made it already."""
    old, new = wire(before), after if isinstance(after, Mapping) else wire(after)
    return tuple(sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)))


def owner_of(pod: PodRecord) -> ObjectRef | None:
    """The job or service a pod belongs to, or ``None`` for a pod that is nobody's."""
    if pod.owner is None:
        return None
    namespace, _, name = pod.owner.partition("/")
    kind = names.INFERENCE_SERVICE_KIND if pod.role is PodRole.INFERENCE else names.TRAINING_JOB_KIND
    return ObjectRef(kind, namespace, name)
