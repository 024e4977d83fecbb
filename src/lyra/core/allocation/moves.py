"""The search's catalogue of moves: one small generator per kind of move, each yielding candidate changes of a
:class:`~lyra.core.allocation.state.SearchState` (``(job, new kind, new width)`` triples) in a fixed order, and
:func:`neighbours`, which chains them in the order the local search tries them:

1. :func:`grow`: one more worker, on the job's own type;
2. :func:`shift`: one worker moved between two jobs of a type (or one of more GPUs for as many of the other's as
   fit);
3. :func:`retype`: a job this plan starts (or, with a restart cost, a running one to a faster type) moved to another
   type, as wide as now, as wide as there is room for, or at its base; a running one also by squeezing the jobs
   there;
4. :func:`exchange`: two jobs exchanging types (at most one of them running), at their bases with the others on both
   types scaled in to theirs when there is no room otherwise;
5. :func:`cycle`: a running job moved to a faster type with the jobs this plan started beside it, in exchange for
   one started there (three types change hands: no exchange of two reaches it);
6. :func:`shrink`: one worker fewer.

Moves that change types also come "filled" (:func:`with_fill`: the GPUs they free handed to the jobs left on the
types). A generator only proposes: the search makes the change in a statement, keeps it if it packs and lowers the
objective, and discards it otherwise, so the state a generator reads between two of its yields is the one it
yielded from. The orders are fixed (members by time at maximum, movers by time left, then by name), so the search
is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from lyra.core.allocation.state import SearchState
from lyra.core.fluid import JobTable
from lyra.core.model import TrainingJob

#: One change of a move: (job, new kind, new width).
Change = tuple[int, int, int]

#: Exchanges that involve a running job, or other jobs scaled in to their bases, are tried only in decisions over at
#: most this many admitted jobs: they are quadratic (or worse) in the jobs that may change type, and most of them
#: do not pack, which costs no budget.
EXCHANGE_JOBS = 64


@dataclass(slots=True)
class Ground:
    """What the moves read besides the candidate: the job table, the jobs, the members (admitted jobs, in the
    search's order: shortest time at maximum first), the jobs that may change type (``movable``), the running ones,
    every job's kind after phase 1 (``home``), and whether a type still packs a candidate (``fits_on``)."""

    table: JobTable
    jobs: Sequence[TrainingJob]
    names: Sequence[str]
    members: list[int]
    movable: set[int]
    running: set[int]
    home: Sequence[int]
    fits_on: Callable[[SearchState, int], bool]


def neighbours(ground: Ground, state: SearchState) -> Iterator[list[Change]]:
    """Every move of the catalogue, in the order the local search tries them (see the module docstring)."""
    yield from grow(ground, state)
    yield from shift(ground, state)
    movers = movers_of(ground, state)
    yield from retype(ground, state, movers)
    yield from exchange(ground, state, movers)
    yield from cycle(ground, state, movers)
    yield from shrink(ground, state)


def movers_of(ground: Ground, state: SearchState) -> list[int]:
    """The members that may change type, the most time left first (they gain the most from a faster type, and the
    first improvement wins), then by name."""
    kinds, widths, speeds = state.kinds, state.widths, ground.table.speeds
    return sorted(
        (i for i in ground.members if i in ground.movable and kinds[i] >= 0),
        key=lambda i: (-ground.jobs[i].time_at(widths[i], speeds[i][kinds[i]]), ground.names[i]),
    )


def grow(ground: Ground, state: SearchState) -> Iterator[list[Change]]:
    """One more worker, on the job's own type where it has room; members in order."""
    kinds, widths, free = state.kinds, state.widths, state.free
    gpw, high = ground.table.gpw, ground.table.high
    for i in ground.members:
        kind = kinds[i]
        if kind >= 0 and widths[i] < high[i] and free[kind] >= gpw[i]:
            yield [(i, kind, widths[i] + 1)]


def shift(ground: Ground, state: SearchState) -> Iterator[list[Change]]:
    """One worker of job ``k`` given to job ``i`` on the same type (``k`` from the longest), and, where ``k``'s worker
    has more GPUs than ``i``'s, as many of ``i``'s as its GPUs hold."""
    kinds, widths, free = state.kinds, state.widths, state.free
    gpw, low, high = ground.table.gpw, ground.table.low, ground.table.high
    members = ground.members
    for i in members:
        kind = kinds[i]
        if kind < 0 or widths[i] >= high[i]:
            continue
        for k in reversed(members):
            if k != i and kinds[k] == kind and widths[k] > low[k] and free[kind] + gpw[k] >= gpw[i]:
                yield [(k, kind, widths[k] - 1), (i, kind, widths[i] + 1)]
                more = min(high[i] - widths[i], (free[kind] + gpw[k]) // gpw[i])
                if more > 1:
                    yield [(k, kind, widths[k] - 1), (i, kind, widths[i] + more)]


def retype(ground: Ground, state: SearchState, movers: Sequence[int]) -> Iterator[list[Change]]:
    """Each mover to each other type it may use (a running one only to a type faster than its own): as wide as it
    is now, as wide as the other type holds (it may be wider there), or at its base (the restart costs less time at a
    lower pace, and its GPUs go to the others); each also filled. A running mover with no room for its base there is
    squeezed in (:func:`squeeze`)."""
    kinds, widths, free = state.kinds, state.widths, state.free
    table = ground.table
    gpw, low, high, speeds = table.gpw, table.low, table.high, table.speeds
    for i in movers:
        running = i in ground.running
        for t in table.preference[i]:
            if t == kinds[i] or (running and speeds[i][t] <= speeds[i][ground.home[i]]):
                continue
            room = free[t] // gpw[i]
            for width in dict.fromkeys((min(widths[i], room), min(high[i], room), low[i])):
                if low[i] <= width <= room:
                    yield from _and_filled(ground, state, [(i, t, width)])
            if room < low[i] and running:
                squeezed = squeeze(ground, state, i, t)
                if squeezed is not None:
                    yield from _and_filled(ground, state, squeezed)


def exchange(ground: Ground, state: SearchState, movers: Sequence[int]) -> Iterator[list[Change]]:
    """Two movers swapping types, at most one of them running (a running one only to a faster type): as wide as the
    other's GPUs and the free ones hold, and filled; in small decisions, when a base has no room so, both at their
    bases with every other job on the two types scaled in to its base, then filled."""
    small = len(ground.members) <= EXCHANGE_JOBS
    exchanging = movers if small else [i for i in movers if i not in ground.running]
    for a, i in enumerate(exchanging):
        for k in exchanging[a + 1 :]:
            if _may_exchange(ground, state, i, k):
                yield from _exchanged(ground, state, i, k, small)


def _may_exchange(ground: Ground, state: SearchState, i: int, k: int) -> bool:
    speeds, home, running = ground.table.speeds, ground.home, ground.running
    ti, tk = state.kinds[i], state.kinds[k]
    if ti == tk or speeds[i][tk] <= 0 or speeds[k][ti] <= 0:
        return False
    if i in running and (k in running or speeds[i][tk] <= speeds[i][home[i]]):
        return False
    return not (k in running and speeds[k][ti] <= speeds[k][home[k]])


def _exchanged(ground: Ground, state: SearchState, i: int, k: int, small: bool) -> Iterator[list[Change]]:
    kinds, widths, free = state.kinds, state.widths, state.free
    gpw, low = ground.table.gpw, ground.table.low
    ti, tk = kinds[i], kinds[k]
    wi = min(widths[i], (free[tk] + widths[k] * gpw[k]) // gpw[i])
    wk = min(widths[k], (free[ti] + widths[i] * gpw[i]) // gpw[k])
    if wi >= low[i] and wk >= low[k]:
        yield from _and_filled(ground, state, [(i, tk, wi), (k, ti, wk)])
    elif small:
        changes = [(i, tk, low[i]), (k, ti, low[k])]
        changes += [(m, kinds[m], low[m]) for m in ground.members if m not in (i, k) and kinds[m] in (ti, tk)]
        yield with_fill(ground, state, changes)


def cycle(ground: Ground, state: SearchState, movers: Sequence[int]) -> Iterator[list[Change]]:
    """In small decisions: a running mover to a type faster for it (``tf``) with the movers this plan started beside
    it on its type (``ts``) that may use ``tf``, all at their bases, in exchange for one started on ``tf`` moved to
    ``ts``; each also filled."""
    if len(ground.members) > EXCHANGE_JOBS:
        return
    kinds, speeds, running = state.kinds, ground.table.speeds, ground.running
    for i in movers:
        if i not in running:
            continue
        ts = kinds[i]
        for tf in ground.table.preference[i]:
            if speeds[i][tf] <= speeds[i][ground.home[i]]:
                continue
            beside = [m for m in movers if m not in running and kinds[m] == ts and speeds[m][tf] > 0]
            if beside:
                yield from _cycled(ground, state, movers, i=i, tf=tf, beside=beside)


def _cycled(
    ground: Ground, state: SearchState, movers: Sequence[int], *, i: int, tf: int, beside: list[int]
) -> Iterator[list[Change]]:
    kinds, widths, free = state.kinds, state.widths, state.free
    table, running = ground.table, ground.running
    gpw, low, speeds = table.gpw, table.low, table.speeds
    ts = kinds[i]
    leaving = widths[i] * gpw[i] + sum(widths[m] * gpw[m] for m in beside)
    bases = low[i] * gpw[i] + sum(low[m] * gpw[m] for m in beside)
    for k in movers:
        if k in running or kinds[k] != tf or speeds[k][ts] <= 0:
            continue
        wk = min(widths[k], (free[ts] + leaving) // gpw[k])
        if wk < low[k] or free[tf] + widths[k] * gpw[k] < bases:
            continue
        yield from _and_filled(ground, state, [(k, ts, wk), (i, tf, low[i]), *((m, tf, low[m]) for m in beside)])


def shrink(ground: Ground, state: SearchState) -> Iterator[list[Change]]:
    """Last, one worker fewer, longest jobs first: the GPU left free goes to the queue's next base sooner (or, in the
    model, to the jobs still running when one ends)."""
    kinds, widths, low = state.kinds, state.widths, ground.table.low
    for i in reversed(ground.members):
        if kinds[i] >= 0 and widths[i] > low[i]:
            yield [(i, kinds[i], widths[i] - 1)]


def _and_filled(ground: Ground, state: SearchState, changes: list[Change]) -> Iterator[list[Change]]:
    """``changes``, then, if it adds something, ``changes`` filled."""
    yield changes
    filled = with_fill(ground, state, changes)
    if len(filled) > len(changes):
        yield filled


def with_fill(ground: Ground, state: SearchState, changes: Sequence[Change]) -> list[Change]:
    """``changes``, then every job widened with the GPUs left on its type, shortest at maximum first: a type move
    often pays off only together with what it frees. Where GPU counts do not decide packing, a job is widened only
    as far as its type still packs (one worker too many would lose the whole move). ``state`` is left as it was."""
    gpw, high = ground.table.gpw, ground.table.high
    result = list(changes)
    with state.statement():
        for i, kind, width in changes:
            state.set(i, kind, width, gpw[i])
        if any(f < 0 for f in state.free):
            return result
        for k in ground.members:
            kind, width = state.kinds[k], state.widths[k]
            if kind < 0 or width >= high[k]:
                continue
            extra = min(high[k] - width, state.free[kind] // gpw[k])
            while extra > 0:
                state.set(k, kind, width + extra, gpw[k])
                if ground.fits_on(state, kind):
                    result.append((k, kind, width + extra))
                    break
                extra -= 1
            else:
                state.set(k, kind, width, gpw[k])
    return result


def squeeze(ground: Ground, state: SearchState, i: int, t: int) -> list[Change] | None:
    """Job ``i`` moved to type ``t`` at its base, scaling in flexible workers of the longest jobs there; ``None`` if
    they do not make room."""
    gpw, low = ground.table.gpw, ground.table.low
    short = low[i] * gpw[i] - state.free[t]
    changes: list[Change] = []
    for k in reversed(ground.members):
        if short <= 0:
            break
        if k == i or state.kinds[k] != t or state.widths[k] <= low[k]:
            continue
        take = min(state.widths[k] - low[k], -(-short // gpw[k]))
        changes.append((k, t, state.widths[k] - take))
        short -= take * gpw[k]
    if short > 0:
        return None
    return [*changes, (i, t, low[i])]
