"""Reference solutions the proofs measure the policy core against, written independently of the core's internals.

* Allocation: exhaustive search over every worker vector in the fluid model, and the poster's own-reduction
  multiple-choice knapsack solved exactly by dynamic programming.
* Reclaim: the preemptions a set of servers causes (recomputed from the snapshot, not from the core's private
  accounting), the exact minimum by brute force over combinations, and the same minimum as an integer program
  solved by HiGHS through ``scipy.optimize.milp``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from lyra.core import ClusterSnapshot, LoanState, TrainingJob
from lyra.core.fluid import FluidJob, average_jct


def fluid_jobs(jobs: Sequence[TrainingJob]) -> list[FluidJob]:
    return [FluidJob(j.remaining_work, j.gpus_per_worker, j.min_workers, j.max_workers, j.priority) for j in jobs]


def brute_force_allocation(jobs: Sequence[TrainingJob], capacity: int) -> tuple[float, tuple[int, ...]]:
    """The least fluid average JCT over every vector with ``w_j`` in {0} or [min, max] that fits ``capacity``."""
    model = fluid_jobs(jobs)
    best = (math.inf, tuple(0 for _ in jobs))
    vector = [0] * len(jobs)

    def visit(i: int, left: int) -> None:
        nonlocal best
        if i == len(jobs):
            value = average_jct(model, vector, capacity)
            if value < best[0]:
                best = (value, tuple(vector))
            return
        job = jobs[i]
        vector[i] = 0
        visit(i + 1, left)
        for w in range(job.min_workers, job.max_workers + 1):
            cost = w * job.gpus_per_worker
            if cost > left:
                break
            vector[i] = w
            visit(i + 1, left - cost)
        vector[i] = 0

    visit(0, capacity)
    return best


def poster_item_values(job: TrainingJob) -> list[float]:
    """The poster's knapsack items of one elastic job: value of ``k`` more workers = T(base) - T(base + k)."""
    base = job.time_at(job.min_workers)
    return [base - job.time_at(job.min_workers + k) for k in range(1, job.max_workers - job.min_workers + 1)]


def poster_allocation(jobs: Sequence[TrainingJob], capacity: int) -> list[int]:
    """The poster's two phases: SJF bases (whole gang or nothing, backfilling), then the multiple-choice knapsack
    over its own-reduction item values, solved exactly (ties keep fewer extra workers, earlier jobs first)."""
    vector = [0] * len(jobs)
    free = capacity
    order = sorted(
        range(len(jobs)),
        key=lambda i: (-jobs[i].priority, jobs[i].time_at(jobs[i].min_workers), jobs[i].submit_time, jobs[i].name),
    )
    for i in order:
        need = jobs[i].min_workers * jobs[i].gpus_per_worker
        if need <= free:
            vector[i] = jobs[i].min_workers
            free -= need
    groups = [i for i in range(len(jobs)) if vector[i] and jobs[i].is_elastic]
    # best[c] = (value, choices) using at most c GPUs over the groups seen so far.
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


@dataclass(frozen=True)
class ReclaimProblem:
    """Loaned servers, the workers each job has on each, and how many workers each job can lose and survive."""

    candidates: tuple[str, ...]
    on_server: dict[str, dict[str, int]]
    spare: dict[str, int]

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> ReclaimProblem:
        candidates = tuple(s.name for s in snapshot.servers if s.state is LoanState.LOANED)
        leaving = {s.name for s in snapshot.servers if s.state is LoanState.RECLAIMING}
        on_server: dict[str, dict[str, int]] = {name: {} for name in candidates}
        spare: dict[str, int] = {}
        for job in snapshot.jobs:
            # Workers on reclaiming servers are already going; the rest above min_workers may leave by scale-in.
            staying = job.workers - sum(n for s, n in job.placement.items() if s in leaving)
            spare[job.name] = max(0, staying - job.min_workers)
            for server, n in job.placement.items():
                if server in on_server:
                    on_server[server][job.name] = n
        return cls(candidates, on_server, spare)

    def removed(self, chosen: Iterable[str]) -> dict[str, int]:
        lost: dict[str, int] = {}
        for server in chosen:
            for job, n in self.on_server[server].items():
                lost[job] = lost.get(job, 0) + n
        return lost

    def preempted(self, chosen: Iterable[str]) -> set[str]:
        return {job for job, n in self.removed(chosen).items() if n > self.spare[job]}


def brute_force_min_preemptions(problem: ReclaimProblem, count: int) -> int:
    return min(len(problem.preempted(c)) for c in itertools.combinations(problem.candidates, count))


def combinations_count(problem: ReclaimProblem, count: int) -> int:
    return math.comb(len(problem.candidates), count)


def ilp_min_preemptions(problem: ReclaimProblem, count: int) -> int:
    """min sum(y_j) s.t. sum(x_s) = count and, for every job, removed_j - spare_j <= (total_j - spare_j) * y_j,
    with x (servers taken) and y (jobs preempted) binary."""
    servers = list(problem.candidates)
    jobs = sorted({j for s in servers for j in problem.on_server[s]})
    if not jobs:
        return 0
    n_x, n_y = len(servers), len(jobs)
    rows = [np.concatenate([np.ones(n_x), np.zeros(n_y)])]
    lower = [float(count)]
    upper = [float(count)]
    for k, job in enumerate(jobs):
        row = np.zeros(n_x + n_y)
        total = 0
        for i, server in enumerate(servers):
            n = problem.on_server[server].get(job, 0)
            row[i] = n
            total += n
        spare = problem.spare[job]
        row[n_x + k] = -(total - spare)
        rows.append(row)
        lower.append(-np.inf)
        upper.append(float(spare))
    objective = np.concatenate([np.zeros(n_x), np.ones(n_y)])
    result = milp(
        objective,
        constraints=LinearConstraint(np.array(rows), lower, upper),
        integrality=np.ones(n_x + n_y),
        bounds=Bounds(0, 1),
    )
    if not result.success:
        raise AssertionError(f"HiGHS failed: {result.message}")
    optimum: float = result.fun
    return round(optimum)
