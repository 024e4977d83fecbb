"""The loan cycle of inference nodes during one pass: lend, reclaim, drain, return.

State lives on the node: the ``lyra.dev/state`` label, the state taint with the same value, and two annotations:
``lyra.dev/idle-since`` (hysteresis: an idle server is lent only after ``lend_delay_s`` idle, which delays lending
and never a reclaim) and ``lyra.dev/reclaim-started`` (the reclaim deadline runs from it). A node whose label,
taint and annotations disagree with the state this pass decides is rewritten whole.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol

from lyra.api import names
from lyra.core.errors import InvalidClusterError
from lyra.core.loaning import plan_loans
from lyra.core.model import ClusterSnapshot, InferenceDemand, LoanState, Pool, Server
from lyra.core.placement import PodRole
from lyra.core.reclaim import plan_reclaim
from lyra.operator import manifests
from lyra.operator.actions import SetNodeState
from lyra.operator.changes import Changes
from lyra.operator.config import OperatorConfig
from lyra.operator.observe import ObjectRef, PodRecord, World, format_time

_TRAINING_ROLES = (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE)


class TrainingHooks(Protocol):
    """What the loan book asks of the training side of the pass (:class:`lyra.operator.jobs.JobBook`)."""

    def training_snapshot(self, states: Mapping[str, LoanState]) -> ClusterSnapshot: ...
    def scale_in(self, job_key: str, pods: list[PodRecord], why: str) -> None: ...
    def preempt(self, job_key: str, why: str) -> None: ...
    def running_workers(self, job_key: str) -> tuple[int, int] | None:
        """(minWorkers, live workers) of a running job, ``None`` for anything else."""


class LoanBook:
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
        self.inference_nodes = [n for n in world.nodes if n.pool is Pool.INFERENCE]
        self.states: dict[str, LoanState] = {}
        self.reclaim_started: dict[str, float | None] = {}
        self.idle_since: dict[str, float | None] = {}
        self.reasons: dict[str, str] = {}
        #: Nodes reclaiming at any point of this pass, and when their reclaim began.
        self.reclaim_began: dict[str, float] = {}
        self.demand = dict(demand)
        self.users = users or {}
        self.settled = True
        self.summary: dict[str, object] = {}
        self.inference_on: dict[str, int] = defaultdict(int)
        self.training_on: dict[str, list[PodRecord]] = defaultdict(list)
        for pod in world.pods:
            if not pod.holds_gpus:
                continue
            if pod.role is PodRole.INFERENCE:
                self.inference_on[pod.node] += 1
            elif pod.role in _TRAINING_ROLES:
                self.training_on[pod.node].append(pod)
        for node in self.inference_nodes:
            state = node.state
            if state is None:
                state = LoanState.SERVING if self.inference_on[node.name] else LoanState.IDLE
            self.states[node.name] = state
            self.reclaim_started[node.name] = node.reclaim_started if state is LoanState.RECLAIMING else None
            if state is LoanState.RECLAIMING:
                self.reclaim_began[node.name] = node.reclaim_started if node.reclaim_started is not None else self.now
            self.idle_since[node.name] = node.idle_since if state is LoanState.IDLE else None
            if state is LoanState.IDLE and node.idle_since is None:
                self.idle_since[node.name] = self.now

    def set_state(self, node: str, state: LoanState, reason: str) -> None:
        self.states[node] = state
        self.reasons[node] = reason
        self.reclaim_started[node] = self.now if state is LoanState.RECLAIMING else None
        self.idle_since[node] = self.now if state is LoanState.IDLE else None
        if state is LoanState.RECLAIMING:
            self.reclaim_began.setdefault(node, self.now)

    def reclaims_under_way(self) -> dict[str, float]:
        """Per GPU type, when the oldest reclaim that was under way during this pass began (including one begun and
        finished in it: idle loaned servers return to serving in the pass that reclaims them)."""
        began: dict[str, float] = {}
        types = {n.name: n.gpu_type for n in self.inference_nodes}
        for node, since in self.reclaim_began.items():
            gpu_type = types[node]
            began[gpu_type] = min(since, began.get(gpu_type, since))
        return began

    # -- lend and reclaim --------------------------------------------------------------------------------------

    def plan_loans_and_reclaims(self) -> None:
        for gpu_type, needed in sorted(self.demand.items()):
            servers = []
            for node in self.inference_nodes:
                if node.gpu_type != gpu_type:
                    continue
                state = self.states[node.name]
                since = self.idle_since[node.name]
                if state is LoanState.IDLE and (since is None or self.now - since < self.config.lend_delay_s):
                    state = LoanState.SERVING  # not idle for long enough yet: held, not lendable (hysteresis)
                servers.append(Server(node.name, Pool.INFERENCE, node.gpu_type, node.gpus, state))
            plan = plan_loans(
                ClusterSnapshot(tuple(servers), (), self.config.gpus),
                InferenceDemand(needed),
                headroom=self.config.headroom,
                gpu_type=gpu_type,
            )
            entry: dict[str, object] = {"needed": plan.needed, "held": plan.held}
            for name in plan.lend:
                self.set_state(name, LoanState.LOANED, f"idle for {self.config.lend_delay_s:g} s, not needed")
            if plan.lend:
                entry["lend"] = list(plan.lend)
            if plan.shortfall:
                entry["shortfall"] = plan.shortfall
            if plan.reclaim:
                entry["reclaim"] = self.reclaim(gpu_type, plan.reclaim, plan.needed)
            self.summary[gpu_type] = entry

    def reclaim(self, gpu_type: str, count: int, needed: int) -> dict[str, object]:
        try:
            snapshot = self.hooks.training_snapshot(self.states)
            plan = plan_reclaim(snapshot, count, gpu_type=gpu_type)
        except InvalidClusterError as error:
            self.settled = False
            return {"error": str(error)}
        who = self.users.get(gpu_type, [])
        why = f"{needed} {gpu_type} servers needed" + (f" by {', '.join(who[:3])}" if who else "")
        for name in plan.servers:
            self.set_state(name, LoanState.RECLAIMING, why)
            self.changes.emit(
                ObjectRef("Node", "", name),
                "Reclaiming",
                f"reclaimed for inference ({why}); deadline {self.config.reclaim_deadline_s:g} s",
            )
        self.settled = False
        return {
            "servers": list(plan.servers),
            "preempted": list(plan.preempted),
            "scaled_in": dict(plan.scaled_in),
            "lost_gpu_seconds": round(plan.lost_gpu_seconds, 1),
        }

    # -- drain and return --------------------------------------------------------------------------------------

    def drain(self) -> None:
        """Training work leaves reclaiming servers; emptied ones return to serving; overdue ones are forced."""
        reclaiming = sorted(n for n, s in self.states.items() if s is LoanState.RECLAIMING)
        leaving: dict[str, list[PodRecord]] = defaultdict(list)
        for node in reclaiming:
            for pod in self.training_on[node]:
                if pod.is_live and pod.owner is not None:
                    leaving[pod.owner].append(pod)
        for job_key, pods in sorted(leaving.items()):
            counts = self.hooks.running_workers(job_key)
            nodes = ", ".join(sorted({p.node for p in pods}))
            reasons = sorted({self.reasons[p.node] for p in pods if p.node in self.reasons})
            why = f"node {nodes} reclaimed for inference" + (f" ({reasons[0]})" if reasons else "")
            if counts is None:
                for pod in pods:
                    self.changes.delete(pod, 0, "Reclaimed")
                continue
            minimum, live = counts
            if live - len(pods) >= minimum:
                self.hooks.scale_in(job_key, pods, why)
            else:
                self.hooks.preempt(job_key, f"{why}; {live - len(pods)} of {minimum} base workers would remain")
        for node in reclaiming:
            holding = self.training_on[node]
            if leaving and any(p.node == node for ps in leaving.values() for p in ps):
                self.settled = False
                continue
            if not holding:
                self.set_state(node, LoanState.SERVING, "training work has left: back to inference")
                self.changes.emit(ObjectRef("Node", "", node), "Returned", "training work has left; serving inference")
                continue
            self.settled = False
            started = self.reclaim_started.get(node)
            if started is not None and self.now - started > self.config.reclaim_deadline_s:
                for pod in holding:
                    self.changes.delete(pod, 0, "ReclaimForced")
                self.changes.emit(
                    ObjectRef("Node", "", node),
                    "ReclaimForced",
                    f"{len(holding)} training pods still here {self.config.reclaim_deadline_s:g} s after the reclaim "
                    "began; deleted without grace",
                    warning=True,
                )

    def settle_serving_and_idle(self) -> None:
        """Per GPU type: a server with replicas is ``serving``; so are empty ones, up to the servers inference needs
        (replicas prefer serving servers, so a burst of new replicas packs onto them instead of spreading over idle
        ones); the rest of the empty servers are ``idle``. Empty servers stay serving before idle ones are
        promoted, and idle ones are promoted in the reverse of the order lending takes them."""
        for gpu_type in sorted({n.gpu_type for n in self.inference_nodes}):
            pool = [
                n
                for n in self.inference_nodes
                if n.gpu_type == gpu_type and self.states[n.name] in (LoanState.SERVING, LoanState.IDLE)
            ]
            busy = [n for n in pool if self.inference_on[n.name] > 0]
            empty = [n for n in pool if self.inference_on[n.name] == 0]
            empty.sort(key=lambda n: (self.states[n.name] is not LoanState.SERVING, n.gpus, _reverse(n.name)))
            reserved = {n.name for n in empty[: max(self.demand.get(gpu_type, 0) - len(busy), 0)]}
            for node in pool:
                state = self.states[node.name]
                if node in busy and state is LoanState.IDLE:
                    self.set_state(node.name, LoanState.SERVING, "runs inference replicas")
                elif node.name in reserved and state is LoanState.IDLE:
                    self.set_state(node.name, LoanState.SERVING, "kept for the replicas inference needs")
                elif node not in busy and node.name not in reserved and state is LoanState.SERVING:
                    self.set_state(node.name, LoanState.IDLE, "runs no inference replica")

    # -- the writes --------------------------------------------------------------------------------------------

    def node_actions(self) -> list[SetNodeState]:
        actions = []
        for node in self.inference_nodes:
            state = self.states[node.name]
            started = self.reclaim_started[node.name]
            since = self.idle_since[node.name]
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


def _reverse(name: str) -> tuple[int, ...]:
    """A key that sorts names in reverse order."""
    return (*(-ord(c) for c in name), 1)


def _formatted(seconds: float | None) -> str | None:
    return format_time(seconds) if seconds is not None else None
