"""One turn of the loan cycle of the inference servers: what the operator does in a pass, and the simulator at a
load step, written once.

From each inference server's state, since when it is idle or reclaiming and what runs on it, the demand per GPU
type and the time, :func:`plan_loan_cycle` returns the servers' new states, the transitions that led there and the
evictions a reclaim causes. The adapters only apply them. Its steps, in order:

1. **Serve or idle** (per GPU type): a ``loaned`` server that runs inference replicas (one scheduled onto it in the
   moment it was lent) is called back at once: it becomes ``reclaiming``, so replicas never live on a loaned server,
   and serves again once its training work has left (step 3). A server running inference replicas is ``serving``;
   so are empty servers up to
   the servers inference needs, those already serving first (a burst of new replicas then packs onto them instead of
   spreading over idle ones), then idle ones in the reverse of the lend order; the other empty servers are
   ``idle``. A server becomes idle "since now".
2. **Lend or reclaim** (per GPU type in the demand): :func:`lyra.core.loaning.balance_loans` with every idle server
   that has not yet been idle for ``lend_delay_s``, and the headroom among those that have, counted as serving (the
   hysteresis, below). Servers to call back are chosen by :func:`lyra.core.reclaim.plan_reclaim` and become
   ``reclaiming``, their deadline running from now.
3. **Drain, return, force**: training workers on ``reclaiming`` servers leave, by *scale-in* where the job keeps
   its base gang (``workers - leaving >= min_workers``), by *preemption* where it does not (:class:`Evictions`; for
   a server reclaimed in this turn that is exactly ``plan_reclaim``'s ``scaled_in`` and ``preempted``). A
   reclaiming server with no training left on it returns to ``serving``; one that still hosts training
   ``reclaim_deadline_s`` after its reclaim began is *forced* (its training pods go without grace).

**Hysteresis: the lend delay.** An idle server is lent only once it has been idle for ``lend_delay_s``, and the
headroom is kept among the servers idle that long; reclaiming never waits. This is the rule the simulator had as
"a recent peak" (lend only what ``max(demand, peak of the last window) + headroom`` leaves), stated per server: with
the deterministic serve order of step 1, the servers idle for the whole delay are those the peak demand of the last
``lend_delay_s`` did not need. Stated per server, it needs no history: the operator keeps the idle time where it
keeps all its state, on the node (the ``idle-since`` annotation), so a restarted or failed-over operator goes on
where the last one stopped (docs/policies.md).

The training side is asked for (``training``) only when a server is reclaimed, or a reclaiming one still hosts
training: building it costs a scan of the jobs, which the simulator does not pay at every load step.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from lyra.core.errors import InvalidClusterError
from lyra.core.loaning import LoanPlan, balance_loans
from lyra.core.model import ClusterSnapshot, InferenceDemand, LoanState, Pool, Server
from lyra.core.ordering import lend_order, serve_order
from lyra.core.reclaim import ReclaimPlan, ReclaimStrategy, plan_reclaim


class Transition(enum.StrEnum):
    """What happens to one inference server in a turn of the cycle."""

    SERVE = "serve"  # idle -> serving: it runs replicas, or is kept for the replicas inference needs
    IDLE = "idle"  # serving -> idle: it runs no replica and inference does not need it
    LEND = "lend"  # idle -> loaned
    RECLAIM = "reclaim"  # loaned -> reclaiming: inference needs it, or a replica was scheduled onto it
    RETURN = "return"  # reclaiming -> serving: no training left on it
    FORCE = "force"  # stays reclaiming: its deadline has passed, its training pods go without grace


_AFTER = {
    Transition.SERVE: LoanState.SERVING,
    Transition.IDLE: LoanState.IDLE,
    Transition.LEND: LoanState.LOANED,
    Transition.RECLAIM: LoanState.RECLAIMING,
    Transition.RETURN: LoanState.SERVING,
    Transition.FORCE: LoanState.RECLAIMING,
}


@dataclass(frozen=True, slots=True)
class InferenceServer:
    """An inference server as the loan cycle reads it.

    ``idle_since`` (for an ``idle`` server) and ``reclaim_started`` (for a ``reclaiming`` one) are when that state
    began; ``None`` means "now" (a server seen in that state for the first time). ``replicas``: inference replicas
    on it. ``hosts_training``: training pods are still on it, running or leaving in their grace period. An idle
    server that is not ``healthy`` is never lent (it would take no training work)."""

    name: str
    gpu_type: str
    gpus: int
    state: LoanState
    idle_since: float | None = None
    reclaim_started: float | None = None
    replicas: int = 0
    hosts_training: bool = False
    healthy: bool = True

    def __post_init__(self) -> None:
        _server_view(self.name, self.gpu_type, self.gpus, self.state)  # the core's checks of a server, memoised
        for label, value in (("idle_since", self.idle_since), ("reclaim_started", self.reclaim_started)):
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value)):
                raise InvalidClusterError(f"server {self.name}: {label} must be a finite time, got {value!r}")
        if not isinstance(self.replicas, int) or self.replicas < 0:
            raise InvalidClusterError(f"server {self.name}: replicas must be an integer >= 0, got {self.replicas!r}")

    @property
    def view(self) -> Server:
        return _server_view(self.name, self.gpu_type, self.gpus, self.state)


@functools.lru_cache(maxsize=1 << 14)
def _server_view(name: str, gpu_type: str, gpus: int, state: LoanState) -> Server:
    """The core's :class:`Server` of an inference server, checked once per value: the simulator turns the cycle
    thousands of times over the same servers."""
    return Server(name, Pool.INFERENCE, gpu_type, gpus, state)


@dataclass(frozen=True, slots=True)
class LoanSettings:
    """The cycle's knobs: ``headroom`` spare servers per GPU type stay with inference; an idle server is lent after
    ``lend_delay_s`` idle; training still on a reclaimed server after ``reclaim_deadline_s`` is forced off (``inf``:
    never); ``strategy`` and ``seed`` are :func:`lyra.core.reclaim.plan_reclaim`'s. ``lending=False`` lends nothing
    (a cluster without loaning: servers still serve, idle and return what is lent when it was switched off)."""

    headroom: int = 0
    lend_delay_s: float = 60.0
    reclaim_deadline_s: float = 300.0
    strategy: ReclaimStrategy = ReclaimStrategy.LYRA
    seed: int = 0
    lending: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.headroom, int) or self.headroom < 0:
            raise InvalidClusterError(f"headroom must be an integer >= 0, got {self.headroom!r}")
        if not (isinstance(self.lend_delay_s, int | float) and 0 <= self.lend_delay_s < math.inf):
            raise InvalidClusterError(f"lend_delay_s must be finite and >= 0, got {self.lend_delay_s!r}")
        if not (isinstance(self.reclaim_deadline_s, int | float) and self.reclaim_deadline_s > 0):
            raise InvalidClusterError(f"reclaim_deadline_s must be > 0, got {self.reclaim_deadline_s!r}")
        if not isinstance(self.strategy, ReclaimStrategy):
            raise InvalidClusterError(f"strategy must be a ReclaimStrategy, got {self.strategy!r}")


@dataclass(frozen=True, slots=True)
class StateChange:
    server: str
    transition: Transition
    reason: str

    @property
    def state(self) -> LoanState:
        """The server's state after the change."""
        return _AFTER[self.transition]


