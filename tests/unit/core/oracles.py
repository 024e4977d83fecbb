"""Reference solutions the proofs measure the policy core against. They share no model code with the core.

Everything here reads the core's value objects only as data (their fields) and implements the rules of
``docs/policies.md`` on its own, the slow and obvious way:

* the typed fluid model (completions one at a time, queued bases by priority and time at base, growth by earliest
  projected finish), evaluated by a plain loop over jobs at each event;
* exact bin packing of workers onto servers, by backtracking;
* brute-force allocation: every GPU type and worker count of every job whose workers pack;
* the poster's own-reduction multiple-choice knapsack, solved exactly by dynamic programming;
* the reclaim's lexicographic optimum (jobs preempted, GPU-seconds lost, workers scaled in), by brute force over
  combinations and by three stacked integer programs (HiGHS through ``scipy.optimize.milp``).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from lyra.core import ClusterSnapshot, LoanState, Pool, Server, TrainingJob

# ----------------------------------------------------------------------------------------------- GPU types


def _catalogue(snapshot: ClusterSnapshot) -> dict[str, tuple[float, float | None]]:
    """Speed and memory of every server's GPU type, from the snapshot's explicit catalogue entries only."""
    types: dict[str, tuple[float, float | None]] = {}
    for server in snapshot.servers:
        entry = snapshot.gpus.types.get(server.gpu_type)
        assert entry is not None, f"the proofs describe every GPU type; {server.gpu_type} is missing"
        types[server.gpu_type] = (entry.speed, entry.memory_gib)
    return types


def allowed_speeds(snapshot: ClusterSnapshot, job: TrainingJob) -> dict[str, float]:
    """The job's speed on every type it may use (its own measured speed, else the type's)."""
    speeds: dict[str, float] = {}
    for name, (speed, memory) in _catalogue(snapshot).items():
        if job.gpu_types is not None and name not in job.gpu_types:
            continue
        if job.gpu_memory_gib is not None and memory is not None and memory < job.gpu_memory_gib:
            continue
        speeds[name] = job.speeds.get(name, speed)
    return speeds


def _usable(server: Server) -> bool:
    return server.pool is Pool.TRAINING or server.state is LoanState.LOANED


# ------------------------------------------------------------------------------------------ the fluid model


@dataclass(frozen=True)
class OracleJob:
    name: str
    work: float
    gpus_per_worker: int
    min_workers: int
    max_workers: int
    speeds: dict[str, float]
    priority: int = 0
    overhead: float = 0.0

    def pace(self, workers: int, speed: float) -> float:
        return workers * speed / (1.0 + self.overhead * (workers - 1))


def oracle_capacity(snapshot: ClusterSnapshot, held: Mapping[str, int] | None = None) -> dict[str, int]:
    """GPUs per type the decision may use: usable servers' GPUs less those ``held`` by work outside it."""
    held = held or {}
    capacity: dict[str, int] = {}
    for server in snapshot.servers:
        if _usable(server):
            capacity[server.gpu_type] = capacity.get(server.gpu_type, 0) + server.gpus - held.get(server.name, 0)
    return capacity


def oracle_jobs(snapshot: ClusterSnapshot, held: Mapping[str, int] | None = None) -> list[OracleJob]:
    """Every job of the snapshot (name order), with its maximum capped at what its types could ever hold."""
    capacity = oracle_capacity(snapshot, held)
    jobs = []
    for job in snapshot.jobs:
        speeds = allowed_speeds(snapshot, job)
        room = sum(capacity.get(t, 0) for t in speeds) // job.gpus_per_worker
        jobs.append(
            OracleJob(
                job.name,
                job.remaining_work,
                job.gpus_per_worker,
                job.min_workers,
                max(job.min_workers, min(job.max_workers, room)),
                speeds,
                job.priority,
                job.scaling_overhead,
            )
        )
    return jobs


