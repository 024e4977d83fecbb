"""``lyra report``'s work: each panel of Lyra's dashboards (:data:`lyra.dashboards.definitions.DASHBOARDS`) asked of
Prometheus' HTTP API (``/api/v1/query_range``, the same PromQL as in Grafana) and plotted to a PNG with matplotlib.

Errors a user can act on are :class:`PrometheusError` with a one-line message: Prometheus unreachable, an answer that
is not Prometheus' API, a query it refused (with its own reason).
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lyra.apiserver_failures import unreachable_reason
from lyra.cli.bounded_http import AnswerBrokenError, AnswerTooLargeError, AnswerTooSlowError, bounded_get
from lyra.dashboards.grafana import Dashboard, HelmValue, Panel, PanelKind, Query, concrete

#: The largest answer read from Prometheus: 300 points of about 7,000 series, more than a panel can show.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: Points per series a plot asks for (the step is the range divided by this, at least a second).
POINTS = 300
_LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class PrometheusError(Exception):
    """Prometheus could not be asked, or refused a query; the message says which and why."""


class PrometheusUnreachableError(PrometheusError):
    """No answer at all (connection refused, timeout, name unknown): no later query can do better."""


@dataclass(frozen=True, slots=True)
class Series:
    labels: Mapping[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Window:
    """The time range to plot: ``start`` to ``end`` (Unix seconds), one point every ``step`` seconds."""

    start: float
    end: float
    step: float

    @classmethod
    def ending(cls, end: float, seconds: float) -> Window:
        return cls(end - seconds, end, max(1.0, math.ceil(seconds / POINTS)))


class PrometheusApi:
    """Prometheus' HTTP API at ``url`` (``http://host:9090``, or below a path prefix)."""

    def __init__(self, url: str, *, timeout_s: float = 30) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, parameters: Mapping[str, str]) -> Any:
        address = f"{self.url}{path}?{urllib.parse.urlencode(parameters)}"
        try:
            got = bounded_get(address, within_s=self.timeout_s, limit_bytes=MAX_ANSWER_BYTES)
        except AnswerTooSlowError as error:  # a server this slow answers no later query either
            raise PrometheusUnreachableError(f"Prometheus at {self.url} gave {error} (--timeout)") from None
        except AnswerBrokenError as error:  # not Prometheus: no later query can do better
            raise PrometheusUnreachableError(f"{self.url}{path} gave {error}: is it Prometheus?") from None
        except AnswerTooLargeError as error:
            narrow = ": narrow it with --cluster, --namespace or --job" if "query" in parameters else ""
            raise PrometheusError(f"{self.url}{path} gave {error}{narrow}") from None
        except (urllib.error.URLError, OSError) as error:
            cause = error.reason if isinstance(error, urllib.error.URLError) else error
            reason = unreachable_reason(cause) if isinstance(cause, BaseException) else None
            raise PrometheusUnreachableError(f"cannot reach Prometheus at {self.url}: {reason or cause}") from None
        answer = _json(got.body)
        if got.status >= 400:
            if isinstance(answer, dict) and answer.get("status") == "error":
                return answer
            raise PrometheusError(f"{self.url} answered HTTP {got.status} to {path}: not Prometheus' API?")
        if not isinstance(answer, dict) or "status" not in answer:
            raise PrometheusError(f"{self.url}{path} did not answer with Prometheus' API JSON")
        return answer

    def version(self) -> str:
        """Prometheus' version (``/api/v1/status/buildinfo``): proves it is reachable and is Prometheus."""
        answer = self._get("/api/v1/status/buildinfo", {})
        if answer.get("status") != "success":
            raise PrometheusError(f"{self.url}: build information refused: {answer.get('error', answer)}")
        return str(answer.get("data", {}).get("version", "unknown"))

    def query_range(self, expr: str, window: Window) -> list[Series]:
        parameters = {
            "query": expr,
            "start": f"{window.start:.3f}",
            "end": f"{window.end:.3f}",
            "step": f"{window.step:g}",
        }
        answer = self._get("/api/v1/query_range", parameters)
        if answer.get("status") != "success":
            raise PrometheusError(f"query {expr!r} failed: {answer.get('errorType', 'error')}: {answer.get('error')}")
        data = answer.get("data", {})
        if data.get("resultType") != "matrix":
            raise PrometheusError(f"query {expr!r}: expected a range vector, got {data.get('resultType')!r}")
        return [_series(item) for item in data.get("result", [])]


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _series(item: Mapping[str, Any]) -> Series:
    points = [(float(time), _finite(value)) for time, value in item.get("values", [])]
    return Series(
        {str(k): str(v) for k, v in item.get("metric", {}).items()},
        tuple(t for t, _ in points),
        tuple(v for _, v in points),
    )


