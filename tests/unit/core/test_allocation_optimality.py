"""Proof: the allocator's average JCT in the fluid model against brute force, and against the poster's knapsack.

Random instances of 2-6 queued jobs on 4-16 GPUs (mostly 1 GPU per worker, some 2), generated from fixed seeds.
Brute force tries every vector ``w_j`` in {0} or [min, max] that fits the capacity (a 0 means the job starts when
GPUs free up, in queue order). The poster's two phases (SJF bases, then its own-reduction multiple-choice
knapsack, solved exactly by dynamic programming) run on the same instances.

* "bases fit" (the poster's setting: every base demand fits at once): the allocator's mean gap to the optimum
  must be <= 0.5% and its worst <= 5%, and its mean below the poster's;
* "over-subscribed" (the bases do not all fit): figures only, plus the allocator's mean <= the poster's.
"""

from __future__ import annotations

import functools
import random
import statistics
from dataclasses import dataclass

import pytest

from lyra.core import TrainingJob, allocate_workers
from lyra.core.fluid import average_jct

from .conftest import Figures
from .oracles import brute_force_allocation, fluid_jobs, poster_allocation

INSTANCES = 1000
WORK = [10, 20, 50, 100, 200, 300, 500]


def random_jobs(rng: random.Random, *, bases_fit: bool) -> tuple[list[TrainingJob], int]:
    while True:
        capacity = rng.randint(4, 16)
        jobs = []
        for i in range(rng.randint(2, 6)):
            low = rng.randint(1, 3)
            jobs.append(
                TrainingJob(
                    name=f"j{i}",
                    gpus_per_worker=rng.choice([1, 1, 1, 2]),
                    min_workers=low,
                    max_workers=low + rng.randint(0, 5),
                    remaining_work=rng.choice(WORK) * rng.uniform(0.5, 2.0),
                )
            )
        bases = [j.min_workers * j.gpus_per_worker for j in jobs]
        if max(bases) <= capacity and (sum(bases) <= capacity) == bases_fit:
            return jobs, capacity


@dataclass(frozen=True)
class Gaps:
    """Relative gap to the optimum of the allocator and of the poster's knapsack, per instance, and the instance
    where the allocator is furthest from the optimum."""

    ours: list[float]
    poster: list[float]
    worst: str


@functools.cache
def measure(seed: int, *, bases_fit: bool) -> Gaps:
    rng = random.Random(seed)
    ours: list[float] = []
    poster: list[float] = []
    worst = (0.0, "")
    for _ in range(INSTANCES):
        jobs, capacity = random_jobs(rng, bases_fit=bases_fit)
        best, best_vector = brute_force_allocation(jobs, capacity)
        model = fluid_jobs(jobs)
        plan = allocate_workers(jobs, capacity)
        vector = [plan.workers[j.name] for j in jobs]
        value = average_jct(model, vector, capacity)
        assert value >= best * (1 - 1e-9), "the allocator beat brute force: the oracle is wrong"
        assert plan.fluid_average_jct == pytest.approx(value, rel=1e-9), "the plan reports its own fluid JCT"
        ours.append(value / best - 1)
        poster.append(average_jct(model, poster_allocation(jobs, capacity), capacity) / best - 1)
        if ours[-1] > worst[0]:
            described = ", ".join(
                f"{j.name}(gpw {j.gpus_per_worker}, w {j.min_workers}..{j.max_workers}, work {j.remaining_work:.1f})"
                for j in jobs
            )
            worst = (
                ours[-1],
                f"capacity {capacity}: {described}; lyra {vector} {value:.2f} s, optimum {list(best_vector)} "
                f"{best:.2f} s",
            )
    return Gaps(ours, poster, worst[1])


def _record(figures: Figures, title: str, gaps: Gaps) -> None:
    for name, values in (("lyra", gaps.ours), ("poster knapsack", gaps.poster)):
        figures.record(
            title,
            f"{name:>16}: mean gap {100 * statistics.fmean(values):.3f}%, worst {100 * max(values):.2f}%, "
            f"optimal on {100 * sum(g < 1e-9 for g in values) / len(values):.1f}%",
        )
    pairs = list(zip(gaps.ours, gaps.poster, strict=True))
    figures.record(
        title,
        f"lyra better than the poster on {sum(a < b - 1e-12 for a, b in pairs)}, "
        f"worse on {sum(a > b + 1e-12 for a, b in pairs)} instances",
    )
    figures.record(title, f"lyra's worst instance: {gaps.worst}")


FIT_SEED = 20240611
OVER_SEED = 20240612


@pytest.mark.proof
def test_allocation_mean_gap_when_bases_fit(figures: Figures) -> None:
    gaps = measure(FIT_SEED, bases_fit=True)
    _record(
        figures, f"Allocation, {INSTANCES} instances where every base fits (fluid average JCT vs brute force)", gaps
    )
    assert statistics.fmean(gaps.ours) <= 0.005
    assert statistics.fmean(gaps.ours) < statistics.fmean(gaps.poster)


@pytest.mark.proof
def test_allocation_worst_gap_when_bases_fit() -> None:
    assert max(measure(FIT_SEED, bases_fit=True).ours) <= 0.05


@pytest.mark.proof
def test_allocation_against_brute_force_when_over_subscribed(figures: Figures) -> None:
    gaps = measure(OVER_SEED, bases_fit=False)
    _record(figures, f"Allocation, {INSTANCES} over-subscribed instances (bases do not all fit)", gaps)
    assert statistics.fmean(gaps.ours) <= statistics.fmean(gaps.poster)
