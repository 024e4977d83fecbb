"""The training side of a pass: each TrainingJob's life (finished, failed, gang timeouts), its intent (phase, target
workers, planned placement, GPU type) from ``allocate_workers``, and its pods made to match the intent. Each
responsibility is a module of its own (:mod:`lyra.operator.training_pass` for what they share,
:mod:`lyra.operator.job_work`, :mod:`lyra.operator.job_life`, :mod:`lyra.operator.job_intent`,
:mod:`lyra.operator.worker_pods`); :class:`JobBook` runs them in a pass's order and is what the rest of the pass
(``decide``, the loan book's :class:`~lyra.operator.loans.TrainingHooks`) sees.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import TypeVar

from lyra.api.resources import JobPhase
from lyra.core.allocation import AllocationPlan
from lyra.core.errors import InvalidClusterError
from lyra.core.model import ClusterSnapshot, LoanState
from lyra.operator.changes import Changes
from lyra.operator.config import OperatorConfig
from lyra.operator.isolation import Alone
from lyra.operator.job_intent import Entry, JobIntents
from lyra.operator.job_life import JobLives
from lyra.operator.job_work import WorkLedger
from lyra.operator.training_pass import (
    PREEMPTED_BY_ALLOCATION,
    PREEMPTED_BY_DISRUPTION,
    PREEMPTED_BY_RECLAIM,
    PREEMPTED_LOST_BASE,
    PREEMPTED_NODE_LOST,
    JobState,
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

log = logging.getLogger("lyra.operator")
T = TypeVar("T")


class JobBook:
    """The training side of one pass: ``lives``, then (on a settled cluster) ``allocate``, ``converge`` and
    ``write_statuses``; the loan book's hooks (snapshot, scale-in, preemption, running workers) in between. It runs
    each step itself and each job's part of it alone (:class:`lyra.operator.isolation.Alone`), handing the step
    modules what they need, so the data flows one way: from here into the steps, never back."""

    def __init__(self, world: World, config: OperatorConfig, changes: Changes) -> None:
        self.changes = changes
        self.training = TrainingPass(world, config, changes)
        self.work = WorkLedger(self.training)
        self.life = JobLives(self.training, self.work)
        self.intent = JobIntents(self.training, self.work, self.life)
        self.worker_pods = WorkerPods(self.training, self.work)

    def alone(self, job: JobState, what: str, step: Callable[[], T]) -> T | None:
        """Run one job's part of the pass alone: if it raises, what it decided is undone and the job fails alone
        (``InvalidSpec``, the error named), out of the rest of the pass; the other jobs are decided as before.
        Returns the step's result, ``None`` if it raised."""
        with Alone(self.changes, job.record.ref, what) as alone:
            return step()
        assert alone.failure is not None
        self.training.drop(job, alone.failure.message)
        return None

    def lives(self) -> None:
        self.life.clean_stale()
        for job in list(self.training.jobs.values()):
            self.alone(job, "deciding the job's life", partial(self.life.life, job))

    def settled(self) -> bool:
        return self.life.settled()

    def snapshot(
        self, states: Mapping[str, LoanState], *, allocating: bool = True
    ) -> tuple[ClusterSnapshot, dict[str, int], dict[str, JobState]]:
        """The core's view of the training side (:meth:`JobIntents.snapshot`), each job modelled alone, and the jobs
        it holds by name."""
        servers = self.intent.servers(states)
        hosts = {s.name for s in servers if s.hosts_training}
        entries: list[Entry] = []
        for job in self.intent.modelled(allocating=allocating):
            entry = self.alone(job, "modelling the job", partial(self.intent.entry, job, hosts))
            if entry is not None:
                entries.append(entry)
        return self.intent.snapshot(servers, entries)

    def training_snapshot(self, states: Mapping[str, LoanState]) -> ClusterSnapshot:
        return self.snapshot(states, allocating=False)[0]

    def allocate(self, states: Mapping[str, LoanState]) -> None:
        """``allocate_workers`` on the settled snapshot, and each job's intent from its plan, each job's alone."""
        try:
            snapshot, held, by_name = self.snapshot(states)
            plan = self.allocation(snapshot, held, by_name)
        except InvalidClusterError as error:
            self.intent.report_error(str(error))
            return
        if plan is None:
            return
        self.intent.report(plan)
        rooms: dict[int, dict[str, int]] = {}  # GPUs per worker -> workers each GPU type holds, empty
        for name, job in by_name.items():
            if job.key in self.training.jobs:
                intend = partial(self.intent.intend, job, name, plan, snapshot, rooms)
                self.alone(job, "applying the allocation", intend)

    def allocation(
        self, snapshot: ClusterSnapshot, held: Mapping[str, int], by_name: Mapping[str, JobState]
    ) -> AllocationPlan | None:
        """The pass's plan. Should ``allocate_workers`` raise anything but :class:`InvalidClusterError` (a value no
        bound foresaw), each job is allocated alone on the same servers: those that raise alone fail alone
        (``InvalidSpec``), and the others are allocated together again. ``None``: even they raise together (no intent
        changes in this pass; the report says why)."""
        try:
            return self.intent.plan(snapshot, held)
        except InvalidClusterError:
            raise
        except Exception:
            log.exception("the allocation failed; allocating each job alone to find the ones that fail it")
        kept = []
        for core in snapshot.jobs:
            by_itself = partial(self.intent.plan, replace(snapshot, jobs=(core,)), held)
            if self.alone(by_name[core.name], "allocating GPUs", by_itself) is not None:
                kept.append(core)
        try:
            return self.intent.plan(replace(snapshot, jobs=tuple(kept)), held)
        except Exception as error:
            log.exception("the allocation failed with every job that fails alone left out")
            self.intent.report_error(f"{type(error).__name__}: {error}")
            return None

    def converge(self) -> None:
        """Make every running job's pods match its intent (target and planned placement). A job whose pods cannot be
        built fails alone: what was decided for it is undone and the others go on."""
        for job in list(self.training.jobs.values()):
            if job.status.phase is not JobPhase.RUNNING or job.finishing:
                continue
            mark = self.changes.mark()
            try:
                self.worker_pods.converge_job(job)
            except Exception as error:  # one job's bad template or a bug in building it: that job only
                log.exception("TrainingJob %s: its worker pods cannot be built", job.key)
                self.changes.undo(mark)
                self.training.drop(job, f"the worker pods cannot be built: {type(error).__name__}: {error}")

    def write_statuses(self) -> None:
        for job in [*self.training.jobs.values(), *self.training.refused]:
            with Alone(self.changes, job.record.ref, "writing the status"):
                self.training.write_status(job)

    def scale_in(self, job_key: str, pods: list[PodRecord], why: str) -> None:
        """Scale a job in for a reclaim, alone (what raises fails that job alone, and its workers leave the
        reclaimed servers with it)."""
        job = self.training.jobs.get(job_key)
        if job is not None:
            self.alone(job, "scaling the job in", partial(self.life.scale_in, job_key, pods, why))

    def preempt(self, job_key: str, why: str) -> None:
        """Preempt a job for a reclaim, alone."""
        job = self.training.jobs.get(job_key)
        if job is not None:
            self.alone(job, "preempting the job", partial(self.life.preempt, job_key, why))

    def running_workers(self, job_key: str) -> tuple[int, int] | None:
        return self.life.running_workers(job_key)
