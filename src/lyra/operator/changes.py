"""What a pass has decided so far: the actions, the pods it deletes, and a summary of its plans."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from lyra.api.resources import wire
from lyra.operator.actions import Action, DeletePod, Emit
from lyra.operator.observe import ObjectRef, PodRecord


class Changes:
    def __init__(self, now: float) -> None:
        self.now = now
        self.actions: list[Action] = []
        self.deleted: set[str] = set()
        self.summary: dict[str, Any] = {}

    def emit(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        self.actions.append(Emit(ref, "Warning" if warning else "Normal", reason, message))

    def delete(self, pod: PodRecord, grace: int, reason: str) -> None:
        """Delete ``pod`` once per pass; a pod already terminating is deleted again only to force it (grace 0)."""
        if pod.ref.key in self.deleted or (pod.terminating and grace > 0):
            return
        self.deleted.add(pod.ref.key)
        self.actions.append(DeletePod(pod.ref, grace, reason))

    def deletes(self) -> bool:
        return any(isinstance(a, DeletePod) for a in self.actions)


def changed_fields(before: BaseModel, after: BaseModel) -> tuple[str, ...]:
    """The wire names of the fields that differ between two statuses (for reports)."""
    old, new = wire(before), wire(after)
    return tuple(sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)))
