"""Phase 1, base demand first-class: queued bases in admission order (:func:`lyra.core.ordering.admission_key`),
each all or nothing on the fastest GPU type with room for it, else on a slower one, else making room by scaling in
flexible workers of running jobs, repacking or relocating this plan's bases, or rebuilding their placement (see
:mod:`lyra.core.allocation`)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from lyra.core.allocation.journal import Change, Statement
from lyra.core.allocation.problem import Problem
from lyra.core.fluid import QUEUED, SPREAD
from lyra.core.ordering import admission_key

#: A blocked base rebuilds the placement of this plan's bases only while they are fewer than this.
_REBUILD_JOBS = 64
#: Bases a blocked base may move to other types to make room (the smallest ones): bounds phase 1's work.
_RELOCATION_MOVERS = 8


class Admission:
    """Phase 1 on a :class:`~lyra.core.allocation.problem.Problem`: what it admits goes into the problem's layout,
    kinds and started jobs; the flexible workers bases may displace and each server's room are its own."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        layout = problem.layout
        # Flexible workers that bases may displace, per type: {job: spare workers}, and their GPUs in all.
        self.spare: list[dict[str, int]] = [{} for _ in problem.types]
        self.spare_gpus = [0] * len(problem.types)
        for k in problem.running:
            kind, other = problem.kind[k], problem.jobs[k]
            extra = layout.workers(other.name) - other.min_workers
            if kind >= 0 and extra > 0:
                self.spare[kind][other.name] = extra
                self.spare_gpus[kind] += extra * other.gpus_per_worker
        self.spare_at_start = list(self.spare_gpus)
        # The smallest base (in workers, per type and worker size) known not to fit even by displacing: free room
        # and flexible workers only shrink during phase 1, so any base at least as large fails too.
        self.no_room: dict[tuple[int, int], int] = {}
        self._donor_servers: dict[int, dict[int, list[str]]] = {}
        # Per type, each server's room for bases in GPUs (free plus displaceable), kept up to date through the
        # servers a change touches (``_dirty``) rather than recomputed for every base.
        self._room: dict[int, dict[int, int]] = {}
        self._dirty: dict[int, set[int]] = {}
        # Shapes of bases whose rebuild failed (``_place_rebuilding``), while this many bases have started.
        self._failed_rebuilds: set[tuple[tuple[int, ...], int, int, int]] = set()
        self._failed_rebuilds_of = 0

    def admit_bases(
        self, *, longest_first: bool, pinned: Mapping[int, int] | None = None, fast_type_first: bool = False
    ) -> None:
        """Phase 1: queued bases in admission order, each on the fastest type with room, else making room. With
        ``fast_type_first``, room made by scaling in flexible workers on a faster type comes before free room on a
        slower one."""
        problem = self.problem
        queued = [i for i in range(len(problem.jobs)) if problem.kind[i] == QUEUED]
        queued.sort(key=lambda i: admission_key(problem.jobs[i], problem.best_speed(i)))
        if longest_first:
            queued.sort(
                key=lambda i: (
                    -problem.jobs[i].priority,
                    -problem.jobs[i].time_at(problem.jobs[i].min_workers, problem.best_speed(i)),
                )
            )
        for i in queued:
            preference = (pinned[i],) if pinned and i in pinned else problem.type_preference(i)
            if self._admit(i, preference, fast_type_first):
                problem.started.append(i)

    def _admit(self, i: int, preference: Sequence[int], fast_type_first: bool) -> bool:
        """Job ``i``'s base on the first of ``preference`` with room, else making room; whether it started."""
        problem, layout = self.problem, self.problem.layout
        job = problem.jobs[i]
        for t in preference:
            moves = layout.place(job.name, job.gpus_per_worker, t, job.min_workers)
            if moves is not None:
                self._dirty.setdefault(t, set()).update(server for server, _ in moves)
                problem.kind[i] = t
                return True
            if fast_type_first and self._place_displacing(i, t):
                problem.kind[i] = t
                return True
        for t in preference:
            if self._place_displacing(i, t) or self._place_repacking(i, t) or self._place_relocating(i, t):
                problem.kind[i] = t
                return True
        if self._place_rebuilding(i):
            return True
        if job.mix_gpu_types and len(preference) > 1 and self._place_across(i, preference):
            kinds = layout.job_types(job.name)
            problem.kind[i] = next(iter(kinds)) if len(kinds) == 1 else SPREAD
        return problem.kind[i] != QUEUED

    def slowed_bases(self) -> bool:
        """Whether phase 1 started a base on a type slower than its fastest while flexible workers were there."""
        return any(
            0 <= self.problem.kind[i] != self.problem.type_preference(i)[0]
            and self.spare_at_start[self.problem.type_preference(i)[0]] > 0
            for i in self.problem.started
        )

    def _place_relocating(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by moving bases this plan started there to another type they may
        use, where they fit in free GPUs: a job that can only use ``t`` is not kept waiting by one that could run
        elsewhere. Each of the ``_RELOCATION_MOVERS`` smallest movable bases is tried alone, then all of them
        together (smallest first); each group in a statement, committed if the base then fits."""
        problem, layout = self.problem, self.problem.layout
        job = problem.jobs[i]
        low, gpw, kind, preference = problem.table.low, problem.table.gpw, problem.kind, problem.table.preference
        movers = sorted(
            (k for k in problem.started if kind[k] == t and len(preference[k]) > 1),
            key=lambda k: (low[k] * gpw[k], problem.names[k]),
        )[:_RELOCATION_MOVERS]
        movable = sum(low[k] * gpw[k] for k in movers)
        if not movers or layout.free_of_type[t] + movable < job.min_workers * job.gpus_per_worker:
            return False
        for group in [[k] for k in movers] + ([movers] if len(movers) > 1 else []):
            with layout.statement() as statement:
                moved = {k: left for k in group if (left := self._move_base(k, t)) is not None}
                if moved and self._place_repacking(i, t):
                    statement.commit()
                    return True
                statement.rollback()
            for k, left in moved.items():
                problem.kind[k] = t
                self._dirty.setdefault(t, set()).update(left)
        return False

    def _place_rebuilding(self, i: int) -> bool:
        """Last resort for job ``i``'s base: place every base this plan started, and ``i``'s, again from scratch,
        the most constrained first (fewest GPU types, then largest workers, then largest bases), each on its
        fastest type with room. None of them has started yet, so moving them costs nothing. In a statement,
        discarded if some base does not fit; bounded to ``_REBUILD_JOBS`` bases.

        A rebuild that failed fails again for a base of the same shape (its types, worker size and base) taking the
        same place in that order, until a base starts (only then does the layout change for good): it is not tried
        again. Nor is one for a base that no type it may use could hold (:meth:`_could_rebuild_for`)."""
        problem, layout = self.problem, self.problem.layout
        if len(problem.started) >= _REBUILD_JOBS or not self._could_rebuild_for(i):
            return False
        table = problem.table

        def constrained(k: int) -> tuple[int, int, int, int]:
            return (len(table.preference[k]), -table.gpw[k], -table.low[k] * table.gpw[k], k)

        mine = constrained(i)
        shape = (table.preference[i], table.gpw[i], table.low[i], sum(constrained(k) < mine for k in problem.started))
        if self._failed_rebuilds_of != len(problem.started):
            self._failed_rebuilds.clear()
            self._failed_rebuilds_of = len(problem.started)
        if shape in self._failed_rebuilds:
            return False
        group = [*problem.started, i]
        kinds = {k: problem.kind[k] for k in group}
        with layout.statement() as statement:
            for k in problem.started:
                layout.remove_all(problem.names[k], table.gpw[k])
            for k in sorted(group, key=constrained):
                placed = next(
                    (
                        t
                        for t in table.preference[k]
                        if layout.place(problem.names[k], table.gpw[k], t, table.low[k]) is not None
                    ),
                    None,
                )
                if placed is None:
                    statement.rollback()
                    for other in group:
                        problem.kind[other] = kinds[other]
                    self._failed_rebuilds.add(shape)
                    return False
                problem.kind[k] = placed
            statement.commit()
        for t in range(len(problem.types)):
            self._dirty.setdefault(t, set()).update(layout.servers_of_type[t])
        return True

    def _could_rebuild_for(self, i: int) -> bool:
        """Whether some type job ``i`` may use holds its base once this plan's bases leave their servers: each
        server's free GPUs plus what those bases hold there, in whole workers of ``i``'s size. When none does, the
        rebuild cannot place ``i`` (the other bases only take room), so it is not tried."""
        problem, layout = self.problem, self.problem.layout
        g, need = problem.table.gpw[i], problem.table.low[i]
        freed: dict[int, int] = {}
        for k in problem.started:
            size = problem.table.gpw[k]
            for server, count in layout.hosts(problem.names[k]).items():
                freed[server] = freed.get(server, 0) + count * size
        for t in problem.type_preference(i):
            workers = layout.room(t, g)
            for server, gpus in freed.items():
                if layout.type_of[server] == t:
                    free = layout.free[server]
                    workers += (free + gpus) // g - free // g
            if workers >= need:
                return True
        return False

    def _move_base(self, k: int, t: int) -> list[int] | None:
        """Move job ``k``'s base from type ``t`` to the fastest other type it may use with free room; the servers of
        ``t`` it left, or ``None``."""
        layout = self.problem.layout
        other = self.problem.jobs[k]
        for u in self.problem.type_preference(k):
            if u == t:
                continue
            placed = layout.place(other.name, other.gpus_per_worker, u, layout.workers(other.name))
            if placed is None:
                continue
            left_t = [(s, -n) for s, n in layout.hosts(other.name).items() if layout.type_of[s] == t]
            for server, count in left_t:
                layout.add(other.name, server, count, other.gpus_per_worker)
            self.problem.kind[k] = u
            self._dirty.setdefault(t, set()).update(s for s, _ in left_t)
            self._dirty.setdefault(u, set()).update(s for s, _ in placed)
            return [s for s, _ in left_t]
        return None

    def _place_repacking(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by packing it again together with the bases this plan started
        there (they have not started yet, so moving them costs nothing): largest workers first, then admission
        order, each by the placement rule. In a statement, discarded if it does not fit."""
        problem, layout = self.problem, self.problem.layout
        job = problem.jobs[i]
        moves = layout.place(job.name, job.gpus_per_worker, t, job.min_workers)
        if moves is not None:
            self._dirty.setdefault(t, set()).update(s for s, _ in moves)
            return True
        if layout.free_of_type[t] < job.min_workers * job.gpus_per_worker:
            return False  # the started bases stay on t: no packing of them leaves room for this base
        gpw, low = problem.table.gpw, problem.table.low
        group = [k for k in problem.started if problem.kind[k] == t] + [i]
        group.sort(key=lambda k: -gpw[k])  # stable: admission order among equals
        with layout.statement() as statement:
            for k in group:
                if layout.hosts(problem.names[k]):
                    layout.remove_all(problem.names[k], gpw[k])
            if not all(layout.place(problem.names[k], gpw[k], t, low[k]) is not None for k in group):
                return False
            statement.commit()
        self._dirty.setdefault(t, set()).update(layout.servers_of_type[t])
        return True

    def _place_across(self, i: int, preference: Sequence[int]) -> bool:
        """A base over several types (a job that opts in to mixing), fastest types first; in a statement, discarded
        if it does not fit."""
        layout = self.problem.layout
        job = self.problem.jobs[i]
        touched: list[int] = []
        left = job.min_workers
        with layout.statement() as statement:
            for t in preference:
                take = min(left, layout.room(t, job.gpus_per_worker))
                if take:
                    placed = layout.place(job.name, job.gpus_per_worker, t, take)
                    if placed is None:
                        break
                    touched += (server for server, _ in placed)
                    left -= take
                if not left:
                    statement.commit()
                    break
        for server in touched:
            self._dirty.setdefault(layout.type_of[server], set()).add(server)
        return not left

    def _place_displacing(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by scaling in flexible workers of jobs there; in a statement, all or
        nothing.

        Servers that can hold the most base workers (free GPUs plus the flexible workers on them) go first, safe
        ones before loaned ones; on each, flexible workers leave from the jobs with the most to spare."""
        layout = self.problem.layout
        job = self.problem.jobs[i]
        g = job.gpus_per_worker
        need = job.min_workers
        if need >= self.no_room.get((t, g), need + 1):
            return False
        if layout.free_of_type[t] + self.spare_gpus[t] < need * g:
            self.no_room[(t, g)] = need
            return False
        # Taken in the order of (workers it holds, loaned, server): the server breaks every tie. A heap, as a base
        # usually needs the first few servers only.
        servers = [(-(r // g), not layout.safe[s], s) for s, r in self._room_of(t).items() if r >= g]
        if -sum(holds for holds, _, _ in servers) < need:
            self.no_room[(t, g)] = need
            return False
        heapq.heapify(servers)
        left = need
        with layout.statement() as statement:
            while left and servers:
                server = heapq.heappop(servers)[2]
                take = min(left, self._raw_room(t, server) // g)
                if take > 0 and self._displace_on(server, t, job.name, take * g):
                    layout.add(job.name, server, take, g)
                    self._dirty.setdefault(t, set()).add(server)
                    left -= take
            if not left:
                statement.commit()
                return True
            self._restore(statement, t, job.name)
        self.no_room[(t, g)] = need
        return False

    def _displace_on(self, server: int, t: int, mover: str, gpus: int) -> bool:
        """Scale in flexible workers on ``server`` until it has ``gpus`` free, from the jobs with the most to spare;
        in a statement, discarded (the workers come back) if that does not make the room."""
        layout, spare, gpw = self.problem.layout, self.spare[t], self.problem.gpw_of
        with layout.statement() as statement:
            for name in sorted(self._donors_on_servers(t).get(server, ()), key=lambda n: (-spare[n], n)):
                while layout.free[server] < gpus and spare[name] and layout.hosts(name).get(server, 0):
                    layout.add(name, server, -1, gpw[name])
                    spare[name] -= 1
                    self.spare_gpus[t] -= gpw[name]
                    self._touch_job(t, name)
            if layout.free[server] >= gpus:
                statement.commit()
                return True
            self._restore(statement, t, mover)
            return False

    def _raw_room(self, t: int, server: int) -> int:
        """GPUs a base could get on ``server``: its free GPUs plus the flexible workers there that may leave."""
        spare, gpw, layout = self.spare[t], self.problem.gpw_of, self.problem.layout
        displaceable = sum(
            min(spare[n], layout.hosts(n).get(server, 0)) * gpw[n] for n in self._donors_on_servers(t).get(server, ())
        )
        return layout.free[server] + displaceable

    def _room_of(self, t: int) -> dict[int, int]:
        """Every server of type ``t`` with room for a base, and that room in GPUs, brought up to date."""
        room = self._room.get(t)
        dirty = self._dirty.setdefault(t, set())
        if room is None:
            room = self._room[t] = {}
            dirty.update(self.problem.layout.servers_of_type[t])
        for server in dirty:
            raw = self._raw_room(t, server)
            if raw > 0:
                room[server] = raw
            else:
                room.pop(server, None)
        dirty.clear()
        return room

    def _touch_job(self, t: int, name: str) -> None:
        """A donor's spare changed: the room of every server it is on may have."""
        self._dirty.setdefault(t, set()).update(self.problem.layout.hosts(name))

    def _restore(self, statement: Statement[Change], t: int, mover: str) -> None:
        """Discard ``statement``'s changes to the layout: displaced flexible workers come back, and the room of the
        servers they are on is worked out again."""
        donors: list[str] = []
        for name, server, _, size in statement.rollback():
            self._dirty.setdefault(t, set()).add(server)
            if name != mover:
                self.spare[t][name] += 1
                self.spare_gpus[t] += size
                donors.append(name)
        for name in donors:
            self._touch_job(t, name)

    def _donors_on_servers(self, t: int) -> dict[int, list[str]]:
        """Server -> jobs there whose flexible workers bases may displace (built once per type; a job whose spare
        is used up, or that left a server, simply has nothing left to give there)."""
        built = self._donor_servers.get(t)
        if built is None:
            built = self._donor_servers[t] = {}
            for name in self.spare[t]:
                for server in self.problem.layout.hosts(name):
                    built.setdefault(server, []).append(name)
        return built
