"""Which loaned servers go back to inference: the fewest preemptions for ``count`` servers.

A job spread over several servers ties them together: reclaiming one of them preempts the job, which frees its
workers on the others too. The poster's "knapsack with dependent item values" handles that by valuing a server at
the sum of its jobs' *server fractions* (1 / number of servers hosting the job) and greedily taking the
lowest-value server, updating values as jobs are preempted.

Lyra here builds on that rule in three ways:

* **Elastic scale-in.** A job loses only the workers on the reclaimed servers. While the workers removed from
  it do not exceed its flexible workers (``workers - min_workers``), it is *scaled in*, not preempted, and
  adds nothing to a server's value. Servers holding no workers, or only removable flexible ones, cost nothing.
* **Fractions over candidates.** A job's fraction counts only the loaned servers hosting it: preempting a job
  that also runs on training servers frees just its loaned part, so that is what its cost is spread over.
* **Exact accounting and local search.** Whatever the greedy picks, the plan's cost is computed exactly from the
  chosen set (a job is preempted iff more workers are removed from it than it can spare). Then single swaps
  (one chosen server out, one other in) are tried while they lower the cost. The greedy's lookahead is one
  server deep; the swaps repair the cases where an early cheap pick made later ones expensive.

Cost, compared lexicographically: jobs preempted (primary), GPU-seconds of work lost since their last checkpoint,
workers scaled in, then server names (deterministic tie-break).

Candidates are the servers in state ``loaned``; servers already ``reclaiming`` are on their way back and their
workers are treated as gone. A job they already leave below its base is *doomed*: an earlier reclaim preempted it,
so it costs this plan nothing and is reported in ``already_preempted``, never counted as a new preemption.
Asking for more servers than are loaned raises :class:`ReclaimError`.

The naive strategies (``random``, ``least-gpus-used``) and the poster's plain greedy exist for comparison: the
proofs measure Lyra against them, and the simulator's ``basic`` scheme uses a naive one.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import math
import random
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from lyra.core.errors import InvalidClusterError
from lyra.core.model import ClusterSnapshot, LoanState, TrainingJob
from lyra.core.ordering import idle_first


class ReclaimError(InvalidClusterError):
    """The reclaim request cannot be met (more servers asked for than are loaned, or a negative count)."""


class ReclaimStrategy(enum.StrEnum):
    LYRA = "lyra"
    POSTER = "poster"
    LEAST_GPUS_USED = "least-gpus-used"
    RANDOM = "random"


@dataclass(frozen=True, slots=True)
class ReclaimCost:
    preempted: int
    lost_gpu_seconds: float
    scaled_in_workers: int

    def key(self) -> tuple[int, float, int]:
        return (self.preempted, round(self.lost_gpu_seconds, 6), self.scaled_in_workers)


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What to do to return ``servers`` to inference.

    ``preempted`` jobs stop entirely (all their workers, everywhere); ``scaled_in`` maps each surviving job to the
    number of workers it loses; ``evictions`` maps each reclaimed server to ``{job: workers}`` leaving it;
    ``already_preempted`` lists jobs with workers on the chosen servers that an earlier reclaim already preempted.
    """

    servers: tuple[str, ...]
    preempted: tuple[str, ...]
    scaled_in: Mapping[str, int]
    lost_gpu_seconds: float
    evictions: Mapping[str, Mapping[str, int]]
    strategy: ReclaimStrategy
    already_preempted: tuple[str, ...] = ()

    @property
    def cost(self) -> ReclaimCost:
        return ReclaimCost(len(self.preempted), self.lost_gpu_seconds, sum(self.scaled_in.values()))


