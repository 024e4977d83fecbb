"""The loan cycle of inference nodes during one pass, as :func:`lyra.core.loan_cycle.plan_loan_cycle` decides it
(serve or idle, lend, reclaim, drain, return, force; the simulator applies the same function).

State lives on the node: the ``lyra.dev/state`` label, the state taint with the same value, and two annotations:
``lyra.dev/idle-since`` (hysteresis: an idle server is lent only after ``lend_delay_s`` idle, which delays lending
and never a reclaim) and ``lyra.dev/reclaim-started`` (the reclaim deadline runs from it). A node whose label,
taint and annotations disagree with the state this pass decides is rewritten whole.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol

from lyra.api import conditions, names
from lyra.core.errors import InvalidClusterError
from lyra.core.loan_cycle import (
    Balance,
    Evictions,
    InferenceServer,
    LoanCycle,
    LoanSettings,
    StateChange,
    Transition,
    plan_loan_cycle,
)
from lyra.core.model import ClusterSnapshot, LoanState, Pool
from lyra.core.placement import WORKER_ROLES, PodRole
from lyra.operator import manifests
from lyra.operator.actions import LoanReport, ReclaimReport, SetNodeState
from lyra.operator.changes import Changes
from lyra.operator.config import OperatorConfig
from lyra.operator.timestamps import format_time
from lyra.operator.world import ObjectRef, PodRecord, World

#: The grace a GPU pod that is not Lyra's (or an earlier run's worker) gets to leave a server reclaimed for inference
#: (Kubernetes' default ``terminationGracePeriodSeconds``); past the reclaim deadline it is deleted without grace.
FOREIGN_GRACE_S = 30


class TrainingHooks(Protocol):
    """What the loan book asks of the training side of the pass (:class:`lyra.operator.jobs.JobBook`)."""

    def training_snapshot(self, states: Mapping[str, LoanState]) -> ClusterSnapshot: ...
    def scale_in(self, job_key: str, pods: list[PodRecord], why: str) -> None: ...
    def preempt(self, job_key: str, why: str) -> None: ...
    def running_workers(self, job_key: str) -> tuple[int, int] | None:
        """(minWorkers, live workers) of a running job, ``None`` for anything else."""


class LoanBook:
    """The operator's side of :func:`lyra.core.loan_cycle.plan_loan_cycle`: reads each inference node into the
    cycle's terms, and applies what the cycle decides as node states, pod deletions, job statuses and Events."""

    def __init__(
        self,
        world: World,
        config: OperatorConfig,
        changes: Changes,
        hooks: TrainingHooks,
        demand: Mapping[str, int],
        *,
        users: Mapping[str, list[str]] | None = None,
    ) -> None:
        self.world = world
        self.config = config
        self.changes = changes
        self.hooks = hooks
        self.now = world.now
        self.reasons: dict[str, str] = {}
        self.demand = dict(demand)
        self.users = users or {}
        self.settled = True
        #: The balance of each GPU type this pass, or why the loan cycle could not be planned.
        self.report: dict[str, LoanReport] = {}
        self.error: str | None = None
        # What holds each node's GPUs, by owner UID (never by labels: lyra.operator.world): inference replicas, the
        # workers of the pass's jobs, and every other GPU pod (another team's, a tenant's own, an earlier run's).
        inference_on: dict[str, int] = defaultdict(int)
        self.training_on: dict[str, list[PodRecord]] = defaultdict(list)
        self.others_on: dict[str, list[PodRecord]] = defaultdict(list)
        stale = {p.ref.key for p in world.stale}
        for pod in world.pods:
            if not pod.holds_gpus:
                continue
            if pod.role is PodRole.INFERENCE:
                inference_on[pod.node] += 1
            elif pod.role in WORKER_ROLES and pod.ref.key not in stale:
                self.training_on[pod.node].append(pod)
            elif pod.gpus > 0:
                self.others_on[pod.node].append(pod)
        # A lost node (unhealthy past the grace) serves nobody: the cycle plans inference without it, and leaves it be.
        # So is a cordoned one that holds no replicas (kube-scheduler places nothing there: counted as room, it would
        # leave scaled-up replicas pending, and lent, it would take no worker), unless it is being reclaimed (that
        # ends): it keeps its state, and its workers, until it is uncordoned. One that serves replicas counts for them.
        # A serving or idle server without replicas whose GPUs are taken by pods Lyra does not manage (another team's
        # serving stack, a pod pinned to it) is left out too: it is never lent, and it is no room for Lyra's replicas.
        # Such pods are cost, never demand: a server that runs replicas beside them stays in the cycle as serving
        # (it counts for the replicas it holds, so they cause no reclaim), and is not lent while they hold it. A
        # loaned or reclaiming one stays in the cycle, so that it is reclaimed (they are deleted) and returned.
        self.inference_nodes = [
            n
            for n in world.nodes
            if n.pool is Pool.INFERENCE
            and not n.lost(world.now, config.node_grace_s)
            and not (n.unschedulable and not inference_on[n.name] and n.state is not LoanState.RECLAIMING)
            and not (
                self.others_on[n.name]
                and not inference_on[n.name]
                and n.state not in (LoanState.LOANED, LoanState.RECLAIMING)
            )
        ]
        self.servers: tuple[InferenceServer, ...] = tuple(
            InferenceServer(
                node.name,
                node.gpu_type,
                node.gpus,
                state,
                idle_since=node.idle_since if state is LoanState.IDLE else None,
                reclaim_started=node.reclaim_started if state is LoanState.RECLAIMING else None,
                replicas=inference_on[node.name],
                # A reclaim is done when the server holds no GPU pod but inference replicas, whatever their labels.
                hosts_training=bool(self.training_on[node.name] or self.others_on[node.name]),
                # Never lent while pods Lyra does not manage hold some of its GPUs, nor while cordoned (the cycle
                # lends healthy ones).
                healthy=node.healthy and not node.unschedulable and not self.others_on[node.name],
            )
            for node in self.inference_nodes
            for state in [node.state or (LoanState.SERVING if inference_on[node.name] else LoanState.IDLE)]
        )
        self.states: dict[str, LoanState] = {s.name: s.state for s in self.servers}
        self.cycle: LoanCycle | None = None

    @property
    def settings(self) -> LoanSettings:
        config = self.config
        return LoanSettings(
            headroom=config.headroom,
            lend_delay_s=config.lend_delay_s,
            reclaim_deadline_s=config.reclaim_deadline_s,
            lending=config.lending,
        )

    def reclaims_under_way(self) -> dict[str, float]:
        """Per GPU type, when the oldest reclaim that was under way during this pass began (including one begun and
        finished in it: idle loaned servers return to serving in the pass that reclaims them)."""
        if self.cycle is None:
            return {}
        types = {s.name: s.gpu_type for s in self.servers}
        began: dict[str, float] = {}
        for node, since in self.cycle.reclaiming_since.items():
            began[types[node]] = min(since, began.get(types[node], since))
        return began

    def turn(self) -> None:
        """One turn of the loan cycle, applied."""
        observed = dict(self.states)
        try:
            cycle = plan_loan_cycle(
                self.servers,
                self.demand,
                lambda: self.hooks.training_snapshot(observed),
                now=self.now,
                settings=self.settings,
            )
        except InvalidClusterError as error:
            self.settled = False
            self.error = str(error)
            return
        self.cycle = cycle
        self.states = cycle.states()
        self.settled = cycle.settled
        for change in cycle.changes:
            self.apply(change)
        self.evict(cycle.evictions)
        for gpu_type, balance in cycle.balances.items():
            self.report[gpu_type] = self.reported(balance)

    def apply(self, change: StateChange) -> None:
        node = change.server
        reason = change.reason
        if change.transition is Transition.RECLAIM:
            who = self.users.get(self.world_type(node), [])
            reason += f" by {', '.join(who[:3])}" if who else ""
            self.changes.emit(
                ObjectRef("Node", "", node),
                conditions.RECLAIMING,
                f"reclaimed for inference ({reason}); deadline {self.config.reclaim_deadline_s:g} s",
            )
        elif change.transition is Transition.RETURN:
            self.changes.emit(
                ObjectRef("Node", "", node), conditions.RETURNED, "training work has left; serving inference"
            )
        elif change.transition is Transition.FORCE:
            holding = [*self.training_on[node], *self.others_on[node]]
            for pod in holding:
                self.changes.delete(pod, 0, conditions.RECLAIM_FORCED)
            self.changes.emit(
                ObjectRef("Node", "", node),
                conditions.RECLAIM_FORCED,
                f"{len(holding)} GPU pods other than inference replicas still here "
                f"{self.config.reclaim_deadline_s:g} s after the reclaim began; deleted without grace",
                warning=True,
            )
            return  # the node keeps the reason it is reclaiming for
        self.reasons[node] = reason

    def world_type(self, node: str) -> str:
        return next(s.gpu_type for s in self.servers if s.name == node)

    def evict(self, evictions: Evictions) -> None:
        """Training work leaves reclaiming servers: by scale-in where the job keeps its base, by preemption where it
        does not; workers of jobs the cycle does not see running (a job that stopped, or one left out of the core's
        view) are deleted at once, and every other GPU pod that is not an inference replica (a pod Lyra does not
        manage, an earlier run's worker) with :data:`FOREIGN_GRACE_S`."""
        reclaiming = {n for n, s in self.states.items() if s is LoanState.RECLAIMING}
        leaving: dict[str, list[PodRecord]] = defaultdict(list)
        for node in sorted(reclaiming):
            for pod in self.training_on[node]:
                if pod.is_live and pod.owner is not None:
                    leaving[pod.owner].append(pod)
            for pod in self.others_on[node]:  # not Lyra's workers, not inference: they leave the server too
                self.changes.delete(pod, 0 if pod.is_finished else FOREIGN_GRACE_S, conditions.RECLAIMED)
        for job_key, pods in sorted(leaving.items()):
            nodes = sorted({p.node for p in pods})
            reasons = sorted({self.reasons[n] for n in nodes if n in self.reasons})
            why = f"node {', '.join(nodes)} reclaimed for inference" + (f" ({reasons[0]})" if reasons else "")
            counts = self.hooks.running_workers(job_key)
            if job_key in evictions.preempted and counts is not None:
                minimum, live = counts
                remain = live - len(pods)
                self.hooks.preempt(job_key, f"{why}; {remain} of {minimum} base workers would remain")
            elif job_key in evictions.scaled_in:
                servers = evictions.scaled_in[job_key]
                self.hooks.scale_in(job_key, [p for p in pods if p.node in servers], why)
            else:  # not running, or left out of the core's view (its workers break its own spec)
                for pod in pods:
                    self.changes.delete(pod, 0, conditions.RECLAIMED)

    @staticmethod
    def reported(balance: Balance) -> LoanReport:
        plan, reclaim = balance.loans, balance.reclaim
        return LoanReport(
            needed=plan.needed,
            held=plan.held,
            lend=tuple(plan.lend),
            shortfall=plan.shortfall,
            reclaim=None
            if reclaim is None
            else ReclaimReport(
                servers=tuple(reclaim.servers),
                preempted=tuple(reclaim.preempted),
                scaled_in=dict(reclaim.scaled_in),
                lost_gpu_seconds=reclaim.lost_gpu_seconds,
            ),
        )

    # -- the writes --------------------------------------------------------------------------------------------

    def node_actions(self) -> list[SetNodeState]:
        actions = []
        after = {s.name: s for s in (self.cycle.servers if self.cycle is not None else self.servers)}
        for node in self.inference_nodes:
            state = after[node.name].state
            started = after[node.name].reclaim_started
            since = after[node.name].idle_since
            want = {
                names.RECLAIM_STARTED_ANNOTATION: format_time(started) if started is not None else None,
                names.IDLE_SINCE_ANNOTATION: format_time(since) if since is not None else None,
            }
            have = {
                names.RECLAIM_STARTED_ANNOTATION: _formatted(node.reclaim_started),
                names.IDLE_SINCE_ANNOTATION: _formatted(node.idle_since),
            }
            if node.state is state and node.taint == state.value and want == have:
                continue
            actions.append(
                SetNodeState(
                    node=node.name,
                    state=state,
                    taints=manifests.state_taints(node.other_taints, state),
                    annotations=want,
                    resource_version=node.resource_version,
                    reason=self.reasons.get(node.name, "labels and taint put in agreement"),
                )
            )
        return actions


def _formatted(seconds: float | None) -> str | None:
    return format_time(seconds) if seconds is not None else None
