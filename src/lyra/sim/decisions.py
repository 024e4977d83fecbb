"""Scheduling decisions by the policy core: the simulator asks :func:`lyra.core.allocation.allocate_workers` and
applies its placements as they are.

Decisions are made on a *view*, so that a decision costs what it touches, not the size of the cluster:

* queued jobs: per bucket of the queue (the GPU types a job may use, its GPUs per worker, its base of ``b`` GPUs),
  the first ``A // b`` jobs in the scheme's order, where ``A`` is what those types offer a base (free GPUs plus
  the GPUs of flexible workers).
  Within a bucket the allocator admits a prefix of that order, so this is a superset of whom it can admit; at
  most ``4 * view_jobs`` of them, in admission order (the next decision offers the rest);
* running elastic jobs: when a queued base needs flexible workers on a GPU type it may use (even if a slower type
  has free room: the allocator may make room on the faster type instead), those on that type holding the most, enough
  to make room and two more (at most ``view_jobs`` per type); when free
  GPUs are left over, the ``view_jobs`` that could grow with the shortest estimated remaining time (the fluid
  model grows those first);
* servers: those the view's jobs run on and, per GPU type they may use and worker size, servers with room for
  such a worker (tightest first) until they hold every worker the view could add; GPUs that jobs outside the view
  hold are passed as ``held``: those jobs keep their workers.

Every ``rebalance_interval_s`` (if anything changed) a periodic decision also offers, with migration, the
``view_jobs`` jobs on inference GPUs with the longest estimated time left whose base the training GPUs could hold,
plus the donors that could make room for them; the allocator may move such a job to the faster GPUs when that
pays for the restart (``allocate_workers(..., restart_cost_s=...)``).

**Small clusters are decided whole.** While at most ``whole_cluster_jobs`` jobs run or wait (schemes with elastic
jobs; without them a running job never changes and views lose nothing), every decision offers the allocator every
running and queued job (on the servers a view of them holds), as each of the operator's passes does: the allocator
may then also move workers between running jobs (a shorter job's base growing onto a longer one's flexible worker),
which views never offer. Held to the live cluster (``lyra demo``, docs/evaluation.md), views diverged exactly there:
the operator gave short jobs of the morning A100 workers taken from a long elastic job, the views left them on lent
T4s, and the A100 servers the 8-GPU jobs needed later were free at different times.

The allocator is not called at all when nothing could change: no queued base fits in what its types offer, no
free GPU could grow an elastic job, and (periodically, with migration) no job on inference GPUs could move. Views
never offer running jobs only to move workers between them: measured on the poster's 15 days, 97% of such
rebalances changed nothing, and each move would pay two resizes that the fluid objective does not count.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping

from lyra.core.allocation import allocate_workers
from lyra.core.model import ClusterSnapshot, Server, TrainingJob
from lyra.sim.driver import Driver
from lyra.sim.jobs import SimJob, Status


class CoreDecisions:
    """The scheduler of every scheme whose admission is the core's (:data:`lyra.sim.schemes.SCHEMES`)."""

    def __init__(self, sim: Driver) -> None:
        self.sim = sim
        scheduler = sim.scenario.scheduler
        self.view_jobs = scheduler.view_jobs
        self.whole_cluster_jobs = scheduler.whole_cluster_jobs
        self.search_evaluations = scheduler.search_evaluations
        self.rebalance_interval = scheduler.rebalance_interval_s
        self.migrate = sim.scheme.migration and scheduler.migration
        self.allocator_calls = 0
        self.dirty = False
        self.next_full = 0.0
        cluster = sim.cluster
        self.catalog = cluster.catalog
        self.type_index = {name: i for i, name in enumerate(cluster.type_names)}
        self._indices_of: dict[frozenset[str], tuple[int, ...]] = {}

    def mark_dirty(self) -> None:
        self.dirty = True

    def _indices(self, types: frozenset[str]) -> tuple[int, ...]:
        indices = self._indices_of.get(types)
        if indices is None:
            indices = self._indices_of[types] = tuple(sorted(self.type_index[t] for t in types))
        return indices

    def _available(self, types: frozenset[str], per_worker: int) -> int:
        """At most the GPUs a queued base of these types and worker size could get now: on a type with flexible
        workers its free GPUs plus theirs (scaling them in may complete a server's room), else the free GPUs that
        whole workers of ``per_worker`` GPUs fill."""
        flexible = self.sim.flexible
        layout = self.sim.cluster.layout
        return sum(
            layout.free_of_type[i] + flexible[i] if flexible[i] else layout.room(i, per_worker) * per_worker
            for i in self._indices(types)
        )

    def _free(self, types: frozenset[str], per_worker: int) -> int:
        """The free GPUs of these types that whole workers of ``per_worker`` GPUs fill."""
        layout = self.sim.cluster.layout
        return sum(layout.room(i, per_worker) * per_worker for i in self._indices(types))

    def _can_grow(self) -> bool:
        free = self.sim.cluster.layout.free_of_type
        return any(f > 0 and g > 0 for f, g in zip(free, self.sim.growable, strict=True))

    def decide(self, t: float) -> None:
        sim = self.sim
        if sim.scheme.elastic and 0 < len(sim.running) + sim.queue.size <= self.whole_cluster_jobs:
            self._decide_whole(t)
            return
        if (sim.scheme.elastic or self.migrate) and self.dirty and t >= self.next_full:
            self.dirty = False
            self.next_full = t + self.rebalance_interval
            queued = self._queued()
            offered: set[int] = set()
            if self.migrate:
                movers = self._migration_candidates(t)
                if movers:
                    cluster = sim.cluster
                    # Every job that could make room on the training GPUs, up to view_jobs: moving a job there
                    # may be worth more than the flexible workers it displaces, and the objective decides.
                    offered.update(movers)
                    for t_index in cluster.training_types:
                        offered.update(self._donors_on(t_index, cluster.training_gpus_of_type[t_index]))
            if queued:
                offered.update(self._donors())
            if self._can_grow():
                offered.update(self._receivers(t))
            if queued or offered:
                self._allocate(t, sorted(offered, key=lambda i: sim.jobs[i].name), queued)
            return
        if sim.queue.could_start(self._available):
            queued = self._queued()
            # Jobs that could give way wherever a base needs flexible workers (also on a faster type when a slower
            # one has free room: the allocator may make room there instead); if free GPUs suffice for some base,
            # also jobs that could grow.
            running = self._donors()
            if sim.queue.could_start(self._free):
                running = sorted(set(running).union(self._receivers(t)), key=lambda i: sim.jobs[i].name)
        elif self._can_grow():
            queued, running = [], self._receivers(t)
        else:
            return
        self._allocate(t, running, queued)

    def _decide_whole(self, t: float) -> None:
        """Every running and queued job (see the module docstring), at every decision: remaining work moves the
        order of jobs as they run, as it does between the operator's passes."""
        sim = self.sim
        self.dirty = False
        running = sorted(sim.running, key=lambda i: sim.jobs[i].name)
        self._allocate(t, running, [entry[3] for entry in sim.queue.ordered()])

    def _queued(self) -> list[int]:
        """The queue's prefix (see the module docstring), at most ``4 * view_jobs`` jobs in admission order."""
        sim = self.sim
        chosen = sim.queue.prefix(self._available)
        cap = 4 * self.view_jobs
        if len(chosen) <= cap:
            return chosen
        jobs = sim.jobs
        return sorted(chosen, key=lambda i: jobs[i].entry or (0.0, 0.0, jobs[i].name, i))[:cap]

    def _migration_candidates(self, t: float) -> list[int]:
        """Jobs on the inference GPU types (those no training server has) whose base one training GPU type could
        hold (free or flexible workers), longest estimated time left first (they gain the most from moving): at most
        ``view_jobs``."""
        sim = self.sim
        cluster = sim.cluster
        movable = [t for t in cluster.inference_types if t not in cluster.training_types]
        if not movable:
            return []
        jobs = sim.jobs
        free = cluster.layout.free_of_type
        room = max(free[t] + sim.flexible[t] for t in cluster.training_types)
        on_inference = set().union(*(sim.on_type[t] for t in movable))
        candidates = (i for i in on_inference if jobs[i].wmin * jobs[i].gpus_per_worker <= room)
        return heapq.nsmallest(self.view_jobs, candidates, key=lambda i: (-self._time_left(i, t), jobs[i].name))

    def _time_left(self, i: int, t: float) -> float:
        job = self.sim.jobs[i]
        left = job.remaining - job.rate * (t - job.last)
        return left * job.estimate_factor / job.rate

    def _donors(self) -> list[int]:
        """Per GPU type where a queued base needs flexible workers to fit, the running elastic jobs there holding
        the most, enough to make room for the largest such base and two more to choose from; at most
        ``view_jobs`` per type."""
        sim = self.sim
        free = sim.cluster.layout.free_of_type
        flexible = sim.flexible
        deficit = [0] * len(free)
        for (types, per_worker, base), bucket in sim.queue.buckets.items():
            if not bucket:
                continue
            need = per_worker * base
            for name in types:
                t = self.type_index[name]
                if free[t] < need <= free[t] + flexible[t]:
                    deficit[t] = max(deficit[t], need - free[t])
        chosen: list[int] = []
        for t, missing in enumerate(deficit):
            chosen += self._donors_on(t, missing)
        return chosen

    def _donors_on(self, gpu_type: int, missing: int) -> list[int]:
        """Running elastic jobs on a type holding the most flexible GPUs: enough to free ``missing`` GPUs, and
        two more to choose from; at most ``view_jobs``."""
        if missing <= 0:
            return []
        sim = self.sim
        jobs = sim.jobs
        ranked = sorted(
            (i for i in sim.on_type[gpu_type] if i in sim.running_elastic and jobs[i].workers > jobs[i].wmin),
            key=lambda i: ((jobs[i].wmin - jobs[i].workers) * jobs[i].gpus_per_worker, jobs[i].name),
        )
        chosen: list[int] = []
        extra = 2
        for i in ranked[: self.view_jobs]:
            if missing <= 0:
                if extra == 0:
                    break
                extra -= 1
            chosen.append(i)
            missing -= (jobs[i].workers - jobs[i].wmin) * jobs[i].gpus_per_worker
        return chosen

    def _receivers(self, t: float) -> list[int]:
        """Running elastic jobs below their maximum on a type with a server that has room for one more of their
        workers, shortest estimated time first."""
        sim = self.sim
        jobs = sim.jobs
        layout = sim.cluster.layout

        def remaining_time(i: int) -> tuple[float, str]:
            return (self._time_left(i, t), jobs[i].name)

        growable = (
            i
            for i in sim.running_elastic
            if jobs[i].workers < jobs[i].wmax
            and sim.kind[i] >= 0
            and layout.has_room(sim.kind[i], jobs[i].gpus_per_worker)
        )
        return heapq.nsmallest(self.view_jobs, growable, key=remaining_time)

    # ------------------------------------------------------------------------------------------ the core

    def _core_job(self, job: SimJob, t: float) -> TrainingJob:
        """The core's view of a job (:meth:`Driver.core_job`); a queued job's view is kept until it changes."""
        if job.status is Status.QUEUED and isinstance(job.view, TrainingJob):
            return job.view
        view = self.sim.core_job(job, t)
        if job.status is Status.QUEUED:
            job.view = view
        return view

    def snapshot(self, jobs: Iterable[SimJob], t: float) -> tuple[ClusterSnapshot, dict[str, int]]:
        """The view as a core snapshot: the view's jobs, the servers they run on, and, of each GPU type they may
        use and each worker size they have (the largest first), the servers with room for such a worker, tightest
        first, until they hold every worker of that size the view could add there, GPUs counted for one size not
        counted again (more could not change the plan's counts), and room for a running job's workers to move to
        where larger workers want room on its type; plus the GPUs that jobs outside the view hold on them."""
        cluster = self.sim.cluster
        layout = cluster.layout
        members = list(jobs)
        used: dict[int, int] = {}
        #: (GPU type index, GPUs per worker) -> workers the view could add there.
        wanted: dict[tuple[int, int], int] = {}

        def want(gpu_type: int, per_worker: int, workers: int) -> None:
            wanted[(gpu_type, per_worker)] = wanted.get((gpu_type, per_worker), 0) + workers

        for job in members:
            per_worker = job.gpus_per_worker
            for server, count in job.placement.items():
                used[server] = used.get(server, 0) + count * per_worker
            kind = self.sim.kind[job.index]
            if kind >= 0:
                want(kind, per_worker, job.wmax - job.workers)
                if self.migrate and kind not in cluster.training_types:
                    # It may move to the training GPUs: offer room there for all of it.
                    for training_type in cluster.training_types:
                        want(training_type, per_worker, job.wmax)
            else:
                for name in job.gpu_types:
                    want(self.type_index[name], per_worker, job.wmax - job.workers)
        # A running job may move its workers to small holes elsewhere to leave a server whole for larger workers
        # (its own or a queued job's): where the view wants room for workers larger than a running job's, it offers
        # room for all of that job's workers too.
        largest: dict[int, int] = {}
        for (gpu_type, per_worker), workers in wanted.items():
            if workers > 0:
                largest[gpu_type] = max(largest.get(gpu_type, 0), per_worker)
        for job in members:
            kind = self.sim.kind[job.index]
            if kind >= 0 and job.workers and largest.get(kind, 0) > job.gpus_per_worker:
                want(kind, job.gpus_per_worker, job.workers)
        chosen = set(used)
        # Per type, the largest workers first; a server's GPUs counted for one size are not counted again.
        spare: dict[int, int] = {}
        for (t_index, per_worker), workers in sorted(wanted.items(), key=lambda item: (item[0][0], -item[0][1])):
            left = workers
            for server in self._open_servers(t_index, per_worker) if left > 0 else ():
                if left <= 0:
                    break
                room = spare.get(server, layout.free[server])
                take = min(left, room // per_worker)
                if take:
                    chosen.add(server)
                    spare[server] = room - take * per_worker
                    left -= take
        servers: list[Server] = []
        held: dict[str, int] = {}
        for server in sorted(chosen):
            servers.append(cluster.server_view(server))
            others = cluster.gpus[server] - layout.free[server] - used.get(server, 0)
            if others:
                held[cluster.names[server]] = others
        views = tuple(self._core_job(job, t) for job in members)
        return ClusterSnapshot(tuple(servers), views, self.catalog), held

    def _open_servers(self, gpu_type: int, per_worker: int) -> Iterator[int]:
        """Servers of a type with at least ``per_worker`` free GPUs, tightest first (then index), read off the
        layout's buckets so that a caller that stops early pays for what it reads. (Inference servers not loaned have
        no free GPUs: their GPUs are held, so every server here may take training work.)"""
        layout = self.sim.cluster.layout
        free = layout.free
        count = layout.count
        for f in range(per_worker, layout.largest[gpu_type] + 1):
            if not count.get((gpu_type, f)):
                continue
            servers: set[int] = set()
            for unsafe in (0, 1):
                servers.update(s for s in layout.buckets.get((gpu_type, unsafe, f), ()) if free[s] == f)
            yield from sorted(servers)

    def _everyone_fits(self, running: list[int], queued: list[int]) -> dict[SimJob, dict[int, int]] | None:
        """When the free GPUs hold every offered job at its maximum (queued jobs on the training GPUs, the
        fastest; running ones on their own type), the allocator's answer is known: everyone at its maximum,
        since with ``w * e(w)`` rising no job is faster with fewer workers and none waits. Then the placements
        come straight from the core's placement rule and the call is skipped (a unit test checks this shortcut
        against :func:`allocate_workers`). ``None`` when it does not apply, and with several training GPU types
        (which of them a queued job gets is the allocator's choice)."""
        sim = self.sim
        cluster = sim.cluster
        layout = cluster.layout
        jobs = sim.jobs
        if len(cluster.training_types) != 1:
            return None
        (training_type,) = cluster.training_types
        wanted = [0] * len(cluster.type_names)
        for i in queued:
            wanted[training_type] += jobs[i].wmax * jobs[i].gpus_per_worker
        for i in running:
            kind = sim.kind[i]
            if kind < 0:
                return None
            if self.migrate and kind != training_type:
                return None  # the allocator may move it to the training GPUs, free or held by flexible workers
            wanted[kind] += (jobs[i].wmax - jobs[i].workers) * jobs[i].gpus_per_worker
        if any(w > f for w, f in zip(wanted, layout.free_of_type, strict=True)):
            return None
        changes: dict[SimJob, dict[int, int]] = {}
        journal: list[tuple[SimJob, list[tuple[int, int]]]] = []
        order = [jobs[i] for i in running] + sorted(
            (jobs[i] for i in queued), key=lambda job: job.entry or (0.0, 0.0, job.name, job.index)
        )
        for job in order:
            kind = sim.kind[job.index] if job.workers else training_type
            extra = job.wmax - job.workers
            if extra <= 0:
                continue
            moves = layout.place(job.name, job.gpus_per_worker, kind, extra)
            if moves is None:
                for placed, made in reversed(journal):
                    layout.undo(placed.name, made, placed.gpus_per_worker)
                return None
            journal.append((job, moves))
            placement = changes.setdefault(job, dict(job.placement))
            for server, count in moves:
                placement[server] = placement.get(server, 0) + count
        for placed, made in reversed(journal):
            layout.undo(placed.name, made, placed.gpus_per_worker)
        return changes

    def _allocate(self, t: float, running: list[int], queued: list[int]) -> None:
        sim = self.sim
        shortcut = self._everyone_fits(running, queued)
        if shortcut is not None:
            if shortcut:
                sim.apply(shortcut, t)
            return
        members = [sim.jobs[i] for i in running] + [sim.jobs[i] for i in queued]
        snapshot, held = self.snapshot(members, t)
        budget = self.search_evaluations * len(members)
        restart = sim.restart_cost if self.migrate else None
        plan = allocate_workers(snapshot, held=held, search_budget=budget, restart_cost_s=restart)
        self.allocator_calls += 1
        index = sim.cluster.layout.index
        changes: dict[SimJob, Mapping[int, int]] = {}
        for job in members:
            placement = plan.placement.get(job.name)
            if placement is None:
                if job.status is Status.RUNNING:
                    raise RuntimeError(f"the allocator stopped running job {job.name}")
                continue
            wanted = {index[name]: count for name, count in placement.items()}
            if wanted != job.placement:
                changes[job] = wanted
        if changes:
            sim.apply(changes, t)
