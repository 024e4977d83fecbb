"""The operator's Prometheus metrics: what it sees (gauges from the observed World) and what it did (counters and
histograms from the actions a pass applied, never from what it only planned).

:data:`METRICS` is the one list of them (names, types, labels, help); docs/operations.md's metrics reference is
generated from it (``python -m lyra.operator.metrics``) and a unit test keeps the two in agreement.

Only the leader exports state gauges: a standby replica (one that does not hold the Lease) exports ``lyra_leader 0``
and ``lyra_build_info``, and its counters count only what it applied while it led, so sums over replicas never count
twice. Labels never name a node, a job or a pod: GPU types, states, phases, reasons and outcomes only.

The derivations (:func:`state_gauges`, :func:`applied_counts`) are pure functions of the World, the Decision and what
became of each action (:attr:`lyra.operator.commit.Outcome.results`); :class:`OperatorMetrics` exports them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge
from prometheus_client import Histogram as PromHistogram
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lyra import __version__
from lyra.api import conditions, names
from lyra.api.resources import JobPhase, TrainingJobStatus
from lyra.core.model import LoanState, Pool
from lyra.core.placement import PodRole
from lyra.exposition import exporter_registry
from lyra.operator import api_errors
from lyra.operator.actions import Decision, DeletePod, PatchStatus, SetNodeState
from lyra.operator.commit import APPLIED
from lyra.operator.timestamps import parse_time
from lyra.operator.world import World

GAUGE, COUNTER, HISTOGRAM = "gauge", "counter", "histogram"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric as exposed (a counter's name ends in ``_total``). ``state``: a state gauge, exported by the leader
    only."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    state: bool = False


SERVERS = MetricSpec(
    "lyra_servers",
    GAUGE,
    "GPU servers in Lyra's pools by state (serving, idle, loaned, reclaiming; training for the training pool; "
    "unlabelled for an inference server the operator has not labelled yet) and GPU type",
    ("state", "gpu_type"),
    state=True,
)
GPUS = MetricSpec(
    "lyra_gpus",
    GAUGE,
    "GPUs of the servers in Lyra's pools by server state and GPU type",
    ("state", "gpu_type"),
    state=True,
)
SERVERS_OUT_OF_SERVICE = MetricSpec(
    "lyra_servers_out_of_service",
    GAUGE,
    "GPU servers in Lyra's pools that take no new work, by reason (cordoned: kubectl cordon or drain; unhealthy: "
    "NotReady, not heard from, GPUs gone or misread; a server that is both counts as unhealthy) and GPU type. "
    "Their workers and replicas stay; their free GPUs are held",
    ("reason", "gpu_type"),
    state=True,
)
TRAINING_JOBS = MetricSpec("lyra_training_jobs", GAUGE, "TrainingJobs by phase", ("phase",), state=True)
TRAINING_WORKERS = MetricSpec(
    "lyra_training_workers",
    GAUGE,
    "Live training workers (not terminating, not finished) by role (base, flexible) and their job's GPU type",
    ("role", "gpu_type"),
    state=True,
)
LOANS = MetricSpec("lyra_loans_total", COUNTER, "Inference servers lent to training", ("gpu_type",))
RECLAIMS = MetricSpec(
    "lyra_reclaims_total",
    COUNTER,
    "Reclaims completed (the server serves inference again), by outcome: drained (training work left within the "
    "reclaim deadline) or forced (it outlived the deadline, and what remained was deleted without grace)",
    ("gpu_type", "outcome"),
)
RECLAIM_DURATION = MetricSpec(
    "lyra_reclaim_duration_seconds",
    HISTOGRAM,
    "Time from a reclaim's start to its server serving inference again",
    ("gpu_type",),
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 180, 300, 600, 1200),
)
INFERENCE_RECLAIM_WAIT = MetricSpec(
    "lyra_inference_reclaim_wait_seconds",
    HISTOGRAM,
    "Time from a reclaim's start to every replica that needed its servers running (the ReclaimServed Event)",
    ("gpu_type",),
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
)
PREEMPTIONS = MetricSpec(
    "lyra_preemptions_total",
    COUNTER,
    "TrainingJobs preempted (stopped and re-queued), by reason: reclaim (its servers went back to inference), "
    "allocation (its GPUs went to other jobs), lost_base (base workers were lost), node_lost (its workers' node was "
    "lost), disruption (Kubernetes evicted or disrupted its workers)",
    ("reason",),
)
SCALED_IN_WORKERS = MetricSpec(
    "lyra_workers_scaled_in_total",
    COUNTER,
    "Flexible training workers a running job lost by a scale-in, by GPU type and cause: deleted (Lyra deleted them: "
    "a reclaim or a smaller allocation) or disruption (Kubernetes took them: evicted or disrupted, or gone from a "
    "node that takes no new work)",
    ("gpu_type", "cause"),
)
QUEUE_WAIT = MetricSpec(
    "lyra_training_job_queue_wait_seconds",
    HISTOGRAM,
    "Time a TrainingJob waited in the queue before it started (each start, including after a preemption)",
    buckets=(1, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400),
)
PASSES = MetricSpec(
    "lyra_reconcile_passes_total",
    COUNTER,
    "Reconcile passes, by result: succeeded (a pass while leading, or in dry-run), or failed (an error that is no "
    "single object's ended it or the Lease check: the API server unreachable, 401, 429)",
    ("result",),
)
PASS_DURATION = MetricSpec(
    "lyra_reconcile_pass_duration_seconds",
    HISTOGRAM,
    "Duration of each phase of a pass: observe (list and read), decide, commit (apply the actions)",
    ("phase",),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
ACTIONS = MetricSpec(
    "lyra_actions_total",
    COUNTER,
    "Actions a pass committed, by kind (SetNodeState, PatchStatus, DeletePod, SetPodRole, SetDeletionCost, "
    "CreatePod, CreateService, ApplyDeployment, ApplyDisruptionBudget, Emit) and outcome (applied, refused, "
    "deferred, held, skipped)",
    ("kind", "outcome"),
)
WATCH_LISTS = MetricSpec(
    "lyra_watch_lists_total",
    COUNTER,
    "Full LISTs each watch cache made, by cache: the first, and one after each 410 Gone (a watch that fell too far "
    "behind the API server); a steady climb means watches keep expiring",
    ("cache",),
)
WATCH_ERRORS = MetricSpec(
    "lyra_watch_errors_total",
    COUNTER,
    "Errors that ended a watch cache's LIST or watch, by cache (the network, the API server, 410 Gone); each is "
    "retried with backoff, resuming from the last version seen",
    ("cache",),
)
WATCH_EVENTS = MetricSpec(
    "lyra_watch_events_total",
    COUNTER,
    "Watch events each cache applied (bookmarks included), by cache",
    ("cache",),
)
API_ERRORS = MetricSpec(
    "lyra_api_errors_total",
    COUNTER,
    "Requests to the API server that it refused (by status code) or that got no answer (code network), by "
    "Kubernetes verb (get, list, watch, create, update, patch, delete): the operator's writes, its watch caches' "
    "lists and watches, its Lease's reads and renewals; every verb and known code from zero. 404 and 409 are "
    "routine (an object gone or changed since it was read); 401, 403, 429, 5xx and network are not",
    ("verb", "code"),
)
LEADER = MetricSpec("lyra_leader", GAUGE, "1 while this operator holds the leader Lease and acts, else 0")
BUILD_INFO = MetricSpec("lyra_build_info", GAUGE, "Always 1; the operator's version as a label", ("version",))

#: Every metric of the operator, in the order of the documentation.
METRICS: tuple[MetricSpec, ...] = (
    SERVERS,
    GPUS,
    SERVERS_OUT_OF_SERVICE,
    LOANS,
    RECLAIMS,
    RECLAIM_DURATION,
    INFERENCE_RECLAIM_WAIT,
    PREEMPTIONS,
    SCALED_IN_WORKERS,
    TRAINING_JOBS,
    TRAINING_WORKERS,
    QUEUE_WAIT,
    PASSES,
    PASS_DURATION,
    ACTIONS,
    WATCH_LISTS,
    WATCH_ERRORS,
    WATCH_EVENTS,
    API_ERRORS,
    LEADER,
    BUILD_INFO,
)

#: Label values spelled once.
TRAINING_STATE, UNLABELLED_STATE = "training", "unlabelled"
CORDONED, UNHEALTHY = "cordoned", "unhealthy"
DELETED, DISRUPTION = "deleted", "disruption"
DRAINED, FORCED = "drained", "forced"
SUCCEEDED, FAILED = "succeeded", "failed"
OBSERVE, DECIDE, COMMIT = "observe", "decide", "commit"
BASE_ROLE, FLEXIBLE_ROLE = "base", "flexible"
_ROLES = {PodRole.TRAINING_BASE: BASE_ROLE, PodRole.TRAINING_FLEXIBLE: FLEXIBLE_ROLE}
_RETURNED = (LoanState.SERVING, LoanState.IDLE)
_LENT = (LoanState.LOANED, LoanState.RECLAIMING)


# -- derivations (pure) ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateGauges:
    """What the leader sees, from one observed World. Keys are label values in the order of the metric's labels."""

    servers: Mapping[tuple[str, ...], int]
    gpus: Mapping[tuple[str, ...], int]
    out_of_service: Mapping[tuple[str, ...], int]
    jobs: Mapping[tuple[str, ...], int]
    workers: Mapping[tuple[str, ...], int]


