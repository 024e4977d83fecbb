"""Phase 2, flexible demand and GPU types: candidate allocations of the admitted jobs scored by the sum of
completion times in the typed fluid model, improved by a first-improvement local search whose every move is realised
on the servers before it is kept (see :mod:`lyra.core.allocation`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lyra.core.allocation.problem import Problem
from lyra.core.fluid import QUEUED, SPREAD, FluidModel
from lyra.core.ordering import admission_key
from lyra.core.packing import Layout, Slot

#: Stand-in completion time for a job that never starts in the fluid model (1,000 years).
_NEVER = 3.2e10

#: Exchanges that involve a running job, or other jobs scaled in to their bases, are tried only in decisions over at
#: most this many admitted jobs: they are quadratic (or worse) in the jobs that may change type, and most of them
#: do not pack, which costs no budget.
_EXCHANGE_JOBS = 64


@dataclass(slots=True)
class SearchState:
    """A candidate allocation as vectors: every job's kind (queued, spread over several types, or its one GPU
    type's index), width (workers) and, for spread jobs, workers per type; free GPUs per type; its objective."""

    kinds: list[int]
    widths: list[int]
    spreads: dict[int, list[tuple[int, int]]]
    free: list[int]
    value: float = math.inf

    def copy(self) -> SearchState:
        return SearchState(list(self.kinds), list(self.widths), dict(self.spreads), list(self.free), self.value)


#: One change of a search move: (job, new kind, new width).
_Change = tuple[int, int, int]


