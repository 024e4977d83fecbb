"""Proof: Lyra's reclaim against the exact minimum number of preemptions, and against the naive strategies.

Two families of random instances, each generated from a fixed seed:

* small (3-10 loaned servers): the minimum by brute force over every combination of ``k`` servers, checked against
  the integer program on every instance;
* larger (12-20 loaned servers): the minimum from the integer program (HiGHS via ``scipy.optimize.milp``), checked
  against brute force wherever the combinations are few enough to enumerate.

``k`` is drawn from 1..n-1 (taking every loaned server is trivially optimal). Bounds: Lyra optimal on >= 95% of
the small instances (>= 90% of the larger ones, where one-swap local search has more room to stop early), mean
preemptions <= 1.05x the optimum on both, fewer on average than ``random`` and ``least-gpus-used``, and no more
than the poster's greedy. The figures are printed in the "Lyra policy-core proof figures" section at the end of
the run.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

import pytest

from lyra.core import ClusterSnapshot, LoanState, Pool, ReclaimStrategy, Server, TrainingJob, plan_reclaim

from .conftest import Figures
from .oracles import (
    ReclaimProblem,
    brute_force_min_preemptions,
    combinations_count,
    ilp_min_preemptions,
)

SMALL_INSTANCES = 2000
LARGE_INSTANCES = 300
#: Enumerate combinations on the larger family only below this many.
BRUTE_FORCE_LIMIT = 3000


def random_instance(rng: random.Random, loaned: tuple[int, int], jobs: tuple[int, int], span: int) -> ClusterSnapshot:
    """Loaned servers (a few T4 servers with 4 GPUs), training and reclaiming servers, and jobs spread over them
    with mixed GPUs per worker, elastic or not, and different times since their last checkpoint."""
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
            )
        )
    return ClusterSnapshot(tuple(servers), tuple(built))


@dataclass
class Tally:
    """Preemptions per instance: the optimum and every strategy's."""

    optimum: list[int] = field(default_factory=list)
    by_strategy: dict[ReclaimStrategy, list[int]] = field(default_factory=lambda: {s: [] for s in ReclaimStrategy})

    def add(self, snap: ClusterSnapshot, count: int, optimum: int, seed: int) -> None:
        self.optimum.append(optimum)
        for strategy in ReclaimStrategy:
            plan = plan_reclaim(snap, count, strategy=strategy, seed=seed)
            assert len(plan.preempted) >= optimum, f"{strategy} beat the exact optimum: the oracle is wrong"
            self.by_strategy[strategy].append(len(plan.preempted))

    def mean(self, strategy: ReclaimStrategy | None = None) -> float:
        return statistics.fmean(self.optimum if strategy is None else self.by_strategy[strategy])

    def optimal_rate(self, strategy: ReclaimStrategy, only_hard: bool = False) -> float:
        pairs = [
            (got, best)
            for got, best in zip(self.by_strategy[strategy], self.optimum, strict=True)
            if best > 0 or not only_hard
        ]
        return sum(got == best for got, best in pairs) / len(pairs)

    def record(self, figures: Figures, title: str) -> None:
        lyra = ReclaimStrategy.LYRA
        hard = sum(best > 0 for best in self.optimum)
        figures.record(
            title,
            f"{len(self.optimum)} instances ({hard} with a forced preemption); "
            f"optimum mean {self.mean():.3f} preemptions",
        )
        for strategy in ReclaimStrategy:
            figures.record(
                title,
                f"{strategy.value:>16}: mean {self.mean(strategy):.3f} "
                f"({self.mean(strategy) / self.mean():.3f}x optimum), optimal on "
                f"{100 * self.optimal_rate(strategy):.1f}% ({100 * self.optimal_rate(strategy, True):.1f}% of those "
                f"with a forced preemption), worst excess {max(self._excess(strategy))}",
            )
        lyra_vs_poster = list(zip(self.by_strategy[lyra], self.by_strategy[ReclaimStrategy.POSTER], strict=True))
        figures.record(
            title,
            f"lyra vs poster per instance: fewer on {sum(a < b for a, b in lyra_vs_poster)}, "
            f"more on {sum(a > b for a, b in lyra_vs_poster)}",
        )

    def _excess(self, strategy: ReclaimStrategy) -> list[int]:
        return [got - best for got, best in zip(self.by_strategy[strategy], self.optimum, strict=True)]

    def check(self, optimal_rate: float) -> None:
        lyra = ReclaimStrategy.LYRA
        assert self.optimal_rate(lyra) >= optimal_rate
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
        optimum = brute_force_min_preemptions(problem, count)
        assert ilp_min_preemptions(problem, count) == optimum, f"ILP and brute force disagree on instance {seed}"
        tally.add(snap, count, optimum, seed)
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
        optimum = ilp_min_preemptions(problem, count)
        if combinations_count(problem, count) <= BRUTE_FORCE_LIMIT:
            assert brute_force_min_preemptions(problem, count) == optimum, f"ILP and brute force disagree on {seed}"
            cross_checked += 1
        tally.add(snap, count, optimum, seed)
    title = f"Reclaim, {LARGE_INSTANCES} larger instances (12-20 loaned servers), ILP (HiGHS)"
    tally.record(figures, title)
    figures.record(title, f"ILP cross-checked by brute force on {cross_checked} instances (all agree)")
    assert cross_checked >= 20
    tally.check(optimal_rate=0.90)