def _finite(text: str) -> float:
    """A sample's value; NaN and infinities (a quantile with nothing to rank) become gaps."""
    value = float(text)
    return value if math.isfinite(value) else math.nan


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` becomes the series' value of ``label`` (empty if it has none)."""
    text = _LEGEND_LABEL.sub(lambda match: labels.get(match.group(1), ""), template).strip()
    return text or "value"


def file_name(dashboard: Dashboard, index: int, panel: Panel) -> str:
    """``lyra-loans-01-gpus-lent-now.png``: the dashboard, the panel's place in it, its title."""
    slug = re.sub(r"[^a-z0-9]+", "-", panel.title.lower()).strip("-")
    return f"{dashboard.uid}-{index:02d}-{slug}.png"


@dataclass(frozen=True, slots=True)
class PanelPlot:
    dashboard: Dashboard
    panel: Panel
    path: Path
    series: int
    points: int
    threshold: float | None
    #: The largest value plotted (None: no data).
    peak: float | None = None


def threshold_of(panel: Panel, values: Mapping[str, float]) -> float | None:
    """The panel's threshold: a chart value's from ``values`` (by its path) if given there, else its default."""
    if panel.threshold is None:
        return None
    value = panel.threshold.value
    return values.get(value.path, value.default) if isinstance(value, HelmValue) else value


def plot_panel(
    path: Path,
    dashboard: Dashboard,
    panel: Panel,
    answers: Sequence[tuple[Query, list[Series]]],
    window: Window,
    *,
    values: Mapping[str, float] | None = None,
) -> PanelPlot:
    """One PNG: every series of every query of ``panel`` against time, the threshold as a dashed line (``values``:
    the chart values a threshold reads, e.g. ``operator.reclaimDeadlineSeconds``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 4.5))
    count = points = 0
    peak: float | None = None
    for query, found in answers:
        for series in sorted(found, key=lambda s: sorted(s.labels.items())):
            minutes = [(t - window.end) / 60 for t in series.times]
            axes.plot(minutes, series.values, label=legend(query.legend, series.labels), linewidth=1.4)
            count += 1
            numbers = [v for v in series.values if not math.isnan(v)]
            points += len(numbers)
            peak = max([*numbers, peak] if peak is not None else numbers, default=None)
    limit = threshold_of(panel, values or {})
    if panel.threshold is not None and limit is not None:
        axes.axhline(limit, color="red", linestyle="--", linewidth=1, label=f"{panel.threshold.label} ({limit:g})")
    if points == 0:
        axes.text(0.5, 0.5, "no data in this range", transform=axes.transAxes, ha="center", va="center", alpha=0.6)
    axes.set_xlim((window.start - window.end) / 60, 0)
    axes.set_ylim(bottom=0)
    end = datetime.fromtimestamp(window.end, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    axes.set_xlabel(f"minutes before {end}")
    axes.set_ylabel(panel.unit.words)
    kind = " (Grafana shows the last value)" if panel.kind is PanelKind.STAT else ""
    axes.set_title(f"{dashboard.title}: {panel.title}{kind}", fontsize=10)
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=7, loc="upper left", ncols=2 if count > 6 else 1)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return PanelPlot(dashboard, panel, path, count, points, limit, peak)


@dataclass(frozen=True, slots=True)
class Failure:
    dashboard: Dashboard
    panel: Panel
    message: str


def write_report(
    api: PrometheusApi,
    dashboards: Sequence[Dashboard],
    out_dir: Path,
    window: Window,
    progress: Callable[[str], None],
    *,
    values: Mapping[str, float] | None = None,
    choices: Mapping[str, str] | None = None,
) -> tuple[list[PanelPlot], list[Failure]]:
    """Every panel of ``dashboards``, in order, plotted into ``out_dir``. A panel whose query Prometheus refuses is
    reported and skipped; an unreachable Prometheus ends the report (:class:`PrometheusError`). ``choices``: the
    dashboards' variables (cluster, namespace, job) as regexes; those not given match every series."""
    panels = [(dashboard, index, panel) for dashboard in dashboards for index, panel in enumerate(dashboard.panels, 1)]
    plots: list[PanelPlot] = []
    failures: list[Failure] = []
    for number, (dashboard, index, panel) in enumerate(panels, 1):
        where = f"[{number}/{len(panels)}] {dashboard.title}: {panel.title}"
        try:
            answers = [
                (query, api.query_range(concrete(query.expr, dashboard.variables, dict(choices or {})), window))
                for query in panel.queries
            ]
        except PrometheusUnreachableError:
            raise
        except PrometheusError as error:
            failures.append(Failure(dashboard, panel, str(error)))
            progress(f"{where}: FAILED: {error}")
            continue
        path = out_dir / file_name(dashboard, index, panel)
        plot = plot_panel(path, dashboard, panel, answers, window, values=values)
        plots.append(plot)
        data = f"{plot.series} series, {plot.points} points" if plot.points else "no data"
        progress(f"{where}: {data} -> {plot.path}")
    return plots, failures