def state_gauges(world: World) -> StateGauges:
    """Servers and GPUs by state and GPU type (every loan state of every inference GPU type, zero or not), servers
    out of service by reason and GPU type (both reasons of every GPU type, zero or not), jobs by phase (every phase),
    live workers by role and GPU type."""
    servers: Counter[tuple[str, ...]] = Counter()
    gpus: Counter[tuple[str, ...]] = Counter()
    out_of_service: Counter[tuple[str, ...]] = Counter()
    for node in world.nodes:
        for reason in (CORDONED, UNHEALTHY):
            out_of_service[(reason, node.gpu_type)] += 0
        if not node.healthy:
            out_of_service[(UNHEALTHY, node.gpu_type)] += 1
        elif node.unschedulable:
            out_of_service[(CORDONED, node.gpu_type)] += 1
        if node.pool is Pool.INFERENCE:
            for state in LoanState:
                servers[(state.value, node.gpu_type)] += 0
                gpus[(state.value, node.gpu_type)] += 0
            label = node.state.value if node.state is not None else UNLABELLED_STATE
        else:
            label = TRAINING_STATE
        servers[(label, node.gpu_type)] += 1
        gpus[(label, node.gpu_type)] += node.gpus
    jobs: Counter[tuple[str, ...]] = Counter({(phase.value,): 0 for phase in JobPhase})
    for job in world.jobs:
        jobs[(job.status.phase.value,)] += 1
    job_types = {job.ref.key: job.status.gpu_type for job in world.jobs}
    node_types = {node.name: node.gpu_type for node in world.nodes}
    workers: Counter[tuple[str, ...]] = Counter()
    for pod in world.pods:
        role = _ROLES.get(pod.role)
        if role is None or not pod.is_live:
            continue
        gpu_type = (job_types.get(pod.owner) if pod.owner else None) or node_types.get(pod.node)
        if gpu_type is not None:
            workers[(role, gpu_type)] += 1
    return StateGauges(dict(servers), dict(gpus), dict(out_of_service), dict(jobs), dict(workers))


