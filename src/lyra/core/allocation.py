"""Who runs, where, and with how many workers: Lyra's two-phase allocation on typed GPUs and real servers.

The plan gives every job its GPU type and worker count and a placement ``{server: workers}`` that realises it on
the servers' free GPUs (a worker's GPUs on one server; a gang whole or not at all; see :mod:`lyra.core.packing`).
Training servers and loaned inference servers are the capacity; reclaiming servers are not, and workers on them
count as gone (a running job left below its base by them is restarted like a queued job and reported
``preempted``).

**Phase 1, base demand is first-class** (minimises queuing). Running jobs keep their workers where they are.
Queued jobs are admitted in order of priority (higher first), shortest time at base on the fastest GPU type they may
use, submit time, name. Each base gang goes, all or nothing, to the fastest type it may use that has room for it,
on the slower type if that is what is free; if no type has room, flexible workers of running jobs on the fastest
type that can make room are scaled in to make it (flexible workers come second). When that puts a base on a slower
type while a faster one has flexible workers, a second opinion scales those in for it instead, kept if the phase-2
objective prefers it: a slow GPU for a job's whole life can be worse than a fast one taken from another job's
surplus. A job whose base does not fit anywhere stays queued with the reason (backfilling: smaller gangs behind it
may start).

**Phase 2, flexible demand and GPU types** (minimises running time). Candidate allocations are scored by the sum of
completion times in the typed fluid model (:mod:`lyra.core.fluid`: slowest-worker pace, reallocation at
completions), which, unlike the poster's own-reduction knapsack value, accounts for GPUs flowing to the jobs still
running when a short one ends. Candidates: everything as phase 1 left it (kept on ties, so a steady cluster is not
rescaled for nothing); shortest-time-at-max first filling; and the poster's knapsack solved greedily by value per
GPU. From each, best first, a first-improvement local search tries: one more worker; one worker moved between two
jobs of the same type; a job started by this plan moved to another GPU type; two such jobs swapping types. A
worker is added only on the job's own type (a worker never slows its job down: ``w * e(w)`` rises with ``w``);
a job that opts in to mixing types may then grow onto another type only where that raises its pace. Every move
is realised on the servers before it is kept, so every plan bin-packs.

The search budget counts fluid-simulated jobs (one evaluation of an n-job instance costs n), so the search is
deterministic, cheap on big instances and thorough on small ones.

**Migration** (with ``restart_cost_s``). Base demand first-class means a job may start on slower loaned GPUs
because that is what was free. The search may then move a running job to a GPU type faster for it, using free
GPUs or flexible workers of the jobs there, when the objective gains more than the restart costs: the move is
charged as ``restart_cost_s`` seconds without progress. Only moves to faster types are tried, so a job never
bounces between types.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.core.errors import InvalidClusterError
from lyra.core.fluid import QUEUED, SPREAD, FluidJob, FluidModel, fastest_first
from lyra.core.model import ClusterSnapshot, LoanState, Pool, TrainingJob
from lyra.core.ordering import admission_key
from lyra.core.packing import Layout, Move, Slot

#: Default phase-2 search budget, in fluid-simulated jobs (see module docstring).
DEFAULT_SEARCH_BUDGET = 16_000

#: Stand-in completion time for a job that never starts in the fluid model (1,000 years).
_NEVER = 3.2e10

#: Kinds of a job in the search: queued, or on several types; otherwise the index of its one GPU type (the fluid
#: model's encoding, written there once).
_QUEUED = QUEUED
_MIXED = SPREAD


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    """Every job's worker count (0 = queued or stopped), GPU types and placement, and what changed to get there.

    ``placement`` holds every job that runs after the plan (running jobs included) and realises ``workers`` on
    the servers' free GPUs. ``queued`` says why each job that waits cannot start.
    """

    workers: Mapping[str, int]
    gpu_types: Mapping[str, tuple[str, ...]]
    placement: Mapping[str, Mapping[str, int]]
    started: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()
    resized: tuple[str, ...] = ()
    migrated: tuple[str, ...] = ()
    queued: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpus_used: int = 0
    capacity_gpus: int = 0
    fluid_average_jct: float = 0.0
    evaluations: int = 0


def allocate_workers(
    snapshot: ClusterSnapshot,
    *,
    held: Mapping[str, int] | None = None,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
    restart_cost_s: float | None = None,
) -> AllocationPlan:
    """Decide every job's GPU type, worker count and placement. Pure and deterministic.

    ``held`` maps a server to GPUs used by work outside this decision (the simulator decides over a view of its
    cluster); the what-if planner and the operator pass every job and no ``held``. With ``restart_cost_s``, a
    running job may also be moved to a GPU type faster for it, where the move's restart (that many seconds
    without progress) is charged in the objective; without it, running jobs keep their type.
    """
    if not isinstance(search_budget, int) or search_budget < 0:
        raise InvalidClusterError(f"search_budget must be an integer >= 0, got {search_budget!r}")
    if restart_cost_s is not None and not (
        isinstance(restart_cost_s, int | float) and 0 <= restart_cost_s <= 1e9 and math.isfinite(restart_cost_s)
    ):
        raise InvalidClusterError(f"restart_cost_s must be in [0, 1e9] seconds, got {restart_cost_s!r}")
    held = held or {}
    problem = _Problem(snapshot, held)
    problem.admit_bases(longest_first=False)
    search = _Search(problem, search_budget, restart_cost_s)
    best, layout = search.run()
    chosen = (problem, best, layout, search)
    slowed = problem.slowed_bases()
    if len(snapshot.jobs) <= _SECOND_OPINION_JOBS and (len(problem.started) > 1 or slowed):
        # Phase 1 in shortest-first order gives the fastest types to the shortest jobs; a long job admitted last
        # may land on the slow type, and the search's moves need room to undo that. Other starts for the search:
        # the same admissions made longest-first (within each priority); when a base went to a slower type while
        # the faster one had flexible workers, the admissions that scale those in first (a slow GPU for a job's
        # whole life may be worse than a fast one taken from another job's surplus: the objective decides); and,
        # when few started jobs could use another type, every assignment of types to them. An alternative is kept
        # only if it starts every job the first one did and scores better.
        admitted = {problem.jobs[i].name for i in problem.started}
        flexible = [i for i in problem.started if len(problem.preference[i]) > 1]
        alternatives: list[tuple[bool, dict[int, int], bool]] = []
        if len(problem.started) > 1:
            alternatives.append((True, {}, False))
        if slowed:
            alternatives.append((False, {}, True))
        # Types matter for packing only where workers have several GPUs: one-GPU workers always fit by counts,
        # and the search's type moves reach those assignments anyway.
        if 1 <= len(flexible) <= _PINNED_JOBS and any(problem.jobs[i].gpus_per_worker > 1 for i in problem.started):
            choices = [problem.preference[i] for i in flexible]
            alternatives += [
                (False, dict(zip(flexible, pins, strict=True)), False) for pins in itertools.product(*choices)
            ]
        for longest_first, pinned, fast_first in alternatives:
            other = _Problem(snapshot, held)
            other.admit_bases(longest_first=longest_first, pinned=pinned, fast_type_first=fast_first)
            if not admitted <= {other.jobs[i].name for i in other.started}:
                continue
            other_search = _Search(other, search_budget, restart_cost_s)
            other_best, other_layout = other_search.run()
            if other_best.value < chosen[1].value * (1 - 1e-12):
                chosen = (other, other_best, other_layout, other_search)
    winner, best, layout, search = chosen
    return winner.plan(best, layout, search)


def current_layout(snapshot: ClusterSnapshot, held: Mapping[str, int]) -> tuple[Layout, frozenset[str]]:
    """The servers training may use (training servers and loaned ones; reclaiming servers are not capacity),
    their GPUs free for the decision (all but ``held``), and the running jobs' workers on them; and the running
    jobs that are doomed (an earlier reclaim left fewer than their base: they restart like queued jobs and are
    not placed)."""
    servers = {s.name: s for s in snapshot.servers}
    for name, gpus in held.items():
        if name not in servers:
            raise InvalidClusterError(f"held GPUs on unknown server {name!r}")
        if not isinstance(gpus, int) or gpus < 0:
            raise InvalidClusterError(f"held GPUs on {name} must be an integer >= 0, got {gpus!r}")
    slots = []
    usable: set[str] = set()
    for server in snapshot.servers:
        if server.pool is not Pool.TRAINING and server.state is not LoanState.LOANED:
            continue
        free = server.gpus - held.get(server.name, 0)
        if free < 0:
            raise InvalidClusterError(f"server {server.name}: {held[server.name]} GPUs held, it has {server.gpus}")
        slots.append(Slot(server.name, server.gpu_type, free, server.pool is Pool.TRAINING))
        usable.add(server.name)
    placed: list[tuple[str, str, int, int]] = []
    doomed: set[str] = set()
    for job in snapshot.jobs:
        if not job.placement:
            continue
        surviving = [(s, n) for s, n in job.placement.items() if s in usable]
        if sum(n for _, n in surviving) < job.min_workers:
            doomed.add(job.name)
            continue
        placed.extend((job.name, s, n, job.gpus_per_worker) for s, n in surviving)
    try:
        return Layout(slots, placed), frozenset(doomed)
    except ValueError as error:
        raise InvalidClusterError(f"the running jobs and held GPUs overbook a server: {error}") from None


#: Decisions over at most this many jobs also try phase 1 in longest-first order (see ``allocate_workers``).
_SECOND_OPINION_JOBS = 48

#: A blocked base rebuilds the placement of this plan's bases only while they are fewer than this.
_REBUILD_JOBS = 64

#: Small decisions with multi-GPU workers also try every assignment of GPU types to the started jobs that could use
#: several, when they are at most this many (2 types: 32 assignments).
_PINNED_JOBS = 5

#: Bases a blocked base may move to other types to make room (the smallest ones): bounds phase 1's work.
_RELOCATION_MOVERS = 8


class _Reasons(Mapping[str, str]):
    """Why each waiting job waits, worded on first read (most callers, like the simulator, never ask)."""

    def __init__(self, jobs: Mapping[str, TrainingJob], explain: Callable[[TrainingJob], str]) -> None:
        self._jobs = jobs
        self._explain = explain
        self._worded: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        reason = self._worded.get(name)
        if reason is None:
            reason = self._worded[name] = self._explain(self._jobs[name])
        return reason

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)

    def __repr__(self) -> str:
        return repr(dict(self))


class _Problem:
    """The allocation problem of one snapshot: the layout of free GPUs, the jobs, and phase 1's admissions."""

    def __init__(self, snapshot: ClusterSnapshot, held: Mapping[str, int]) -> None:
        self.snapshot = snapshot
        self.layout, doomed = current_layout(snapshot, held)
        layout = self.layout
        self.types = layout.types
        gpu_of_type = [snapshot.gpus[t] for t in self.types]
        self.jobs = list(snapshot.jobs)
        self.speeds: list[tuple[float, ...]] = []
        self.high: list[int] = []
        self.fluid: list[FluidJob] = []
        # Jobs with the same GPU constraints share their speeds per type (a simulator's jobs come in a few kinds).
        speeds_of: dict[tuple[object, ...], tuple[float, ...]] = {}
        for job in self.jobs:
            constraints = (job.gpu_types, job.gpu_memory_gib, tuple(job.speeds.items()))
            speeds = speeds_of.get(constraints)
            if speeds is None:
                speeds = speeds_of[constraints] = tuple(job.speed_on(g) if job.may_use(g) else 0.0 for g in gpu_of_type)
            self.speeds.append(speeds)
            # No job can hold more workers than the GPUs it may use have room for: this bounds every loop below
            # (and GPUs of types it may not use change nothing about it).
            usable = sum(c for c, speed in zip(layout.capacity, speeds, strict=True) if speed > 0)
            self.high.append(max(job.min_workers, min(job.max_workers, usable // job.gpus_per_worker)))
            self.fluid.append(
                FluidJob(
                    job.remaining_work,
                    job.gpus_per_worker,
                    job.min_workers,
                    self.high[-1],
                    speeds,
                    job.priority,
                    job.scaling_overhead,
                    job.submit_time,
                )
            )
        self.index = {job.name: i for i, job in enumerate(self.jobs)}
        self.kind = [_QUEUED] * len(self.jobs)
        self.doomed = sorted(doomed)
        self.running: list[int] = []
        self.initial_types: dict[int, set[int]] = {}
        for i, job in enumerate(self.jobs):
            if job.placement and job.name not in doomed:
                kinds = layout.job_types(job.name)
                self.kind[i] = next(iter(kinds)) if len(kinds) == 1 else _MIXED
                self.initial_types[i] = kinds
                self.running.append(i)
        #: Running jobs' workers that survive reclaiming servers, before this plan changes anything.
        self.surviving = {self.jobs[i].name: layout.placement(self.jobs[i].name) for i in self.running}
        self.started: list[int] = []
        preferences: dict[tuple[float, ...], list[int]] = {}
        self.preference = []
        for speeds in self.speeds:
            preference = preferences.get(speeds)
            if preference is None:
                preference = preferences[speeds] = fastest_first(speeds)
            self.preference.append(preference)
        #: Workers of a given size each GPU type holds on an empty cluster, (type, GPUs per worker) -> workers:
        #: asked once per queued job's reason, the same few sizes each time.
        self._most: dict[tuple[int, int], int] = {}

    def most_workers(self, gpu_type: int, gpus_per_worker: int) -> int:
        """Workers of ``gpus_per_worker`` GPUs that the servers of ``gpu_type`` hold when nothing else runs."""
        key = (gpu_type, gpus_per_worker)
        most = self._most.get(key)
        if most is None:
            layout = self.layout
            most = self._most[key] = sum(
                layout.size[s] // gpus_per_worker for s in range(len(layout.names)) if layout.type_of[s] == gpu_type
            )
        return most

    def best_speed(self, i: int) -> float:
        return max(self.speeds[i], default=0.0)

    def type_preference(self, i: int) -> list[int]:
        """The types job ``i`` may use, fastest first (then by name)."""
        return self.preference[i]

    def admit_bases(
        self, *, longest_first: bool, pinned: Mapping[int, int] | None = None, fast_type_first: bool = False
    ) -> None:
        """Phase 1: queued bases in admission order, each on the fastest type with room, else making room. With
        ``fast_type_first``, room made by scaling in flexible workers on a faster type comes before free room on a
        slower one."""
        layout = self.layout
        # Flexible workers that bases may displace, per type: {job: spare workers}, and their GPUs in all.
        self.spare: list[dict[str, int]] = [{} for _ in self.types]
        self.spare_gpus = [0] * len(self.types)
        for k in self.running:
            kind, other = self.kind[k], self.jobs[k]
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
        self.gpw_of = {job.name: job.gpus_per_worker for job in self.jobs}
        queued = [i for i, job in enumerate(self.jobs) if self.kind[i] == _QUEUED]
        queued.sort(key=lambda i: admission_key(self.jobs[i], self.best_speed(i)))
        if longest_first:
            queued.sort(
                key=lambda i: (
                    -self.jobs[i].priority,
                    -self.jobs[i].time_at(self.jobs[i].min_workers, self.best_speed(i)),
                )
            )
        for i in queued:
            job = self.jobs[i]
            preference = [pinned[i]] if pinned and i in pinned else self.type_preference(i)
            for t in preference:
                moves = layout.place(job.name, job.gpus_per_worker, t, job.min_workers)
                if moves is not None:
                    self._dirty.setdefault(t, set()).update(server for server, _ in moves)
                    self.kind[i] = t
                    break
                if fast_type_first and self._place_displacing(i, t):
                    self.kind[i] = t
                    break
            else:
                for t in preference:
                    if self._place_displacing(i, t) or self._place_repacking(i, t) or self._place_relocating(i, t):
                        self.kind[i] = t
                        break
                else:
                    if self._place_rebuilding(i):
                        self.started.append(i)
                        continue
                    if job.mix_gpu_types and len(preference) > 1 and self._place_across(i, preference):
                        kinds = layout.job_types(job.name)
                        self.kind[i] = next(iter(kinds)) if len(kinds) == 1 else _MIXED
            if self.kind[i] != _QUEUED:
                self.started.append(i)

    def slowed_bases(self) -> bool:
        """Whether phase 1 started a base on a type slower than its fastest while flexible workers were there."""
        return any(
            0 <= self.kind[i] != self.preference[i][0] and self.spare_at_start[self.preference[i][0]] > 0
            for i in self.started
        )

    def _place_relocating(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by moving bases this plan started there to another type they may
        use, where they fit in free GPUs: a job that can only use ``t`` is not kept waiting by one that could run
        elsewhere. Each of the ``_RELOCATION_MOVERS`` smallest movable bases is tried alone, then all of them
        together (smallest first); all or nothing."""
        layout = self.layout
        job = self.jobs[i]
        movers = sorted(
            (k for k in self.started if self.kind[k] == t and len(self.preference[k]) > 1),
            key=lambda k: (self.jobs[k].min_workers * self.jobs[k].gpus_per_worker, self.jobs[k].name),
        )[:_RELOCATION_MOVERS]
        movable = sum(self.jobs[k].min_workers * self.jobs[k].gpus_per_worker for k in movers)
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
                other = self.jobs[k]
                layout.undo(other.name, placed, other.gpus_per_worker)
                layout.undo(other.name, left_t, other.gpus_per_worker)
                self.kind[k] = t
                self._dirty.setdefault(t, set()).update(server for server, _ in left_t)
        return False

    def _place_rebuilding(self, i: int) -> bool:
        """Last resort for job ``i``'s base: place every base this plan started, and ``i``'s, again from scratch,
        the most constrained first (fewest GPU types, then largest workers, then largest bases), each on its
        fastest type with room. None of them has started yet, so moving them costs nothing. Undone if some base
        does not fit; bounded to ``_REBUILD_JOBS`` bases."""
        if len(self.started) >= _REBUILD_JOBS:
            return False
        layout = self.layout
        group = [*self.started, i]
        before = {k: dict(layout.hosts(self.jobs[k].name)) for k in group}
        kinds = {k: self.kind[k] for k in group}
        for k in self.started:
            layout.remove_all(self.jobs[k].name, self.jobs[k].gpus_per_worker)

        def constrained(k: int) -> tuple[int, int, int, int]:
            job = self.jobs[k]
            return (len(self.preference[k]), -job.gpus_per_worker, -job.min_workers * job.gpus_per_worker, k)

        for k in sorted(group, key=constrained):
            job = self.jobs[k]
            for t in self.preference[k]:
                if layout.place(job.name, job.gpus_per_worker, t, job.min_workers) is not None:
                    self.kind[k] = t
                    break
            else:
                for other in group:
                    if layout.hosts(self.jobs[other].name):
                        layout.remove_all(self.jobs[other].name, self.jobs[other].gpus_per_worker)
                for other, hosts in before.items():
                    for server, count in hosts.items():
                        layout.add(self.jobs[other].name, server, count, self.jobs[other].gpus_per_worker)
                    self.kind[other] = kinds[other]
                return False
        for t in range(len(self.types)):
            self._dirty.setdefault(t, set()).update(layout.servers_of_type[t])
        return True

    def _move_base(self, k: int, t: int) -> tuple[list[Move], list[Move]] | None:
        """Move job ``k``'s base from type ``t`` to the fastest other type it may use with free room; the moves
        made (left, placed), or ``None``."""
        layout = self.layout
        other = self.jobs[k]
        for u in self.preference[k]:
            if u == t:
                continue
            placed = layout.place(other.name, other.gpus_per_worker, u, layout.workers(other.name))
            if placed is None:
                continue
            left_t = [(s, -n) for s, n in layout.hosts(other.name).items() if layout.type_of[s] == t]
            for server, count in left_t:
                layout.add(other.name, server, count, other.gpus_per_worker)
            self.kind[k] = u
            self._dirty.setdefault(t, set()).update(s for s, _ in left_t)
            self._dirty.setdefault(u, set()).update(s for s, _ in placed)
            return left_t, placed
        return None

    def _place_repacking(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by packing it again together with the bases this plan started
        there (they have not started yet, so moving them costs nothing): largest workers first, then admission
        order, each by the placement rule. Undone if it does not fit."""
        layout = self.layout
        job = self.jobs[i]
        moves = layout.place(job.name, job.gpus_per_worker, t, job.min_workers)
        if moves is not None:
            self._dirty.setdefault(t, set()).update(s for s, _ in moves)
            return True
        if layout.free_of_type[t] < job.min_workers * job.gpus_per_worker:
            return False  # the started bases stay on t: no packing of them leaves room for this base
        group = [k for k in self.started if self.kind[k] == t] + [i]
        group.sort(key=lambda k: -self.jobs[k].gpus_per_worker)  # stable: admission order among equals
        before = {k: dict(layout.hosts(self.jobs[k].name)) for k in group}
        for k in group:
            if before[k]:
                layout.remove_all(self.jobs[k].name, self.jobs[k].gpus_per_worker)
        placed: list[tuple[int, list[Move]]] = []
        for k in group:
            other = self.jobs[k]
            made = layout.place(other.name, other.gpus_per_worker, t, other.min_workers)
            if made is None:
                for done, made_moves in reversed(placed):
                    layout.undo(self.jobs[done].name, made_moves, self.jobs[done].gpus_per_worker)
                for back, hosts in before.items():
                    for server, count in hosts.items():
                        layout.add(self.jobs[back].name, server, count, self.jobs[back].gpus_per_worker)
                return False
            placed.append((k, made))
        self._dirty.setdefault(t, set()).update(layout.servers_of_type[t])
        return True

    def _place_across(self, i: int, preference: Sequence[int]) -> bool:
        """A base over several types (a job that opts in to mixing), fastest types first."""
        job = self.jobs[i]
        moves: list[Move] = []
        left = job.min_workers
        for t in preference:
            take = min(left, self.layout.room(t, job.gpus_per_worker))
            if take:
                placed = self.layout.place(job.name, job.gpus_per_worker, t, take)
                if placed is None:
                    break
                moves += placed
                left -= take
            if not left:
                break
        for server, _ in moves:
            self._dirty.setdefault(self.layout.type_of[server], set()).add(server)
        if left:
            self.layout.undo(job.name, moves, job.gpus_per_worker)
            return False
        return True

    def _place_displacing(self, i: int, t: int) -> bool:
        """Place job ``i``'s base on type ``t`` by scaling in flexible workers of jobs there; all or nothing.

        Servers that can hold the most base workers (free GPUs plus the flexible workers on them) go first, safe
        ones before loaned ones; on each, flexible workers leave from the jobs with the most to spare."""
        layout = self.layout
        job = self.jobs[i]
        g = job.gpus_per_worker
        need = job.min_workers
        if need >= self.no_room.get((t, g), need + 1):
            return False
        if layout.free_of_type[t] + self.spare_gpus[t] < need * g:
            self.no_room[(t, g)] = need
            return False
        spare = self.spare[t]
        gpw = self.gpw_of
        on_server = self._donors_on_servers(t)
        room = self._room_of(t)
        if sum(r // g for r in room.values()) < need:
            self.no_room[(t, g)] = need
            return False
        servers = sorted((s for s in room if room[s] >= g), key=lambda s: (-(room[s] // g), not layout.safe[s], s))
        journal: list[tuple[str, Move, int]] = []
        left = need
        for server in servers:
            if not left:
                break
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
        spare, gpw, layout = self.spare[t], self.gpw_of, self.layout
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
            dirty.update(self.layout.servers_of_type[t])
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
        self._dirty.setdefault(t, set()).update(self.layout.hosts(name))

    def _restore(
        self, journal: list[tuple[str, Move, int]], mark: int, spare: dict[str, int], t: int, mover: str
    ) -> None:
        """Undo the journal's moves after position ``mark``: displaced flexible workers come back."""
        while len(journal) > mark:
            name, (server, count), size = journal.pop()
            self.layout.add(name, server, -count, size)
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
                for server in self.layout.hosts(name):
                    built.setdefault(server, []).append(name)
        return built

    def plan(self, best: _State, layout: Layout, search: _Search) -> AllocationPlan:
        workers: dict[str, int] = {}
        types: dict[str, tuple[str, ...]] = {}
        placement: dict[str, Mapping[str, int]] = {}
        used = 0
        names, type_of, type_names = layout.names, layout.type_of, self.types
        kinds: dict[str, set[int]] = {}
        for job in self.jobs:
            hosts = layout.jobs.get(job.name)
            if not hosts:
                workers[job.name] = 0
                types[job.name] = ()
                continue
            count = sum(hosts.values())
            workers[job.name] = count
            used += count * job.gpus_per_worker
            kinds[job.name] = {type_of[s] for s in hosts}
            types[job.name] = tuple(type_names[t] for t in sorted(kinds[job.name]))
            placement[job.name] = MappingProxyType({names[s]: hosts[s] for s in sorted(hosts)})
        started = sorted(j.name for j in self.jobs if (not j.placement or j.name in self.doomed) and workers[j.name])
        # Migrated: left a GPU type it ran on (a mixing job that only grows onto another type is resized).
        migrated = sorted(
            self.jobs[i].name for i in self.running if not self.initial_types[i] <= kinds.get(self.jobs[i].name, set())
        )
        # Resized: a running job whose workers this plan changes, in number or in place (workers leaving with a
        # reclaiming server are the reclaim's doing, not this plan's).
        resized = sorted(
            name
            for name, before in self.surviving.items()
            if name not in migrated and name in placement and dict(placement[name]) != before
        )
        queued = _Reasons(
            {j.name: j for j in self.jobs if not workers[j.name]}, lambda job: self.why_queued(job, layout)
        )
        return AllocationPlan(
            workers=MappingProxyType(workers),
            gpu_types=MappingProxyType(types),
            placement=MappingProxyType(placement),
            started=tuple(started),
            preempted=tuple(sorted(self.doomed)),
            resized=tuple(resized),
            migrated=tuple(migrated),
            queued=queued,
            gpus_used=used,
            capacity_gpus=sum(layout.capacity),
            fluid_average_jct=search.average_jct(best),
            evaluations=search.evaluations,
        )

    def why_queued(self, job: TrainingJob, layout: Layout) -> str:
        """Why ``job`` waits: what its base needs and what the GPU types it may use hold now and at best."""
        i = self.index[job.name]
        base = f"base of {job.min_workers} worker{'s' if job.min_workers > 1 else ''} x {job.gpus_per_worker} GPU"
        base += "s" if job.gpus_per_worker > 1 else ""
        allowed = self.type_preference(i)
        excluded = [t for t in self.types if t not in {self.types[a] for a in allowed}]
        if not allowed:
            present = ", ".join(self.types) or "none"
            return f"may use none of the GPU types training can use now (present: {present})"
        parts = []
        for t in allowed:
            now = layout.room(t, job.gpus_per_worker)
            most = self.most_workers(t, job.gpus_per_worker)
            parts.append(f"{self.types[t]} holds {now} now, at most {most}")
        reason = f"{base} does not fit: " + "; ".join(parts)
        if excluded:
            reason += f" (may not use {', '.join(excluded)})"
        return reason


@dataclass(slots=True)
class _State:
    """A candidate allocation as vectors: every job's kind (queued, spread over several types, or its one GPU
    type's index), width (workers) and, for spread jobs, workers per type; free GPUs per type; its objective."""

    kinds: list[int]
    widths: list[int]
    spreads: dict[int, list[tuple[int, int]]]
    free: list[int]
    value: float = math.inf

    def copy(self) -> _State:
        return _State(list(self.kinds), list(self.widths), dict(self.spreads), list(self.free), self.value)


#: One change of a search move: (job, new kind, new width).
_Change = tuple[int, int, int]


class _Search:
    """Phase 2: flexible workers and GPU types of admitted jobs, scored in the typed fluid model.

    The search works on GPU counts per type; a move is kept only if it still bin-packs. On a type where every job
    that may use it has one-GPU workers the counts are exact; elsewhere a move is realised on the servers (by the
    placement rule) before it is scored. The best allocation found is realised once at the end.
    """

    def __init__(self, problem: _Problem, budget: int, restart_cost_s: float | None) -> None:
        self.problem = problem
        self.budget = budget
        self.restart_cost = restart_cost_s
        self.evaluations = 0
        jobs = problem.jobs
        layout = problem.layout
        self.model = FluidModel(problem.fluid, layout.capacity)
        self.members = [i for i in range(len(jobs)) if problem.kind[i] != _QUEUED]
        self.name = [j.name for j in jobs]
        self.gpw = [j.gpus_per_worker for j in jobs]
        self.low = [j.min_workers for j in jobs]
        self.high = problem.high
        self.types = len(problem.types)
        #: Types on which GPU counts decide packing exactly (every job that may use them has 1-GPU workers).
        self.unit = [
            all(problem.speeds[i][t] <= 0 or self.gpw[i] == 1 for i in range(len(jobs))) for t in range(self.types)
        ]
        #: Jobs this plan starts that may use another GPU type than phase 1 gave them; with a restart cost, also
        #: running jobs (on one type) that may use a type faster for them.
        self.movable = {i for i in problem.started if problem.kind[i] >= 0 and len(problem.type_preference(i)) > 1}
        self.running = set(problem.running)
        if restart_cost_s is not None:
            for i in problem.running:
                kind = problem.kind[i]
                if kind >= 0 and max(problem.speeds[i]) > problem.speeds[i][kind]:
                    self.movable.add(i)
        self.members.sort(key=lambda i: (self._time_at_max(i), self.name[i]))
        widths = [layout.workers(name) for name in self.name]
        spreads: dict[int, list[tuple[int, int]]] = {}
        for i, kind in enumerate(problem.kind):
            if kind == _MIXED:
                per_type: dict[int, int] = {}
                for server, count in layout.hosts(self.name[i]).items():
                    per_type[layout.type_of[server]] = per_type.get(layout.type_of[server], 0) + count
                spreads[i] = sorted(per_type.items())
        self.phase_one = _State(list(problem.kind), widths, spreads, list(layout.free_of_type))
        self._type_layouts: dict[int, Layout] = {}

    def _time_at_max(self, i: int) -> float:
        problem = self.problem
        kind = problem.kind[i]
        speed = problem.speeds[i][kind] if kind >= 0 else min(s for s in problem.speeds[i] if s > 0)
        return problem.jobs[i].time_at(self.high[i], speed)

    # -------------------------------------------------------------------------------------------- objective

    def evaluate(self, state: _State) -> float:
        self.evaluations += 1
        self.budget -= len(self.problem.jobs)
        extra: dict[int, float] = {}
        if self.restart_cost:
            phase_one = self.phase_one.kinds
            for i in self.running:
                kind = state.kinds[i]
                if kind != phase_one[i] and kind >= 0:
                    job = self.problem.jobs[i]
                    extra[i] = self.restart_cost * job.pace(state.widths[i], self.problem.speeds[i][kind])
        times = self.model.run(state.kinds, state.widths, state.spreads, extra)
        state.value = math.fsum(t if t != math.inf else _NEVER for t in times)
        return state.value

    def average_jct(self, state: _State) -> float:
        if not self.problem.jobs:
            return 0.0
        if state.value >= _NEVER:
            return math.inf
        return state.value / len(self.problem.jobs)

    # ------------------------------------------------------------------------------------------ realising

    def realise(self, state: _State) -> Layout | None:
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
            target = dict(state.spreads[i]) if kind == _MIXED else {kind: state.widths[i]}
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

    def _packs(self, state: _State, touched: set[int]) -> bool:
        """Whether ``state`` bin-packs on the touched types (exact by counts on unit types; realised on the
        others, type by type, from phase 1's servers of that type alone)."""
        return all(self.unit[t] or self._packs_on(state, t) for t in touched)

    def _packs_on(self, state: _State, t: int) -> bool:
        layout = self._type_layout(t).copy()
        pending: list[tuple[int, int, int]] = []  # (member order, job, workers to add)
        for order, i in enumerate(self.members):
            kind = state.kinds[i]
            wanted = dict(state.spreads[i]).get(t, 0) if kind == _MIXED else (state.widths[i] if kind == t else 0)
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

    def run(self) -> tuple[_State, Layout]:
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
        if self._admit_leftovers(best, layout):
            self.evaluate(best)
        return best, layout

    def _admit_leftovers(self, state: _State, layout: Layout) -> bool:
        """Base demand stays first-class after phase 2: moving jobs between types can free room where a base that
        phase 1 could not place now fits. Such bases start, in admission order, on their fastest type with room."""
        problem = self.problem
        waiting = sorted(
            (i for i in range(len(problem.jobs)) if state.kinds[i] == _QUEUED and problem.preference[i]),
            key=lambda i: admission_key(problem.jobs[i], problem.best_speed(i)),
        )
        started = False
        for i in waiting:
            job = problem.jobs[i]
            for t in problem.type_preference(i):
                if layout.place(job.name, job.gpus_per_worker, t, job.min_workers) is not None:
                    self._set(state, i, t, job.min_workers)
                    problem.started.append(i)
                    started = True
                    break
        return started

    def _signature(self, state: _State) -> tuple[tuple[int, int], ...]:
        return tuple((state.kinds[i], state.widths[i]) for i in self.members)

    def _set(self, state: _State, i: int, kind: int, width: int) -> None:
        g = self.gpw[i]
        if state.kinds[i] >= 0:
            state.free[state.kinds[i]] += state.widths[i] * g
        if kind >= 0:
            state.free[kind] -= width * g
        state.kinds[i] = kind
        state.widths[i] = width

    def _at_bases(self) -> _State:
        state = self.phase_one.copy()
        for i in self.members:
            if state.kinds[i] >= 0 and state.widths[i] > self.low[i]:
                self._set(state, i, state.kinds[i], self.low[i])
        return state

    def _filled(self) -> _State:
        """Every admitted job widened to its maximum as GPUs last, shortest time at maximum first."""
        state = self._at_bases()
        for i in self.members:
            kind = state.kinds[i]
            if kind >= 0:
                extra = min(self.high[i] - state.widths[i], state.free[kind] // self.gpw[i])
                if extra > 0:
                    self._set(state, i, kind, state.widths[i] + extra)
        return state

    def _knapsack(self) -> _State | None:
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
                per_speed = job.remaining_work / problem.speeds[i][state.kinds[i]]
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

    def _try(self, state: _State, changes: Sequence[_Change]) -> bool:
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

    def _local_search(self, start: _State) -> _State:
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

    def _neighbours(self, state: _State) -> Iterator[list[_Change]]:
        """Moves, one at a time: one more worker; one worker moved between two jobs of a type; a job this plan
        starts moved to another type; two such jobs swapping types."""
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
        speeds = self.problem.speeds
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
                # As wide as it is now, or as wide as the other type holds (it may be wider there); and the same
                # with the GPUs it leaves handed to the jobs still on its old type (a move that pays off only
                # together with that).
                for width in dict.fromkeys((min(widths[i], room), min(high[i], room))):
                    if width >= low[i]:
                        yield [(i, t, width)]
                        filled = self._with_fill(state, [(i, t, width)])
                        if len(filled) > 1:
                            yield filled
                if room < low[i] and running:
                    squeezed = self._squeeze(state, i, t)
                    if squeezed is not None:
                        yield squeezed
        new = [i for i in movable if i not in self.running]
        for a, i in enumerate(new):
            for k in new[a + 1 :]:
                ti, tk = kinds[i], kinds[k]
                if ti == tk or speeds[i][tk] <= 0 or speeds[k][ti] <= 0:
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

    def _with_fill(self, state: _State, changes: Sequence[_Change]) -> list[_Change]:
        """``changes``, then every job widened with the GPUs left on its type, shortest at maximum first: a type
        move often pays off only together with what it frees."""
        free = list(state.free)
        widths = {i: state.widths[i] for i in self.members}
        kinds = {i: state.kinds[i] for i in self.members}
        for i, kind, width in changes:
            if kinds[i] >= 0:
                free[kinds[i]] += widths[i] * self.gpw[i]
            free[kind] -= width * self.gpw[i]
            kinds[i], widths[i] = kind, width
        result = list(changes)
        for k in self.members:
            kind = kinds[k]
            if kind < 0 or widths[k] >= self.high[k]:
                continue
            extra = min(self.high[k] - widths[k], free[kind] // self.gpw[k])
            if extra > 0:
                free[kind] -= extra * self.gpw[k]
                result.append((k, kind, widths[k] + extra))
        return result

    def _squeeze(self, state: _State, i: int, t: int) -> list[_Change] | None:
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

    def _mix_types(self, state: _State) -> None:
        """Jobs that opt in to mixing may grow onto other types where that raises their pace and the objective."""
        problem = self.problem
        for i in self.members:
            job = problem.jobs[i]
            if not job.mix_gpu_types or self.budget <= 0:
                continue
            for t in problem.type_preference(i):
                spread = dict(state.spreads[i]) if state.kinds[i] == _MIXED else {state.kinds[i]: state.widths[i]}
                width = sum(spread.values())
                if width >= self.high[i] or t in spread:
                    continue
                slowest = min(problem.speeds[i][u] for u in spread)
                count = min(self.high[i] - width, state.free[t] // job.gpus_per_worker)
                if count <= 0 or job.pace(width + count, min(slowest, problem.speeds[i][t])) <= job.pace(
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
                state.kinds[i] = _MIXED
                state.widths[i] = width + count
                state.spreads[i] = sorted(spread.items())
                if not (self._packs(state, set(spread)) and self.evaluate(state) < before.value * (1 - 1e-12)):
                    state.kinds, state.widths, state.spreads = before.kinds, before.widths, before.spreads
                    state.free, state.value = before.free, before.value
