"""metav1.Condition bookkeeping: a condition's transition time moves only when its status changes."""

from __future__ import annotations

from typing import Protocol, Self, TypeVar

from lyra.api.conditions import APPLIED, WRITES_APPLIED
from lyra.api.resources import Condition, ConditionStatus
from lyra.operator.isolation import Failure
from lyra.operator.timestamps import format_time


class _WithConditions(Protocol):
    @property
    def conditions(self) -> list[Condition]: ...

    def model_copy(self, *, update: dict[str, object] | None = None, deep: bool = False) -> Self: ...


S = TypeVar("S", bound=_WithConditions)


def set_condition(status: S, kind: str, true: bool, reason: str, message: str, *, now: float, generation: int) -> S:
    """``status`` with the condition ``kind`` set (others kept, sorted by type)."""
    value = ConditionStatus.TRUE if true else ConditionStatus.FALSE
    old = next((c for c in status.conditions if c.type == kind), None)
    since = old.last_transition_time if old is not None and old.status is value else format_time(now)
    condition = Condition(
        type=kind,
        status=value,
        reason=reason,
        message=message[:32768],
        last_transition_time=since,
        observed_generation=generation,
    )
    if old == condition:
        return status
    others = [c for c in status.conditions if c.type != kind]
    return status.model_copy(update={"conditions": sorted([*others, condition], key=lambda c: c.type)})


def set_applied(status: S, failure: Failure | None, *, now: float, generation: int) -> S:
    """``status`` with the ``Applied`` condition: False with the API's reason while the object's writes fail; True
    again once they go through. An object that never failed carries no such condition."""
    if failure is not None:
        return set_condition(status, APPLIED, False, failure.reason, failure.message, now=now, generation=generation)
    if any(c.type == APPLIED and c.status is not ConditionStatus.TRUE for c in status.conditions):
        return set_condition(
            status,
            APPLIED,
            True,
            WRITES_APPLIED,
            "the operator's writes go through again",
            now=now,
            generation=generation,
        )
    return status