@dataclass(frozen=True, slots=True)
class AppliedCounts:
    """What one pass applied, as the counters and histograms count it."""

    actions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    loans: Mapping[tuple[str], int] = field(default_factory=dict)
    reclaims: Mapping[tuple[str, str], int] = field(default_factory=dict)
    reclaim_durations: tuple[tuple[str, float], ...] = ()
    inference_waits: tuple[tuple[str, float], ...] = ()
    preemptions: Mapping[tuple[str], int] = field(default_factory=dict)
    scaled_in: Mapping[tuple[str, str], int] = field(default_factory=dict)
    queue_waits: tuple[float, ...] = ()


def applied_counts(
    world: World, decision: Decision, results: Sequence[str], *, reclaim_deadline_s: float
) -> AppliedCounts:
    """Count the actions of ``decision`` that ``results`` (one per action) says were applied.

    * a server is lent when its state is set to loaned; a reclaim completes when a loaned or reclaiming server is
      set to serving or idle (a loaned server with nothing left on it returns in the pass that reclaims it: 0 s),
      forced if it took longer than the reclaim deadline;
    * a job is preempted, or starts after waiting in the queue, when its status saying so is written;
    * a worker is scaled in when its deletion for a scale-in goes through (``deleted``), or, if Kubernetes took it,
      when its job's status counting the scale-in is written (``disruption``);
    * a service's replicas are served when its status, clearing the reclaim it waited for, is written.
    """
    nodes = {node.name: node for node in world.nodes}
    jobs = {job.ref.key: job for job in world.jobs}
    preempted = decision.report.preempted
    disrupted = decision.report.disrupted
    waits = {wait.service: wait for wait in decision.report.reclaim_waits}
    actions: Counter[tuple[str, str]] = Counter()
    loans: Counter[tuple[str]] = Counter()
    reclaims: Counter[tuple[str, str]] = Counter()
    durations: list[tuple[str, float]] = []
    inference_waits: list[tuple[str, float]] = []
    preemptions: Counter[tuple[str]] = Counter()
    scaled_in: Counter[tuple[str, str]] = Counter()
    queue_waits: list[float] = []
    for action, result in zip(decision.actions, results, strict=True):
        actions[(type(action).__name__, result)] += 1
        if result != APPLIED:
            continue
        if isinstance(action, SetNodeState) and action.node in nodes:
            node = nodes[action.node]
            if action.state is LoanState.LOANED and node.state is not LoanState.LOANED:
                loans[(node.gpu_type,)] += 1
            elif action.state in _RETURNED and node.state in _LENT:
                started = node.reclaim_started if node.state is LoanState.RECLAIMING else None
                seconds = max(world.now - started, 0.0) if started is not None else 0.0
                reclaims[(node.gpu_type, FORCED if seconds > reclaim_deadline_s else DRAINED)] += 1
                durations.append((node.gpu_type, seconds))
        elif isinstance(action, PatchStatus) and action.ref.kind == names.TRAINING_JOB_KIND:
            job = jobs.get(action.ref.key)
            if job is None:
                continue
            if action.ref.key in preempted:
                preemptions[(preempted[action.ref.key],)] += 1
            for taken_type, workers in disrupted.get(action.ref.key, {}).items():
                scaled_in[(taken_type, DISRUPTION)] += workers
            status = TrainingJobStatus.model_validate(dict(action.status))
            if job.status.phase is JobPhase.QUEUED and status.phase is JobPhase.RUNNING:
                queued = parse_time(job.status.queued_at) or job.created
                queue_waits.append(max(world.now - queued, 0.0))
        elif isinstance(action, PatchStatus) and action.ref.kind == names.INFERENCE_SERVICE_KIND:
            served = waits.get(action.ref.key)
            if served is not None:
                inference_waits.append((served.gpu_type, served.seconds))
        elif isinstance(action, DeletePod) and action.reason == conditions.SCALED_IN:
            deleted_type = _gpu_type_of(action, jobs, nodes)
            if deleted_type is not None:
                scaled_in[(deleted_type, DELETED)] += 1
    return AppliedCounts(
        dict(actions),
        dict(loans),
        dict(reclaims),
        tuple(durations),
        tuple(inference_waits),
        dict(preemptions),
        dict(scaled_in),
        tuple(queue_waits),
    )


