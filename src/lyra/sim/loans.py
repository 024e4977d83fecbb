"""Lending idle inference servers and reclaiming them, by the core's plans, with the time a reclaim really takes.

* At every load step (and when a reclaimed server is back) the inference pool is balanced by
  :func:`lyra.core.loaning.plan_loans`: demand plus headroom stays with inference; lending is held back by
  hysteresis (the peak demand of the last ``lend_hysteresis_s``), reclaiming never is.
* A reclaim asks :func:`lyra.core.reclaim.plan_reclaim` (the scheme's strategy) which loaned servers go back. The
  jobs it preempts stop and re-enter the queue after their grace period; the jobs it scales in lose the workers on
  those servers. A returned server serves inference only after its training workers' grace period and a drain
  (``checkpoint_grace_s + drain_s``; at once if no training worker was on it): meanwhile the unmet demand is
  counted as server-seconds short (:mod:`lyra.sim.cluster`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from lyra.core.loaning import plan_loans
from lyra.core.model import ClusterSnapshot, InferenceDemand
from lyra.core.reclaim import plan_reclaim
from lyra.sim.jobs import SimJob, Status

if TYPE_CHECKING:
    from lyra.sim.engine import Simulation


class LoanKeeper:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        scenario = sim.scenario
        self.headroom = scenario.inference.headroom_servers
        self.hysteresis = scenario.loaning.lend_hysteresis_s
        self.drain = scenario.loaning.drain_s
        self.strategy = sim.scheme.reclaim
        self.seed = scenario.seed
        self.changed = True
        #: (time, demand) of the load steps inside the hysteresis window, oldest first.
        self.history: deque[tuple[float, int]] = deque()
        self.reclaims = 0
        self.reclaimed_servers = 0

    def load_changed(self, t: float) -> None:
        """Demand may have changed, or a server is back: balance the pool at the next decision."""
        self.changed = True
        history = self.history
        demand = self.sim.cluster.demand
        if not history or history[-1][0] < t:
            history.append((t, demand))
        else:
            history[-1] = (t, demand)
        # Keep the newest step at or before the window start: it was in force during the whole window's start.
        while len(history) > 1 and history[1][0] <= t - self.hysteresis:
            history.popleft()

    def recent_peak(self) -> int:
        return max(demand for _, demand in self.history)

    def adjust(self, t: float) -> None:
        if not self.changed:
            return
        self.changed = False
        cluster = self.sim.cluster
        held = cluster.n_inference - cluster.loaned
        needed = cluster.demand + self.headroom
        keep = max(needed, self.recent_peak() + self.headroom)
        if needed > held and cluster.loaned == 0:
            return
        if needed <= held and held - keep <= 0:
            return
        snapshot = ClusterSnapshot(tuple(cluster.inference_views()))
        plan = plan_loans(
            snapshot,
            InferenceDemand(cluster.demand),
            headroom=self.headroom,
            recent_peak=InferenceDemand(self.recent_peak()),
        )
        if plan.reclaim:
            self._reclaim(t, plan.reclaim)
        if plan.lend:
            index = cluster.layout.index
            for name in plan.lend:
                cluster.lend(index[name])
            self.sim.decider_dirty()

    def _reclaim(self, t: float, count: int) -> None:
        sim = self.sim
        cluster = sim.cluster
        strategy = self.strategy
        if strategy is None:
            raise RuntimeError(f"scheme {sim.scheme.name} lends servers but has no reclaim strategy")
        affected = {
            i for i in sim.on_type[cluster.inference_type] if any(cluster.is_loaned(s) for s in sim.jobs[i].placement)
        }
        jobs = [sim.core_job(sim.jobs[i], t) for i in sorted(affected, key=lambda i: sim.jobs[i].name)]
        servers = [cluster.server_view(s) for s in cluster.training_servers] + cluster.inference_views()
        snapshot = ClusterSnapshot(tuple(servers), tuple(jobs), cluster.catalog)
        plan = plan_reclaim(snapshot, count, strategy=strategy, seed=self.seed + self.reclaims)
        self.reclaims += 1
        self.reclaimed_servers += len(plan.servers)
        by_name = {sim.jobs[i].name: sim.jobs[i] for i in affected}
        for name in plan.preempted:
            sim.preempt(by_name[name], t)
        index = cluster.layout.index
        shrunk: dict[SimJob, dict[int, int]] = {}
        for server_name in plan.servers:
            server = index[server_name]
            for job in (by_name[name] for name in plan.evictions[server_name]):
                if job.status is Status.RUNNING and job.placement.get(server):
                    placement = shrunk.setdefault(job, dict(job.placement))
                    placement.pop(server, None)
        if shrunk:
            sim.apply(shrunk, t)
        for server_name in plan.servers:
            server = index[server_name]
            # Scaled-in and preempted workers alike take their grace period to leave.
            hosted = bool(plan.evictions[server_name]) or cluster.layout.free[server] < cluster.gpus[server]
            delay = sim.grace + self.drain if hosted else 0.0
            cluster.start_reclaim(server, t + delay)
            if delay > 0:
                sim.server_ready_at(server, t + delay)
            else:
                cluster.finish_reclaim(server)
        sim.decider_dirty()