class _Instance:
    """The reclaim problem extracted from a snapshot: loaned servers, the jobs on them, and their slack."""

    def __init__(
        self, snapshot: ClusterSnapshot, gpu_type: str | None = None, among: Collection[str] | None = None
    ) -> None:
        self.candidates: list[str] = [
            s.name
            for s in snapshot.servers
            if s.state is LoanState.LOANED
            and (gpu_type is None or s.gpu_type == gpu_type)
            and (among is None or s.name in among)
        ]
        reclaiming = {s.name for s in snapshot.servers if s.state is LoanState.RECLAIMING}
        candidate_set = set(self.candidates)
        self.jobs: dict[str, TrainingJob] = {}
        self.slack: dict[str, int] = {}
        self.lost: dict[str, float] = {}
        self.on_server: dict[str, dict[str, int]] = {name: {} for name in self.candidates}
        self.used_gpus: dict[str, int] = dict.fromkeys(self.candidates, 0)
        self.servers_of: dict[str, list[str]] = {}
        # Jobs an earlier reclaim already left below their base: {server: {job: workers}} for the evictions.
        self.doomed_on: dict[str, dict[str, int]] = {}
        on_server = self.on_server
        used = self.used_gpus
        for job in snapshot.jobs:
            placement = job.placement
            hosts = [s for s in placement if s in candidate_set]
            if not hosts:
                continue
            name = job.name
            workers = sum(placement.values())
            leaving = sum(n for s, n in placement.items() if s in reclaiming) if reclaiming else 0
            if workers - leaving < job.min_workers:
                for server in hosts:
                    self.doomed_on.setdefault(server, {})[name] = placement[server]
                    used[server] += placement[server] * job.gpus_per_worker
                continue
            self.jobs[name] = job
            self.slack[name] = workers - leaving - job.min_workers
            self.lost[name] = workers * job.gpus_per_worker * job.seconds_since_checkpoint
            self.servers_of[name] = hosts  # placement keys are sorted, so hosts are too
            for server in hosts:
                count = placement[server]
                on_server[server][name] = count
                used[server] += count * job.gpus_per_worker

    def lost_if_preempted(self, job: str) -> float:
        return self.lost[job]

    def evaluate(self, chosen: Iterable[str]) -> tuple[ReclaimCost, set[str], dict[str, int]]:
        """Exact cost of reclaiming ``chosen``: who is preempted and who is scaled in by how much."""
        removed: dict[str, int] = defaultdict(int)
        for server in chosen:
            for job, count in self.on_server[server].items():
                removed[job] += count
        preempted = {job for job, n in removed.items() if n > self.slack[job]}
        scaled = {job: n for job, n in removed.items() if job not in preempted}
        lost = math.fsum(self.lost_if_preempted(job) for job in sorted(preempted))
        return ReclaimCost(len(preempted), lost, sum(scaled.values())), preempted, scaled


def plan_reclaim(
    snapshot: ClusterSnapshot,
    count: int,
    *,
    strategy: ReclaimStrategy = ReclaimStrategy.LYRA,
    seed: int = 0,
    gpu_type: str | None = None,
    among: Collection[str] | None = None,
) -> ReclaimPlan:
    """Choose ``count`` loaned servers to return to inference. Pure and deterministic (``seed`` for ``random``).

    With ``gpu_type``, only loaned servers of that GPU type are candidates (inference needs servers of the type
    its replicas run on); with ``among``, only loaned servers it names (a cordoned server, say, would give inference
    nothing back); fractions are then counted over those candidates. The jobs' workers on other servers still count
    for what a job keeps."""
    if not isinstance(count, int) or count < 0:
        raise ReclaimError(f"the number of servers to reclaim must be an integer >= 0, got {count!r}")
    instance = _Instance(snapshot, gpu_type, None if among is None else frozenset(among))
    loaned = len(instance.candidates)
    if count > loaned:
        of_type = f" {gpu_type}" if gpu_type is not None else ""
        raise ReclaimError(
            f"cannot reclaim {count}{of_type} servers: only {loaned} are loaned"
            + (f" ({', '.join(instance.candidates)})" if 0 < loaned <= 10 else "")
        )
    if strategy is ReclaimStrategy.LYRA:
        chosen = _lyra(instance, count)
    elif strategy is ReclaimStrategy.POSTER:
        chosen = _greedy(instance, count, elastic=False)
    elif strategy is ReclaimStrategy.LEAST_GPUS_USED:
        chosen = idle_first(instance.candidates, instance.used_gpus)[:count]
    else:
        chosen = random.Random(seed).sample(instance.candidates, count)
    return _plan(instance, chosen, strategy)


def reclaim_order(snapshot: ClusterSnapshot) -> tuple[str, ...]:
    """Every loaned server in the order Lyra's greedy would reclaim them (first = reclaimed first).

    Placement uses it to keep new work off the servers most likely to be reclaimed next.
    """
    instance = _Instance(snapshot)
    return tuple(_greedy(instance, len(instance.candidates), elastic=True))


