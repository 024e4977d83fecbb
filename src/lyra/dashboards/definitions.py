"""Lyra's Grafana dashboards as code: *Loans*, *Training* and *Internals* (:data:`DASHBOARDS`), in the typed model of
:mod:`lyra.dashboards.grafana`.

Every query is built here from the metric definitions the code exports (:mod:`lyra.operator.metrics`' specs, the
extender's metric names), never from retyped names, and every label it groups or selects by is checked against its
metric's labels when the module loads. The same dashboards are written to ``dashboards/*.json`` (to import into
Grafana) and into the chart as ConfigMaps for Grafana's dashboard sidecar, by the chart's generator
(:mod:`lyra.chart.dashboard_files`), and plotted by ``lyra report``; this module is what runs, that one what builds.

Every series is selected by the dashboard's variables, :data:`VARIABLES` (the cluster, the release's namespace and the
scrape job; "All" by default), so one Grafana tells several clusters and releases apart. Rates and quantiles over
recent data use Grafana's ``$__rate_interval``; the hourly panels say "per hour" and keep ``[1h]``. ``lyra report`` and
the tests ask Prometheus directly, with :func:`lyra.dashboards.grafana.concrete` (5m, each variable "All" or chosen).
"""

from __future__ import annotations

from lyra.core.model import LoanState
from lyra.dashboards.grafana import (
    COUNT,
    PER_HOUR,
    PER_SECOND,
    RATE_INTERVAL,
    SECONDS,
    ColorStep,
    Dashboard,
    HelmValue,
    Panel,
    PanelKind,
    Query,
    Threshold,
    Variable,
)
from lyra.extender.app import REQUEST_SECONDS_METRIC, REQUESTS_METRIC
from lyra.operator import metrics
from lyra.operator.config import OperatorConfig
from lyra.operator.metrics import HISTOGRAM, MetricSpec

RATE_WINDOW = RATE_INTERVAL
HOUR = "1h"
#: Labels every scraped series carries: Prometheus' own (instance, job), the namespace Kubernetes' service discovery
#: adds, and the cluster a multi-cluster Prometheus (or its external labels) adds.
_TARGET_LABELS = ("instance", "job", "namespace", "cluster")
#: Every dashboard's variables, each narrowing the next: cluster, then namespace (one per release), then scrape job.
#: Their values come from ``lyra_build_info`` (every replica of the operator exports it) and the extender's request
#: counter (created at its start).
CLUSTER = Variable("cluster", "cluster", "Cluster", "lyra_build_info")
NAMESPACE = Variable("namespace", "namespace", "Namespace", "lyra_build_info", narrowed_by=("cluster",))
JOB = Variable(
    "job",
    "job",
    "Job",
    '{__name__=~"lyra_build_info|lyra_extender_requests_total"}',
    narrowed_by=("cluster", "namespace"),
)
VARIABLES = (CLUSTER, NAMESPACE, JOB)
_EXTENDER_REQUESTS = MetricSpec(REQUESTS_METRIC, metrics.COUNTER, "extender requests", ("verb", "outcome"))
_EXTENDER_SECONDS = MetricSpec(REQUEST_SECONDS_METRIC, HISTOGRAM, "extender request time", ("verb",))
#: Servers lent to training, still hosting its work: loaned, and reclaiming until their training work has gone.
LENT_STATES = (LoanState.LOANED, LoanState.RECLAIMING)
#: The chart's value for the operator's --reclaim-deadline, with the operator's default (a test holds the chart's
#: default to it).
RECLAIM_DEADLINE = HelmValue("operator.reclaimDeadlineSeconds", int(OperatorConfig().reclaim_deadline_s))


# -- PromQL, from the metric specs -------------------------------------------------------------------------------------


def _check_labels(spec: MetricSpec, labels: tuple[str, ...] | list[str], *, extra: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(labels) - set(spec.labels) - set(_TARGET_LABELS) - set(extra))
    if unknown:
        raise ValueError(f"{spec.name} has no label {', '.join(unknown)} (its labels: {', '.join(spec.labels)})")


def series(spec: MetricSpec, suffix: str = "", **matchers: str) -> str:
    """``name{<the variables>, label="value", ...}``; a value with ``|`` matches any of its alternatives (``=~``)."""
    _check_labels(spec, list(matchers))
    chosen = [variable.matcher for variable in VARIABLES]
    chosen += [f'{label}{"=~" if "|" in value else "="}"{value}"' for label, value in matchers.items()]
    return f"{spec.name}{suffix}{{{', '.join(chosen)}}}"


