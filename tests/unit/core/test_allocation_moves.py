"""The allocation search's parts alone: each kind of move of the catalogue (:mod:`lyra.core.allocation.moves`) on a
small hand-made candidate, statements on the layout and on the candidate (:mod:`lyra.core.allocation.journal`,
:mod:`lyra.core.allocation.state`), and the package's size rule (no function over 60 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lyra.core import TrainingJob
from lyra.core.allocation import journal, moves
from lyra.core.allocation.moves import Change, Ground
from lyra.core.allocation.state import SearchState
from lyra.core.fluid import QUEUED, SPREAD, FluidJob, JobTable
from lyra.core.packing import Slot

FAST, SLOW = 0, 1


def _ground(
    specs: list[tuple[int, int, int, tuple[float, float]]],
    *,
    members: list[int],
    movable: set[int] | None = None,
    running: set[int] | None = None,
    home: list[int] | None = None,
    fits: bool = True,
) -> Ground:
    """Jobs from (GPUs per worker, base, maximum, speeds on the fast and slow type); work 100 each."""
    fluid = [FluidJob(100.0, gpw, low, high, speeds) for gpw, low, high, speeds in specs]
    jobs = [TrainingJob(f"j{i}", gpw, low, high, 100.0) for i, (gpw, low, high, _) in enumerate(specs)]
    return Ground(
        table=JobTable.of(fluid),
        jobs=jobs,
        names=[job.name for job in jobs],
        members=members,
        movable=set(movable or ()),
        running=set(running or ()),
        home=home if home is not None else [QUEUED] * len(specs),
        fits_on=lambda state, t: fits,
    )


def _state(kinds: list[int], widths: list[int], gpw: list[int], capacity: tuple[int, int]) -> SearchState:
    free = list(capacity)
    for kind, width, g in zip(kinds, widths, gpw, strict=True):
        if kind >= 0:
            free[kind] -= width * g
    return SearchState(list(kinds), list(widths), {}, free, 10.0)


def _unchanged(state: SearchState) -> tuple[list[int], list[int], list[int], float]:
    return (list(state.kinds), list(state.widths), list(state.free), state.value)


BOTH = (1.0, 0.5)


def test_grow_adds_one_worker_where_the_job_is_below_its_maximum_and_its_type_has_room() -> None:
    ground = _ground([(1, 1, 3, BOTH), (1, 1, 1, BOTH), (2, 1, 3, BOTH)], members=[0, 1, 2])
    state = _state([FAST, FAST, SLOW], [1, 1, 1], [1, 1, 2], (4, 3))
    assert list(moves.grow(ground, state)) == [[(0, FAST, 2)]]  # j1 is at its maximum, j2's worker does not fit


def test_shift_moves_a_worker_between_jobs_of_a_type_from_the_longest_and_several_for_a_larger_one() -> None:
    ground = _ground([(1, 1, 4, BOTH), (2, 1, 3, BOTH)], members=[0, 1])
    state = _state([FAST, FAST], [1, 3], [1, 2], (7, 0))
    assert list(moves.shift(ground, state)) == [
        [(1, FAST, 2), (0, FAST, 2)],
        [(1, FAST, 2), (0, FAST, 3)],  # j1's worker of 2 GPUs holds two of j0's
    ]


def test_retype_moves_a_started_job_as_wide_as_now_as_wide_as_there_is_room_and_at_its_base() -> None:
    ground = _ground([(1, 1, 4, BOTH)], members=[0], movable={0}, fits=False)
    state = _state([SLOW], [2], [1], (3, 2))
    movers = moves.movers_of(ground, state)
    assert list(moves.retype(ground, state, movers)) == [[(0, FAST, 2)], [(0, FAST, 3)], [(0, FAST, 1)]]


def test_retype_takes_a_running_job_only_to_a_faster_type_squeezing_the_jobs_there() -> None:
    # j0 runs on the slow type; the fast one is full of j1 (flexible); j2 runs fast and may not go slower.
    ground = _ground(
        [(1, 2, 2, BOTH), (1, 1, 4, BOTH), (1, 1, 2, BOTH)],
        members=[1, 0, 2],
        movable={0, 2},
        running={0, 2},
        home=[SLOW, FAST, FAST],
        fits=False,
    )
    state = _state([SLOW, FAST, FAST], [2, 4, 1], [1, 1, 1], (5, 4))
    movers = moves.movers_of(ground, state)
    assert list(moves.retype(ground, state, movers)) == [[(1, FAST, 2), (0, FAST, 2)]]


def test_exchange_swaps_the_types_of_two_movers_and_scales_the_others_in_when_a_base_has_no_room() -> None:
    ground = _ground([(1, 1, 2, BOTH), (1, 1, 2, BOTH)], members=[0, 1], movable={0, 1}, fits=False)
    state = _state([FAST, SLOW], [2, 2], [1, 1], (2, 2))
    assert list(moves.exchange(ground, state, [0, 1])) == [[(0, SLOW, 2), (1, FAST, 2)]]
    # j1's base of 3 fits on the fast type only when j2, there too, is scaled in to its base.
    ground = _ground([(1, 2, 2, BOTH), (1, 3, 3, BOTH), (1, 1, 3, BOTH)], members=[0, 1, 2], movable={0, 1}, fits=False)
    state = _state([FAST, SLOW, FAST], [2, 3, 3], [1, 1, 1], (5, 3))
    assert list(moves.exchange(ground, state, [0, 1])) == [[(0, SLOW, 2), (1, FAST, 3), (2, FAST, 1)]]


def test_exchange_never_swaps_two_running_jobs_nor_a_running_one_to_a_slower_type() -> None:
    ground = _ground([(1, 1, 2, BOTH), (1, 1, 2, BOTH)], members=[0, 1], movable={0, 1}, running={0}, home=[FAST, SLOW])
    state = _state([FAST, SLOW], [1, 1], [1, 1], (2, 2))
    assert list(moves.exchange(ground, state, [0, 1])) == []


def test_cycle_moves_a_running_job_and_the_jobs_started_beside_it_for_one_started_on_the_faster_type() -> None:
    # j0 runs slow with j1 (started by this plan) beside it; j2, started on the fast type, goes slow.
    ground = _ground(
        [(1, 1, 1, BOTH), (1, 1, 1, BOTH), (1, 2, 2, BOTH)],
        members=[0, 1, 2],
        movable={0, 1, 2},
        running={0},
        home=[SLOW, SLOW, FAST],
        fits=False,
    )
    state = _state([SLOW, SLOW, FAST], [1, 1, 2], [1, 1, 1], (2, 2))
    assert list(moves.cycle(ground, state, [2, 0, 1])) == [[(2, SLOW, 2), (0, FAST, 1), (1, FAST, 1)]]


def test_shrink_takes_one_worker_from_the_longest_job_first() -> None:
    ground = _ground([(1, 1, 3, BOTH), (1, 1, 3, BOTH), (1, 2, 3, BOTH)], members=[0, 1, 2])
    state = _state([FAST, FAST, SLOW], [2, 3, 2], [1, 1, 1], (8, 8))
    assert list(moves.shrink(ground, state)) == [[(1, FAST, 2)], [(0, FAST, 1)]]


def test_with_fill_widens_the_others_with_what_a_move_frees_and_leaves_the_candidate_as_it_was() -> None:
    ground = _ground([(1, 1, 3, BOTH), (1, 1, 4, BOTH)], members=[1, 0])
    state = _state([SLOW, FAST], [3, 1], [1, 1], (4, 3))
    before = _unchanged(state)
    changes: list[Change] = [(0, FAST, 2)]
    assert moves.with_fill(ground, state, changes) == [(0, FAST, 2), (1, FAST, 2)]
    assert _unchanged(state) == before


def test_squeeze_scales_in_the_longest_jobs_there_or_gives_up() -> None:
    ground = _ground([(1, 3, 3, BOTH), (1, 1, 3, BOTH), (1, 1, 2, BOTH)], members=[1, 2, 0])
    state = _state([SLOW, FAST, FAST], [3, 3, 2], [1, 1, 1], (5, 3))
    assert moves.squeeze(ground, state, 0, FAST) == [(2, FAST, 1), (1, FAST, 1), (0, FAST, 3)]
    assert moves.squeeze(ground, _state([SLOW, FAST, FAST], [3, 1, 1], [1, 1, 1], (2, 3)), 0, FAST) is None


def test_neighbours_chain_the_kinds_in_the_catalogue_order() -> None:
    ground = _ground([(1, 1, 3, BOTH), (1, 1, 3, BOTH)], members=[0, 1], movable={0})
    state = _state([FAST, SLOW], [2, 2], [1, 1], (3, 3))
    found = list(moves.neighbours(ground, state))
    grow = list(moves.grow(ground, state))
    assert found[: len(grow)] == grow
    assert found[-len(list(moves.shrink(ground, state))) :] == list(moves.shrink(ground, state))
    movers = moves.movers_of(ground, state)
    assert found == [
        *grow,
        *moves.shift(ground, state),
        *moves.retype(ground, state, movers),
        *moves.exchange(ground, state, movers),
        *moves.cycle(ground, state, movers),
        *moves.shrink(ground, state),
    ]


# -------------------------------------------------------------------------------------------- statements


def _layout() -> journal.TrackedLayout:
    return journal.TrackedLayout(
        [Slot("a", "V100", 8, True), Slot("b", "V100", 4, False), Slot("c", "T4", 8, False)], [("r", "a", 2, 2)]
    )


def _contents(layout: journal.TrackedLayout) -> tuple[list[int], dict[str, dict[int, int]], list[int]]:
    return (list(layout.free), {job: dict(hosts) for job, hosts in layout.jobs.items()}, list(layout.free_of_type))


def test_a_discarded_statement_restores_the_layout_and_its_decisions() -> None:
    layout = _layout()
    before, reference = _contents(layout), layout.copy()
    with layout.statement():
        assert layout.place("x", 2, 0, 3) is not None
        layout.remove("r", 2, 1)
        assert layout.place("y", 1, 1, 8) is not None
    assert _contents(layout) == before
    assert layout.journal == []
    # The placement rules decide on the rolled-back layout as on an untouched copy.
    assert layout.place("z", 2, 0, 3) == reference.place("z", 2, 0, 3)


def test_a_committed_statement_keeps_its_changes_and_an_outer_one_may_still_discard_them() -> None:
    layout = _layout()
    before = _contents(layout)
    with layout.statement() as outer:
        with layout.statement() as inner:
            layout.add("x", 1, 2, 1)
            inner.commit()
        assert layout.hosts("x") == {1: 2}
        undone = outer.rollback()
    assert undone == [("x", 1, 2, 1)]
    assert _contents(layout) == before
    with layout.statement() as statement:
        layout.add("x", 1, 2, 1)
        statement.commit()
    assert layout.hosts("x") == {1: 2}
    assert layout.journal == []
    with pytest.raises(RuntimeError, match="once"):
        statement.rollback()


def test_a_discarded_statement_on_a_candidate_restores_its_vectors_and_its_objective() -> None:
    state = SearchState([FAST, SLOW, QUEUED], [2, 1, 0], {}, [4, 5], 7.5)
    before = (_unchanged(state), dict(state.spreads))
    with state.statement():
        state.set(0, SLOW, 3, 1)
        state.set(2, FAST, 2, 2)
        state.spread_over(1, SPREAD, [(FAST, 1), (SLOW, 1)], {FAST: 1})
        state.value = 1.0
    assert (_unchanged(state), dict(state.spreads)) == before
    with state.statement() as statement:
        state.set(2, FAST, 2, 2)
        state.value = 3.0
        statement.commit()
    assert (state.kinds[2], state.free, state.value) == (FAST, [0, 5], 3.0)


# ------------------------------------------------------------------------------------------------- size


def test_no_function_of_the_allocation_package_is_over_60_lines() -> None:
    package = Path(moves.__file__).parent
    long = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted(package.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert len(list(package.glob("*.py"))) >= 8
    assert long == []
