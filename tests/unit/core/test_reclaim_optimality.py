"""Proof: Lyra's reclaim against the exact lexicographic optimum, and against the naive strategies.

The objective is lexicographic: jobs preempted, then GPU-seconds of work lost, then workers scaled in. A job that
an earlier reclaim already doomed (a reclaiming server left it below its base) is not a new preemption of this
plan. The oracle (``oracles.py``) implements these semantics on its own and solves them exactly twice:

* small instances (3-10 loaned servers): brute force over every combination of ``k`` servers, checked against three
  stacked integer programs (HiGHS via ``scipy.optimize.milp``: preemptions; then work lost at those preemptions;
  then workers scaled in) on every instance;
* larger instances (12-20 loaned servers): the integer programs, checked against brute force where the
  combinations are few enough to enumerate.

``k`` is drawn from 1..n-1. Bounds: optimal on preemptions on >= 95% of the instances; where Lyra's preemptions
are optimal, optimal on work lost on >= 90%; mean preemptions <= 1.05x the optimum; fewer on average than
``random`` and ``least-gpus-used``, and no more than the poster's greedy. Lyra's own account of every plan (who is
preempted, work lost, workers scaled in) must equal the oracle's recomputation for the same servers. The figures
are printed in the "Lyra policy-core proof figures" section at the end of the run.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

import pytest

from lyra.core import ClusterSnapshot, LoanState, Pool, ReclaimStrategy, Server, TrainingJob, plan_reclaim

from .conftest import Figures
from .oracles import ReclaimProblem, brute_force_reclaim, combinations_count, ilp_reclaim, reclaim_cost

SMALL_INSTANCES = 2000
LARGE_INSTANCES = 300
#: Enumerate combinations on the larger family only below this many.
BRUTE_FORCE_LIMIT = 3000


def random_instance(rng: random.Random, loaned: tuple[int, int], jobs: tuple[int, int], span: int) -> ClusterSnapshot:
    """Loaned servers (a few T4 servers with 4 GPUs), training and reclaiming servers, and jobs spread over them
    with mixed GPUs per worker, elastic or not, and different times since their last checkpoint. Jobs with workers
    on reclaiming servers may already be doomed (left below their base)."""
    servers = [
        Server(f"l{i:02d}", Pool.INFERENCE, "T4", rng.choice([8, 8, 8, 4]), LoanState.LOANED)
        for i in range(rng.randint(*loaned))
    ]
    servers += [Server(f"t{i}", Pool.TRAINING, "A100", 8) for i in range(rng.randint(0, 3))]
    servers += [Server(f"r{i}", Pool.INFERENCE, "T4", 8, LoanState.RECLAIMING) for i in range(rng.randint(0, 2))]
    free = {s.name: s.gpus for s in servers}
    built: list[TrainingJob] = []
    for j in range(rng.randint(*jobs)):
        gpw = rng.choice([1, 1, 2, 4])
        placement: dict[str, int] = {}
        for host in rng.sample([s.name for s in servers], rng.randint(1, min(span, len(servers)))):
            count = min(rng.randint(1, 3), free[host] // gpw)
            if count:
                placement[host] = count
                free[host] -= count * gpw
        workers = sum(placement.values())
        if not workers:
            continue
        low = rng.randint(1, workers) if rng.random() < 0.6 else workers
        built.append(
            TrainingJob(
                f"j{j:02d}",
                gpw,
                low,
                workers + rng.randint(0, 3),
                1000.0,
                placement=placement,
                seconds_since_checkpoint=float(rng.choice([0, 60, 600])),
                # Jobs spill from training (A100) onto loaned (T4) servers here, which only a mixing job may.
                mix_gpu_types=True,
            )
        )
    return ClusterSnapshot(tuple(servers), tuple(built))


Cost = tuple[int, float, int]


def _same_lost(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def _same_cost(a: Cost, b: Cost) -> bool:
    return a[0] == b[0] and a[2] == b[2] and _same_lost(a[1], b[1])


@dataclass
class Tally:
    """Per instance: the exact lexicographic optimum and every strategy's cost."""

    optimum: list[Cost] = field(default_factory=list)
    by_strategy: dict[ReclaimStrategy, list[Cost]] = field(default_factory=lambda: {s: [] for s in ReclaimStrategy})

    def add(self, snap: ClusterSnapshot, count: int, problem: ReclaimProblem, optimum: Cost, seed: int) -> None:
        self.optimum.append(optimum)
        for strategy in ReclaimStrategy:
            plan = plan_reclaim(snap, count, strategy=strategy, seed=seed)
            ours: Cost = (len(plan.preempted), plan.lost_gpu_seconds, sum(plan.scaled_in.values()))
            theirs = reclaim_cost(problem, plan.servers)
            assert _same_cost(ours, theirs), (
                f"{strategy}: the plan's own cost {ours} differs from the oracle's {theirs} for {plan.servers}"
            )
            assert ours[0] >= optimum[0], f"{strategy} beat the exact optimum: the oracle is wrong"
            self.by_strategy[strategy].append(ours)

    def mean(self, strategy: ReclaimStrategy | None = None) -> float:
        costs = self.optimum if strategy is None else self.by_strategy[strategy]
        return statistics.fmean(c[0] for c in costs)

    def optimal_preemptions(self, strategy: ReclaimStrategy) -> float:
        pairs = list(zip(self.by_strategy[strategy], self.optimum, strict=True))
        return sum(got[0] == best[0] for got, best in pairs) / len(pairs)

    def optimal_lost(self, strategy: ReclaimStrategy) -> tuple[float, int]:
        """Share of the instances with optimal preemptions where the work lost is optimal too, and how many."""
        pairs = [(g, b) for g, b in zip(self.by_strategy[strategy], self.optimum, strict=True) if g[0] == b[0]]
        good = sum(g[1] <= b[1] or _same_lost(g[1], b[1]) for g, b in pairs)
        return (good / len(pairs) if pairs else 1.0), len(pairs)

    def optimal_scaled(self, strategy: ReclaimStrategy) -> float:
        """Share of the instances optimal on both first criteria where the workers scaled in are optimal too."""
        pairs = [
            (g, b)
            for g, b in zip(self.by_strategy[strategy], self.optimum, strict=True)
            if g[0] == b[0] and _same_lost(g[1], b[1])
        ]
        return sum(g[2] <= b[2] for g, b in pairs) / len(pairs) if pairs else 1.0

    def record(self, figures: Figures, title: str) -> None:
        hard = sum(best[0] > 0 for best in self.optimum)
        figures.record(
            title,
            f"{len(self.optimum)} instances ({hard} with a forced preemption); optimum mean {self.mean():.3f} "
            "preemptions",
        )
        for strategy in ReclaimStrategy:
            lost, counted = self.optimal_lost(strategy)
            figures.record(
                title,
                f"{strategy.value:>16}: mean {self.mean(strategy):.3f} ({self.mean(strategy) / self.mean():.3f}x), "
                f"optimal on preemptions {100 * self.optimal_preemptions(strategy):.1f}%, on work lost at equal "
                f"preemptions {100 * lost:.1f}% (of {counted}), on workers scaled in at equal preemptions and "
                f"work lost {100 * self.optimal_scaled(strategy):.1f}%",
            )
        lyra = self.by_strategy[ReclaimStrategy.LYRA]
        poster = self.by_strategy[ReclaimStrategy.POSTER]
        figures.record(
            title,
            f"lyra vs poster per instance (preemptions): fewer on "
            f"{sum(a[0] < b[0] for a, b in zip(lyra, poster, strict=True))}, "
            f"more on {sum(a[0] > b[0] for a, b in zip(lyra, poster, strict=True))}",
        )

    def check(self, optimal_rate: float) -> None:
        lyra = ReclaimStrategy.LYRA
        assert self.optimal_preemptions(lyra) >= optimal_rate
        assert self.optimal_lost(lyra)[0] >= 0.90
        assert self.mean(lyra) <= 1.05 * self.mean()
        assert self.mean(lyra) < self.mean(ReclaimStrategy.RANDOM)
        assert self.mean(lyra) < self.mean(ReclaimStrategy.LEAST_GPUS_USED)
        assert self.mean(lyra) <= self.mean(ReclaimStrategy.POSTER)


