"""Realising a candidate on the servers: the search works on GPU counts per type, and a move is kept only if it
still bin-packs. On a type where every job that may use it has one-GPU workers the counts are exact; elsewhere the
candidate is realised on that type's servers (phase 1's, in a statement discarded after the check) by the scale-in
and placement rules before it is scored."""

from __future__ import annotations

from collections.abc import Iterable

from lyra.core.allocation.journal import TrackedLayout
from lyra.core.allocation.problem import Problem
from lyra.core.allocation.state import SearchState
from lyra.core.fluid import SPREAD
from lyra.core.packing import Layout, Slot


class Realiser:
    """Realises candidates of ``problem`` on its servers; ``members`` (the search's, shared) are the admitted jobs in
    the order their workers are placed among equals."""

    def __init__(self, problem: Problem, members: list[int]) -> None:
        self.problem = problem
        self.members = members
        table = problem.table
        #: Types on which GPU counts decide packing exactly (every job that may use them has 1-GPU workers).
        self.unit = [
            all(table.speeds[i][t] <= 0 or table.gpw[i] == 1 for i in range(len(table)))
            for t in range(len(problem.types))
        ]
        self._type_layouts: dict[int, TrackedLayout] = {}

    def packs(self, state: SearchState, types: Iterable[int]) -> bool:
        """Whether ``state`` bin-packs on ``types`` (exact by counts on unit types; realised on the others, type by
        type, from phase 1's servers of that type alone)."""
        return all(self.unit[t] or self._packs_on(state, t) for t in types)

    def realise(self, state: SearchState) -> Layout | None:
        """The servers' layout of ``state``: phase 1's, with workers removed by the scale-in rule and added by the
        placement rule (largest workers first); ``None`` if something does not pack."""
        layout = self.problem.layout.copy()
        names, gpw = self.problem.names, self.problem.table.gpw
        pending: list[tuple[int, int, int, int]] = []  # (member order, job, type, workers to add)
        for order, i in enumerate(self.members):
            name, g = names[i], gpw[i]
            current: dict[int, int] = {}
            for server, count in layout.hosts(name).items():
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
        pending.sort(key=lambda item: (-gpw[item[1]], item[0]))
        for _, i, t, count in pending:
            if layout.place(names[i], gpw[i], t, count) is None:
                return None
        return layout

    def _packs_on(self, state: SearchState, t: int) -> bool:
        layout = self._type_layout(t)
        names, gpw = self.problem.names, self.problem.table.gpw
        kinds, widths, placed = state.kinds, state.widths, layout.jobs
        with layout.statement():
            pending: list[tuple[int, int, int]] = []  # (member order, job, workers to add)
            for order, i in enumerate(self.members):
                kind = kinds[i]
                wanted = dict(state.spreads[i]).get(t, 0) if kind == SPREAD else (widths[i] if kind == t else 0)
                hosts = placed.get(names[i])
                count = sum(hosts.values()) if hosts else 0
                if wanted < count:
                    layout.remove(names[i], gpw[i], count - wanted)
                elif wanted > count:
                    pending.append((order, i, wanted - count))
            pending.sort(key=lambda item: (-gpw[item[1]], item[0]))
            return all(layout.place(names[i], gpw[i], 0, count) is not None for _, i, count in pending)

    def _type_layout(self, t: int) -> TrackedLayout:
        """Phase 1's layout of the servers of one type (built once; every check discards its changes)."""
        built = self._type_layouts.get(t)
        if built is None:
            full = self.problem.layout
            names, type_of, gpw_of = full.names, full.type_of, self.problem.gpw_of
            built = TrackedLayout(
                [Slot(names[s], full.types[t], full.size[s], full.safe[s]) for s in full.servers_of_type[t]],
                [
                    (name, names[server], count, gpw_of[name])
                    for name, hosts in full.jobs.items()
                    for server, count in hosts.items()
                    if type_of[server] == t
                ],
            )
            self._type_layouts[t] = built
        return built
