"""The admin's bound on a TrainingJob's ``spec.priority``, per namespace (``lyra operator --max-priority``).

``spec.priority`` orders Lyra's admission queue (higher first), and the CRD lets any tenant write up to 1,000,000:
unbounded, one namespace could put every job of its own before everyone else's. The operator orders each job at
``min(spec.priority, bound of its namespace)``; the namespace ``*`` stands for every namespace not named. ``lyra
operator`` and the chart bound every namespace at :data:`DEFAULT_MAX_PRIORITY` unless told otherwise, so a tenant's
jobs compete on their expected durations until an admin trusts its namespace with more (docs/security.md). A job
above its bound says so (``PriorityBounded=True``).

Why the operator, not an admission policy: the bound holds where the priority is used (the queue), for objects
stored before it and on any Kubernetes version; an admin who also wants ``kubectl apply`` to refuse such jobs adds
the ValidatingAdmissionPolicy of docs/examples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lyra.api.resources import MAX_PRIORITY
from lyra.operator.sizing import EVERY_OTHER_NAMESPACE, namespace_problem
from lyra.settings import DEFAULT_MAX_PRIORITY

__all__ = ["DEFAULT_MAX_PRIORITY", "PriorityBounds"]


@dataclass(frozen=True, slots=True)
class PriorityBounds:
    """The highest priority each namespace's TrainingJobs are ordered at: ``(namespace, priority)`` pairs, sorted,
    ``*`` for every namespace not named. No entry for a namespace: its jobs are ordered at their own priority."""

    entries: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        names = [namespace for namespace, _ in self.entries]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"a namespace is bounded twice: {', '.join(twice)}")
        for namespace, priority in self.entries:
            problem = namespace_problem(namespace)
            if problem is not None:
                raise ValueError(problem)
            if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
                raise ValueError(f"the bound of {namespace} must be {-MAX_PRIORITY} to {MAX_PRIORITY}, not {priority}")
        object.__setattr__(self, "entries", tuple(sorted(self.entries)))

    @classmethod
    def parse(cls, settings: Iterable[str], *, default: int | None = None) -> PriorityBounds:
        """From ``NAMESPACE=PRIORITY`` settings (``*=PRIORITY`` for every namespace not named), with ``default`` for
        ``*`` when no setting names it; ValueError says what is wrong with which."""
        entries = []
        for setting in settings:
            namespace, equals, value = setting.partition("=")
            digits = value.strip().removeprefix("-")
            if not equals or not digits.isdigit():
                raise ValueError(f"{setting!r} is not NAMESPACE=PRIORITY (a whole number)")
            entries.append((namespace.strip(), int(value)))
        if default is not None and EVERY_OTHER_NAMESPACE not in {n for n, _ in entries}:
            entries.append((EVERY_OTHER_NAMESPACE, default))
        return cls(tuple(entries))

    def bound_of(self, namespace: str) -> int | None:
        """The namespace's bound, ``None`` when it has none."""
        named = dict(self.entries)
        return named.get(namespace, named.get(EVERY_OTHER_NAMESPACE))