@dataclass(frozen=True, slots=True)
class Evictions:
    """Training work leaving reclaiming servers: ``scaled_in`` maps each job that keeps its base gang to the workers
    it loses per server; ``preempted`` jobs stop entirely (they would fall below their base)."""

    scaled_in: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))
    preempted: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.scaled_in and not self.preempted


@dataclass(frozen=True, slots=True)
class Balance:
    """One GPU type's balance in this turn: the loan plan, and the reclaim plan if servers were called back."""

    loans: LoanPlan
    reclaim: ReclaimPlan | None = None


@dataclass(frozen=True, slots=True)
class LoanCycle:
    """The outcome of one turn: every inference server after it (sorted by name), the changes in the order they were
    decided, the evictions and each GPU type's balance."""

    servers: tuple[InferenceServer, ...]
    changes: tuple[StateChange, ...]
    evictions: Evictions
    balances: Mapping[str, Balance]
    #: Every server that was reclaiming at some point of the turn (one reclaimed and returned in it too), and when
    #: its reclaim began.
    reclaiming_since: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def settled(self) -> bool:
        """No server is on its way back: the training side may be allocated on these states."""
        return not any(s.state is LoanState.RECLAIMING for s in self.servers)

    def states(self) -> dict[str, LoanState]:
        return {s.name: s.state for s in self.servers}

    def changed(self, transition: Transition) -> tuple[str, ...]:
        return tuple(c.server for c in self.changes if c.transition is transition)


