"""A small typed model of the part of Grafana's dashboard JSON that Lyra's dashboards use (schema version 39, read by
Grafana 10 and later): a dashboard of time series and stat panels, each with PromQL queries against a Prometheus data
source chosen by a ``datasource`` variable, laid out on Grafana's 24-column grid in order.

The same model feeds the dashboards' JSON (:meth:`Dashboard.document`) and ``lyra report``, which plots each panel's
queries itself; :mod:`lyra.dashboards.definitions` defines Lyra's three dashboards with it.

A threshold can be a :class:`HelmValue`: the chart's copy of a dashboard then reads it from the release's values at
install (:func:`dashboard_json` renders it as a Helm expression), the standalone copy carries its default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 39
GRID_COLUMNS = 24
#: The dashboard variable every panel's data source refers to (type ``datasource``, Prometheus only).
DATASOURCE_VARIABLE = "datasource"
_DATASOURCE = {"type": "prometheus", "uid": "${" + DATASOURCE_VARIABLE + "}"}
_PLACEHOLDER = "@@helm-value:{index}@@"


class PanelKind(StrEnum):
    TIMESERIES = "timeseries"
    STAT = "stat"


@dataclass(frozen=True, slots=True)
class Unit:
    """A value's unit: Grafana's unit id and the words an axis says."""

    grafana: str
    words: str


SECONDS = Unit("s", "seconds")
COUNT = Unit("short", "count")
PER_SECOND = Unit("ops", "per second")
PER_HOUR = Unit("short", "per hour")


@dataclass(frozen=True, slots=True)
class HelmValue:
    """A number the chart's copy takes from the release's values (``path``, e.g. ``operator.reclaimDeadlineSeconds``);
    the standalone copy and ``lyra report`` use ``default``."""

    path: str
    default: float

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*", self.path):
            raise ValueError(f"not a values path: {self.path!r}")


#: Grafana's rate window, "at least four scrape intervals" of the data source; ``lyra report`` and tests that ask
#: Prometheus directly put :data:`DEFAULT_RATE_INTERVAL` in its place.
RATE_INTERVAL = "$__rate_interval"
DEFAULT_RATE_INTERVAL = "5m"
#: What a label variable stands for when "All" is chosen, or when a query is asked of Prometheus directly.
ALL = ".*"


@dataclass(frozen=True, slots=True)
class Variable:
    """A dashboard variable over one label's values (a ``query`` variable: ``label_values(metric{...}, label)``),
    multi-valued with "All" (any value, or none): every query selects ``label=~"$name"``."""

    name: str
    label: str
    title: str
    metric: str
    #: Variables whose choice narrows this one's values (their selectors go into its query).
    narrowed_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"variable name {self.name!r}: lowercase letters, digits and underscores")

    @property
    def matcher(self) -> str:
        return f'{self.label}=~"${self.name}"'


def concrete(expr: str, variables: tuple[Variable, ...], choices: dict[str, str] | None = None) -> str:
    """``expr`` as Prometheus itself answers it: the rate interval at its default, each variable at its choice
    (a regex; default: any)."""
    chosen = choices or {}
    unknown = sorted(set(chosen) - {variable.name for variable in variables})
    if unknown:
        raise ValueError(f"no variable {', '.join(unknown)}")
    text = expr.replace(RATE_INTERVAL, DEFAULT_RATE_INTERVAL)
    for variable in variables:
        text = text.replace(f'"${variable.name}"', json.dumps(chosen.get(variable.name, ALL)))
    return text


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL query of a panel; ``legend`` names each series, ``{{label}}`` standing for a label's value."""

    expr: str
    legend: str

    def __post_init__(self) -> None:
        if not self.expr.strip():
            raise ValueError("a query needs an expression")


@dataclass(frozen=True, slots=True)
class Threshold:
    """A line drawn at ``value`` (a limit the series should stay under), named ``label``."""

    value: float | HelmValue
    label: str

    @property
    def default(self) -> float:
        return self.value.default if isinstance(self.value, HelmValue) else self.value


@dataclass(frozen=True, slots=True)
class ColorStep:
    """From ``value`` up (``None``: from the lowest), a stat panel shows its value in ``color``."""

    value: float | None
    color: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: Unit
    kind: PanelKind = PanelKind.TIMESERIES
    stacked: bool = False
    threshold: Threshold | None = None
    colors: tuple[ColorStep, ...] = ()
    width: int = 12
    height: int = 8

    def __post_init__(self) -> None:
        if self.colors:
            rising = [step.value for step in self.colors[1:] if step.value is not None]
            if self.colors[0].value is not None or len(rising) != len(self.colors) - 1 or rising != sorted(set(rising)):
                raise ValueError(f"panel {self.title!r}: colours start from None, then strictly rising values")
            if self.threshold is not None:
                raise ValueError(f"panel {self.title!r}: a threshold line or colours, not both")
        if not self.queries:
            raise ValueError(f"panel {self.title!r} has no query")
        if not 1 <= self.width <= GRID_COLUMNS:
            raise ValueError(f"panel {self.title!r}: width {self.width} is not within 1..{GRID_COLUMNS}")
        if len(self.queries) > 26:
            raise ValueError(f"panel {self.title!r}: at most 26 queries (refIds A..Z)")


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    tags: tuple[str, ...] = ("lyra",)
    variables: tuple[Variable, ...] = ()
    refresh: str = "30s"
    time_from: str = "now-6h"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,39}", self.uid):
            raise ValueError(f"dashboard uid {self.uid!r}: lowercase letters, digits and dashes, at most 40")
        titles = [panel.title for panel in self.panels]
        if len(set(titles)) != len(titles):
            raise ValueError(f"dashboard {self.uid}: two panels share a title")

    def document(self) -> dict[str, Any]:
        """The dashboard as Grafana's JSON model, every :class:`HelmValue` at its default."""
        return _document(self, lambda value: value.default)


