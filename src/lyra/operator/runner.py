"""The running operator: watch caches wake a reconcile loop that observes, decides and commits.

The caches (:mod:`lyra.operator.caches`, on :mod:`lyra.kubewatch`; or, with ``watch_layer="kopf"``, kopf's indexes,
:mod:`lyra.operator.kopf_caches`) keep list-and-watch streams on pool nodes, pods,
TrainingJobs, InferenceServices and Lyra's Deployments (resuming, with backoff); any change to an object they keep
wakes the loop. The loop makes no pass before every cache has listed once (``/readyz`` is not ready meanwhile), then
one pass at a time (coalescing the events that arrived meanwhile), and at least one every ``resync_s`` so that timed
transitions (lend delay, reclaim deadline, gang timeout) happen without an event. A pass starts by holding the
leader Lease (:mod:`lyra.operator.leader`); an operator that does not hold it stands by. A pass reads the caches,
never lists, and reads only once they have seen its previous writes. The caches mirror the API, so killed at any
point, a new operator converges from what the API says. An API error on one object is confined to it (its own
backoff, :mod:`lyra.operator.isolation`); errors that are not one object's (the API server unreachable, 401, 429)
end a pass, and the next one is retried with exponential backoff.

With ``dry_run`` the loop decides and reports (log lines, one per new plan) and writes nothing.

Each pass feeds the metrics (:mod:`lyra.operator.metrics`: gauges from the World it observed, counters from the
actions it applied, the duration of each phase) and the health endpoints (:mod:`lyra.operator.endpoints`), served
on ``http_port``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client

from lyra import __version__
from lyra.api import names
from lyra.apiserver_failures import describe_api_failure
from lyra.core.gpus import MemoryDisagreement
from lyra.operator import heap
from lyra.operator.actions import ApplyDeployment, ApplyDisruptionBudget, Decision, PatchStatus, SetNodeState
from lyra.operator.api_errors import count_api_errors, count_write_errors
from lyra.operator.caches import WATCH_LAYERS, ClusterCaches, PassCaches
from lyra.operator.commit import Cluster
from lyra.operator.config import LoopSettings
from lyra.operator.decide import OperatorConfig, decide, observed_gpus
from lyra.operator.endpoints import Health, serve
from lyra.operator.leader import LeaderLease, LeadershipLostError, LeaseTiming, lease_client
from lyra.operator.metrics import COMMIT, DECIDE, FAILED, OBSERVE, SUCCEEDED, OperatorMetrics, applied_counts
from lyra.operator.timestamps import format_time
from lyra.operator.world import World

log = logging.getLogger("lyra.operator")

MIN_PASS_INTERVAL_S = 0.25
MAX_BACKOFF_S = 30.0
SYNC_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class RunOptions:
    config: OperatorConfig
    dry_run: bool = False
    resync_s: float = LoopSettings().resync_s
    lease_namespace: str = "default"
    lease_duration_s: float = LoopSettings().lease_duration_s
    renew_deadline_s: float | None = None  # None: client-go's proportion of the lease duration
    retry_period_s: float | None = None

    @property
    def lease_timing(self) -> LeaseTiming:
        return LeaseTiming.from_duration(self.lease_duration_s, self.renew_deadline_s, self.retry_period_s)

    http_address: str = ""  # all interfaces
    http_port: int = 0  # 0: no metrics or health endpoints
    debug_endpoints: bool = False  # also /debug/caches on http_port
    watch_layer: str = "kubewatch"  # or "kopf" (lyra.operator.caches.WATCH_LAYERS)

    @property
    def liveness_window_s(self) -> float:
        """A loop that has not finished a pass (or a standby check) for this long is not alive: a few resyncs, and
        more than the longest backoff between failed passes."""
        return max(3 * self.resync_s, 2 * MAX_BACKOFF_S)


def describe(decision: Decision) -> list[str]:
    """One line per action, for logs and ``--dry-run`` reports."""
    lines = []
    for action in decision.actions:
        if isinstance(action, SetNodeState):
            lines.append(f"node {action.node}: {action.state.value} ({action.reason})")
        elif isinstance(action, PatchStatus):
            lines.append(f"status of {action.ref.kind} {action.ref.key}: {', '.join(action.changed)}")
        elif isinstance(action, ApplyDeployment):
            what = "create" if action.create else "pod template and replicas" if action.roll else "replicas"
            replicas = action.manifest["spec"]["replicas"]
            lines.append(f"ApplyDeployment {action.ref.kind} {action.ref.key} {what} ({replicas} replicas)")
        elif isinstance(action, ApplyDisruptionBudget):
            what = f"maxUnavailable {action.max_unavailable}" if action.manifest is not None else "delete"
            lines.append(f"ApplyDisruptionBudget {action.ref.kind} {action.ref.key} {what}")
        else:
            detail = getattr(action, "reason", "")
            message = getattr(action, "message", "")
            lines.append(f"{type(action).__name__} {action.ref.kind} {action.ref.key} {detail} {message}".rstrip())
    return lines


def action_kinds(decision: Decision) -> str:
    """What a decision holds, by kind, for the pass's log line: ``2 PatchStatus, 1 CreatePod`` (in the decision's
    order of first appearance)."""
    kinds = Counter(type(action).__name__ for action in decision.actions)
    return ", ".join(f"{count} {kind}" for kind, count in kinds.items())


class Reconciler:
    def __init__(
        self,
        cluster: Cluster,
        options: RunOptions,
        clock: Callable[[], float] = time.time,
        lease: LeaderLease | None = None,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.options = options
        self.clock = clock
        self.lease = lease
        self.metrics = metrics or OperatorMetrics()
        if lease is not None:
            self.metrics.follow(lease.may_write)  # between passes, the fence says whether this operator leads
        self.health = Health(options.liveness_window_s)
        self.wake = asyncio.Event()
        self.passes = 0
        #: Called once, after the first pass that completes (:func:`lyra.operator.heap.freeze_survivors`).
        self.after_first_pass: Callable[[], None] | None = None
        self._last_report: list[str] | None = None
        #: Shadow mode: the last pass's plan, as ``/plan`` serves it (``lyra status --shadow``); None before a pass.
        self.proposal: dict[str, object] | None = None
        #: When the next pass is due without an event, as the last pass that committed left it (None: at the resync;
        #: an operator standing by, or a shadow, retries nothing).
        self.retry_due: float | None = None
        self._memory_disagreements: set[MemoryDisagreement] = set()

    def pass_once(self) -> Decision:
        """Observe, decide and (unless dry-run) commit, once. Blocking: runs in a worker thread."""
        now = self.clock()
        lease = self.lease
        self.retry_due = None
        if lease is not None and not self.options.dry_run and not (lease.may_write() or lease.try_lead()):
            self.metrics.standing_by()
            caches = self.cluster.caches
            if caches is not None and caches.synced:
                self.metrics.zero_gpu_types(caches.node_kinds())  # counted from zero if this standby takes over
            return Decision(())  # another operator leads; shadow mode needs no lease (it writes nothing)
        started = time.perf_counter()
        world = self.cluster.observe(now)
        observed = time.perf_counter()
        self.metrics.phase_took(OBSERVE, observed - started)
        failures = self.cluster.backoff.failures()
        if self.options.dry_run:
            for item in world.unreadable:
                log.warning("skipped %s %s: %s", item.ref.kind, item.ref.key, item.reason)
        else:
            self.cluster.report_left_out(world, now)  # logs them too, and posts an Event on each node left out
        self.report_memory_disagreements(world)
        decision = decide(world, self.options.config, failures)
        decided = time.perf_counter()
        self.metrics.phase_took(DECIDE, decided - observed)
        self.passes += 1
        lines = describe(decision)
        if self.options.dry_run:
            self.metrics.standing_by()  # a shadow exports no state: it would count the leader's servers twice
            self.metrics.pass_ended(SUCCEEDED)
            self.proposal = {
                "dryRun": True,
                "decidedAt": format_time(now),
                "pass": self.passes,
                "actions": lines,
                "summary": decision.report.as_json(),
            }
            if lines != self._last_report:
                log.info("dry run: would apply %d actions: %s", len(lines), json.dumps(decision.report.as_json()))
                for line in lines:
                    log.info("dry run: %s", line)
                self._last_report = lines
            return decision
        self.metrics.leading(world)
        # Applied even when empty: the commit also ends the backoff of objects whose retry time has come with nothing
        # left to retry (a status write that failed, then found the status as wanted). Without it their statuses
        # would report the failure until some other write of theirs came due.
        outcome = self.cluster.apply(decision, now, world)
        # A pass that ended a backoff is followed at once: that object's status stops reporting the failure.
        self.retry_due = now if outcome.settled else self.cluster.backoff.next_retry()
        if decision.actions:
            deadline = self.options.config.reclaim_deadline_s
            self.metrics.count(applied_counts(world, decision, outcome.results, reclaim_deadline_s=deadline))
            log.info(
                "pass %d: applied %d of %d actions (%d refused, %d held back, %d skipped): %s",
                self.passes,
                outcome.applied,
                len(decision.actions),
                outcome.failed,
                outcome.held,
                outcome.skipped,
                action_kinds(decision),
            )
        self.metrics.phase_took(COMMIT, time.perf_counter() - decided)
        self.metrics.pass_ended(SUCCEEDED)
        return decision

    def report_memory_disagreements(self, world: World) -> None:
        """Warn once per GPU type and values where nodes' ``nvidia.com/gpu.memory`` disagrees with the catalogue."""
        for disagreement in observed_gpus(world, self.options.config.gpus)[1]:
            if disagreement not in self._memory_disagreements:
                self._memory_disagreements.add(disagreement)
                log.warning(
                    "GPU type %s: nodes report %.1f GiB per GPU (%s), the GPU catalogue says %.1f GiB; the catalogue "
                    "wins",
                    disagreement.gpu_type,
                    disagreement.reported_gib,
                    names.GPU_MEMORY_LABEL,
                    disagreement.catalog_gib,
                )

    async def wait_synced(self, stop: asyncio.Event) -> None:
        """Until every cache has listed once: no pass, and not ready (the loop is alive, it beats)."""
        caches = self.cluster.caches
        while caches is not None and not stop.is_set():
            if await asyncio.to_thread(caches.wait_synced, SYNC_POLL_S):
                return
            self.health.beat(synced=False, problem="the watch caches have not listed every kind once yet")

    async def run(self, stop: asyncio.Event) -> None:
        await self.wait_synced(stop)
        backoff = 1.0
        after_first_pass = self.after_first_pass
        while not stop.is_set():
            started = time.monotonic()
            # Cleared before the pass reads the caches, never after: a change that arrives while the pass runs (a
            # pod the pass created turning Running) must wake the next pass, not wait for the resync.
            self.wake.clear()
            try:
                await asyncio.to_thread(self.pass_once)
                self.health.beat(synced=True)
                backoff = 1.0
                timeout = self.next_pass_in()
                if after_first_pass is not None:
                    after_first_pass()
                    after_first_pass = None
            except LeadershipLostError as error:  # the fence closed mid-pass: nothing more is written
                self.metrics.pass_ended(FAILED)
                self.health.beat(synced=True)
                log.warning("%s; standing by", error)
                timeout = self.options.resync_s
            except Exception as error:  # any failure ends the pass; the next reads afresh
                self.metrics.pass_ended(FAILED)
                why = describe_api_failure(error, self.cluster.server)
                self.health.beat(synced=False, problem=f"the last pass failed: {why}")
                log.warning("pass failed (%s); retrying in %.0f s", why, backoff)
                timeout = backoff
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(self.wake, stop), timeout=timeout)
            rest = MIN_PASS_INTERVAL_S - (time.monotonic() - started)
            if rest > 0 and not stop.is_set():
                await asyncio.sleep(rest)  # coalesce a burst of events into one pass

    def next_pass_in(self) -> float:
        """Seconds until the next pass is due without an event: the resync, or sooner when a held object's retry
        comes due (a server error is retried after 1 s, not at the next resync), or at once when the last pass ended
        an object's backoff (its status stops reporting the failure). An operator that stands by, or a shadow, waits
        for the resync: it retries nothing."""
        if self.retry_due is None:
            return self.options.resync_s
        return min(self.options.resync_s, max(0.0, self.retry_due - self.clock()))

    async def keep_lease(self, stop: asyncio.Event) -> None:
        """Renew (or try for) the Lease every retry period, apart from the passes, so a long pass does not let it
        lapse; a pass that begins to lead is started at once."""
        lease = self.lease
        if lease is None or self.options.dry_run:
            return
        while not stop.is_set():
            was_leading = lease.may_write()
            try:
                leading = await asyncio.to_thread(lease.try_lead)
            except Exception as error:  # the API server unreachable: the renew deadline decides
                log.warning("the lease: %s", describe_api_failure(error, self.cluster.server))
                leading = lease.may_write()
            if leading and not was_leading:
                self.wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=lease.timing.retry_period_s)


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def watch_layer(name: str, api: client.ApiClient) -> PassCaches:
    """The watch layer called ``name`` (one of :data:`WATCH_LAYERS`) on the API server ``api`` talks to."""
    if name == "kopf":
        # Imported here: kopf (and aiohttp) load only in an operator that runs on them, and it is no dependency of the
        # kubewatch caches.
        from lyra.operator.kopf_caches import KopfCaches  # noqa: PLC0415

        return KopfCaches(api.configuration)
    if name != "kubewatch":
        raise ValueError(f"no watch layer {name!r} (one of {', '.join(WATCH_LAYERS)})")
    return ClusterCaches.on_api(api)


