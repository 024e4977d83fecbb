"""The search's candidate allocation, as vectors over the job table, with checkpoint and rollback
(:class:`~lyra.core.allocation.journal.Statement`): a move is made on the candidate in a statement, kept if it packs
and lowers the objective, discarded otherwise."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lyra.core.allocation.journal import Statement

#: One change of a candidate: (job, kind, width, GPUs per worker, spread or ``None``, free GPUs taken per type or
#: ``None``), the job's values before the change; the last two only for a job made to spread over several types.
StateChange = tuple[int, int, int, int, list[tuple[int, int]] | None, dict[int, int] | None]


@dataclass(slots=True)
class SearchState:
    """A candidate allocation as vectors: every job's kind (queued, spread over several types, or its one GPU
    type's index), width (workers) and, for spread jobs, workers per type; free GPUs per type; its objective."""

    kinds: list[int]
    widths: list[int]
    spreads: dict[int, list[tuple[int, int]]]
    free: list[int]
    value: float = math.inf
    journal: list[StateChange] = field(default_factory=list)
    depth: int = 0

    def copy(self) -> SearchState:
        return SearchState(list(self.kinds), list(self.widths), dict(self.spreads), list(self.free), self.value)

    def statement(self) -> Statement[StateChange]:
        """Changes from now on, committed or discarded; discarding also restores the objective."""
        return _StateStatement(self)

    def set(self, i: int, kind: int, width: int, gpus_per_worker: int) -> None:
        """Job ``i`` (on one type or queued) at ``kind`` and ``width``; the free GPUs follow."""
        if self.depth:
            self.journal.append((i, self.kinds[i], self.widths[i], gpus_per_worker, None, None))
        self._put(i, kind, width, gpus_per_worker)

    def _put(self, i: int, kind: int, width: int, gpus_per_worker: int) -> None:
        if self.kinds[i] >= 0:
            self.free[self.kinds[i]] += self.widths[i] * gpus_per_worker
        if kind >= 0:
            self.free[kind] -= width * gpus_per_worker
        self.kinds[i] = kind
        self.widths[i] = width

    def spread_over(self, i: int, kind: int, spread: list[tuple[int, int]], taken: dict[int, int]) -> None:
        """Job ``i`` made to spread as ``spread`` (``kind`` is :data:`~lyra.core.fluid.SPREAD`), taking ``taken``
        GPUs per type from the free ones (a negative count gives them back)."""
        if self.depth:
            self.journal.append((i, self.kinds[i], self.widths[i], 0, self.spreads.get(i), taken))
        for t, gpus in taken.items():
            self.free[t] -= gpus
        self.kinds[i] = kind
        self.widths[i] = sum(w for _, w in spread)
        self.spreads[i] = spread

    def revert(self, entry: StateChange) -> None:
        i, kind, width, gpus_per_worker, spread, taken = entry
        if taken is None:
            self._put(i, kind, width, gpus_per_worker)
            return
        for t, gpus in taken.items():
            self.free[t] += gpus
        self.kinds[i] = kind
        self.widths[i] = width
        if spread is None:
            self.spreads.pop(i, None)
        else:
            self.spreads[i] = spread


class _StateStatement(Statement[StateChange]):
    __slots__ = ("_state", "_value")

    def __init__(self, state: SearchState) -> None:
        super().__init__(state)
        self._state = state
        self._value = state.value

    def rollback(self) -> list[StateChange]:
        undone = super().rollback()
        self._state.value = self._value
        return undone
