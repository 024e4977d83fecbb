"""Checkpoint and rollback, shared by admission and the search: a :class:`Statement` opened on a journaled object
records every change made to it until it is committed (the changes stay) or discarded (they are undone, last
first). Statements nest: an inner statement's committed changes are undone with the outer one's.

Two objects keep such a journal: the servers' layout (:class:`TrackedLayout`, the problem's, and each GPU type's in
the search's packing checks) and the search's candidate (:class:`~lyra.core.allocation.state.SearchState`).
Undoing the layout's changes restores what its placement rules decide on (free GPUs and workers per server), so a
rolled-back layout decides as before the statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from lyra.core.packing import Layout, Slot

Entry = TypeVar("Entry")


class Journaled(Protocol[Entry]):
    """An object whose changes are recorded while a statement is open, and undone one by one."""

    journal: list[Entry]
    depth: int

    def revert(self, entry: Entry) -> None: ...


class Statement(Generic[Entry]):
    """The changes made to ``target`` from now on, committed or discarded (discarded if neither is said by the end of
    a ``with`` block)."""

    __slots__ = ("_mark", "_open", "_target")

    def __init__(self, target: Journaled[Entry]) -> None:
        self._target = target
        self._mark = len(target.journal)
        self._open = True
        target.depth += 1

    def __enter__(self) -> Statement[Entry]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._open:
            self.rollback()

    def commit(self) -> None:
        """Keep the changes (an outer statement may still discard them)."""
        self._close()
        if not self._target.depth:
            del self._target.journal[:]

    def rollback(self) -> list[Entry]:
        """Undo the changes, last first; returns them in the order they were undone."""
        self._close()
        journal = self._target.journal
        undone: list[Entry] = []
        while len(journal) > self._mark:
            entry = journal.pop()
            self._target.revert(entry)
            undone.append(entry)
        return undone

    def _close(self) -> None:
        if not self._open:
            raise RuntimeError("a statement is committed or discarded once")
        self._open = False
        self._target.depth -= 1


#: One change of a layout: (job, server, workers added (< 0: removed), GPUs per worker).
Change = tuple[str, int, int, int]


class TrackedLayout(Layout):
    """A :class:`~lyra.core.packing.Layout` whose every change (:meth:`add`, which :meth:`place`, :meth:`remove` and
    :meth:`undo` go through) is journaled while a :meth:`statement` is open."""

    def __init__(self, slots: Sequence[Slot], placed: Sequence[tuple[str, str, int, int]] = ()) -> None:
        super().__init__(slots, placed)
        self.journal: list[Change] = []
        self.depth = 0

    def add(self, job: str, server: int, count: int, gpus_per_worker: int) -> None:
        Layout.add(self, job, server, count, gpus_per_worker)
        if self.depth:
            self.journal.append((job, server, count, gpus_per_worker))

    def revert(self, entry: Change) -> None:
        job, server, count, gpus_per_worker = entry
        Layout.add(self, job, server, -count, gpus_per_worker)

    def statement(self) -> Statement[Change]:
        return Statement(self)