def summed(expression: str, spec: MetricSpec, *by: str, extra: tuple[str, ...] = ()) -> str:
    _check_labels(spec, by, extra=extra)
    return f"sum by ({', '.join(by)}) ({expression})" if by else f"sum({expression})"


def increase_per_hour(spec: MetricSpec, *by: str, **matchers: str) -> str:
    return summed(f"increase({series(spec, **matchers)}[{HOUR}])", spec, *by)


def rate(spec: MetricSpec, *by: str, **matchers: str) -> str:
    return summed(f"rate({series(spec, **matchers)}[{RATE_WINDOW}])", spec, *by)


def quantile(q: float, spec: MetricSpec, *by: str, window: str = RATE_WINDOW) -> str:
    """The ``q`` quantile of a histogram over ``window``, per ``by``."""
    if spec.kind != HISTOGRAM:
        raise ValueError(f"{spec.name} is not a histogram")
    buckets = summed(f"rate({series(spec, '_bucket')}[{window}])", spec, "le", *by, extra=("le",))
    return f"histogram_quantile({q}, {buckets})"


def _states(states: tuple[LoanState, ...]) -> str:
    return "|".join(state.value for state in states)


# -- the dashboards --------------------------------------------------------------------------------------------------

LOANS = Dashboard(
    uid="lyra-loans",
    variables=VARIABLES,
    title="Lyra / Loans",
    description="Inference servers lent to training and taken back: how many, how often, how fast, at what cost.",
    panels=(
        Panel(
            "GPUs lent now",
            "GPUs of inference servers lent to training (loaned, or reclaiming while training work leaves them), "
            "per GPU type.",
            (
                Query(
                    summed(series(metrics.GPUS, state=_states(LENT_STATES)), metrics.GPUS, "gpu_type"), "{{gpu_type}}"
                ),
            ),
            COUNT,
            kind=PanelKind.STAT,
            width=6,
        ),
        Panel(
            "Servers by state per GPU type",
            "Servers of Lyra's pools by loan state (serving, idle, loaned, reclaiming; training for the training "
            "pool) and GPU type.",
            (Query(summed(series(metrics.SERVERS), metrics.SERVERS, "gpu_type", "state"), "{{gpu_type}} {{state}}"),),
            COUNT,
            stacked=True,
            width=18,
        ),
        Panel(
            "Servers taking no new work",
            "Servers of Lyra's pools out of service, by reason (cordoned: kubectl cordon or drain; unhealthy: "
            "NotReady, not heard from, GPUs gone or misread) and GPU type. Their workers and replicas stay; nothing "
            "new is placed there, none is lent while idle, and inference short of servers calls a lent one back.",
            (
                Query(
                    summed(
                        series(metrics.SERVERS_OUT_OF_SERVICE), metrics.SERVERS_OUT_OF_SERVICE, "gpu_type", "reason"
                    ),
                    "{{gpu_type}} {{reason}}",
                ),
            ),
            COUNT,
            stacked=True,
            width=24,
        ),
        Panel(
            "Reclaims per hour",
            "Reclaims completed in the last hour, per GPU type and outcome: drained (training work left within the "
            "reclaim deadline) or forced (deleted without grace at the deadline).",
            (Query(increase_per_hour(metrics.RECLAIMS, "gpu_type", "outcome"), "{{gpu_type}} {{outcome}}"),),
            PER_HOUR,
        ),
        Panel(
            "p95 reclaim time against the deadline",
            "95th percentile over the last hour of the time from a reclaim's start to its server serving again, per "
            "GPU type; the dashed line is the operator's reclaim deadline.",
            (Query(quantile(0.95, metrics.RECLAIM_DURATION, "gpu_type", window=HOUR), "{{gpu_type}}"),),
            SECONDS,
            threshold=Threshold(RECLAIM_DEADLINE, "reclaim deadline"),
        ),
        Panel(
            "Preemptions against scale-ins",
            "Per hour: TrainingJobs preempted (stopped and re-queued), by reason, against flexible workers scaled in, "
            "by GPU type and cause (deleted by Lyra, or taken by a disruption). Lyra's reclaim prefers scale-ins.",
            (
                Query(increase_per_hour(metrics.PREEMPTIONS, "reason"), "preempted: {{reason}}"),
                Query(
                    increase_per_hour(metrics.SCALED_IN_WORKERS, "gpu_type", "cause"),
                    "scaled in: {{gpu_type}} ({{cause}})",
                ),
            ),
            PER_HOUR,
        ),
        Panel(
            "p95 inference wait for reclaimed servers",
            "95th percentile over the last hour of the time from a reclaim's start to every replica that needed its "
            "servers running, per GPU type.",
            (Query(quantile(0.95, metrics.INFERENCE_RECLAIM_WAIT, "gpu_type", window=HOUR), "{{gpu_type}}"),),
            SECONDS,
        ),
    ),
)

