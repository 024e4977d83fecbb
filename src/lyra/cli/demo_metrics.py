"""The demo's local Prometheus (:class:`lyra.localcluster.prometheus.LocalPrometheus`, one per run): what it scrapes,
and what is read from it after the run, over the run's window: the Grafana dashboards' panels as PNGs (``lyra
report``'s code, :func:`lyra.cli.report_panels.write_report`) and the operator's own counts and durations, shown beside
the same figures read from the cluster (:data:`FIGURES`), and the mean of the operator's passes, which the simulator
charges each decision beside the wait for a pass (:func:`pass_seconds`, :func:`decision_cost`).

The operator's clock is the wall clock; its durations are turned into trace hours (times the speed-up) like the
cluster's. Its counters are read at the end of the run as the largest value each series reached (one operator per run,
so they start at zero with it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lyra.cli.report_panels import PrometheusApi, PrometheusError, Window, write_report
from lyra.dashboards.definitions import DASHBOARDS, RECLAIM_DEADLINE
from lyra.localcluster.ports import LOOPBACK
from lyra.operator import metrics

OPERATOR_JOB, EXTENDER_JOB = "lyra-operator", "lyra-extender"
#: The scrape interval (seconds) and the resolution of the subquery that integrates a gauge over the day.
RESOLUTION_S = 1


def scrape_targets(extender_port: int, operator_port: int) -> dict[str, list[str]]:
    """What the demo's Prometheus scrapes: the operator's and the extender's ``/metrics`` (the emulator has none)."""
    return {OPERATOR_JOB: [f"{LOOPBACK}:{operator_port}"], EXTENDER_JOB: [f"{LOOPBACK}:{extender_port}"]}


@dataclass(frozen=True, slots=True)
class PanelFile:
    """One panel's PNG, with what it showed: series, points with a number, the largest value (None: no data)."""

    file: str
    dashboard: str
    panel: str
    series: int
    points: int
    peak: float | None


def render_panels(
    api: PrometheusApi, out_dir: Path, start: float, end: float, reclaim_deadline_s: float
) -> tuple[list[PanelFile], list[str]]:
    """Every panel of the dashboards over ``start`` to ``end`` (Unix seconds) into ``out_dir``, the reclaim deadline
    the operator ran with drawn on its panel; the files written and the panels that failed (with why)."""
    window = Window.ending(end, end - start)
    plots, failures = write_report(
        api, DASHBOARDS, out_dir, window, lambda _line: None, values={RECLAIM_DEADLINE.path: reclaim_deadline_s}
    )
    files = [
        PanelFile(plot.path.name, plot.dashboard.uid, plot.panel.title, plot.series, plot.points, plot.peak)
        for plot in plots
    ]
    return files, [f"{failure.dashboard.title}: {failure.panel.title}: {failure.message}" for failure in failures]


@dataclass(frozen=True, slots=True)
class Figure:
    """A figure of the run from Prometheus: its label, and the cluster-read figure it stands beside (None: the
    cluster does not read it)."""

    label: str
    beside: str | None


#: The figures read from Prometheus, in the order shown.
FIGURES: Mapping[str, Figure] = {
    "lent_gpu_h": Figure("GPU-hours lent (inference pool)", "lent_gpu_h"),
    "reclaims": Figure("servers reclaimed", "reclaims"),
    "reclaim_mean_h": Figure("reclaim duration mean (h)", "reclaim_mean_h"),
    "preemptions": Figure("preemptions", "preemptions"),
    "workers_scaled_in": Figure("flexible workers scaled in", None),
    "queue_wait_per_start_mean_h": Figure("queue wait per start, mean (h)", None),
    "reclaim_wait_mean_h": Figure("replicas waiting on a reclaim, mean (h)", None),
    "passes": Figure("operator passes", None),
    "pass_mean_ms": Figure("operator pass, mean (ms of wall time)", None),
}


def _total(name: str, span: int) -> str:
    return f"sum(max_over_time({name}[{span}s]))"