def plan_loan_cycle(
    servers: Sequence[InferenceServer],
    demand: Mapping[str, int],
    training: Callable[[], ClusterSnapshot],
    *,
    now: float,
    settings: LoanSettings,
) -> LoanCycle:
    """One turn of the loan cycle (module docstring). ``demand``: servers inference needs per GPU type (a type it
    does not list is neither lent nor reclaimed). ``training``: the training side (every server, the running jobs
    with their live workers), called at most once, and only when a server is reclaimed or a reclaiming one hosts
    training; the states of its inference servers are replaced by the cycle's own. Only ``servers`` are reclaimed: a
    loaned server the training side holds and ``servers`` leave out (the operator leaves out a cordoned one) stays
    lent."""
    if not (isinstance(now, int | float) and math.isfinite(now)):
        raise InvalidClusterError(f"now must be a finite time, got {now!r}")
    for gpu_type, count in demand.items():
        InferenceDemand(count)  # checks the count
        if not isinstance(gpu_type, str) or not gpu_type:
            raise InvalidClusterError(f"demand must be keyed by GPU type names, got {gpu_type!r}")
    turn = _Turn(servers, now, settings, training)
    for gpu_type in sorted(turn.names_of_type):
        turn.serve_or_idle(gpu_type, demand.get(gpu_type, 0))
    balances = {gpu_type: turn.lend_or_reclaim(gpu_type, needed) for gpu_type, needed in sorted(demand.items())}
    evictions = turn.drain()
    return LoanCycle(
        servers=tuple(turn.servers[name] for name in turn.names),
        changes=tuple(turn.changes),
        evictions=evictions,
        balances=MappingProxyType(balances),
        reclaiming_since=MappingProxyType(dict(sorted(turn.reclaiming_since.items()))),
    )


