"""Phase 2, flexible demand and GPU types: candidate allocations of the admitted jobs scored by the sum of
completion times in the typed fluid model, improved by a first-improvement local search over the catalogue of moves
(:mod:`.moves`) whose every move is made in a statement on the candidate (:mod:`.state`) and kept only if it is
realised on the servers and lowers the objective (see :mod:`lyra.core.allocation`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from lyra.core.allocation.moves import Change, Ground, neighbours, squeeze
from lyra.core.allocation.problem import Problem
from lyra.core.allocation.realise import Realiser
from lyra.core.allocation.state import SearchState
from lyra.core.fluid import QUEUED, SPREAD, FluidModel
from lyra.core.ordering import admission_key
from lyra.core.packing import Layout

#: Stand-in completion time for a job that never starts in the fluid model (1,000 years).
_NEVER = 3.2e10

#: The objective of candidates already scored, by everything the fluid model reads of one (kinds, widths, spreads,
#: restarts charged), for the jobs and capacity of one decision: the searches of a decision (its second opinions
#: included) meet the same candidates again, and score each once. An evaluation counts against the budget either
#: way, so the search goes exactly as if it had scored it anew.
Scores = dict[tuple[tuple[int, ...], tuple[int, ...], tuple[object, ...], tuple[tuple[int, float], ...]], float]


class Search:
    """Phase 2: flexible workers and GPU types of admitted jobs, scored in the typed fluid model.

    The search works on GPU counts per type; a move is kept only if it still bin-packs (:class:`.realise.Realiser`).
    The best allocation found is realised once at the end.
    """

    def __init__(
        self, problem: Problem, budget: int, restart_cost_s: float | None, scores: Scores | None = None
    ) -> None:
        """``scores`` may be shared by the searches of one decision (:data:`Scores`)."""
        self.problem = problem
        self.budget = budget
        self.restart_cost = restart_cost_s
        self.evaluations = 0
        self.scores: Scores = {} if scores is None else scores
        table = self.table = problem.table
        self.model = FluidModel(table, problem.layout.capacity)
        self.running = set(problem.running)
        members = [i for i in range(len(problem.jobs)) if problem.kind[i] != QUEUED]
        members.sort(key=lambda i: (self._time_at_max(i), problem.names[i]))
        self.realiser = Realiser(problem, members)
        self.ground = Ground(
            table=table,
            jobs=problem.jobs,
            names=problem.names,
            members=members,
            movable=self._movable(),
            running=self.running,
            home=list(problem.kind),
            fits_on=self._fits_on,
        )
        self.phase_one = self._phase_one()

    @property
    def members(self) -> list[int]:
        """Admitted jobs, shortest time at maximum first (then by name); bases started by the search come last."""
        return self.ground.members

    def _movable(self) -> set[int]:
        """Jobs this plan starts that may use another GPU type than phase 1 gave them; with a restart cost, also
        running jobs (on one type) that may use a type faster for them."""
        problem = self.problem
        movable = {i for i in problem.started if problem.kind[i] >= 0 and len(problem.type_preference(i)) > 1}
        if self.restart_cost is not None:
            for i in problem.running:
                kind, speeds = problem.kind[i], self.table.speeds[i]
                if kind >= 0 and max(speeds) > speeds[kind]:
                    movable.add(i)
        return movable

    def _phase_one(self) -> SearchState:
        problem, layout = self.problem, self.problem.layout
        widths = [layout.workers(name) for name in problem.names]
        spreads: dict[int, list[tuple[int, int]]] = {}
        for i, kind in enumerate(problem.kind):
            if kind == SPREAD:
                per_type: dict[int, int] = {}
                for server, count in layout.hosts(problem.names[i]).items():
                    per_type[layout.type_of[server]] = per_type.get(layout.type_of[server], 0) + count
                spreads[i] = sorted(per_type.items())
        return SearchState(list(problem.kind), widths, spreads, list(layout.free_of_type))

    def _time_at_max(self, i: int) -> float:
        kind, speeds = self.problem.kind[i], self.table.speeds[i]
        speed = speeds[kind] if kind >= 0 else min(s for s in speeds if s > 0)
        return self.problem.jobs[i].time_at(self.table.high[i], speed)

    def _fits_on(self, state: SearchState, t: int) -> bool:
        return self.realiser.packs(state, (t,))

    # -------------------------------------------------------------------------------------------- objective

    def evaluate(self, state: SearchState) -> float:
        self.evaluations += 1
        self.budget -= len(self.problem.jobs)
        extra: dict[int, float] = {}
        if self.restart_cost:
            phase_one = self.phase_one.kinds
            for i in self.running:
                kind = state.kinds[i]
                if kind != phase_one[i] and kind >= 0:
                    job = self.problem.jobs[i]
                    extra[i] = self.restart_cost * job.pace(state.widths[i], self.table.speeds[i][kind])
        spreads = tuple((i, tuple(spread)) for i, spread in sorted(state.spreads.items())) if state.spreads else ()
        key = (tuple(state.kinds), tuple(state.widths), spreads, tuple(sorted(extra.items())) if extra else ())
        value = self.scores.get(key)
        if value is None:
            times = self.model.run(state.kinds, state.widths, state.spreads, extra)
            value = self.scores[key] = math.fsum(t if t != math.inf else _NEVER for t in times)
        state.value = value
        return value

    def average_jct(self, state: SearchState) -> float:
        if not self.problem.jobs:
            return 0.0
        if state.value >= _NEVER:
            return math.inf
        return state.value / len(self.problem.jobs)

    # ------------------------------------------------------------------------------------------- candidates

    def run(self) -> tuple[SearchState, Layout]:
        kept = self.phase_one.copy()
        self.evaluate(kept)
        high, low = self.table.high, self.table.low
        if not any(high[i] > low[i] or i in self.ground.movable for i in self.members):
            return kept, self.problem.layout  # nothing to choose: no elastic job, none that could change type
        best = self._best_of(self._candidates(kept))
        self._mix_types(best)
        layout = self.realiser.realise(best)
        if layout is None:  # every kept move packed; this is a guard, not a path
            return kept, self.problem.layout
        # Bases that the moves made room for start; the search then goes on with them (they may change type too),
        # until no more start or the budget is spent.
        while (admitted := self._admit_leftovers(best, layout)) is not None:
            layout = admitted
            self.evaluate(best)
            if self.budget <= 0:
                break
            found = self._local_search(best)
            realised = self.realiser.realise(found) if found.value < best.value * (1 - 1e-12) else None
            if realised is not None:
                best, layout = found, realised
        return best, layout

    def _candidates(self, kept: SearchState) -> list[SearchState]:
        """Phase 1's allocation, then, where they differ from it and pack, every job filled and the knapsack."""
        candidates = [kept]
        seen = {self._signature(kept)}
        for candidate in (self._filled(), self._knapsack()):
            if candidate is None:
                continue
            signature = self._signature(candidate)
            if signature not in seen and self.realiser.packs(candidate, range(len(self.problem.types))):
                seen.add(signature)
                candidates.append(candidate)
                self.evaluate(candidate)
        return candidates

    def _best_of(self, candidates: list[SearchState]) -> SearchState:
        """Local search from every candidate, best first, while the budget lasts: the objective has several basins
        (one wide job vs several narrower ones), and candidates start in different ones."""
        order = sorted(range(len(candidates)), key=lambda k: (candidates[k].value, k))
        best = candidates[order[0]]
        for k in order:
            if self.budget <= 0:
                break
            found = self._local_search(candidates[k])
            if found.value < best.value * (1 - 1e-12):
                best = found
        return best

    def _signature(self, state: SearchState) -> tuple[tuple[int, int], ...]:
        return tuple((state.kinds[i], state.widths[i]) for i in self.members)

    def _at_bases(self) -> SearchState:
        state = self.phase_one.copy()
        low, gpw = self.table.low, self.table.gpw
        for i in self.members:
            if state.kinds[i] >= 0 and state.widths[i] > low[i]:
                state.set(i, state.kinds[i], low[i], gpw[i])
        return state

    def _filled(self) -> SearchState:
        """Every admitted job widened to its maximum as GPUs last, shortest time at maximum first."""
        state = self._at_bases()
        high, gpw = self.table.high, self.table.gpw
        for i in self.members:
            kind = state.kinds[i]
            if kind >= 0:
                extra = min(high[i] - state.widths[i], state.free[kind] // gpw[i])
                if extra > 0:
                    state.set(i, kind, state.widths[i] + extra, gpw[i])
        return state

    def _knapsack(self) -> SearchState | None:
        """The poster's own-reduction knapsack (value of a worker: the job's own time saved), greedy by value per
        GPU, which is exact for these concave values. ``None`` when at most one job can grow: then it is
        :meth:`_filled`."""
        state = self._at_bases()
        table = self.table
        widths, free, gpw, high = state.widths, state.free, table.gpw, table.high
        growing = [i for i in self.members if state.kinds[i] >= 0 and widths[i] < high[i]]
        if len(growing) <= 1:
            return None
        heap: list[tuple[float, str, int]] = []

        def push(i: int) -> None:
            w = widths[i]
            if w < high[i]:
                # Time saved by one more worker: work / pace(w) - work / pace(w + 1), pace = w s / (1 + o (w - 1)).
                o = table.overhead[i]
                per_speed = self.problem.jobs[i].remaining_work / table.speeds[i][state.kinds[i]]
                gain = per_speed * ((1 + o * (w - 1)) / w - (1 + o * w) / (w + 1))
                heapq.heappush(heap, (-gain / gpw[i], self.problem.names[i], i))

        for i in growing:
            push(i)
        while heap:
            _, _, i = heapq.heappop(heap)
            kind = state.kinds[i]
            if free[kind] >= gpw[i]:
                state.set(i, kind, widths[i] + 1, gpw[i])
                push(i)
        return state

    # --------------------------------------------------------------------------------------- local search

    def _try(self, state: SearchState, changes: Sequence[Change]) -> bool:
        """Make ``changes`` in a statement; commit them if they pack and lower the objective, else discard them."""
        value = state.value
        gpw = self.table.gpw
        touched: set[int] = set()
        with state.statement() as statement:
            for i, kind, width in changes:
                touched.update(t for t in (state.kinds[i], kind) if t >= 0)
                state.set(i, kind, width, gpw[i])
            fits = all(f >= 0 for f in state.free) and self.realiser.packs(state, touched)
            if fits and self.evaluate(state) < value * (1 - 1e-12):
                statement.commit()
                return True
        return False

    def _local_search(self, start: SearchState) -> SearchState:
        state = start.copy()
        improved = True
        while improved and self.budget > 0:
            improved = False
            for changes in neighbours(self.ground, state):
                if self.budget <= 0:
                    break
                if self._try(state, changes):
                    improved = True
                    break
        return state

    def _mix_types(self, state: SearchState) -> None:
        """Jobs that opt in to mixing may grow onto other types where that raises their pace and the objective."""
        for i in self.members:
            if not self.problem.jobs[i].mix_gpu_types or self.budget <= 0:
                continue
            for t in self.problem.type_preference(i):
                self._mix_onto(state, i, t)

    def _mix_onto(self, state: SearchState, i: int, t: int) -> None:
        """Job ``i`` grown onto type ``t`` as far as the free GPUs there go, kept if it raises its pace (its slowest
        type's speed may drop) and lowers the objective."""
        job, speeds, g = self.problem.jobs[i], self.table.speeds[i], self.table.gpw[i]
        spread = dict(state.spreads[i]) if state.kinds[i] == SPREAD else {state.kinds[i]: state.widths[i]}
        width = sum(spread.values())
        if width >= self.table.high[i] or t in spread:
            return
        slowest = min(speeds[u] for u in spread)
        count = min(self.table.high[i] - width, state.free[t] // g)
        if count <= 0 or job.pace(width + count, min(slowest, speeds[t])) <= job.pace(width, slowest):
            return
        value = state.value
        # The free GPUs as the search has always counted them: a job on one type gives its GPUs back before taking
        # its spread's.
        taken = {state.kinds[i]: -state.widths[i] * g} if state.kinds[i] >= 0 else {}
        spread[t] = count
        for u, w in spread.items():
            taken[u] = taken.get(u, 0) + w * g
        with state.statement() as statement:
            state.spread_over(i, SPREAD, sorted(spread.items()), taken)
            if self.realiser.packs(state, set(spread)) and self.evaluate(state) < value * (1 - 1e-12):
                statement.commit()

    # ------------------------------------------------------------------------------------ leftover bases

    def _admit_leftovers(self, state: SearchState, layout: Layout) -> Layout | None:
        """Base demand stays first-class after phase 2: moving jobs between types can free room where a base that
        phase 1 could not place now fits. Such bases start, in admission order, on their fastest type with room,
        else on the fastest where scaling in flexible workers (of the longest jobs first) makes room. ``state`` and
        ``layout`` change in place (the layout may be replaced: the one returned); ``None`` if none starts."""
        problem = self.problem
        waiting = sorted(
            (i for i in range(len(problem.jobs)) if state.kinds[i] == QUEUED and problem.type_preference(i)),
            key=lambda i: admission_key(problem.jobs[i], problem.best_speed(i)),
        )
        started = False
        spare = self._spare(state)
        # The smallest base (GPUs, per type and worker size) that scaling in did not make room for: room only
        # shrinks as bases start, so any base at least as large fails too (as in phase 1).
        no_room: dict[tuple[int, int], int] = {}
        for i in waiting:
            placed = self._place_leftover(state, layout, i, spare, no_room)
            if placed is None:
                continue
            if placed[0] is not layout:  # flexible workers were scaled in for it
                layout = placed[0]
                spare = self._spare(state)
            state.set(i, placed[1], self.table.low[i], self.table.gpw[i])
            problem.started.append(i)
            self.members.append(i)  # so that realising a later squeeze places it too
            if len(problem.type_preference(i)) > 1:
                self.ground.movable.add(i)
            started = True
        return layout if started else None

    def _place_leftover(
        self, state: SearchState, layout: Layout, i: int, spare: list[int], no_room: dict[tuple[int, int], int]
    ) -> tuple[Layout, int] | None:
        """Job ``i``'s base placed on ``layout`` (its fastest type with room), else on a layout realised with the
        jobs of a type it may use squeezed (``state`` changed for them); the layout and the type, or ``None``."""
        job, preference = self.problem.jobs[i], self.problem.type_preference(i)
        for t in preference:
            if layout.place(job.name, job.gpus_per_worker, t, job.min_workers) is not None:
                return layout, t
        need = job.min_workers * job.gpus_per_worker
        for t in preference:
            # Scaling in helps only where the free GPUs alone fall short and the flexible ones make it up.
            if not state.free[t] < need <= state.free[t] + spare[t]:
                continue
            if need >= no_room.get((t, job.gpus_per_worker), need + 1):
                continue
            squeezed = squeeze(self.ground, state, i, t)
            if squeezed is None:
                continue
            with state.statement() as statement:
                for k, kind, width in squeezed[:-1]:
                    state.set(k, kind, width, self.table.gpw[k])
                realised = self.realiser.realise(state)
                if realised is None or realised.place(job.name, job.gpus_per_worker, t, job.min_workers) is None:
                    no_room[t, job.gpus_per_worker] = need
                    continue
                statement.commit()
                return realised, t
        return None

    def _spare(self, state: SearchState) -> list[int]:
        """Flexible GPUs (above the jobs' bases) per type."""
        spare = [0] * len(self.problem.types)
        low, gpw = self.table.low, self.table.gpw
        for k in self.members:
            if state.kinds[k] >= 0:
                spare[state.kinds[k]] += (state.widths[k] - low[k]) * gpw[k]
        return spare
