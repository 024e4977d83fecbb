"""Phase 1, base demand first-class: queued bases in admission order (:func:`lyra.core.ordering.admission_key`),
each all or nothing on the fastest GPU type with room for it, else on a slower one, else making room by scaling in
flexible workers of running jobs, repacking or relocating this plan's bases, or rebuilding their placement (see
:mod:`lyra.core.allocation`)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from lyra.core.allocation.problem import Problem
from lyra.core.fluid import QUEUED, SPREAD
from lyra.core.ordering import admission_key
from lyra.core.packing import Move

#: A blocked base rebuilds the placement of this plan's bases only while they are fewer than this.
_REBUILD_JOBS = 64
#: Bases a blocked base may move to other types to make room (the smallest ones): bounds phase 1's work.
_RELOCATION_MOVERS = 8


class Admission:
    """Phase 1 on a :class:`~lyra.core.allocation.problem.Problem`: what it admits goes into the problem's layout,
    kinds and started jobs; the flexible workers bases may displace and each server's room are its own."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem

    def admit_bases(
        self, *, longest_first: bool, pinned: Mapping[int, int] | None = None, fast_type_first: bool = False
    ) -> None:
        """Phase 1: queued bases in admission order, each on the fastest type with room, else making room. With
        ``fast_type_first``, room made by scaling in flexible workers on a faster type comes before free room on a
        slower one."""
        layout = self.problem.layout
        # Flexible workers that bases may displace, per type: {job: spare workers}, and their GPUs in all.
        self.spare: list[dict[str, int]] = [{} for _ in self.problem.types]
        self.spare_gpus = [0] * len(self.problem.types)
        for k in self.problem.running:
            kind, other = self.problem.kind[k], self.problem.jobs[k]
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
        queued = [i for i, job in enumerate(self.problem.jobs) if self.problem.kind[i] == QUEUED]
        queued.sort(key=lambda i: admission_key(self.problem.jobs[i], self.problem.best_speed(i)))
        if longest_first:
            queued.sort(
                key=lambda i: (
                    -self.problem.jobs[i].priority,
                    -self.problem.jobs[i].time_at(self.problem.jobs[i].min_workers, self.problem.best_speed(i)),
                )
            )
        for i in queued:
            job = self.problem.jobs[i]
            preference = [pinned[i]] if pinned and i in pinned else self.problem.type_preference(i)
            for t in preference:
                moves = layout.place(job.name, job.gpus_per_worker, t, job.min_workers)
                if moves is not None:
                    self._dirty.setdefault(t, set()).update(server for server, _ in moves)
                    self.problem.kind[i] = t
                    break
                if fast_type_first and self._place_displacing(i, t):
                    self.problem.kind[i] = t
                    break
            else:
                for t in preference:
                    if self._place_displacing(i, t) or self._place_repacking(i, t) or self._place_relocating(i, t):
                        self.problem.kind[i] = t
                        break
                else:
                    if self._place_rebuilding(i):
                        self.problem.started.append(i)
                        continue
                    if job.mix_gpu_types and len(preference) > 1 and self._place_across(i, preference):
                        kinds = layout.job_types(job.name)
                        self.problem.kind[i] = next(iter(kinds)) if len(kinds) == 1 else SPREAD
            if self.problem.kind[i] != QUEUED:
                self.problem.started.append(i)

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
        together (smallest first); all or nothing."""
        layout = self.problem.layout
        job = self.problem.jobs[i]
        kind, preference = self.problem.kind, self.problem.type_preference
        movers = sorted(
            (k for k in self.problem.started if kind[k] == t and len(preference(k)) > 1),
            key=lambda k: (
                self.problem.jobs[k].min_workers * self.problem.jobs[k].gpus_per_worker,
                self.problem.jobs[k].name,
            ),
        )[:_RELOCATION_MOVERS]
        movable = sum(self.problem.jobs[k].min_workers * self.problem.jobs[k].gpus_per_worker for k in movers)
        if not movers or layout.free_of_type[t] + movable < job.min_workers * job.gpus_per_worker:
            return False
        for group in [[k] for k in movers] + ([movers] if len(movers) > 1 else []):
            journal: list[tuple[int, list[Move], list[Move]]] = []
            for k in group:
                moved = self._move_base(k, t)
                if moved is not None:
                    journal.append((k, *moved))
            if journal and self._place_repacking(i, t):
                return True
            for k, left_t, placed in reversed(journal):
                other = self.problem.jobs[k]
                layout.undo(other.name, placed, other.gpus_per_worker)
                layout.undo(other.name, left_t, other.gpus_per_worker)
                self.problem.kind[k] = t
                self._dirty.setdefault(t, set()).update(server for server, _ in left_t)
        return False

    def _place_rebuilding(self, i: int) -> bool:
        """Last resort for job ``i``'s base: place every base this plan started, and ``i``'s, again from scratch,
        the most constrained first (fewest GPU types, then largest workers, then largest bases), each on its
        fastest type with room. None of them has started yet, so moving them costs nothing. Undone if some base
        does not fit; bounded to ``_REBUILD_JOBS`` bases."""
        if len(self.problem.started) >= _REBUILD_JOBS:
            return False
        layout = self.problem.layout
        group = [*self.problem.started, i]
        before = {k: dict(layout.hosts(self.problem.jobs[k].name)) for k in group}
        kinds = {k: self.problem.kind[k] for k in group}
        for k in self.problem.started:
            layout.remove_all(self.problem.jobs[k].name, self.problem.jobs[k].gpus_per_worker)

        def constrained(k: int) -> tuple[int, int, int, int]:
            job = self.problem.jobs[k]
            types = len(self.problem.type_preference(k))
            return (types, -job.gpus_per_worker, -job.min_workers * job.gpus_per_worker, k)

        for k in sorted(group, key=constrained):
            job = self.problem.jobs[k]
            for t in self.problem.type_preference(k):
                if layout.place(job.name, job.gpus_per_worker, t, job.min_workers) is not None:
                    self.problem.kind[k] = t
                    break
            else:
                for other in group:
                    if layout.hosts(self.problem.jobs[other].name):
                        layout.remove_all(self.problem.jobs[other].name, self.problem.jobs[other].gpus_per_worker)
                for other, hosts in before.items():
                    for server, count in hosts.items():
                        layout.add(
                            self.problem.jobs[other].name, server, count, self.problem.jobs[other].gpus_per_worker
                        )
                    self.problem.kind[other] = kinds[other]
                return False
        for t in range(len(self.problem.types)):
            self._dirty.setdefault(t, set()).update(layout.servers_of_type[t])
        return True

    def _move_base(self, k: int, t: int) -> tuple[list[Move], list[Move]] | None:
        """Move job ``k``'s base from type ``t`` to the fastest other type it may use with free room; the moves
        made (left, placed), or ``None``."""
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
            return left_t, placed
        return None

    def _place_repacking(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by packing it again together with the bases this plan started
        there (they have not started yet, so moving them costs nothing): largest workers first, then admission
        order, each by the placement rule. Undone if it does not fit."""
        layout = self.problem.layout
        job = self.problem.jobs[i]
        moves = layout.place(job.name, job.gpus_per_worker, t, job.min_workers)
        if moves is not None:
            self._dirty.setdefault(t, set()).update(s for s, _ in moves)
            return True
        if layout.free_of_type[t] < job.min_workers * job.gpus_per_worker:
            return False  # the started bases stay on t: no packing of them leaves room for this base
        group = [k for k in self.problem.started if self.problem.kind[k] == t] + [i]
        group.sort(key=lambda k: -self.problem.jobs[k].gpus_per_worker)  # stable: admission order among equals
        before = {k: dict(layout.hosts(self.problem.jobs[k].name)) for k in group}
        for k in group:
            if before[k]:
                layout.remove_all(self.problem.jobs[k].name, self.problem.jobs[k].gpus_per_worker)
        placed: list[tuple[int, list[Move]]] = []
        for k in group:
            other = self.problem.jobs[k]
            made = layout.place(other.name, other.gpus_per_worker, t, other.min_workers)
            if made is None:
                for done, made_moves in reversed(placed):
                    layout.undo(self.problem.jobs[done].name, made_moves, self.problem.jobs[done].gpus_per_worker)
                for back, hosts in before.items():
                    for server, count in hosts.items():
                        layout.add(self.problem.jobs[back].name, server, count, self.problem.jobs[back].gpus_per_worker)
                return False
            placed.append((k, made))
        self._dirty.setdefault(t, set()).update(layout.servers_of_type[t])
        return True

    def _place_across(self, i: int, preference: Sequence[int]) -> bool:
        """A base over several types (a job that opts in to mixing), fastest types first."""
        job = self.problem.jobs[i]
        moves: list[Move] = []
        left = job.min_workers
        for t in preference:
            take = min(left, self.problem.layout.room(t, job.gpus_per_worker))
            if take:
                placed = self.problem.layout.place(job.name, job.gpus_per_worker, t, take)
                if placed is None:
                    break
                moves += placed
                left -= take
            if not left:
                break
        for server, _ in moves:
            self._dirty.setdefault(self.problem.layout.type_of[server], set()).add(server)
        if left:
            self.problem.layout.undo(job.name, moves, job.gpus_per_worker)
            return False
        return True

    def _place_displacing(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by scaling in flexible workers of jobs there; all or nothing.

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
        spare = self.spare[t]
        gpw = self.problem.gpw_of
        on_server = self._donors_on_servers(t)
        room = self._room_of(t)
        safe = layout.safe
        # Taken in the order of (workers it holds, loaned, server): the server breaks every tie. A heap, as a base
        # usually needs the first few servers only.
        servers = [(-(r // g), not safe[s], s) for s, r in room.items() if r >= g]
        if -sum(holds for holds, _, _ in servers) < need:
            self.no_room[(t, g)] = need
            return False
        heapq.heapify(servers)
        journal: list[tuple[str, Move, int]] = []
        left = need
        while left and servers:
            server = heapq.heappop(servers)[2]
            take = min(left, self._raw_room(t, server) // g)
            if take <= 0:
                continue
            mark = len(journal)
            for name in sorted(on_server.get(server, ()), key=lambda n: (-spare[n], n)):
                while layout.free[server] < take * g and spare[name] and layout.hosts(name).get(server, 0):
                    layout.add(name, server, -1, gpw[name])
                    journal.append((name, (server, -1), gpw[name]))
                    spare[name] -= 1
                    self.spare_gpus[t] -= gpw[name]
                    self._touch_job(t, name)
            if layout.free[server] < take * g:
                self._restore(journal, mark, spare, t, job.name)
                continue
            layout.add(job.name, server, take, g)
            journal.append((job.name, (server, take), g))
            self._dirty.setdefault(t, set()).add(server)
            left -= take
        if left:
            self._restore(journal, 0, spare, t, job.name)
            self.no_room[(t, g)] = need
            return False
        return True

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

    def _restore(
        self, journal: list[tuple[str, Move, int]], mark: int, spare: dict[str, int], t: int, mover: str
    ) -> None:
        """Undo the journal's moves after position ``mark``: displaced flexible workers come back."""
        while len(journal) > mark:
            name, (server, count), size = journal.pop()
            self.problem.layout.add(name, server, -count, size)
            self._dirty.setdefault(t, set()).add(server)
            if name != mover:
                spare[name] += 1
                self.spare_gpus[t] += size
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