def _count(rng: random.Random, snap: ClusterSnapshot) -> int:
    loaned = sum(s.state is LoanState.LOANED for s in snap.servers)
    return rng.randint(1, max(1, loaned - 1))


@pytest.mark.proof
def test_reclaim_against_brute_force_on_small_instances(figures: Figures) -> None:
    rng = random.Random(20240601)
    tally = Tally()
    for seed in range(SMALL_INSTANCES):
        snap = random_instance(rng, loaned=(3, 10), jobs=(1, 12), span=4)
        count = _count(rng, snap)
        problem = ReclaimProblem.of(snap)
        optimum = brute_force_reclaim(problem, count)
        exact = ilp_reclaim(problem, count)
        assert _same_cost(exact, optimum), f"ILP and brute force disagree on instance {seed}: {exact} vs {optimum}"
        tally.add(snap, count, problem, optimum, seed)
    tally.record(figures, f"Reclaim, {SMALL_INSTANCES} small instances (3-10 loaned servers), brute force = ILP")
    tally.check(optimal_rate=0.95)


@pytest.mark.proof
def test_reclaim_against_the_ilp_on_larger_instances(figures: Figures) -> None:
    rng = random.Random(20240602)
    tally = Tally()
    cross_checked = 0
    for seed in range(LARGE_INSTANCES):
        snap = random_instance(rng, loaned=(12, 20), jobs=(10, 30), span=6)
        count = _count(rng, snap)
        problem = ReclaimProblem.of(snap)
        optimum = ilp_reclaim(problem, count)
        if combinations_count(problem, count) <= BRUTE_FORCE_LIMIT:
            brute = brute_force_reclaim(problem, count)
            assert _same_cost(brute, optimum), f"ILP and brute force disagree on {seed}: {brute} vs {optimum}"
            cross_checked += 1
        tally.add(snap, count, problem, optimum, seed)
    title = f"Reclaim, {LARGE_INSTANCES} larger instances (12-20 loaned servers), ILP (HiGHS)"
    tally.record(figures, title)
    figures.record(title, f"ILP cross-checked by brute force on {cross_checked} instances (all agree)")
    assert cross_checked >= 20
    tally.check(optimal_rate=0.95)
