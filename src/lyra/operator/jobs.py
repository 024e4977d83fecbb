"""The training side of a pass: each TrainingJob's life (finished, failed, gang timeouts), its intent (phase, target
workers, planned placement, GPU type) from ``allocate_workers``, and its pods made to match the intent. Each
responsibility is a module of its own (:mod:`lyra.operator.training_pass` for what they share,
:mod:`lyra.operator.job_work`, :mod:`lyra.operator.job_life`, :mod:`lyra.operator.job_intent`,
:mod:`lyra.operator.worker_pods`); :class:`JobBook` runs them in a pass's order and is what the rest of the pass
(``decide``, the loan book's :class:`~lyra.operator.loans.TrainingHooks`) sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from lyra.core.model import ClusterSnapshot, LoanState
from lyra.operator.changes import Changes
from lyra.operator.config import OperatorConfig
from lyra.operator.job_intent import JobIntents
from lyra.operator.job_life import JobLives
from lyra.operator.job_work import WorkLedger
from lyra.operator.training_pass import (
    PREEMPTED_BY_ALLOCATION,
    PREEMPTED_BY_DISRUPTION,
    PREEMPTED_BY_RECLAIM,
    PREEMPTED_LOST_BASE,
    PREEMPTED_NODE_LOST,
    TrainingPass,
)
from lyra.operator.worker_pods import WorkerPods
from lyra.operator.world import PodRecord, World

__all__ = [
    "PREEMPTED_BY_ALLOCATION",
    "PREEMPTED_BY_DISRUPTION",
    "PREEMPTED_BY_RECLAIM",
    "PREEMPTED_LOST_BASE",
    "PREEMPTED_NODE_LOST",
    "JobBook",
]


class JobBook:
    """The training side of one pass: ``lives``, then (on a settled cluster) ``allocate``, ``converge`` and
    ``write_statuses``; the loan book's hooks (snapshot, scale-in, preemption, running workers) in between."""

    def __init__(self, world: World, config: OperatorConfig, changes: Changes) -> None:
        self.training = TrainingPass(world, config, changes)
        self.work = WorkLedger(self.training)
        self.life = JobLives(self.training, self.work)
        self.intent = JobIntents(self.training, self.work, self.life)
        self.worker_pods = WorkerPods(self.training, self.work)

    def lives(self) -> None:
        self.life.lives()

    def settled(self) -> bool:
        return self.life.settled()

    def allocate(self, states: Mapping[str, LoanState]) -> None:
        self.intent.allocate(states)

    def converge(self) -> None:
        self.worker_pods.converge()

    def write_statuses(self) -> None:
        self.training.write_statuses()

    def training_snapshot(self, states: Mapping[str, LoanState]) -> ClusterSnapshot:
        return self.intent.training_snapshot(states)

    def scale_in(self, job_key: str, pods: list[PodRecord], why: str) -> None:
        """Scale a job in for a reclaim, under the per-object isolation (what raises fails that job alone, and its
        workers leave the reclaimed servers with it)."""
        job = self.training.jobs.get(job_key)
        if job is not None:
            self.training.alone(job, "scaling the job in", partial(self.life.scale_in, job_key, pods, why))

    def preempt(self, job_key: str, why: str) -> None:
        """Preempt a job for a reclaim, under the per-object isolation."""
        job = self.training.jobs.get(job_key)
        if job is not None:
            self.training.alone(job, "preempting the job", partial(self.life.preempt, job_key, why))

    def running_workers(self, job_key: str) -> tuple[int, int] | None:
        return self.life.running_workers(job_key)
