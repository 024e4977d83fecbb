"""Lending idle inference servers and reclaiming them, by the core's loan cycle, with the time a reclaim really takes.

At every load step, and whenever a reclaimed server's training workers are gone, one turn of
:func:`lyra.core.loan_cycle.plan_loan_cycle` (the function the operator runs at every pass) decides: which servers
serve, which are idle, which idle ones are lent (once idle for the lend delay, ``loaning.lend_hysteresis_s``), which
loaned ones come back (``plan_reclaim``, the scheme's strategy), which jobs are scaled in or preempted, and which
reclaimed servers return. This module only applies it:

* Preempted jobs stop and re-enter the queue after their grace period; scaled-in jobs lose the workers on the
  reclaimed servers.
* A reclaimed server that hosted training serves inference only after its training workers' grace period and a
  drain (``checkpoint_grace_s + drain_s``): until then it counts as still hosting training, and the turn at that
  time returns it. One that hosted nothing returns in the turn that reclaims it. Meanwhile the unmet demand is
  counted as server-seconds short (:mod:`lyra.sim.cluster`). A reclaim is never forced: the simulator charges the
  grace and the drain in full.
* The window opens on a settled pool: servers idle at time 0 count as idle for the whole lend delay already.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lyra.core.loan_cycle import InferenceServer, LoanCycle, LoanSettings, Transition, plan_loan_cycle
from lyra.core.model import ClusterSnapshot, LoanState
from lyra.core.reclaim import ReclaimStrategy
from lyra.sim.driver import Driver
from lyra.sim.jobs import SimJob, Status


@dataclass(frozen=True, slots=True)
class WindowCount:
    """A count split at the end of the submit window: ``window`` inside it, ``tail`` after it (the tail lasts until
    the last job finishes, and its length differs between schemes, so only ``window`` compares them)."""

    window: int = 0
    tail: int = 0

    @property
    def total(self) -> int:
        return self.window + self.tail

    def added(self, n: int, *, inside: bool) -> WindowCount:
        return WindowCount(self.window + n, self.tail) if inside else WindowCount(self.window, self.tail + n)


class LoanKeeper:
    def __init__(self, sim: Driver) -> None:
        self.sim = sim
        scenario = sim.scenario
        cluster = sim.cluster
        strategy = sim.scheme.reclaim
        if strategy is None:
            raise ValueError(f"scheme {sim.scheme.name} lends servers but has no reclaim strategy")
        self.settings = LoanSettings(
            headroom=scenario.inference.headroom_servers,
            lend_delay_s=scenario.loaning.lend_hysteresis_s,
            reclaim_deadline_s=math.inf,
            strategy=strategy,
            seed=scenario.seed,
        )
        self.drain = scenario.loaning.drain_s
        settled = -self.settings.lend_delay_s
        #: Each inference server as the loan cycle sees it, in the layout's (name) order.
        self.servers = [
            InferenceServer(
                cluster.names[s],
                cluster.type_names[cluster.type_of[s]],
                cluster.gpus[s],
                LoanState.IDLE,
                idle_since=settled,
            )
            for s in cluster.inference_servers
        ]
        self.changed = True
        self.reclaims = WindowCount()
        self.reclaimed_servers = WindowCount()
        self.scale_ins = WindowCount()
        #: The running jobs the last training snapshot holds, by name.
        self.by_name: dict[str, SimJob] = {}
        #: The last turn of the cycle.
        self.cycle: LoanCycle | None = None

    def load_changed(self, t: float) -> None:
        """Demand may have changed, or a reclaimed server's workers are gone: a turn at the next decision."""
        self.changed = True

    def adjust(self, t: float) -> None:
        if not self.changed:
            return
        self.changed = False
        cluster = self.sim.cluster
        servers = []
        for server, record in zip(cluster.inference_servers, self.servers, strict=True):
            if cluster.is_loaned(server):
                hosts = cluster.layout.free[server] < cluster.gpus[server]
            else:
                hosts = cluster.is_reclaiming(server) and cluster.ready_at[server] > t
            servers.append(record if record.hosts_training == hosts else replace(record, hosts_training=hosts))
        settings = self.settings
        if settings.strategy is ReclaimStrategy.RANDOM:
            settings = replace(settings, seed=settings.seed + self.reclaims.total)
        cycle = plan_loan_cycle(servers, self.demand(), lambda: self.training(t), now=t, settings=settings)
        self.cycle = cycle
        self.servers = list(cycle.servers)  # sorted by name, as the layout is
        self.apply(cycle, t)

    def demand(self) -> dict[str, int]:
        """Inference servers needed per GPU type (the cluster's split of the demand)."""
        cluster = self.sim.cluster
        return {cluster.type_names[t]: cluster.demand_of_type[t] for t in cluster.inference_types}

    def training(self, t: float) -> ClusterSnapshot:
        """The running jobs with workers on inference servers, and every server."""
        sim = self.sim
        cluster = sim.cluster
        on_inference_types = set().union(*(sim.on_type[t] for t in cluster.inference_types))
        affected = [
            sim.jobs[i] for i in on_inference_types if any(not cluster.is_training[s] for s in sim.jobs[i].placement)
        ]
        self.by_name = {job.name: job for job in affected}
        jobs = tuple(sim.core_job(job, t) for job in sorted(affected, key=lambda job: job.name))
        servers = tuple(cluster.server_view(s) for s in range(cluster.count))
        return ClusterSnapshot(servers, jobs, cluster.catalog)

    def apply(self, cycle: LoanCycle, t: float) -> None:
        sim = self.sim
        cluster = sim.cluster
        index = cluster.layout.index
        lent = cycle.changed(Transition.LEND)
        for name in lent:
            cluster.lend(index[name])
        reclaimed = cycle.changed(Transition.RECLAIM)
        inside = t < cluster.window_s
        if reclaimed:
            self.reclaims = self.reclaims.added(1, inside=inside)
            self.reclaimed_servers = self.reclaimed_servers.added(len(reclaimed), inside=inside)
        evictions = cycle.evictions
        for name in evictions.preempted:
            sim.preempt(self.by_name[name], t)
        shrunk: dict[SimJob, dict[int, int]] = {}
        for name, leaving in evictions.scaled_in.items():
            job = self.by_name[name]
            if job.status is Status.RUNNING:
                placement = shrunk.setdefault(job, dict(job.placement))
                for server_name in leaving:
                    placement.pop(index[server_name], None)
        if shrunk:
            self.scale_ins = self.scale_ins.added(len(shrunk), inside=inside)
            sim.apply(shrunk, t)
        returned = set(cycle.changed(Transition.RETURN))
        for name in reclaimed:
            server = index[name]
            if name in returned:  # it hosted nothing: back at once
                cluster.start_reclaim(server, t)
                continue
            # Scaled-in and preempted workers alike take their grace period to leave, then the server drains.
            ready = t + sim.grace + self.drain
            cluster.start_reclaim(server, ready)
            sim.server_ready_at(server, ready)
        for name in sorted(returned):
            cluster.finish_reclaim(index[name])
        if lent or reclaimed:
            sim.decider_dirty()