def _gpu_type_of(action: DeletePod, jobs: Mapping[str, Any], nodes: Mapping[str, Any]) -> str | None:
    """The GPU type of a deleted worker: its node's, or (unbound) its job's."""
    if action.node in nodes:
        return str(nodes[action.node].gpu_type)
    job = jobs.get(action.owner.key) if action.owner is not None else None
    return job.status.gpu_type if job is not None else None


# -- export ----------------------------------------------------------------------------------------------------------


class _StateCollector(Collector):
    """The state gauges of the last World the leader observed; nothing while standing by (``acts`` false at the
    scrape). Swapped whole, so a scrape never sees half of one pass and half of the next."""

    def __init__(self, acts: Callable[[], bool]) -> None:
        self.gauges: StateGauges | None = None
        self.acts = acts

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(spec.name, spec.help, labels=spec.labels) for spec in _STATE_SPECS]

    def collect(self) -> Iterator[Metric]:
        gauges = self.gauges
        if gauges is None or not self.acts():
            return
        tables: tuple[Mapping[tuple[str, ...], int], ...] = (
            gauges.servers,
            gauges.gpus,
            gauges.out_of_service,
            gauges.jobs,
            gauges.workers,
        )
        for spec, values in zip(_STATE_SPECS, tables, strict=True):
            family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            for labels, value in sorted(values.items()):
                family.add_metric(list(labels), value)
            yield family