TRAINING = Dashboard(
    uid="lyra-training",
    variables=VARIABLES,
    title="Lyra / Training",
    description="Elastic TrainingJobs: phases, how long they wait, and their base and flexible workers.",
    panels=(
        Panel(
            "Jobs by phase",
            "TrainingJobs by phase.",
            (Query(summed(series(metrics.TRAINING_JOBS), metrics.TRAINING_JOBS, "phase"), "{{phase}}"),),
            COUNT,
            stacked=True,
        ),
        Panel(
            "p95 queue wait",
            "95th percentile over the last hour of the time a TrainingJob waited in the queue before it started "
            "(each start, including after a preemption).",
            (Query(quantile(0.95, metrics.QUEUE_WAIT, window=HOUR), "p95 queue wait"),),
            SECONDS,
        ),
        Panel(
            "Base and flexible workers per GPU type",
            "Live training workers by role (base: the job's minimum gang; flexible: the elastic extra) and their "
            "job's GPU type.",
            (
                Query(
                    summed(series(metrics.TRAINING_WORKERS), metrics.TRAINING_WORKERS, "gpu_type", "role"),
                    "{{gpu_type}} {{role}}",
                ),
            ),
            COUNT,
            stacked=True,
            width=24,
        ),
    ),
)

INTERNALS = Dashboard(
    uid="lyra-internals",
    variables=VARIABLES,
    title="Lyra / Internals",
    description="The operator's reconcile passes and actions, its leadership, and the scheduler extender.",
    panels=(
        Panel(
            "p95 pass duration by phase",
            "95th percentile over 5 minutes of each phase of a reconcile pass: observe (list and read), decide, "
            "commit (apply the actions).",
            (Query(quantile(0.95, metrics.PASS_DURATION, "phase"), "{{phase}}"),),
            SECONDS,
        ),
        Panel(
            "Passes by result",
            "Reconcile passes per second by result; failed: an error that is no single object's ended the pass (API "
            "server unreachable, 401, 429).",
            (Query(rate(metrics.PASSES, "result"), "{{result}}"),),
            PER_SECOND,
        ),
        Panel(
            "Actions by kind and outcome",
            "Actions per second that passes committed, by kind and outcome (applied, refused, deferred, held, "
            "skipped).",
            (Query(rate(metrics.ACTIONS, "kind", "outcome"), "{{kind}} {{outcome}}"),),
            PER_SECOND,
            width=18,
        ),
        Panel(
            "Leader",
            "Operator replicas holding the leader Lease and acting: exactly 1 when healthy (green), red otherwise.",
            (Query(summed(series(metrics.LEADER), metrics.LEADER), "leading replicas"),),
            COUNT,
            kind=PanelKind.STAT,
            colors=(ColorStep(None, "red"), ColorStep(1, "green"), ColorStep(2, "red")),
            width=6,
        ),
        Panel(
            "API errors by verb and code",
            "Requests per second the API server refused (by status code) or that got no answer (network), by verb: "
            "the operator's writes, its watch caches' lists and watches, its Lease. 404 and 409 are routine; 401, "
            "403, 429, 5xx and network are not (LyraApiErrors).",
            (Query(rate(metrics.API_ERRORS, "verb", "code"), "{{verb}} {{code}}"),),
            PER_SECOND,
            width=24,
        ),
        Panel(
            "Extender requests",
            "Requests per second from kube-scheduler to the extender, by verb and outcome.",
            (Query(rate(_EXTENDER_REQUESTS, "verb", "outcome"), "{{verb}} {{outcome}}"),),
            PER_SECOND,
        ),
        Panel(
            "Extender p99 latency",
            "99th percentile over 5 minutes of the time the extender took to answer, by verb.",
            (Query(quantile(0.99, _EXTENDER_SECONDS, "verb"), "{{verb}}"),),
            SECONDS,
        ),
    ),
)

#: Every dashboard, in the order of the documentation.
DASHBOARDS: tuple[Dashboard, ...] = (LOANS, TRAINING, INTERNALS)