def _document(dashboard: Dashboard, resolve: Callable[[HelmValue], Any]) -> dict[str, Any]:
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": dashboard.refresh,
        "time": {"from": dashboard.time_from, "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": DATASOURCE_VARIABLE,
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "regex": "",
                    "options": [],
                },
                *(_variable(variable, dashboard.variables) for variable in dashboard.variables),
            ]
        },
        "panels": [
            _panel(panel, index + 1, position, resolve)
            for index, (panel, position) in enumerate(zip(dashboard.panels, layout(dashboard.panels), strict=True))
        ],
    }


def _variable(variable: Variable, every: tuple[Variable, ...]) -> dict[str, Any]:
    narrowing = [other.matcher for other in every if other.name in variable.narrowed_by]
    if variable.metric.startswith("{"):  # a selector of its own: {__name__=~"a|b"}
        selector = "{" + ", ".join([variable.metric[1:-1], *narrowing]) + "}"
    else:
        selector = f"{variable.metric}{{{', '.join(narrowing)}}}" if narrowing else variable.metric
    query = f"label_values({selector}, {variable.label})"
    return {
        "name": variable.name,
        "label": variable.title,
        "type": "query",
        "datasource": dict(_DATASOURCE),
        "query": {"query": query, "refId": f"{variable.name}-values"},
        "definition": query,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "includeAll": True,
        "allValue": ALL,
        "multi": True,
        "hide": 0,
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "options": [],
    }


def layout(panels: tuple[Panel, ...]) -> list[dict[str, int]]:
    """Grid positions: left to right in order, a panel that does not fit the row starts the next one, a row as tall
    as its tallest panel."""
    positions = []
    x = y = row_height = 0
    for panel in panels:
        if x + panel.width > GRID_COLUMNS:
            x, y, row_height = 0, y + row_height, 0
        positions.append({"h": panel.height, "w": panel.width, "x": x, "y": y})
        x += panel.width
        row_height = max(row_height, panel.height)
    return positions


def _panel(
    panel: Panel, panel_id: int, position: dict[str, int], resolve: Callable[[HelmValue], Any]
) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"color": step.color, "value": step.value} for step in panel.colors] or [
        {"color": "green", "value": None}
    ]
    custom: dict[str, Any] = {}
    if panel.threshold is not None:
        value = panel.threshold.value
        steps.append({"color": "red", "value": resolve(value) if isinstance(value, HelmValue) else value})
        custom["thresholdsStyle"] = {"mode": "dashed"}
    defaults: dict[str, Any] = {
        "unit": panel.unit.grafana,
        "min": 0,
        "thresholds": {"mode": "absolute", "steps": steps},
        "color": {"mode": "palette-classic" if panel.kind is PanelKind.TIMESERIES else "thresholds"},
    }
    if panel.kind is PanelKind.TIMESERIES:
        custom |= {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if panel.stacked else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
        }
        defaults["custom"] = custom
        options: dict[str, Any] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    else:
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "value_and_name",
        }
    return {
        "id": panel_id,
        "type": panel.kind.value,
        "title": panel.title,
        "description": panel.description,
        "gridPos": position,
        "datasource": dict(_DATASOURCE),
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": dict(_DATASOURCE),
                "expr": query.expr,
                "legendFormat": query.legend,
                "range": True,
                "instant": False,
            }
            for index, query in enumerate(panel.queries)
        ],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
    }


def dashboard_json(dashboard: Dashboard, *, helm: bool = False) -> str:
    """The dashboard's JSON text. ``helm=False``: thresholds at their defaults (a file to import into Grafana).
    ``helm=True``: text for a Helm template: Grafana's own ``{{ }}`` escaped, and each :class:`HelmValue` read
    from the release's values."""
    if not helm:
        return json.dumps(dashboard.document(), indent=2, ensure_ascii=False) + "\n"
    values: list[HelmValue] = []

    def placeholder(value: HelmValue) -> str:
        values.append(value)
        return _PLACEHOLDER.format(index=len(values) - 1)

    text = json.dumps(_document(dashboard, placeholder), indent=2, ensure_ascii=False) + "\n"
    text = re.sub(r"\{\{|\}\}", lambda match: '{{ "' + match.group() + '" }}', text)
    for index, value in enumerate(values):
        text = text.replace(json.dumps(_PLACEHOLDER.format(index=index)), f"{{{{ .Values.{value.path} }}}}")
    return text
