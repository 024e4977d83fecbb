"""What the simulator's policies see of the simulation: a narrow protocol, so that the deciders
(:mod:`lyra.sim.decisions`, :mod:`lyra.sim.context_policies`) and the loan keeper (:mod:`lyra.sim.loans`) depend
on it and not on the engine that drives them (:class:`lyra.sim.engine.Simulation` implements it; an import-linter
contract keeps the engine out of their imports).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from lyra.core.model import TrainingJob
from lyra.sim.cluster import SimCluster
from lyra.sim.jobs import SimJob
from lyra.sim.queueing import JobQueue
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import Scheme


class Decider(Protocol):
    """Who decides which jobs run: the core's allocation (:mod:`lyra.sim.decisions`) or a context policy."""

    allocator_calls: int

    def decide(self, t: float) -> None: ...

    def mark_dirty(self) -> None:
        """Something changed (a job queued, started, resized, ended): the next periodic rebalance is due."""


class Driver(Protocol):
    """The simulation as a policy sees it: its setting, the jobs and the servers, the running totals the deciders
    read instead of scanning jobs (per GPU type index), and the few verbs that change a job's life."""

    scenario: Scenario
    scheme: Scheme
    cluster: SimCluster
    jobs: list[SimJob]
    queue: JobQueue
    #: Per job: not running (:data:`lyra.core.fluid.QUEUED`), on several GPU types (``SPREAD``), else its one
    #: type's index.
    kind: list[int]
    #: Per GPU type: the GPUs of flexible workers (above their jobs' minimum), and the running elastic jobs that
    #: could still grow.
    flexible: list[int]
    growable: list[int]
    #: Per GPU type: the running jobs on it.
    on_type: list[set[int]]
    running: set[int]
    running_elastic: set[int]
    #: The checkpoint grace and the restart cost a preemption is charged, in seconds.
    grace: float
    restart_cost: float

    def core_job(self, job: SimJob, t: float) -> TrainingJob:
        """The core's view of ``job`` at ``t``."""

    def apply(self, changes: Mapping[SimJob, Mapping[int, int]], t: float) -> None:
        """Give every job in ``changes`` its new placement (server index -> workers)."""

    def preempt(self, job: SimJob, t: float) -> None: ...

    def las_level(self, attained: float) -> int: ...

    def server_ready_at(self, server: int, t: float) -> None:
        """A reclaimed server's workers are gone at ``t``: the loan cycle runs then."""

    def decider_dirty(self) -> None: ...
