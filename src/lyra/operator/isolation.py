"""Isolation per object: which object each action belongs to, what it must wait for, and the backoff of objects whose
writes the API refuses.

Every action has a *subject*, the object a failure is reported on: a node for its state; a TrainingJob or
InferenceService for its status, its Deployment, a job's Service and its pods' deletions, role labels and
creations; a pod that no job or service owns for itself; a service's PodDisruptionBudget for itself (a refused
budget holds back neither the replicas nor the status). :mod:`lyra.operator.commit` applies a decision object by
object: when the API refuses
one action (a ResourceQuota's 403, an admission webhook's denial, a 422, a 500, a namespace being deleted), that
subject's later actions in the pass are skipped and every other subject's actions still go through. Only two orders
are kept across subjects, the ones a crash needs (:mod:`lyra.operator.actions`): a pod's change waits for its node's
state (a node is tainted before its pods go) and for its owner's status (a job's intent is written before its pods
change). A pod action whose node or owner failed in the pass, or is held back, is skipped.

A subject whose write failed is held back with exponential backoff (10 s, doubling, at most 5 min): its changes are
not retried every pass. A server error (500, 502, 503, 504: etcd timed out, the server is overloaded or starting)
says nothing about the object and is retried sooner (1 s, doubling, at most 30 s): a job whose status write failed
holds its pods back, those of a reclaim included, and 10 s of backoff after each of a few transient errors in a row
kept servers from inference past the reclaim deadline (tests/integration/test_api_faults.py). What is held depends
on what failed: after a failed status write, everything of the object; after a failed change (a pod, a Deployment,
a node's state), only its changes, so its status still says why (the ``Applied`` condition, written by the next
decision). A conflict (409 on a node whose resourceVersion moved) and an
object that is gone (404) are not failures of the object: the pass skips its dependants and the next one reads afresh.

The backoff is kept in the memory of the running operator, not in status. A restart or a new leader retries each
failing object once, which costs one refused call per object; keeping it in status would cost a status write per
failure, and the failing objects are the ones whose writes the API may refuse (a namespace being deleted refuses
them all). Durable state stays where a crash needs it: node labels, statuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Protocol, TypeVar

from lyra.api import names
from lyra.operator.actions import (
    Action,
    ApplyDeployment,
    ApplyDisruptionBudget,
    CreatePod,
    CreateService,
    DeletePod,
    Emit,
    PatchStatus,
    SetDeletionCost,
    SetNodeState,
    SetPodRole,
)
from lyra.operator.world import ObjectRef

log = logging.getLogger("lyra.operator")
T = TypeVar("T")

FIRST_DELAY_S = 10.0
MAX_DELAY_S = 300.0
#: API statuses that say the server failed the write, not that it refused the object: retried sooner.
TRANSIENT_STATUSES = frozenset({500, 502, 503, 504})
TRANSIENT_FIRST_DELAY_S = 1.0
TRANSIENT_MAX_DELAY_S = 30.0


class Stage(StrEnum):
    """What a failure holds back: ``status`` everything of the subject, ``changes`` all but its status writes."""

    STATUS = "status"
    CHANGES = "changes"


@dataclass(frozen=True, slots=True)
class Failure:
    """The last refused write of one subject: what was tried, what the API said, when it is tried again."""

    subject: ObjectRef
    stage: Stage
    reason: str  # the API's reason (Forbidden, Invalid, InternalError ...): the condition's reason
    message: str  # what was tried and what the API said
    attempts: int
    failed_at: float
    retry_at: float


class Undoable(Protocol):
    """What a pass has decided so far, marked and undone back to the mark (:class:`lyra.operator.changes.Changes`)."""

    def mark(self) -> tuple[int, int]: ...
    def undo(self, mark: tuple[int, int]) -> None: ...


@dataclass(frozen=True, slots=True)
class Undecidable:
    """Deciding about one object raised: what it raised, worded for its status (the object's actions were undone)."""

    message: str


class Alone:
    """A ``with`` block that runs one object's part of a pass. Whatever it raises (a value no bound foresaw, a bug)
    stops that object only: the actions it had added are undone, the error is logged with its traceback, the block
    is left, and :attr:`failure` words it for the object's status (``InvalidSpec``), while every other object's
    decision goes on in the same pass. The caller runs the part itself, so the data flows from it to the part and
    never back through here."""

    def __init__(self, changes: Undoable, ref: ObjectRef, what: str) -> None:
        self.changes = changes
        self.ref = ref
        self.what = what
        self.failure: Undecidable | None = None
        self._mark = (0, 0)

    def __enter__(self) -> Alone:
        self._mark = self.changes.mark()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool:
        if not isinstance(error, Exception):
            return False
        self.changes.undo(self._mark)
        log.error("%s %s: %s failed", self.ref.kind, self.ref.key, self.what, exc_info=error)
        self.failure = Undecidable(f"{self.what} failed: {type(error).__name__}: {error}")
        return True


def decide_alone(changes: Undoable, ref: ObjectRef, what: str, step: Callable[[], T]) -> T | Undecidable:
    """Run ``step``, one object's part of a pass, in an :class:`Alone` block: its result, or why it failed."""
    with Alone(changes, ref, what) as alone:
        return step()
    assert alone.failure is not None
    return alone.failure


def key_of(ref: ObjectRef) -> str:
    """A subject's key: its kind and ``namespace/name`` (a job and a service may share a name)."""
    return f"{ref.kind}/{ref.key}"


def node_ref(node: str) -> ObjectRef:
    return ObjectRef("Node", "", node)


def subject_of(action: Action) -> ObjectRef:
    """The object an action's failure is reported on (see the module docstring)."""
    if isinstance(action, SetNodeState):
        return node_ref(action.node)
    if isinstance(action, DeletePod | SetPodRole | SetDeletionCost | CreatePod):
        return action.owner or action.ref
    if isinstance(action, CreateService):
        return action.owner
    return action.ref


def stage_of(action: Action) -> Stage:
    return Stage.STATUS if isinstance(action, PatchStatus) else Stage.CHANGES


def needs_of(action: Action) -> tuple[str, ...]:
    """The keys of the other subjects whose failure in this pass skips ``action``: a pod's node."""
    if isinstance(action, DeletePod | SetPodRole | SetDeletionCost | CreatePod) and action.node:
        return (key_of(node_ref(action.node)),)
    return ()


def describe(action: Action) -> str:
    """What an action does, for messages: ``creating pod ml/train-w0``."""
    if isinstance(action, SetNodeState):
        return f"setting node {action.node} {action.state.value}"
    if isinstance(action, PatchStatus):
        return f"writing the status of {action.ref.kind} {action.ref.key}"
    if isinstance(action, DeletePod):
        return f"deleting pod {action.ref.key}"
    if isinstance(action, SetPodRole):
        return f"relabelling pod {action.ref.key} {action.role}"
    if isinstance(action, SetDeletionCost):
        return f"setting the deletion cost of pod {action.ref.key} to {action.cost}"
    if isinstance(action, CreatePod):
        return f"creating pod {action.ref.key}"
    if isinstance(action, CreateService):
        return f"creating Service {action.ref.key}"
    if isinstance(action, ApplyDeployment):
        doing = "creating" if action.create else "writing the pod template of" if action.roll else "scaling"
        return f"{doing} Deployment {action.ref.key}"
    if isinstance(action, ApplyDisruptionBudget):
        doing = "applying" if action.manifest is not None else "deleting"
        return f"{doing} PodDisruptionBudget {action.ref.key}"
    assert isinstance(action, Emit)
    return f"posting Event {action.reason} on {action.ref.kind} {action.ref.key}"


def reports_in_status(ref: ObjectRef) -> bool:
    """Whether a subject has a status to carry the ``Applied`` condition (Lyra's own resources)."""
    return ref.kind in (names.TRAINING_JOB_KIND, names.INFERENCE_SERVICE_KIND)


class Backoff:
    """The subjects whose writes failed, in the running operator's memory (see the module docstring)."""

    def __init__(self, first_s: float = FIRST_DELAY_S, cap_s: float = MAX_DELAY_S) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        self._failures: dict[str, Failure] = {}

    def failures(self) -> Mapping[str, Failure]:
        """Every subject whose last write failed, by key (decide reports them in the ``Applied`` condition)."""
        return dict(self._failures)

    def holds(self, action: Action, now: float) -> Failure | None:
        """The failure that holds ``action`` back now, if any (Events are never held)."""
        if isinstance(action, Emit):
            return None
        failure = self._failures.get(key_of(subject_of(action)))
        if failure is None or now >= failure.retry_at:
            return None
        if failure.stage is Stage.CHANGES and stage_of(action) is Stage.STATUS:
            return None
        return failure

    def record(self, action: Action, reason: str, error: str, now: float, *, transient: bool = False) -> Failure:
        """A refused write of ``action``'s subject: the next try waits twice as long as the last (capped); from
        1 s rather than 10 s, capped at 30 s, when the server failed (``transient``, :data:`TRANSIENT_STATUSES`)."""
        subject = subject_of(action)
        key = key_of(subject)
        before = self._failures.get(key)
        attempts = before.attempts + 1 if before is not None else 1
        stage = stage_of(action)
        if before is not None and before.stage is Stage.STATUS:
            stage = Stage.STATUS  # a status that could not be written stays the stronger hold
        first, cap = (TRANSIENT_FIRST_DELAY_S, TRANSIENT_MAX_DELAY_S) if transient else (self.first_s, self.cap_s)
        delay = min(first * 2 ** (attempts - 1), cap)
        message = f"{describe(action)} failed: {error}; retrying in {delay:g} s (attempt {attempts})"
        failure = Failure(subject, stage, reason, message, attempts, now, now + delay)
        self._failures[key] = failure
        return failure

    def next_retry(self) -> float | None:
        """When the earliest held subject may be tried again (None: nothing is held). The loop makes a pass then,
        not only at its resync: a server error's retry is due after 1 s."""
        return min((f.retry_at for f in self._failures.values()), default=None)

    def settle(self, failed: set[str], now: float) -> list[Failure]:
        """After a pass: the failures whose retry time has come and that did not fail again are over (their retry
        went through, or nothing is left to retry). Returns them."""
        over = [f for k, f in self._failures.items() if k not in failed and now >= f.retry_at]
        for failure in over:
            del self._failures[key_of(failure.subject)]
        return over