def _plan(instance: _Instance, chosen: Sequence[str], strategy: ReclaimStrategy) -> ReclaimPlan:
    cost, preempted, scaled = instance.evaluate(chosen)
    evictions = {}
    for server in sorted(chosen):
        leaving = instance.on_server[server] | instance.doomed_on.get(server, {})
        evictions[server] = MappingProxyType(dict(sorted(leaving.items())))
    doomed = sorted({job for server in chosen for job in instance.doomed_on.get(server, {})})
    return ReclaimPlan(
        servers=tuple(sorted(chosen)),
        preempted=tuple(sorted(preempted)),
        scaled_in=MappingProxyType(dict(sorted(scaled.items()))),
        lost_gpu_seconds=cost.lost_gpu_seconds,
        evictions=MappingProxyType(evictions),
        strategy=strategy,
        already_preempted=tuple(doomed),
    )


def _greedy(instance: _Instance, count: int, *, elastic: bool) -> list[str]:
    """Take the lowest-value server, preempt or scale in its jobs, update the values; ``count`` times.

    With ``elastic=False`` this is the poster's rule: every job on a taken server is preempted and a server's
    value is the sum of its jobs' fractions. With ``elastic=True`` only jobs that cannot spare the workers count.
    Values live in a heap with lazy invalidation: a pick only changes servers that share a job with it.
    """
    slack = dict(instance.slack) if elastic else dict.fromkeys(instance.slack, -1)
    # Copy on write: a pick changes only the servers and jobs near it, so most of the instance is never copied.
    base_on_server = instance.on_server
    on_server: dict[str, dict[str, int]] = {}
    base_servers_of = instance.servers_of
    servers_of: dict[str, set[str]] = {}
    version = dict.fromkeys(instance.candidates, 0)
    lost_of = instance.lost

    def jobs_on(server: str) -> dict[str, int]:
        jobs = on_server.get(server)
        if jobs is None:
            jobs = on_server[server] = dict(base_on_server[server])
        return jobs

    def hosts_of(job: str) -> set[str]:
        hosts = servers_of.get(job)
        if hosts is None:
            hosts = servers_of[job] = set(base_servers_of[job])
        return hosts

    def entry(server: str, stamp: int) -> tuple[float, int, float, int, str, int]:
        """The server's heap entry: its key (value, preemptions, lost work, scaled-in workers, name), then the
        version it was computed at (never compared: names are unique)."""
        value = 0.0
        preempts = 0
        lost = 0.0
        scaled = 0
        jobs = on_server.get(server)
        for job, n in (base_on_server[server] if jobs is None else jobs).items():
            if n > slack[job]:
                hosts = servers_of.get(job)
                value += 1.0 / len(base_servers_of[job] if hosts is None else hosts)
                preempts += 1
                lost += lost_of[job]
            else:
                scaled += n
        if not preempts:
            return (0.0, 0, 0.0, scaled, server, stamp)
        # Rounded so that equal sums of fractions (0.5 + 0.25 and 0.75) tie and fall through to the next criterion.
        return (round(value, 9), preempts, lost, scaled, server, stamp)

    heap = [entry(s, 0) for s in instance.candidates]
    heapq.heapify(heap)
    chosen: list[str] = []
    taken: set[str] = set()
    while len(chosen) < count:
        *_, server, seen_version = heapq.heappop(heap)
        if server in taken or seen_version != version[server]:
            continue
        chosen.append(server)
        taken.add(server)
        touched: set[str] = set()
        for job, n in jobs_on(server).items():
            hosts = hosts_of(job)
            hosts.discard(server)
            if n > slack[job]:
                for other in hosts:
                    del jobs_on(other)[job]
                touched |= hosts
                hosts.clear()
            else:
                slack[job] -= n
                touched |= hosts
        on_server[server] = {}
        for other in sorted(touched - taken):
            version[other] += 1
            heapq.heappush(heap, entry(other, version[other]))
    return chosen


#: Instances with at most this many loaned servers get the thorough search (several starts); pair swaps also run
#: where one round of them costs at most ``_PAIR_SWAPS`` evaluations.
_THOROUGH = 32
_PAIR_SWAPS = 5_000