class Search:
    """Phase 2: flexible workers and GPU types of admitted jobs, scored in the typed fluid model.

    The search works on GPU counts per type; a move is kept only if it still bin-packs. On a type where every job
    that may use it has one-GPU workers the counts are exact; elsewhere a move is realised on the servers (by the
    placement rule) before it is scored. The best allocation found is realised once at the end.
    """

    def __init__(self, problem: Problem, budget: int, restart_cost_s: float | None) -> None:
        self.problem = problem
        self.budget = budget
        self.restart_cost = restart_cost_s
        self.evaluations = 0
        jobs = problem.jobs
        layout = problem.layout
        self.model = FluidModel([terms.fluid for terms in problem.terms], layout.capacity)
        self.members = [i for i in range(len(jobs)) if problem.kind[i] != QUEUED]
        self.name = [j.name for j in jobs]
        self.gpw = [j.gpus_per_worker for j in jobs]
        self.low = [j.min_workers for j in jobs]
        self.high = [terms.high for terms in problem.terms]
        self.speeds = [terms.speeds for terms in problem.terms]
        self.types = len(problem.types)
        #: Types on which GPU counts decide packing exactly (every job that may use them has 1-GPU workers).
        self.unit = [
            all(self.speeds[i][t] <= 0 or self.gpw[i] == 1 for i in range(len(jobs))) for t in range(self.types)
        ]
        #: Jobs this plan starts that may use another GPU type than phase 1 gave them; with a restart cost, also
        #: running jobs (on one type) that may use a type faster for them.
        self.movable = {i for i in problem.started if problem.kind[i] >= 0 and len(problem.type_preference(i)) > 1}
        self.running = set(problem.running)
        if restart_cost_s is not None:
            for i in problem.running:
                kind = problem.kind[i]
                if kind >= 0 and max(problem.terms[i].speeds) > problem.terms[i].speeds[kind]:
                    self.movable.add(i)
        self.members.sort(key=lambda i: (self._time_at_max(i), self.name[i]))
        widths = [layout.workers(name) for name in self.name]
        spreads: dict[int, list[tuple[int, int]]] = {}
        for i, kind in enumerate(problem.kind):
            if kind == SPREAD:
                per_type: dict[int, int] = {}
                for server, count in layout.hosts(self.name[i]).items():
                    per_type[layout.type_of[server]] = per_type.get(layout.type_of[server], 0) + count
                spreads[i] = sorted(per_type.items())
        self.phase_one = SearchState(list(problem.kind), widths, spreads, list(layout.free_of_type))
        self._type_layouts: dict[int, Layout] = {}

    def _time_at_max(self, i: int) -> float:
        problem = self.problem
        kind = problem.kind[i]
        speed = problem.terms[i].speeds[kind] if kind >= 0 else min(s for s in problem.terms[i].speeds if s > 0)
        return problem.jobs[i].time_at(self.high[i], speed)

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
                    extra[i] = self.restart_cost * job.pace(state.widths[i], self.problem.terms[i].speeds[kind])
        times = self.model.run(state.kinds, state.widths, state.spreads, extra)
        state.value = math.fsum(t if t != math.inf else _NEVER for t in times)
        return state.value

    def average_jct(self, state: SearchState) -> float:
        if not self.problem.jobs:
            return 0.0
        if state.value >= _NEVER:
            return math.inf
        return state.value / len(self.problem.jobs)

    # ------------------------------------------------------------------------------------------ realising

    def realise(self, state: SearchState) -> Layout | None:
        """The servers' layout of ``state``: phase 1's, with workers removed by the scale-in rule and added by the
        placement rule (largest workers first); ``None`` if something does not pack."""
        layout = self.problem.layout.copy()
        pending: list[tuple[int, int, int, int]] = []  # (member order, job, type, workers to add)
        for order, i in enumerate(self.members):
            name, g = self.name[i], self.gpw[i]
            hosts = layout.hosts(name)
            current: dict[int, int] = {}
            for server, count in hosts.items():
                current[layout.type_of[server]] = current.get(layout.type_of[server], 0) + count
            kind = state.kinds[i]
            target = dict(state.spreads[i]) if kind == SPREAD else {kind: state.widths[i]}
            for t, count in current.items():
                wanted = target.get(t, 0)
                if wanted < count:
                    layout.remove(name, g, count - wanted, only_type=t)
            for t, wanted in target.items():
                if wanted > current.get(t, 0):
                    pending.append((order, i, t, wanted - current.get(t, 0)))
        pending.sort(key=lambda item: (-self.gpw[item[1]], item[0]))
        for _, i, t, count in pending:
            if layout.place(self.name[i], self.gpw[i], t, count) is None:
                return None
        return layout

    def _packs(self, state: SearchState, touched: set[int]) -> bool:
        """Whether ``state`` bin-packs on the touched types (exact by counts on unit types; realised on the
        others, type by type, from phase 1's servers of that type alone)."""
        return all(self.unit[t] or self._packs_on(state, t) for t in touched)

    def _packs_on(self, state: SearchState, t: int) -> bool:
        layout = self._type_layout(t).copy()
        pending: list[tuple[int, int, int]] = []  # (member order, job, workers to add)
        for order, i in enumerate(self.members):
            kind = state.kinds[i]
            wanted = dict(state.spreads[i]).get(t, 0) if kind == SPREAD else (state.widths[i] if kind == t else 0)
            name, g = self.name[i], self.gpw[i]
            count = layout.workers(name)
            if wanted < count:
                layout.remove(name, g, count - wanted)
            elif wanted > count:
                pending.append((order, i, wanted - count))
        pending.sort(key=lambda item: (-self.gpw[item[1]], item[0]))
        return all(layout.place(self.name[i], self.gpw[i], 0, count) is not None for _, i, count in pending)

    def _type_layout(self, t: int) -> Layout:
        """Phase 1's layout of the servers of one type (built once)."""
        built = self._type_layouts.get(t)
        if built is None:
            full = self.problem.layout
            built = Layout(
                [Slot(full.names[s], full.types[t], full.size[s], full.safe[s]) for s in full.servers_of_type[t]]
            )
            for name, hosts in full.jobs.items():
                for server, count in hosts.items():
                    if full.type_of[server] == t:
                        built.add(name, built.index[full.names[server]], count, self.problem.gpw_of[name])
            self._type_layouts[t] = built
        return built

    # ------------------------------------------------------------------------------------------- candidates

    def run(self) -> tuple[SearchState, Layout]:
        kept = self.phase_one.copy()
        self.evaluate(kept)
        if not any(self.high[i] > self.low[i] or i in self.movable for i in self.members):
            return kept, self.problem.layout  # nothing to choose: no elastic job, none that could change type
        candidates = [kept]
        seen = {self._signature(kept)}
        for candidate in (self._filled(), self._knapsack()):
            if candidate is None:
                continue
            signature = self._signature(candidate)
            if signature not in seen and self._packs(candidate, set(range(self.types))):
                seen.add(signature)
                candidates.append(candidate)
                self.evaluate(candidate)
        order = sorted(range(len(candidates)), key=lambda k: (candidates[k].value, k))
        best = candidates[order[0]]
        # Local search from every candidate, best first, while the budget lasts: the objective has several
        # basins (one wide job vs several narrower ones), and candidates start in different ones.
        for k in order:
            if self.budget <= 0:
                break
            found = self._local_search(candidates[k])
            if found.value < best.value * (1 - 1e-12):
                best = found
        self._mix_types(best)
        layout = self.realise(best)
        if layout is None:  # every kept move packed; this is a guard, not a path
            return kept, self.problem.layout
        # Bases that the moves made room for start; the search then goes on with them (they may change type too),
        # until no more start or the budget is spent.
        while (admitted := self._admit_leftovers(best, layout)) is not None:
            best, layout = admitted
            self.evaluate(best)
            if self.budget <= 0:
                break
            found = self._local_search(best)
            realised = self.realise(found) if found.value < best.value * (1 - 1e-12) else None
            if realised is not None:
                best, layout = found, realised
        return best, layout

    def _admit_leftovers(self, state: SearchState, layout: Layout) -> tuple[SearchState, Layout] | None:
        """Base demand stays first-class after phase 2: moving jobs between types can free room where a base that
        phase 1 could not place now fits. Such bases start, in admission order, on their fastest type with room,
        else on the fastest where scaling in flexible workers (of the longest jobs first) makes room. ``None`` if
        none starts."""
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
            job = problem.jobs[i]
            need = job.min_workers * job.gpus_per_worker
            for t in problem.type_preference(i):
                if layout.place(job.name, job.gpus_per_worker, t, job.min_workers) is not None:
                    break
            else:
                for t in problem.type_preference(i):
                    # Scaling in helps only where the free GPUs alone fall short and the flexible ones make it up.
                    if not state.free[t] < need <= state.free[t] + spare[t]:
                        continue
                    if need >= no_room.get((t, job.gpus_per_worker), need + 1):
                        continue
                    squeezed = self._squeeze(state, i, t)
                    if squeezed is None:
                        continue
                    trial = state.copy()
                    for k, kind, width in squeezed[:-1]:
                        self._set(trial, k, kind, width)
                    realised = self.realise(trial)
                    if realised is None or realised.place(job.name, job.gpus_per_worker, t, job.min_workers) is None:
                        no_room[t, job.gpus_per_worker] = need
                        continue
                    state, layout = trial, realised
                    spare = self._spare(state)
                    break
                else:
                    continue
            self._set(state, i, t, job.min_workers)
            problem.started.append(i)
            self.members.append(i)  # so that realising a later squeeze places it too
            if len(problem.type_preference(i)) > 1:
                self.movable.add(i)
            started = True
        return (state, layout) if started else None

    def _spare(self, state: SearchState) -> list[int]:
        """Flexible GPUs (above the jobs' bases) per type."""
        spare = [0] * self.types
        for k in self.members:
            if state.kinds[k] >= 0:
                spare[state.kinds[k]] += (state.widths[k] - self.low[k]) * self.gpw[k]
        return spare

    def _signature(self, state: SearchState) -> tuple[tuple[int, int], ...]:
        return tuple((state.kinds[i], state.widths[i]) for i in self.members)

    def _set(self, state: SearchState, i: int, kind: int, width: int) -> None:
        g = self.gpw[i]
        if state.kinds[i] >= 0:
            state.free[state.kinds[i]] += state.widths[i] * g
        if kind >= 0:
            state.free[kind] -= width * g
        state.kinds[i] = kind
        state.widths[i] = width

    def _at_bases(self) -> SearchState:
        state = self.phase_one.copy()
        for i in self.members:
            if state.kinds[i] >= 0 and state.widths[i] > self.low[i]:
                self._set(state, i, state.kinds[i], self.low[i])
        return state

    def _filled(self) -> SearchState:
        """Every admitted job widened to its maximum as GPUs last, shortest time at maximum first."""
        state = self._at_bases()
        for i in self.members:
            kind = state.kinds[i]
            if kind >= 0:
                extra = min(self.high[i] - state.widths[i], state.free[kind] // self.gpw[i])
                if extra > 0:
                    self._set(state, i, kind, state.widths[i] + extra)
        return state

    def _knapsack(self) -> SearchState | None:
        """The poster's own-reduction knapsack (value of a worker: the job's own time saved), greedy by value per
        GPU, which is exact for these concave values. ``None`` when at most one job can grow: then it is
        :meth:`_filled`."""
        state = self._at_bases()
        growing = [i for i in self.members if state.kinds[i] >= 0 and state.widths[i] < self.high[i]]
        if len(growing) <= 1:
            return None
        problem = self.problem
        heap: list[tuple[float, str, int]] = []
        widths, free, gpw, high = state.widths, state.free, self.gpw, self.high

        def push(i: int) -> None:
            w = widths[i]
            if w < high[i]:
                job = problem.jobs[i]
                # Time saved by one more worker: work / pace(w) - work / pace(w + 1), pace = w s / (1 + o (w - 1)).
                o = job.scaling_overhead
                per_speed = job.remaining_work / problem.terms[i].speeds[state.kinds[i]]
                gain = per_speed * ((1 + o * (w - 1)) / w - (1 + o * w) / (w + 1))
                heapq.heappush(heap, (-gain / gpw[i], self.name[i], i))

        for i in growing:
            push(i)
        while heap:
            _, _, i = heapq.heappop(heap)
            kind = state.kinds[i]
            if free[kind] >= gpw[i]:
                self._set(state, i, kind, widths[i] + 1)
                push(i)
        return state

    # --------------------------------------------------------------------------------------- local search

    def _try(self, state: SearchState, changes: Sequence[_Change]) -> bool:
        """Apply ``changes``, keep them if they pack and lower the objective; otherwise restore ``state``."""
        before = [(i, state.kinds[i], state.widths[i]) for i, _, _ in changes]
        value = state.value
        touched: set[int] = set()
        for i, kind, width in changes:
            touched.update(t for t in (state.kinds[i], kind) if t >= 0)
            self._set(state, i, kind, width)
        fits = all(f >= 0 for f in state.free) and self._packs(state, touched)
        if fits and self.evaluate(state) < value * (1 - 1e-12):
            return True
        for i, kind, width in reversed(before):
            self._set(state, i, kind, width)
        state.value = value
        return False

    def _local_search(self, start: SearchState) -> SearchState:
        state = start.copy()
        improved = True
        while improved and self.budget > 0:
            improved = False
            for changes in self._neighbours(state):
                if self.budget <= 0:
                    break
                if self._try(state, changes):
                    improved = True
                    break
        return state

    def _neighbours(self, state: SearchState) -> Iterator[list[_Change]]:
        """Moves, one at a time, in this order: one more worker; one worker moved between two jobs of a type; a job
        this plan starts (or, with a restart cost, a running one) moved to another type; two jobs exchanging types;
        a running job and the jobs started beside it exchanged for one job on a faster type; one worker fewer. The
        order is fixed (members by time at maximum, movers by time left), so the search is deterministic."""
        kinds, widths, free = state.kinds, state.widths, state.free
        members = self.members
        gpw, low, high = self.gpw, self.low, self.high
        for i in members:
            kind = kinds[i]
            if kind >= 0 and widths[i] < high[i] and free[kind] >= gpw[i]:
                yield [(i, kind, widths[i] + 1)]
        for i in members:
            kind = kinds[i]
            if kind < 0 or widths[i] >= high[i]:
                continue
            for k in reversed(members):
                if k != i and kinds[k] == kind and widths[k] > low[k] and free[kind] + gpw[k] >= gpw[i]:
                    yield [(k, kind, widths[k] - 1), (i, kind, widths[i] + 1)]
                    # A worker of more GPUs than i's frees room for several of i's.
                    more = min(high[i] - widths[i], (free[kind] + gpw[k]) // gpw[i])
                    if more > 1:
                        yield [(k, kind, widths[k] - 1), (i, kind, widths[i] + more)]
        speeds = self.speeds
        phase_one = self.phase_one.kinds
        # Jobs with the most time left first: they gain the most from a faster type (first improvement wins).
        movable = sorted(
            (i for i in members if i in self.movable and kinds[i] >= 0),
            key=lambda i: (-self.problem.jobs[i].time_at(widths[i], speeds[i][kinds[i]]), self.name[i]),
        )
        for i in movable:
            running = i in self.running
            for t in self.problem.type_preference(i):
                if t == kinds[i] or (running and speeds[i][t] <= speeds[i][phase_one[i]]):
                    continue
                room = free[t] // gpw[i]
                # As wide as it is now, as wide as the other type holds (it may be wider there), or at its base
                # (the restart costs less time at a lower pace, and its GPUs go to the others); each also with the
                # GPUs it leaves handed to the jobs still on its old type (a move that pays off only with that).
                for width in dict.fromkeys((min(widths[i], room), min(high[i], room), low[i])):
                    if low[i] <= width <= room:
                        yield [(i, t, width)]
                        filled = self._with_fill(state, [(i, t, width)])
                        if len(filled) > 1:
                            yield filled
                if room < low[i] and running:
                    squeezed = self._squeeze(state, i, t)
                    if squeezed is not None:
                        yield squeezed
                        filled = self._with_fill(state, squeezed)
                        if len(filled) > len(squeezed):
                            yield filled
        # Exchanges: two jobs swapping types, at most one of them running (a running job only to a faster type).
        small = len(members) <= _EXCHANGE_JOBS
        exchanging = movable if small else [i for i in movable if i not in self.running]
        for a, i in enumerate(exchanging):
            for k in exchanging[a + 1 :]:
                ti, tk = kinds[i], kinds[k]
                if ti == tk or speeds[i][tk] <= 0 or speeds[k][ti] <= 0:
                    continue
                if i in self.running and (k in self.running or speeds[i][tk] <= speeds[i][phase_one[i]]):
                    continue
                if k in self.running and speeds[k][ti] <= speeds[k][phase_one[k]]:
                    continue
                room_i = free[tk] + widths[k] * gpw[k]
                room_k = free[ti] + widths[i] * gpw[i]
                wi = min(widths[i], room_i // gpw[i])
                wk = min(widths[k], room_k // gpw[k])
                if wi >= low[i] and wk >= low[k]:
                    yield [(i, tk, wi), (k, ti, wk)]
                    filled = self._with_fill(state, [(i, tk, wi), (k, ti, wk)])
                    if len(filled) > 2:
                        yield filled
                elif small:
                    # No room for a base at the widths of now: both at their bases, every other job on the two
                    # types scaled in to its base, then everything widened with what is left.
                    changes = [(i, tk, low[i]), (k, ti, low[k])]
                    changes += [(m, kinds[m], low[m]) for m in members if m not in (i, k) and kinds[m] in (ti, tk)]
                    yield self._with_fill(state, changes)

        # A running job moved to a faster type together with the jobs this plan started beside it, in exchange for
        # one job this plan started there (a cycle of three types changes that no exchange of two reaches): all of
        # them at their bases, then widened with what is left.
        for i in movable if small else ():
            if i not in self.running:
                continue
            ts = kinds[i]
            for tf in self.problem.type_preference(i):
                if speeds[i][tf] <= speeds[i][phase_one[i]]:
                    continue
                movers = [m for m in movable if m not in self.running and kinds[m] == ts and speeds[m][tf] > 0]
                if not movers:
                    continue
                leaving = widths[i] * gpw[i] + sum(widths[m] * gpw[m] for m in movers)
                bases = low[i] * gpw[i] + sum(low[m] * gpw[m] for m in movers)
                for k in movable:
                    if k in self.running or kinds[k] != tf or speeds[k][ts] <= 0:
                        continue
                    wk = min(widths[k], (free[ts] + leaving) // gpw[k])
                    if wk < low[k] or free[tf] + widths[k] * gpw[k] < bases:
                        continue
                    changes = [(k, ts, wk), (i, tf, low[i]), *((m, tf, low[m]) for m in movers)]
                    yield changes
                    filled = self._with_fill(state, changes)
                    if len(filled) > len(changes):
                        yield filled

        # Last, one worker fewer: the GPU left free goes to the queue's next base sooner (or, in the model, to the
        # jobs still running when one ends), longest jobs first.
        for i in reversed(members):
            if kinds[i] >= 0 and widths[i] > low[i]:
                yield [(i, kinds[i], widths[i] - 1)]

    def _with_fill(self, state: SearchState, changes: Sequence[_Change]) -> list[_Change]:
        """``changes``, then every job widened with the GPUs left on its type, shortest at maximum first: a type
        move often pays off only together with what it frees. Where GPU counts do not decide packing, a job is
        widened only as far as its type still packs (one worker too many would lose the whole move)."""
        trial = state.copy()
        for i, kind, width in changes:
            self._set(trial, i, kind, width)
        result = list(changes)
        if any(f < 0 for f in trial.free):
            return result
        for k in self.members:
            kind, width = trial.kinds[k], trial.widths[k]
            if kind < 0 or width >= self.high[k]:
                continue
            extra = min(self.high[k] - width, trial.free[kind] // self.gpw[k])
            while extra > 0:
                self._set(trial, k, kind, width + extra)
                if self.unit[kind] or self._packs_on(trial, kind):
                    result.append((k, kind, width + extra))
                    break
                extra -= 1
            else:
                self._set(trial, k, kind, width)
        return result

    def _squeeze(self, state: SearchState, i: int, t: int) -> list[_Change] | None:
        """Move job ``i`` to type ``t`` at its base, scaling in flexible workers of the longest jobs there."""
        g = self.gpw[i]
        short = self.low[i] * g - state.free[t]
        changes: list[_Change] = []
        for k in reversed(self.members):
            if short <= 0:
                break
            if k == i or state.kinds[k] != t or state.widths[k] <= self.low[k]:
                continue
            take = min(state.widths[k] - self.low[k], -(-short // self.gpw[k]))
            changes.append((k, t, state.widths[k] - take))
            short -= take * self.gpw[k]
        if short > 0:
            return None
        return [*changes, (i, t, self.low[i])]

    def _mix_types(self, state: SearchState) -> None:
        """Jobs that opt in to mixing may grow onto other types where that raises their pace and the objective."""
        problem = self.problem
        for i in self.members:
            job = problem.jobs[i]
            if not job.mix_gpu_types or self.budget <= 0:
                continue
            for t in problem.type_preference(i):
                spread = dict(state.spreads[i]) if state.kinds[i] == SPREAD else {state.kinds[i]: state.widths[i]}
                width = sum(spread.values())
                if width >= self.high[i] or t in spread:
                    continue
                slowest = min(problem.terms[i].speeds[u] for u in spread)
                count = min(self.high[i] - width, state.free[t] // job.gpus_per_worker)
                if count <= 0 or job.pace(width + count, min(slowest, problem.terms[i].speeds[t])) <= job.pace(
                    width, slowest
                ):
                    continue
                before = state.copy()
                kind = state.kinds[i]
                if kind >= 0:
                    state.free[kind] += state.widths[i] * job.gpus_per_worker
                spread[t] = count
                for u, w in spread.items():
                    state.free[u] -= w * job.gpus_per_worker
                state.kinds[i] = SPREAD
                state.widths[i] = width + count
                state.spreads[i] = sorted(spread.items())
                if not (self._packs(state, set(spread)) and self.evaluate(state) < before.value * (1 - 1e-12)):
                    state.kinds, state.widths, state.spreads = before.kinds, before.widths, before.spreads
                    state.free, state.value = before.free, before.value