def leader_lease(cluster: Cluster, options: RunOptions) -> LeaderLease:
    """The operator's Lease, on a client of its own (the Lease's writes are the renewals, never fenced), with the
    fence installed on the cluster's client. Every write of both names the lease identity in its user agent, so
    the API server's audit log tells which operator wrote what (and that a fenced one wrote nothing)."""
    lease = LeaderLease(lease_client(cluster.api.configuration), options.lease_namespace, timing=options.lease_timing)
    agent = f"{names.OPERATOR_NAME}/{__version__} ({lease.identity})"
    cluster.api.user_agent = agent
    lease.api.user_agent = agent
    cluster.fence = lease.may_write
    lease.on_lead = cluster.reconnect
    return lease


def run_operator(cluster: Cluster, options: RunOptions) -> None:
    """Run until SIGINT/SIGTERM: the watch caches, the reconcile loop and the Lease's loop."""
    lease = leader_lease(cluster, options)
    reconciler = Reconciler(cluster, options, lease=lease)
    for api in (cluster.api, lease.api):  # the writes and the watch caches' client; the Lease's
        count_api_errors(api, reconciler.metrics.api_error)
    count_write_errors(cluster.writes, reconciler.metrics.api_error)
    reconciler.after_first_pass = heap.freeze_survivors  # the caches and the first readings: long-lived
    caches = cluster.caches or watch_layer(options.watch_layer, cluster.api)
    cluster.caches = caches
    reconciler.metrics.watch(caches.caches)
    debug = caches.versions if options.debug_endpoints else None
    server = (
        serve(
            options.http_address,
            options.http_port,
            reconciler.metrics,
            reconciler.health,
            debug,
            plan=(lambda: reconciler.proposal) if options.dry_run else None,
        )
        if options.http_port
        else None
    )  # bound before anything starts: a port in use is a ListenError, with nothing to undo
    heap.tune_collector()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)

        def wake() -> None:  # from a cache's thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: the operator is stopping
                loop.call_soon_threadsafe(reconciler.wake.set)

        caches.on_change = wake
        caches.start()
        loop_task = asyncio.create_task(reconciler.run(stop))
        lease_task = asyncio.create_task(reconciler.keep_lease(stop))
        await stop.wait()
        # A pass under way finishes first: it is never cut between two writes.
        await asyncio.gather(loop_task, lease_task, return_exceptions=True)

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        lease.release()  # the Lease names no holder: nobody reads it as a live leader's
        if server is not None:
            server.shutdown()
            server.server_close()
        caches.stop()  # the watch threads are daemons: a stream slow to close does not hold the exit up
        log.info("stopped")