def oracle_completion_times(
    jobs: Sequence[OracleJob],
    start: Mapping[str, Mapping[str, int]],
    capacity: Mapping[str, int],
    restarts: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Completion time of every job from ``start`` (job -> type -> workers; absent: queued). A job in
    ``restarts`` (a migration) first spends that many seconds without progress, charged as that many seconds of
    its starting pace in more work to do."""
    type_names = sorted(capacity)
    free = {t: capacity[t] for t in type_names}
    workers: dict[str, dict[str, int]] = {}
    for job in jobs:
        allocation = {t: w for t, w in start.get(job.name, {}).items() if w}
        for t, w in allocation.items():
            if t not in job.speeds:
                raise ValueError(f"{job.name} starts on {t}, which it may not use")
            free[t] -= w * job.gpus_per_worker
        if allocation:
            workers[job.name] = allocation
    if any(f < 0 for f in free.values()):
        raise ValueError("the start does not fit the capacity")
    index = {job.name: i for i, job in enumerate(jobs)}
    finish: dict[str, float] = {}
    now = 0.0

    def rate(job: OracleJob) -> float:
        allocation = workers[job.name]
        return job.pace(sum(allocation.values()), min(job.speeds[t] for t in allocation))

    left = {job.name: job.work + (restarts or {}).get(job.name, 0.0) * rate(job) for job in jobs if job.name in workers}
    left.update({job.name: job.work for job in jobs if job.name not in workers})

    def fastest(job: OracleJob) -> list[str]:
        return sorted(job.speeds, key=lambda t: (-job.speeds[t], type_names.index(t)))

    def at_base(job: OracleJob) -> float:
        return job.work / job.pace(job.min_workers, job.speeds[fastest(job)[0]])

    waiting = sorted(
        (job for job in jobs if job.name not in workers and job.speeds),
        key=lambda job: (-job.priority, at_base(job), index[job.name]),
    )
    projected = {job.name: now + left[job.name] / rate(job) for job in jobs if job.name in workers}
    while projected:
        name = min(projected, key=lambda n: (projected[n], index[n]))
        done_at = projected.pop(name)
        for other, until in projected.items():  # every running job progresses to this instant
            left[other] = (until - done_at) * rate(jobs[index[other]])
        now = done_at
        finish[name] = now
        job = jobs[index[name]]
        for t, w in workers.pop(name).items():
            free[t] += w * job.gpus_per_worker
        # Queued bases, whole or not at all, in queue order, on their fastest type with room.
        still = []
        for candidate in waiting:
            need = candidate.min_workers * candidate.gpus_per_worker
            room = [t for t in fastest(candidate) if free[t] >= need]
            if room:
                free[room[0]] -= need
                workers[candidate.name] = {room[0]: candidate.min_workers}
                projected[candidate.name] = now + left[candidate.name] / rate(candidate)
            else:
                still.append(candidate)
        waiting = still
        # Growth, type by type: single-type jobs below their maximum, not finishing now, earliest finish first.
        for t in type_names:
            growers = sorted(
                (
                    n
                    for n in projected
                    if list(workers[n]) == [t] and workers[n][t] < jobs[index[n]].max_workers and projected[n] > now
                ),
                key=lambda n: (projected[n], index[n]),
            )
            for other in growers:
                job = jobs[index[other]]
                extra = min(job.max_workers - workers[other][t], free[t] // job.gpus_per_worker)
                if extra <= 0:
                    continue
                remaining = (projected[other] - now) * rate(job)
                workers[other][t] += extra
                free[t] -= extra * job.gpus_per_worker
                projected[other] = now + remaining / rate(job)
    return {job.name: finish.get(job.name, math.inf) for job in jobs}


def oracle_average_jct(
    jobs: Sequence[OracleJob],
    start: Mapping[str, Mapping[str, int]],
    capacity: Mapping[str, int],
    restarts: Mapping[str, float] | None = None,
) -> float:
    times = oracle_completion_times(jobs, start, capacity, restarts)
    return math.fsum(times.values()) / len(times) if times else 0.0


# ------------------------------------------------------------------------------------------- bin packing


def _fits(sizes: Sequence[int], bins: Sequence[int]) -> bool:
    """Can items of ``sizes`` (GPUs each, never split) go into ``bins`` (free GPUs each)? Exact."""

    @functools.cache
    def place(item: int, left: tuple[int, ...]) -> bool:
        if item == len(order):
            return True
        size = order[item]
        tried: set[int] = set()
        for b, room in enumerate(left):
            if room >= size and room not in tried:
                tried.add(room)
                after = list(left)
                after[b] -= size
                if place(item + 1, tuple(sorted(after, reverse=True))):
                    return True
        return False

    order = sorted(sizes, reverse=True)
    if sum(order) > sum(bins):
        return False
    return place(0, tuple(sorted(bins, reverse=True)))


def packs(
    snapshot: ClusterSnapshot,
    vector: Mapping[str, tuple[str | None, int]],
    *,
    held: Mapping[str, int] | None = None,
) -> bool:
    """Do the jobs' workers (job -> (type, workers)) pack onto the usable servers of their types, exactly?"""
    held = held or {}
    gpw = {job.name: job.gpus_per_worker for job in snapshot.jobs}
    by_type: dict[str, list[int]] = {}
    for job, (gpu_type, count) in vector.items():
        if gpu_type is not None and count:
            by_type.setdefault(gpu_type, []).extend([gpw[job]] * count)
    for gpu_type, sizes in by_type.items():
        bins = [s.gpus - held.get(s.name, 0) for s in snapshot.servers if _usable(s) and s.gpu_type == gpu_type]
        if not _fits(sizes, bins):
            return False
    return True


def plan_problems(
    snapshot: ClusterSnapshot,
    workers: Mapping[str, int],
    placement: Mapping[str, Mapping[str, int]],
    *,
    held: Mapping[str, int] | None = None,
) -> list[str]:
    """Every way the plan fails to be realisable, in words (empty: it is)."""
    held = held or {}
    servers = {s.name: s for s in snapshot.servers}
    jobs = {j.name: j for j in snapshot.jobs}
    problems: list[str] = []
    used: dict[str, int] = {}
    for name, count in workers.items():
        job = jobs[name]
        hosts = placement.get(name, {})
        if sum(hosts.values()) != count:
            problems.append(f"{name}: placed {sum(hosts.values())} workers, planned {count}")
        if count and not job.min_workers <= count <= job.max_workers:
            problems.append(f"{name}: {count} workers outside [{job.min_workers}, {job.max_workers}]")
        allowed = allowed_speeds(snapshot, job)
        kinds = set()
        for server_name, n in hosts.items():
            server = servers.get(server_name)
            if server is None:
                problems.append(f"{name}: unknown server {server_name}")
                continue
            if not _usable(server):
                problems.append(f"{name}: server {server_name} ({server.pool}, {server.state}) takes no training")
            if server.gpu_type not in allowed:
                problems.append(f"{name}: server {server_name} is a {server.gpu_type}, which it may not use")
            kinds.add(server.gpu_type)
            used[server_name] = used.get(server_name, 0) + n * job.gpus_per_worker
        if len(kinds) > 1 and not job.mix_gpu_types:
            problems.append(f"{name}: on several GPU types {sorted(kinds)} without mixing")
    for server_name, gpus in used.items():
        server = servers.get(server_name)
        if server is not None and gpus + held.get(server_name, 0) > server.gpus:
            problems.append(f"{server_name}: {gpus} GPUs used and {held.get(server_name, 0)} held of {server.gpus}")
    return problems


# ------------------------------------------------------------------------------ brute-force allocation

#: One job's part of a plan: its GPU type (``None``: it waits) and its workers.
Choice = tuple[str | None, int]


def _keeps(hosts: Sequence[tuple[str, int]], count: int) -> Iterable[dict[str, int]]:
    """Every way to keep ``count`` of a job's workers on the servers it runs on (``hosts``: server, workers)."""
    if count == 0:
        yield {}
        return
    if not hosts:
        return
    (server, here), rest = hosts[0], hosts[1:]
    for k in range(min(here, count), -1, -1):
        for kept in _keeps(rest, count - k):
            yield {server: k, **kept} if k else kept


class PlanSpace:
    """The plans of one snapshot that brute force ranges over, and whether one packs onto the servers.

    A queued job waits, or starts on a type it may use with ``min..max`` workers. A running job (one with a
    placement; the proofs' running jobs run on one type) keeps running: on its own type with ``min..max`` workers
    of which at least its base stay on the servers it runs on (the others anywhere on that type); and, with a
    ``restart_cost_s``, moved whole to a type faster for it, where its restart costs that many seconds without
    progress. ``held`` GPUs are outside the decision.
    """

    def __init__(
        self, snapshot: ClusterSnapshot, held: Mapping[str, int] | None = None, restart_cost_s: float | None = None
    ) -> None:
        held = held or {}
        self.snapshot = snapshot
        self.jobs = oracle_jobs(snapshot, held)
        self.capacity = oracle_capacity(snapshot, held)
        self.restart_cost = restart_cost_s
        self.gpw = {job.name: job.gpus_per_worker for job in self.jobs}
        self.low = {job.name: job.min_workers for job in self.jobs}
        self.bins: dict[str, dict[str, int]] = {}
        for server in snapshot.servers:
            if _usable(server):
                self.bins.setdefault(server.gpu_type, {})[server.name] = server.gpus - held.get(server.name, 0)
        types = {s.name: s.gpu_type for s in snapshot.servers}
        #: Running jobs: their type and their workers per server.
        self.running: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
        for job in snapshot.jobs:
            if job.placement:
                kinds = {types[s] for s in job.placement}
                assert len(kinds) == 1, "the proofs' running jobs run on one GPU type"
                assert all(s in self.bins[next(iter(kinds))] for s in job.placement), "and on usable servers"
                self.running[job.name] = (next(iter(kinds)), tuple(sorted(job.placement.items())))
        self._packs: dict[tuple[str, tuple[tuple[str, int], ...]], bool] = {}

    def choices(self, job: OracleJob) -> list[Choice]:
        if job.name in self.running:
            home = self.running[job.name][0]
            types = [home]
            if self.restart_cost is not None:
                types += [t for t in sorted(job.speeds) if t in self.capacity and job.speeds[t] > job.speeds[home]]
            return [(t, w) for t in types for w in range(job.min_workers, job.max_workers + 1)]
        waits: list[Choice] = [(None, 0)]
        return waits + [
            (t, w)
            for t in sorted(job.speeds)
            if t in self.capacity
            for w in range(job.min_workers, job.max_workers + 1)
        ]

    def migrated(self, vector: Mapping[str, Choice]) -> list[str]:
        return [name for name, (home, _) in self.running.items() if vector[name][0] != home]

    def packs(self, vector: Mapping[str, Choice]) -> bool:
        """Do the plan's workers pack, type by type, with every running job that stays keeping its base where it
        runs? Exact: every way to keep the bases, then exact bin packing of the other workers."""
        by_type: dict[str, list[tuple[str, int]]] = {}
        for name, (gpu_type, workers) in vector.items():
            if gpu_type is not None and workers:
                by_type.setdefault(gpu_type, []).append((name, workers))
        for gpu_type, members in by_type.items():
            key = (gpu_type, tuple(sorted(members)))
            known = self._packs.get(key)
            if known is None:
                known = self._packs[key] = self._packs_on(gpu_type, members)
            if not known:
                return False
        return True

    def _packs_on(self, gpu_type: str, members: Sequence[tuple[str, int]]) -> bool:
        bins = self.bins[gpu_type]
        staying = [name for name, _ in members if name in self.running and self.running[name][0] == gpu_type]
        loose: list[int] = []
        for name, workers in members:
            loose += [self.gpw[name]] * (workers - (self.low[name] if name in staying else 0))
        if sum(loose) + sum(self.low[n] * self.gpw[n] for n in staying) > sum(bins.values()):
            return False
        ways = [list(_keeps(self.running[name][1], self.low[name])) for name in staying]
        for kept in itertools.product(*ways):
            room = dict(bins)
            for name, on in zip(staying, kept, strict=True):
                for server, k in on.items():
                    room[server] -= k * self.gpw[name]
            if all(r >= 0 for r in room.values()) and _fits(loose, list(room.values())):
                return True
        return False

    def bases_first(self, vector: Mapping[str, Choice]) -> bool:
        """No waiting job's base could join the bases of the jobs that run (base demand is first-class)."""
        bases = {name: (gpu_type, self.low[name]) for name, (gpu_type, _) in vector.items() if gpu_type is not None}
        for job in self.jobs:
            if vector[job.name][0] is None:
                for gpu_type in job.speeds:
                    if gpu_type in self.capacity and self.packs({**bases, job.name: (gpu_type, job.min_workers)}):
                        return False
        return True

    def average_jct(self, vector: Mapping[str, Choice]) -> float:
        start = {name: {t: w} for name, (t, w) in vector.items() if t is not None}
        restarts = dict.fromkeys(self.migrated(vector), self.restart_cost or 0.0)
        return oracle_average_jct(self.jobs, start, self.capacity, restarts)

    def vector_of(self, placement: Mapping[str, Mapping[str, int]]) -> dict[str, Choice]:
        """A plan's choices from its placement (job -> server -> workers)."""
        types = {s.name: s.gpu_type for s in self.snapshot.servers}
        vector: dict[str, Choice] = {}
        for job in self.jobs:
            hosts = placement.get(job.name, {})
            kinds = {types[s] for s in hosts}
            assert len(kinds) <= 1, f"{job.name} runs on several types"
            vector[job.name] = (next(iter(kinds)), sum(hosts.values())) if kinds else (None, 0)
        return vector

    def problems(self, placement: Mapping[str, Mapping[str, int]]) -> list[str]:
        """How a plan leaves this space: a running job stopped, moved to a type not faster for it (or at all
        without a restart cost), or keeping fewer than its base where it ran."""
        problems = []
        vector = self.vector_of(placement)
        jobs = {job.name: job for job in self.jobs}
        for name, (home, hosts) in self.running.items():
            gpu_type = vector[name][0]
            if gpu_type is None:
                problems.append(f"{name} was stopped")
            elif gpu_type != home:
                speeds = jobs[name].speeds
                if self.restart_cost is None or speeds[gpu_type] <= speeds[home]:
                    problems.append(f"{name} moved from {home} to {gpu_type}")
            else:
                kept = sum(min(n, placement[name].get(server, 0)) for server, n in hosts)
                if kept < self.low[name]:
                    problems.append(f"{name} keeps {kept} workers where it ran, below its base")
        return problems


def brute_force_plan(
    snapshot: ClusterSnapshot,
    *,
    held: Mapping[str, int] | None = None,
    restart_cost_s: float | None = None,
    admitted: Iterable[str] | None = None,
) -> tuple[float, dict[str, Choice]]:
    """The least fluid average JCT over every plan of :class:`PlanSpace` that packs, and that plan.

    With ``admitted``, exactly those queued jobs start (the others wait); without, any queued job may wait, but
    only if its base could not join the bases of the jobs that run (base demand is first-class).
    """
    space = PlanSpace(snapshot, held, restart_cost_s)
    chosen = None if admitted is None else set(admitted)
    options = []
    for job in space.jobs:
        choices = space.choices(job)
        if chosen is not None and job.name not in space.running:
            choices = [c for c in choices if (c[0] is not None) == (job.name in chosen)]
        options.append(choices)
    names = [job.name for job in space.jobs]
    best: tuple[float, dict[str, Choice]] = (math.inf, {})
    for combination in itertools.product(*options):
        used: dict[str, int] = {}
        for name, (gpu_type, count) in zip(names, combination, strict=True):
            if gpu_type is not None:
                used[gpu_type] = used.get(gpu_type, 0) + count * space.gpw[name]
        if any(used[t] > space.capacity[t] for t in used):
            continue
        vector = dict(zip(names, combination, strict=True))
        if not space.packs(vector) or (chosen is None and not space.bases_first(vector)):
            continue
        value = space.average_jct(vector)
        if value < best[0]:
            best = (value, vector)
    return best


def brute_force_allocation(snapshot: ClusterSnapshot, *, all_start: bool) -> tuple[float, dict[str, Choice]]:
    """:func:`brute_force_plan` of a snapshot of queued jobs: with ``all_start`` every job starts."""
    assert all(not job.placement for job in snapshot.jobs), "all jobs queued here"
    return brute_force_plan(snapshot, admitted=[job.name for job in snapshot.jobs] if all_start else None)


def starts_every_base_that_fits(
    snapshot: ClusterSnapshot,
    placement: Mapping[str, Mapping[str, int]],
    *,
    held: Mapping[str, int] | None = None,
    restart_cost_s: float | None = None,
) -> bool:
    """Whether a plan (job -> server -> workers) leaves no job waiting whose base could join the bases of the jobs
    that run, on their types."""
    space = PlanSpace(snapshot, held, restart_cost_s)
    return space.bases_first(space.vector_of(placement))


# ------------------------------------------------------------------------------ the poster's knapsack


def _time_at(job: TrainingJob, workers: int) -> float:
    return job.remaining_work / workers


def poster_item_values(job: TrainingJob) -> list[float]:
    """The poster's knapsack items of one elastic job: value of ``k`` more workers = T(base) - T(base + k)."""
    base = _time_at(job, job.min_workers)
    return [base - _time_at(job, job.min_workers + k) for k in range(1, job.max_workers - job.min_workers + 1)]


def poster_allocation(jobs: Sequence[TrainingJob], capacity: int) -> list[int]:
    """The poster's two phases on one pool of speed-1 GPUs: SJF bases (whole gang or nothing, backfilling), then
    the multiple-choice knapsack over its own-reduction item values, solved exactly (ties keep fewer extra workers,
    earlier jobs first)."""
    vector = [0] * len(jobs)
    free = capacity
    order = sorted(
        range(len(jobs)),
        key=lambda i: (-jobs[i].priority, _time_at(jobs[i], jobs[i].min_workers), jobs[i].submit_time, jobs[i].name),
    )
    for i in order:
        need = jobs[i].min_workers * jobs[i].gpus_per_worker
        if need <= free:
            vector[i] = jobs[i].min_workers
            free -= need
    groups = [i for i in range(len(jobs)) if vector[i] and jobs[i].max_workers > jobs[i].min_workers]
    best: list[tuple[float, tuple[int, ...]]] = [(0.0, ())] * (free + 1)
    for i in groups:
        values = poster_item_values(jobs[i])
        gpw = jobs[i].gpus_per_worker
        nxt: list[tuple[float, tuple[int, ...]]] = []
        for c in range(free + 1):
            choice = (best[c][0], (*best[c][1], 0))
            for k, value in enumerate(values, start=1):
                if k * gpw > c:
                    break
                prior = best[c - k * gpw]
                if prior[0] + value > choice[0] + 1e-9:
                    choice = (prior[0] + value, (*prior[1], k))
            nxt.append(choice)
        best = nxt
    for i, k in zip(groups, best[free][1], strict=True):
        vector[i] += k
    return vector


# -------------------------------------------------------------------------------------------------- reclaim

Cost = tuple[int, float, int]


@dataclass(frozen=True)
class ReclaimProblem:
    """Loaned servers, each live job's workers on them, what each can spare, and what it loses if preempted.
    Jobs a reclaiming server already left below their base (doomed) are not part of the problem."""

    candidates: tuple[str, ...]
    on_server: dict[str, dict[str, int]]
    spare: dict[str, int]
    lost: dict[str, float]

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> ReclaimProblem:
        candidates = tuple(sorted(s.name for s in snapshot.servers if s.state is LoanState.LOANED))
        leaving_servers = {s.name for s in snapshot.servers if s.state is LoanState.RECLAIMING}
        on_server: dict[str, dict[str, int]] = {name: {} for name in candidates}
        spare: dict[str, int] = {}
        lost: dict[str, float] = {}
        for job in snapshot.jobs:
            total = sum(job.placement.values())
            surviving = total - sum(n for s, n in job.placement.items() if s in leaving_servers)
            if surviving < job.min_workers:
                continue  # doomed already: costs nothing here
            spare[job.name] = surviving - job.min_workers
            lost[job.name] = total * job.gpus_per_worker * job.seconds_since_checkpoint
            for server, n in job.placement.items():
                if server in on_server:
                    on_server[server][job.name] = n
        return cls(candidates, on_server, spare, lost)


def reclaim_cost(problem: ReclaimProblem, chosen: Iterable[str]) -> Cost:
    removed: dict[str, int] = {}
    for server in chosen:
        for job, n in problem.on_server[server].items():
            removed[job] = removed.get(job, 0) + n
    preempted = [job for job, n in removed.items() if n > problem.spare[job]]
    scaled = sum(n for job, n in removed.items() if n <= problem.spare[job])
    return (len(preempted), math.fsum(problem.lost[job] for job in sorted(preempted)), scaled)


def _lexicographic_less(a: Cost, b: Cost) -> bool:
    if a[0] != b[0]:
        return a[0] < b[0]
    if abs(a[1] - b[1]) > 1e-6 * max(1.0, abs(a[1]), abs(b[1])):
        return a[1] < b[1]
    return a[2] < b[2]


def brute_force_reclaim(problem: ReclaimProblem, count: int) -> Cost:
    best: Cost | None = None
    for chosen in itertools.combinations(problem.candidates, count):
        cost = reclaim_cost(problem, chosen)
        if best is None or _lexicographic_less(cost, best):
            best = cost
    assert best is not None
    return best


def combinations_count(problem: ReclaimProblem, count: int) -> int:
    return math.comb(len(problem.candidates), count)


def ilp_reclaim(problem: ReclaimProblem, count: int) -> Cost:
    """Three stacked integer programs. Variables: x_s (server taken), y_j (job preempted, exactly: y_j = 1 iff
    removed_j >= spare_j + 1), z_j (workers scaled in: z_j >= removed_j - total_j y_j, z_j >= 0). Minimise the
    preemptions; then, at that many, the work lost; then, at both, the workers scaled in."""
    servers = list(problem.candidates)
    jobs = sorted({j for s in servers for j in problem.on_server[s]})
    if not jobs:
        return (0, 0.0, 0)
    nx, ny = len(servers), len(jobs)
    size = nx + 2 * ny
    rows: list[np.ndarray] = []
    lower: list[float] = []
    upper: list[float] = []

    def constrain(row: np.ndarray, low: float, high: float) -> None:
        rows.append(row)
        lower.append(low)
        upper.append(high)

    row = np.zeros(size)
    row[:nx] = 1
    constrain(row, count, count)
    for k, job in enumerate(jobs):
        removal = np.zeros(size)
        total = 0
        for i, server in enumerate(servers):
            n = problem.on_server[server].get(job, 0)
            removal[i] = n
            total += n
        spare = problem.spare[job]
        y, z = nx + k, nx + ny + k
        # removed - (spare + 1) y >= 0: a preempted job loses more than it can spare.
        at_least = removal.copy()
        at_least[y] = -(spare + 1)
        constrain(at_least, 0, np.inf)
        # removed - (total - spare) y <= spare: a job not preempted loses at most what it can spare.
        at_most = removal.copy()
        at_most[y] = -(total - spare)
        constrain(at_most, -np.inf, spare)
        # z - removed + total y >= 0.
        scaled = -removal
        scaled[z] = 1
        scaled[y] = total
        constrain(scaled, 0, np.inf)
    integrality = np.concatenate([np.ones(nx + ny), np.zeros(ny)])
    bounds = Bounds(np.zeros(size), np.concatenate([np.ones(nx + ny), np.full(ny, np.inf)]))

    def solve(objective: np.ndarray) -> float:
        result = milp(
            objective,
            constraints=LinearConstraint(np.array(rows), lower, upper),
            integrality=integrality,
            bounds=bounds,
        )
        assert result.success, f"HiGHS failed: {result.message}"
        return float(result.fun)

    preempt = np.zeros(size)
    preempt[nx : nx + ny] = 1
    preemptions = round(solve(preempt))
    constrain(preempt, preemptions, preemptions)
    losing = np.zeros(size)
    losing[nx : nx + ny] = [problem.lost[job] for job in jobs]
    lost = solve(losing)
    constrain(losing, -np.inf, lost + 1e-6 * max(1.0, lost))
    scaling = np.zeros(size)
    scaling[nx + ny :] = 1
    scaled = round(solve(scaling))
    return (preemptions, lost, scaled)