def _lyra(instance: _Instance, count: int) -> list[str]:
    """The greedy on server fractions, then swaps. On instances of up to ``_THOROUGH`` loaned servers (a reclaim
    decision of a real cluster, where a few milliseconds buy the better plan) the swap search also starts from the
    poster's greedy and from the least-used servers, and, where that stays cheap (``_PAIR_SWAPS``), the best result
    is refined by swapping pairs of servers."""
    best = _local_search(instance, _greedy(instance, count, elastic=True))
    if len(instance.candidates) > _THOROUGH or count in (0, len(instance.candidates)):
        return best
    best_key = instance.evaluate(best)[0].key()
    for start in (
        _greedy(instance, count, elastic=False),
        idle_first(instance.candidates, instance.used_gpus)[:count],
    ):
        found = _local_search(instance, start)
        key = instance.evaluate(found)[0].key()
        if key < best_key:
            best, best_key = found, key
    if math.comb(count, 2) * math.comb(len(instance.candidates) - count, 2) > _PAIR_SWAPS:
        return best
    return _pair_swaps(instance, best, best_key)


def _pair_swaps(instance: _Instance, chosen: list[str], key: tuple[int, float, int]) -> list[str]:
    """Swap two chosen servers for two unchosen ones while the exact cost drops (first improvement, a few
    rounds): moves a one-server swap cannot make, such as trading two half-reclaimed jobs for one whole one."""
    current = sorted(chosen)
    for _ in range(4):
        outside = [s for s in instance.candidates if s not in set(current)]
        improved = False
        for out in itertools.combinations(current, 2):
            for into in itertools.combinations(outside, 2):
                trial = sorted((set(current) - set(out)) | set(into))
                trial_key = instance.evaluate(trial)[0].key()
                if trial_key < key:
                    current, key, improved = trial, trial_key, True
                    break
            if improved:
                break
        if not improved:
            break
    return current


#: Swap candidates tried per chosen server in the local search on large instances.
_SWAP_SHORTLIST = 48


def _local_search(instance: _Instance, chosen: list[str]) -> list[str]:
    """Swap one chosen server for one unchosen server while the exact cost drops (first improvement).

    Small instances try every pair. Large ones try, for each chosen server that causes a preemption, the
    unchosen servers sharing a job with it plus the cheapest others, which keeps a pass near-linear.
    """
    if not chosen or len(chosen) == len(instance.candidates):
        return chosen
    current = set(chosen)
    removed: dict[str, int] = defaultdict(int)
    for server in current:
        for job, n in instance.on_server[server].items():
            removed[job] += n

    def job_cost(job: str, n: int) -> tuple[int, float, int]:
        if n > max(instance.slack[job], 0):
            return (1, instance.lost_if_preempted(job), 0)
        return (0, 0.0, n)

    def delta(out: str, into: str) -> tuple[int, float, int]:
        change: dict[str, int] = defaultdict(int)
        for job, n in instance.on_server[out].items():
            change[job] -= n
        for job, n in instance.on_server[into].items():
            change[job] += n
        p = 0
        lost = 0.0
        scaled = 0
        for job, d in change.items():
            if d == 0:
                continue
            before = job_cost(job, removed[job])
            after = job_cost(job, removed[job] + d)
            p += after[0] - before[0]
            lost += after[1] - before[1]
            scaled += after[2] - before[2]
        return (p, round(lost, 6), scaled)

    small = len(instance.candidates) <= 64
    standalone = idle_first(instance.candidates, instance.used_gpus)
    for _ in range(4 * len(instance.candidates)):
        improved = False
        for out in sorted(current):
            if not small and not any(removed[j] > instance.slack[j] for j in instance.on_server[out]):
                continue
            if small:
                options = [s for s in instance.candidates if s not in current]
            else:
                neighbours = {s for j in instance.on_server[out] for s in instance.servers_of[j] if s not in current}
                cheap = [s for s in standalone if s not in current][:_SWAP_SHORTLIST]
                options = sorted(neighbours | set(cheap))
            for into in options:
                if delta(out, into) < (0, 0.0, 0):
                    for job, n in instance.on_server[out].items():
                        removed[job] -= n
                    for job, n in instance.on_server[into].items():
                        removed[job] += n
                    current.remove(out)
                    current.add(into)
                    improved = True
                    break
            if improved:
                break
        if not improved:
            break
    return sorted(current)
