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
jobs of the same type (or one of more GPUs for as many of the other's as fit); a job started by this plan moved to
another GPU type (as wide as now, as wide as there is room for, or at its base); two jobs exchanging types (at most
one of them running), at their bases with the others on both types scaled in to theirs when there is no room
otherwise; a running job moved to a faster type together with the jobs this plan started beside it, in exchange for
one started there (these exchanges with a running job or at bases in decisions over at most 64 admitted jobs); and,
last, one worker fewer. A worker is added only on the job's own type (a worker never slows its job down: ``w *
e(w)`` rises with ``w``); a job that opts in to mixing types may then grow onto another type only where that raises
its pace. Every move is realised on the servers before it is kept, so every plan bin-packs. Moves that free GPUs can
make room for a base still waiting: such bases then start, in the queue's order, scaling in flexible workers if need
be, and the search goes on with them.

The search budget counts fluid-simulated jobs (one evaluation of an n-job instance costs n), so the search is
deterministic, cheap on big instances and thorough on small ones.

**Migration** (with ``restart_cost_s``). Base demand first-class means a job may start on slower loaned GPUs
because that is what was free. The search may then move a running job to a GPU type faster for it, using free
GPUs or flexible workers of the jobs there, when the objective gains more than the restart costs: the move is
charged as ``restart_cost_s`` seconds without progress. Only moves to faster types are tried, so a job never
bounces between types.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from lyra.core.allocation.admission import Admission
from lyra.core.allocation.plan import AllocationPlan, plan_of
from lyra.core.allocation.problem import Problem, current_layout
from lyra.core.allocation.search import Scores, Search
from lyra.core.errors import InvalidClusterError
from lyra.core.model import ClusterSnapshot

__all__ = ["DEFAULT_SEARCH_BUDGET", "AllocationPlan", "allocate_workers", "current_layout"]

#: Default phase-2 search budget, in fluid-simulated jobs (see module docstring).
DEFAULT_SEARCH_BUDGET = 16_000

#: Decisions over at most this many jobs also try phase 1 in longest-first order (see ``allocate_workers``).
_SECOND_OPINION_JOBS = 48

#: Small decisions with multi-GPU workers also try every assignment of GPU types to the started jobs that could use
#: several, when they are at most this many (2 types: 32 assignments).
_PINNED_JOBS = 5


def allocate_workers(
    snapshot: ClusterSnapshot,
    *,
    held: Mapping[str, int] | None = None,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
    restart_cost_s: float | None = None,
) -> AllocationPlan:
    """Decide every job's GPU type, worker count and placement. Pure and deterministic.

    ``held`` maps a server to GPUs used by work outside this decision: replicas, other GPU pods, leaving workers and
    the free GPUs of nodes that take no new work (the operator and ``lyra plan --from-cluster``), or a view of the
    simulator's cluster. With ``restart_cost_s``, a
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
    problem = Problem(snapshot, held)
    admission = Admission(problem)
    admission.admit_bases(longest_first=False)
    scores: Scores = {}
    search = Search(problem, search_budget, restart_cost_s, scores)
    best, layout = search.run()
    chosen = (problem, best, layout, search)
    slowed = admission.slowed_bases()
    if len(snapshot.jobs) <= _SECOND_OPINION_JOBS and (len(problem.started) > 1 or slowed):
        admitted = {problem.jobs[i].name for i in problem.started}
        for longest_first, pinned, fast_first in _second_opinions(problem, slowed):
            other = Problem(snapshot, held)
            Admission(other).admit_bases(longest_first=longest_first, pinned=pinned, fast_type_first=fast_first)
            if not admitted <= {other.jobs[i].name for i in other.started}:
                continue
            other_search = Search(other, search_budget, restart_cost_s, scores)
            other_best, other_layout = other_search.run()
            if other_best.value < chosen[1].value * (1 - 1e-12):
                chosen = (other, other_best, other_layout, other_search)
    winner, best, layout, search = chosen
    return plan_of(winner, best, layout, search)


def _second_opinions(problem: Problem, slowed: bool) -> list[tuple[bool, dict[int, int], bool]]:
    """Other starts for the search, as phase 1's arguments (longest first, pinned types, fast type first).

    Phase 1 in shortest-first order gives the fastest types to the shortest jobs; a long job admitted last may land
    on the slow type, and the search's moves need room to undo that. So: the same admissions made longest-first
    (within each priority); when a base went to a slower type while the faster one had flexible workers, the
    admissions that scale those in first (a slow GPU for a job's whole life may be worse than a fast one taken from
    another job's surplus: the objective decides); and, when few started jobs could use another type, every
    assignment of types to them. An alternative is kept only if it starts every job the first one did and scores
    better."""
    flexible = [i for i in problem.started if len(problem.type_preference(i)) > 1]
    alternatives: list[tuple[bool, dict[int, int], bool]] = []
    if len(problem.started) > 1:
        alternatives.append((True, {}, False))
    if slowed:
        alternatives.append((False, {}, True))
    # Types matter for packing only where workers have several GPUs: one-GPU workers always fit by counts, and the
    # search's type moves reach those assignments anyway.
    if 1 <= len(flexible) <= _PINNED_JOBS and any(problem.jobs[i].gpus_per_worker > 1 for i in problem.started):
        choices = [problem.type_preference(i) for i in flexible]
        alternatives += [(False, dict(zip(flexible, pins, strict=True)), False) for pins in itertools.product(*choices)]
    return alternatives