class _Turn:
    """The servers as one turn changes them."""

    def __init__(
        self,
        servers: Sequence[InferenceServer],
        now: float,
        settings: LoanSettings,
        training: Callable[[], ClusterSnapshot],
    ) -> None:
        self.now = now
        self.settings = settings
        self.training = training
        self.snapshot: ClusterSnapshot | None = None
        self.servers: dict[str, InferenceServer] = {}
        self.changes: list[StateChange] = []
        self.reclaiming_since: dict[str, float] = {}
        mine = self.servers
        for server in servers:
            name, state = server.name, server.state
            if name in mine:
                raise InvalidClusterError(f"duplicate server name {name!r}")
            idle_since = started = None
            if state is LoanState.IDLE:
                idle_since = server.idle_since if server.idle_since is not None else now
            elif state is LoanState.RECLAIMING:
                started = server.reclaim_started if server.reclaim_started is not None else now
                self.reclaiming_since[name] = started
            unchanged = idle_since == server.idle_since and started == server.reclaim_started
            mine[name] = server if unchanged else replace(server, idle_since=idle_since, reclaim_started=started)
        #: Every server's name, sorted, and those of each GPU type: the order every step reads them in.
        self.names = sorted(mine)
        self.names_of_type: dict[str, list[str]] = {}
        for name in self.names:
            self.names_of_type.setdefault(mine[name].gpu_type, []).append(name)

    def change(self, name: str, transition: Transition, reason: str) -> None:
        state = _AFTER[transition]
        server = self.servers[name]
        self.servers[name] = replace(
            server,
            state=state,
            idle_since=self.now if state is LoanState.IDLE else None,
            reclaim_started=(server.reclaim_started if transition is Transition.FORCE else self.now)
            if state is LoanState.RECLAIMING
            else None,
        )
        self.changes.append(StateChange(name, transition, reason))
        if transition is Transition.RECLAIM:
            self.reclaiming_since[name] = self.now

    def of_type(self, gpu_type: str, *states: LoanState) -> list[InferenceServer]:
        """The servers of ``gpu_type`` in one of ``states`` (every state if none is given), by name."""
        servers = self.servers
        of_type = (servers[name] for name in self.names_of_type.get(gpu_type, ()))
        return [s for s in of_type if s.state in states] if states else list(of_type)

    # -- 1. serve or idle ----------------------------------------------------------------------------------------

    def serve_or_idle(self, gpu_type: str, needed: int) -> None:
        for server in self.of_type(gpu_type, LoanState.LOANED):
            if server.replicas > 0:  # scheduled in the moment it was lent: it serves again, its training leaves
                self.change(server.name, Transition.RECLAIM, "runs inference replicas: called back from its loan")
        pool = self.of_type(gpu_type, LoanState.SERVING, LoanState.IDLE)
        busy = [s for s in pool if s.replicas > 0]
        empty = serve_order(s for s in pool if s.replicas == 0)
        reserved = {s.name for s in empty[: max(needed - len(busy), 0)]}
        for server in pool:
            if server.replicas > 0 and server.state is LoanState.IDLE:
                self.change(server.name, Transition.SERVE, "runs inference replicas")
            elif server.name in reserved and server.state is LoanState.IDLE:
                self.change(server.name, Transition.SERVE, "kept for the replicas inference needs")
            elif server.replicas == 0 and server.name not in reserved and server.state is LoanState.SERVING:
                self.change(server.name, Transition.IDLE, "runs no inference replica")

    # -- 2. lend or reclaim --------------------------------------------------------------------------------------

    def lendable(self, servers: list[InferenceServer]) -> list[InferenceServer]:
        """Of ``servers``, those that may be lent (idle for the lend delay, healthy), in the lend order."""
        if not self.settings.lending:
            return []
        now, delay = self.now, self.settings.lend_delay_s
        return lend_order(
            s
            for s in servers
            if s.state is LoanState.IDLE and s.healthy and s.idle_since is not None and now - s.idle_since >= delay
        )

    def lend_or_reclaim(self, gpu_type: str, needed: int) -> Balance:
        settings = self.settings
        servers = self.of_type(gpu_type)
        # Hysteresis: only servers idle for the lend delay may be lent, and the headroom stays among them too (the
        # last of them in the lend order are held), so a dip lends no more than the peak of the delay leaves idle.
        # The others count as serving: inference holds every server that is not loaned.
        lendable = self.lendable(servers)
        loaned = sum(1 for s in servers if s.state is LoanState.LOANED)
        may_lend = lendable[: max(len(lendable) - settings.headroom, 0)]
        plan = balance_loans(len(servers) - loaned, loaned, may_lend, needed + settings.headroom)
        for name in plan.lend:
            self.change(name, Transition.LEND, f"idle for {settings.lend_delay_s:g} s, not needed")
        if not plan.reclaim:
            return Balance(plan)
        reclaim = plan_reclaim(
            self.training_snapshot(),
            plan.reclaim,
            strategy=settings.strategy,
            seed=settings.seed,
            gpu_type=gpu_type,
            among=self.names_of_type[gpu_type],  # a loaned server the cycle leaves out stays lent
        )
        for name in reclaim.servers:
            self.change(name, Transition.RECLAIM, f"{plan.needed} {gpu_type} servers needed")
        self.snapshot = None  # the states changed: the next reader sees them
        return Balance(plan, reclaim)

    def training_snapshot(self) -> ClusterSnapshot:
        """The training side with the inference servers in this turn's states."""
        if self.snapshot is None:
            given = self.training()
            mine = self.servers
            servers = tuple(
                mine[s.name].view if s.name in mine and s.state is not mine[s.name].state else s for s in given.servers
            )
            self.snapshot = ClusterSnapshot(servers, given.jobs, given.gpus)
        return self.snapshot

    # -- 3. drain, return, force ---------------------------------------------------------------------------------

    def drain(self) -> Evictions:
        # Every server reclaiming now was reclaiming when the turn began or was reclaimed in it.
        since = sorted(self.reclaiming_since)
        reclaiming = [s for s in map(self.servers.__getitem__, since) if s.state is LoanState.RECLAIMING]
        if not reclaiming:
            return Evictions()
        # Only a server that hosts training pods can have workers to evict.
        names = {s.name for s in reclaiming if s.hosts_training}
        scaled_in: dict[str, Mapping[str, int]] = {}
        preempted: list[str] = []
        leaving_from: set[str] = set()
        for job in self.training_snapshot().jobs if names else ():
            leaving = {server: n for server, n in job.placement.items() if server in names}
            if not leaving:
                continue
            leaving_from |= leaving.keys()
            if job.workers - sum(leaving.values()) >= job.min_workers:
                scaled_in[job.name] = MappingProxyType(leaving)
            else:
                preempted.append(job.name)
        deadline = self.settings.reclaim_deadline_s
        for server in reclaiming:
            if server.name in leaving_from:
                continue  # its workers leave now; it returns once they are gone
            if not server.hosts_training:
                self.change(server.name, Transition.RETURN, "training work has left: back to inference")
                continue
            started = server.reclaim_started
            if started is not None and self.now - started > deadline:
                self.change(
                    server.name, Transition.FORCE, f"training still here {deadline:g} s after the reclaim began"
                )
        return Evictions(MappingProxyType(dict(scaled_in)), tuple(sorted(preempted)))