_STATE_SPECS = (SERVERS, GPUS, SERVERS_OUT_OF_SERVICE, TRAINING_JOBS, TRAINING_WORKERS)


class WatchCounts(Protocol):
    """What a watch cache counts (:class:`lyra.kubewatch.cache.WatchCache`)."""

    lists: int
    errors: int
    events: int


class _WatchCollector(Collector):
    """The watch caches' own counts, read at each scrape (every replica: a standby watches too)."""

    def __init__(self) -> None:
        self.caches: Mapping[str, WatchCounts] = {}

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels) for spec in _WATCH]

    def collect(self) -> Iterator[Metric]:
        caches = dict(self.caches)
        counts = {name: (cache.lists, cache.errors, cache.events) for name, cache in caches.items()}
        for index, spec in enumerate(_WATCH):
            family = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
            for name in sorted(counts):
                family.add_metric([name], counts[name][index])
            yield family


_WATCH = (WATCH_LISTS, WATCH_ERRORS, WATCH_EVENTS)


class OperatorMetrics:
    """The operator's metrics in their own registry (:meth:`exposition` is what ``/metrics`` serves)."""

    def __init__(self, version: str = __version__) -> None:
        self.registry = exporter_registry()
        self._lock = threading.Lock()
        self._acting = False
        self._may_write: Callable[[], bool] = lambda: True
        self._state = _StateCollector(self.acts)
        self.registry.register(self._state)
        self._watches = _WatchCollector()
        self.registry.register(self._watches)
        self._counters = {
            spec.name: PromCounter(spec.name.removesuffix("_total"), spec.help, spec.labels, registry=self.registry)
            for spec in METRICS
            if spec.kind == COUNTER and spec not in _WATCH  # the caches count those themselves
        }
        self._histograms = {
            spec.name: PromHistogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=self.registry)
            for spec in METRICS
            if spec.kind == HISTOGRAM
        }
        self._zeroed: set[tuple[str, Pool]] = set()
        for reason in conditions.PreemptionCause:
            self._counters[PREEMPTIONS.name].labels(reason.value)
        for result in (SUCCEEDED, FAILED):
            self._counters[PASSES.name].labels(result)
        for verb in api_errors.VERBS:
            for code in api_errors.CODES:
                self._counters[API_ERRORS.name].labels(verb, code)
        for phase in (OBSERVE, DECIDE, COMMIT):
            self._histograms[PASS_DURATION.name].labels(phase)
        self._leader = PromGauge(LEADER.name, LEADER.help, registry=self.registry)
        self._leader.set_function(lambda: 1.0 if self.acts() else 0.0)
        PromGauge(BUILD_INFO.name, BUILD_INFO.help, BUILD_INFO.labels, registry=self.registry).labels(version).set(1)

    def watch(self, caches: Mapping[str, WatchCounts]) -> None:
        """Export the counts of these watch caches (by cache name)."""
        self._watches.caches = caches

    def follow(self, may_write: Callable[[], bool]) -> None:
        """Between passes, leadership is what the Lease's fence says at the scrape
        (:meth:`lyra.operator.leader.LeaderLease.may_write`): an operator whose renewals lapse stops exporting state
        at once, not at its next pass."""
        self._may_write = may_write

    def acts(self) -> bool:
        """This operator's last pass led (not a standby's check, not a shadow's), and the fence is still open."""
        return self._acting and self._may_write()

    def leading(self, world: World) -> None:
        """This operator leads and observed ``world``."""
        self._state.gauges = state_gauges(world)
        self.zero_gpu_types({(node.gpu_type, node.pool) for node in world.nodes})
        self._acting = True

    def zero_gpu_types(self, kinds: Iterable[tuple[str, Pool]]) -> None:
        """Each GPU type's counters and histograms exist, at zero, from the first pass that sees the type (the
        reasons, results and phases from the start), a standby's included (from its node cache), so a standby that
        takes the Lease over counts its first pass in series Prometheus has already seen at zero: ``rate()`` and
        ``increase()`` see no increase in a series that first appears already counting, so without this a type's
        first reclaim would never show. ``kinds``: (GPU type, pool) pairs."""
        for gpu_type, pool in sorted(set(kinds) - self._zeroed):
            for cause in (DELETED, DISRUPTION):
                self._counters[SCALED_IN_WORKERS.name].labels(gpu_type, cause)
            if pool is Pool.INFERENCE:
                self._counters[LOANS.name].labels(gpu_type)
                for outcome in (DRAINED, FORCED):
                    self._counters[RECLAIMS.name].labels(gpu_type, outcome)
                for spec in (RECLAIM_DURATION, INFERENCE_RECLAIM_WAIT):
                    self._histograms[spec.name].labels(gpu_type)
            self._zeroed.add((gpu_type, pool))

    def standing_by(self) -> None:
        """This operator does not lead (or only shadows): no state gauges."""
        self._acting = False
        self._state.gauges = None

    def count(self, counts: AppliedCounts) -> None:
        with self._lock:
            for spec, values in (
                (ACTIONS, counts.actions),
                (LOANS, counts.loans),
                (RECLAIMS, counts.reclaims),
                (PREEMPTIONS, counts.preemptions),
                (SCALED_IN_WORKERS, counts.scaled_in),
            ):
                for labels, amount in values.items():
                    self._counters[spec.name].labels(*labels).inc(amount)
            for spec, samples in (
                (RECLAIM_DURATION, counts.reclaim_durations),
                (INFERENCE_RECLAIM_WAIT, counts.inference_waits),
            ):
                for gpu_type, seconds in samples:
                    self._histograms[spec.name].labels(gpu_type).observe(seconds)
            for seconds in counts.queue_waits:
                self._histograms[QUEUE_WAIT.name].observe(seconds)

    def phase_took(self, phase: str, seconds: float) -> None:
        self._histograms[PASS_DURATION.name].labels(phase).observe(seconds)

    def api_error(self, verb: str, code: str) -> None:
        """The API server refused a request (``code``: its status) or it got no answer (``network``)."""
        self._counters[API_ERRORS.name].labels(verb, code).inc()

    def pass_ended(self, result: str) -> None:
        self._counters[PASSES.name].labels(result).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


# -- documentation ---------------------------------------------------------------------------------------------------

REFERENCE_BEGIN = "<!-- metrics reference: generated by `python -m lyra.operator.metrics`; do not edit -->"
REFERENCE_END = "<!-- end of the metrics reference -->"


def reference() -> str:
    """The metrics reference of docs/operations.md (a Markdown table), from :data:`METRICS`."""
    lines = [
        REFERENCE_BEGIN,
        "",
        "| metric | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for spec in METRICS:
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "none"
        kind = spec.kind + (" (leader only)" if spec.state else "")
        lines.append(f"| `{spec.name}` | {kind} | {labels} | {spec.help} |")
    lines += ["", REFERENCE_END]
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference())