def prometheus_figures(
    value_at: Callable[[str, float], float | None],
    *,
    start: float,
    end: float,
    day_wall_s: float,
    speed_up: float,
) -> dict[str, float | None]:
    """:data:`FIGURES` for the run from ``start`` to ``end`` (Unix seconds), the day being its first ``day_wall_s``
    seconds. ``value_at(expression, time)``: the value of a query yielding at most one series at ``time`` (None: no
    series or not a number). GPU-hours lent count the day only (as the cluster's reading and the simulator do);
    a mean with nothing observed is None."""
    span = math.ceil(end - start) + RESOLUTION_S
    day = max(math.ceil(day_wall_s), RESOLUTION_S)

    def total(name: str) -> float:
        return value_at(_total(name, span), end) or 0.0

    def mean_h(histogram: str) -> float | None:
        count = total(f"{histogram}_count")
        return total(f"{histogram}_sum") / count * speed_up / 3600 if count else None

    lent = value_at(
        f'sum_over_time(sum({metrics.GPUS.name}{{state="loaned"}})[{day}s:{RESOLUTION_S}s])',
        start + day,
    )
    # Every pass observes, and a pass's phases add up to it: its mean is all phases' time over the observations.
    passes = value_at(_total(f'{metrics.PASS_DURATION.name}_count{{phase="{metrics.OBSERVE}"}}', span), end) or 0.0
    spent = total(f"{metrics.PASS_DURATION.name}_sum")
    return {
        "lent_gpu_h": (lent or 0.0) * RESOLUTION_S * speed_up / 3600,
        "reclaims": total(metrics.RECLAIMS.name),
        "reclaim_mean_h": mean_h(metrics.RECLAIM_DURATION.name),
        "preemptions": total(metrics.PREEMPTIONS.name),
        "workers_scaled_in": total(metrics.SCALED_IN_WORKERS.name),
        "queue_wait_per_start_mean_h": mean_h(metrics.QUEUE_WAIT.name),
        "reclaim_wait_mean_h": mean_h(metrics.INFERENCE_RECLAIM_WAIT.name),
        "passes": total(metrics.PASSES.name),
        "pass_mean_ms": spent / passes * 1000 if passes else None,
    }


def pass_seconds(measured: Mapping[str, float | None]) -> float | None:
    """The mean of the run's operator passes in wall seconds (None: Prometheus read none)."""
    mean_ms = measured.get("pass_mean_ms")
    return None if mean_ms is None else mean_ms / 1000


def decision_cost(wait_s: float, speed_up: float, measured: Mapping[str, float | None]) -> str:
    """What the simulator charges a decision, in trace seconds: the wait for the next pass (``wait_s``, already in
    trace seconds), and the pass itself as long as the run's passes took on average (:func:`pass_seconds`), or the
    wait alone, said so, when Prometheus read no pass."""
    took = pass_seconds(measured)
    if took is None:
        return (
            f"Prometheus read no pass of the operator's: the simulator charges each decision the wait for the next "
            f"pass alone ({wait_s:.0f} trace s), not the pass itself."
        )
    return (
        f"The simulator charges each decision {wait_s + took * speed_up:.0f} trace s after the change that calls for "
        f"it: the wait for the next pass ({wait_s:.0f}), and the pass itself as long as the operator's "
        f"{measured.get('passes') or 0:.0f} passes took on average ({took * 1000:.0f} ms of wall time, "
        f"{took * speed_up:.0f} trace s)."
    )


def value_at(api: PrometheusApi) -> Callable[[str, float], float | None]:
    """:func:`prometheus_figures`' reader over Prometheus' API: a range of one point is an instant query."""

    def read(expression: str, time: float) -> float | None:
        found = api.query_range(expression, Window(time, time, RESOLUTION_S))
        if len(found) > 1:
            raise PrometheusError(f"query {expression!r} yields {len(found)} series, not one")
        values = [v for series in found for v in series.values if not math.isnan(v)]
        return values[-1] if values else None

    return read


def beside_table(
    cluster: Mapping[str, Mapping[str, float]], prometheus: Mapping[str, Mapping[str, float | None]]
) -> str:
    """Each run's Prometheus figures beside the cluster's reading of the same figure (``-``: not read there)."""
    modes = list(prometheus)
    header = f"{'':40}" + "".join(f" {f'{mode} cluster':>13} {f'{mode} Prometheus':>16}" for mode in modes)
    lines = [header]
    for key, figure in FIGURES.items():
        row = f"{figure.label:40}"
        for mode in modes:
            read = cluster[mode].get(figure.beside) if figure.beside is not None else None
            row += f" {_fmt(read):>13} {_fmt(prometheus[mode].get(key)):>16}"
        lines.append(row)
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"
