"""Where a job's workers go on real servers: the one placement rule the allocator, the migration planner and the
simulator share.

A worker's GPUs sit on one server, so a plan is valid only if its workers bin-pack onto the servers' free GPUs
(three 6-GPU servers hold three 4-GPU workers, not four). :class:`Layout` keeps the free GPUs of every server and
every job's workers per server, and places and removes workers by one deterministic rule:

*Adding* ``k`` workers of ``g`` GPUs for a job on GPU type ``t`` (all or nothing):

1. servers of type ``t`` already hosting the job, while they have room: the job stays on few servers, which keeps
   its server fraction, and so the cost of reclaiming any one of them, low;
2. then, if the remaining workers fit on one server, the tightest such server (best fit: big holes stay free for
   big gangs);
3. otherwise the server that takes the most of them, and again from step 2 for the rest.

Among equals, *safe* servers (training servers, never reclaimed) come before loaned ones, then the lower index
(servers are indexed in name order).

*Removing* ``k`` workers of a job (scale-in): from loaned servers before safe ones, then from the servers where the
job has the fewest workers (so the job leaves servers entirely), then the higher index.

Buckets of servers by (type, safety, free GPUs), each a lazily cleaned heap of indices, make a placement cost
O(distinct free values) instead of O(servers).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Slot:
    """A server as placement sees it: its name, GPU type, GPUs free for this decision, and whether it is safe
    (a training server) rather than loaned."""

    name: str
    gpu_type: str
    free: int
    safe: bool


#: One worker change: (server index, workers added (> 0) or removed (< 0)).
Move = tuple[int, int]


class Layout:
    """Free GPUs per server and every job's workers per server; mutable, with exact undo."""

    def __init__(self, slots: Sequence[Slot], placed: Iterable[tuple[str, str, int, int]] = ()) -> None:
        """``slots`` with their free GPUs, then the workers already ``placed`` on them, as (job, server name,
        workers, GPUs per worker): placing them one by one would cost a bucket update each."""
        ordered = sorted(slots, key=lambda s: s.name)
        self.names = names = [s.name for s in ordered]
        self.types = sorted({s.gpu_type for s in ordered})
        type_index = {t: i for i, t in enumerate(self.types)}
        self.type_of = type_of = [type_index[s.gpu_type] for s in ordered]
        self.safe = [s.safe for s in ordered]
        #: 1 for a loaned server, 0 for a safe one: the middle of a bucket's key.
        self.unsafe = unsafe = [int(not s.safe) for s in ordered]
        #: Free GPUs of every server before any job of the decision is placed.
        self.size = size = [s.free for s in ordered]
        self.index = index = {name: i for i, name in enumerate(names)}
        self.jobs: dict[str, dict[int, int]] = {}
        self.free = free = list(size)
        for job, server, count, gpus_per_worker in placed:
            i = index[server]
            hosts = self.jobs.setdefault(job, {})
            hosts[i] = hosts.get(i, 0) + count
            free[i] -= count * gpus_per_worker
        types = len(self.types)
        self.servers_of_type: list[list[int]] = [[] for _ in range(types)]
        self.capacity = capacity = [0] * types
        self.largest = largest = [0] * types
        self.free_of_type = free_of_type = [0] * types
        # buckets[(type, unsafe, free)] = heap of server indices (lazily cleaned: an entry is valid while the
        # server's free count still equals the bucket's). Indices are appended in order, so each list is a heap.
        self.buckets: dict[tuple[int, int, int], list[int]] = {}
        # count[(type, free)] = servers of the type with exactly that many free GPUs.
        self.count: dict[tuple[int, int], int] = {}
        # valid[(type, unsafe, free)] = servers really in that bucket (its heap may also hold stale entries).
        self.valid: dict[tuple[int, int, int], int] = {}
        buckets, counts, valid, servers_of_type = self.buckets, self.count, self.valid, self.servers_of_type
        for i, left in enumerate(free):
            t, whole = type_of[i], size[i]
            if left < 0 or whole < 0:
                raise ValueError(f"server {names[i]}: {left} free GPUs")
            servers_of_type[t].append(i)
            capacity[t] += whole
            largest[t] = max(largest[t], whole)
            free_of_type[t] += left
            key = (t, unsafe[i], left)
            bucket = buckets.get(key)
            if bucket is None:
                buckets[key] = [i]
                valid[key] = 1
            else:
                bucket.append(i)
                valid[key] += 1
            counts[t, left] = counts.get((t, left), 0) + 1

    def copy(self) -> Layout:
        clone = Layout.__new__(Layout)
        clone.names = self.names
        clone.types = self.types
        clone.type_of = self.type_of
        clone.servers_of_type = self.servers_of_type
        clone.safe = self.safe
        clone.unsafe = self.unsafe
        clone.index = self.index
        clone.size = self.size
        clone.capacity = self.capacity
        clone.largest = self.largest
        clone.free = list(self.free)
        clone.free_of_type = list(self.free_of_type)
        clone.buckets = {key: list(heap) for key, heap in self.buckets.items()}
        clone.count = dict(self.count)
        clone.valid = dict(self.valid)
        clone.jobs = {job: dict(hosts) for job, hosts in self.jobs.items()}
        return clone

    # ------------------------------------------------------------------------------------------- primitives

    def _set_free(self, server: int, free: int) -> None:
        frees = self.free
        old = frees[server]
        if old == free:
            return
        t = self.type_of[server]
        frees[server] = free
        self.free_of_type[t] += free - old
        count, valid = self.count, self.valid
        count[t, old] -= 1
        count[t, free] = count.get((t, free), 0) + 1
        unsafe = self.unsafe[server]
        valid[t, unsafe, old] -= 1
        key = (t, unsafe, free)
        valid[key] = in_bucket = valid.get(key, 0) + 1
        heap = self.buckets.get(key)
        if heap is None:
            self.buckets[key] = [server]
            return
        heapq.heappush(heap, server)
        if len(heap) > 2 * in_bucket + 8:
            # Stale entries pile up in a long-lived layout (the simulator keeps one for a whole run): rebuild.
            self.buckets[key] = sorted({s for s in heap if frees[s] == free})

    def _best_in_bucket(self, key: tuple[int, int, int]) -> int | None:
        heap = self.buckets.get(key)
        if not heap:
            return None
        free = key[2]
        while heap and self.free[heap[0]] != free:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def add(self, job: str, server: int, count: int, gpus_per_worker: int) -> None:
        """Put ``count`` workers (``count < 0`` removes) of ``job`` on ``server``; the caller checked the room."""
        hosts = self.jobs.get(job)
        if hosts is None:
            hosts = self.jobs[job] = {}
        now = hosts.get(server, 0) + count
        free = self.free[server] - count * gpus_per_worker
        if now < 0 or free < 0:
            if not hosts:
                del self.jobs[job]
            raise ValueError(f"job {job}: cannot move {count} workers on server {self.names[server]}")
        if now:
            hosts[server] = now
        else:
            hosts.pop(server, None)
            if not hosts:
                del self.jobs[job]
        self._set_free(server, free)

    def undo(self, job: str, moves: Iterable[Move], gpus_per_worker: int) -> None:
        """Reverse ``moves`` made for ``job`` (in reverse order)."""
        for server, count in reversed(list(moves)):
            self.add(job, server, -count, gpus_per_worker)

    # --------------------------------------------------------------------------------------------- queries

    def workers(self, job: str) -> int:
        return sum(self.jobs.get(job, {}).values())

    def hosts(self, job: str) -> dict[int, int]:
        return self.jobs.get(job, {})

    def job_types(self, job: str) -> set[int]:
        return {self.type_of[s] for s in self.jobs.get(job, {})}

    def placement(self, job: str) -> dict[str, int]:
        return {self.names[s]: n for s, n in sorted(self.jobs.get(job, {}).items())}

    def room(self, gpu_type: int, gpus_per_worker: int) -> int:
        """How many workers of ``gpus_per_worker`` GPUs the free GPUs of a type hold: what :meth:`place` can add for
        one job."""
        if gpus_per_worker == 1:
            return self.free_of_type[gpu_type]
        return sum(
            count * (free // gpus_per_worker)
            for (t, free), count in self.count.items()
            if t == gpu_type and free >= gpus_per_worker and count
        )

    def has_room(self, gpu_type: int, gpus_per_worker: int) -> bool:
        """True if some server of the type has ``gpus_per_worker`` GPUs free."""
        if gpus_per_worker == 1:
            return self.free_of_type[gpu_type] > 0
        return self._tightest(gpu_type, gpus_per_worker) is not None

    # ----------------------------------------------------------------------------------------------- rules

    def place(self, job: str, gpus_per_worker: int, gpu_type: int, count: int) -> list[Move] | None:
        """Add ``count`` workers of ``job`` on type ``gpu_type`` by the rule above; all or nothing.

        Returns the moves made (for :meth:`undo`), or ``None`` (and changes nothing) if they do not fit.
        """
        if count <= 0:
            return []
        g = gpus_per_worker
        if self.free_of_type[gpu_type] < count * g or self.largest[gpu_type] < g:
            return None
        moves: list[Move] = []
        left = count
        hosts = self.jobs.get(job)
        hosting = (
            sorted(
                (s for s in hosts if self.type_of[s] == gpu_type and self.free[s] >= g),
                key=lambda s: (not self.safe[s], -self.free[s], s),
            )
            if hosts
            else ()
        )
        for server in hosting:
            take = min(left, self.free[server] // g)
            self.add(job, server, take, g)
            moves.append((server, take))
            left -= take
            if not left:
                return moves
        while left:
            tightest = self._tightest(gpu_type, left * g)
            if tightest is not None:
                self.add(job, tightest, left, g)
                moves.append((tightest, left))
                return moves
            roomiest = self._roomiest(gpu_type, g)
            if roomiest is None:
                self.undo(job, moves, g)
                return None
            take = min(left, self.free[roomiest] // g)
            self.add(job, roomiest, take, g)
            moves.append((roomiest, take))
            left -= take
        return moves

    def _tightest(self, gpu_type: int, need: int) -> int | None:
        """The server of the type with the fewest free GPUs that are still >= ``need``: safe first, then index."""
        for free in range(need, self.largest[gpu_type] + 1):
            for unsafe in (0, 1):
                server = self._best_in_bucket((gpu_type, unsafe, free))
                if server is not None:
                    return server
        return None

    def _roomiest(self, gpu_type: int, gpus_per_worker: int) -> int | None:
        """The server that holds the most workers of ``gpus_per_worker`` GPUs (>= 1): safe first, tightest, index."""
        best: tuple[int, int, int, int] | None = None
        for free in range(self.largest[gpu_type], gpus_per_worker - 1, -1):
            for unsafe in (0, 1):
                server = self._best_in_bucket((gpu_type, unsafe, free))
                if server is None:
                    continue
                key = (-(free // gpus_per_worker), unsafe, free, server)
                if best is None or key < best:
                    best = key
        return None if best is None else best[3]

    def remove(self, job: str, gpus_per_worker: int, count: int, *, only_type: int | None = None) -> list[Move]:
        """Remove ``count`` workers of ``job`` by the scale-in rule above; returns the moves (for :meth:`undo`)."""
        hosts = self.jobs.get(job, {})
        order = sorted(
            (s for s in hosts if only_type is None or self.type_of[s] == only_type),
            key=lambda s: (self.safe[s], hosts[s], -s),
        )
        moves: list[Move] = []
        left = count
        for server in order:
            if not left:
                break
            take = min(left, hosts[server])
            self.add(job, server, -take, gpus_per_worker)
            moves.append((server, -take))
            left -= take
        if left:
            self.undo(job, moves, gpus_per_worker)
            raise ValueError(f"job {job}: cannot remove {count} workers, it has {count - left}")
        return moves

    def remove_all(self, job: str, gpus_per_worker: int) -> list[Move]:
        return self.remove(job, gpus_per_worker, self.workers(job))
