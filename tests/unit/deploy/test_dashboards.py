"""Lyra's Grafana dashboards: every query names only series the operator and the extender really expose, and only
their labels; every panel reads the datasource variable; panels tile the grid without overlapping; the chart's copy
differs from the importable one only in the reclaim deadline, which it reads from the values.

The oracle for names and labels is the live exposition of the metrics code, read by prometheus_client's parser and
regular expressions over the queries: it shares no code with :mod:`lyra.dashboards.definitions`' query builders."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lyra.dashboards import definitions as dashboards
from lyra.dashboards import grafana
from lyra.extender.app import ExtenderMetrics
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.metrics import AppliedCounts, OperatorMetrics
from tests.unit.operator.fake_cluster import A100, T4, FakeCluster, node, training_job

REPOSITORY = Path(__file__).resolve().parents[3]
#: What the issue asks each dashboard to show, by title.
EXPECTED_PANELS = {
    "lyra-loans": 7,
    "lyra-training": 3,
    "lyra-internals": 7,
}
_METRIC = re.compile(r"\b(lyra_[a-z0-9_]+)")


def exposed_series() -> dict[str, set[str]]:
    """Series names exposed by the operator (leading, having counted one of everything) and the extender, each with
    the labels its samples carry."""
    cluster = FakeCluster([node("a0", "training", A100), node("t0", "inference", T4)])
    cluster.add_job(training_job("j", 1, 2))
    for _ in range(3):  # the job starts: live workers
        cluster.apply(decide(cluster.world(), OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100)))
    operator = OperatorMetrics()
    operator.leading(cluster.world())
    operator.count(
        AppliedCounts(
            actions={("CreatePod", "applied"): 1},
            loans={(T4,): 1},
            reclaims={(T4, "drained"): 1},
            reclaim_durations=((T4, 3.0),),
            inference_waits=((T4, 2.0),),
            preemptions={("reclaim",): 1},
            scaled_in={(T4, "deleted"): 1},
            queue_waits=(5.0,),
        )
    )
    operator.phase_took("observe", 0.01)
    operator.pass_ended("succeeded")
    registry = CollectorRegistry()
    extender = ExtenderMetrics(registry)
    extender.requests.labels("prioritize", "ok").inc()
    extender.latency.labels("prioritize").observe(0.001)
    found: dict[str, set[str]] = {}
    for text in (operator.exposition(), generate_latest(registry)):
        for family in text_string_to_metric_families(text.decode()):
            for sample in family.samples:
                found.setdefault(sample.name, set()).update(sample.labels)
    return found


def queries() -> list[tuple[str, str, str]]:
    return [
        (dashboard.uid, panel.title, query.expr)
        for dashboard in dashboards.DASHBOARDS
        for panel in dashboard.panels
        for query in panel.queries
    ]


def test_the_dashboards_have_the_panels_the_issue_asks_for() -> None:
    assert {d.uid: len(d.panels) for d in dashboards.DASHBOARDS} == EXPECTED_PANELS
    titles = {panel.title for d in dashboards.DASHBOARDS for panel in d.panels}
    for wanted in (
        "GPUs lent now",
        "Reclaims per hour",
        "p95 queue wait",
        "Leader",
        "Extender p99 latency",
        "API errors by verb and code",
        "Servers taking no new work",
    ):
        assert wanted in titles


@pytest.mark.parametrize(("uid", "title", "expr"), queries(), ids=lambda v: str(v)[:50])
def test_every_query_names_exposed_series_and_their_labels_only(uid: str, title: str, expr: str) -> None:
    exposed = exposed_series()
    names = set(_METRIC.findall(expr))
    assert len(names) == 1, f"{title}: one metric per query, found {names}"
    [name] = names
    assert name in exposed, f"{uid} / {title}: {name} is not exposed"
    allowed = exposed[name] | {"instance", "job", "namespace", "cluster"}  # the scrape's target labels
    grouped = {label.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for label in group.split(",")}
    matched = set(re.findall(r"([a-z_]+)=~?\"", expr))
    assert grouped | matched <= allowed, f"{uid} / {title}: labels {sorted((grouped | matched) - allowed)} unknown"


def test_a_label_the_metric_does_not_have_is_refused_when_building() -> None:
    from lyra.operator import metrics

    with pytest.raises(ValueError, match="lyra_servers has no label phase"):
        dashboards.series(metrics.SERVERS, phase="Running")
    with pytest.raises(ValueError, match="no label node"):
        dashboards.summed("x", metrics.GPUS, "node")
    with pytest.raises(ValueError, match="not a histogram"):
        dashboards.quantile(0.9, metrics.LOANS)


def all_panels(document: dict[str, Any]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = document["panels"]
    return panels


@pytest.mark.parametrize("dashboard", dashboards.DASHBOARDS, ids=lambda d: d.uid)
def test_every_panel_reads_the_datasource_variable(dashboard: grafana.Dashboard) -> None:
    document = json.loads((REPOSITORY / "dashboards" / f"{dashboard.uid}.json").read_text())
    datasource, *labels = document["templating"]["list"]
    assert (datasource["name"], datasource["type"], datasource["query"]) == ("datasource", "datasource", "prometheus")
    assert [(v["name"], v["type"], v["includeAll"], v["multi"]) for v in labels] == [
        (name, "query", True, True) for name in ("cluster", "namespace", "job")
    ]
    for variable in labels:
        assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert variable["allValue"] == ".*"
    for panel in all_panels(document):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            expr = target["expr"]
            selectors = re.findall(r"lyra_[a-z0-9_]+\{([^}]*)\}", expr)
            assert selectors, expr
            for selector in selectors:  # every series is narrowed by the three variables
                for name in ("cluster", "namespace", "job"):
                    assert f'{name}=~"${name}"' in selector, expr
            windows = set(re.findall(r"\[([^\]]+)\]", expr))
            assert windows <= {"$__rate_interval", "1h"}, f"fixed windows other than per hour: {windows}"


@pytest.mark.parametrize("dashboard", dashboards.DASHBOARDS, ids=lambda d: d.uid)
def test_panels_tile_the_grid_without_overlapping(dashboard: grafana.Dashboard) -> None:
    document = dashboard.document()
    cells: set[tuple[int, int]] = set()
    ids = []
    for panel in all_panels(document):
        position = panel["gridPos"]
        assert position["x"] >= 0, panel["title"]
        assert position["x"] + position["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(position["x"], position["x"] + position["w"])
            for y in range(position["y"], position["y"] + position["h"])
        }
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
        ids.append(panel["id"])
    assert len(set(ids)) == len(ids)


def test_the_charts_copy_escapes_legends_and_reads_the_deadline_from_the_values() -> None:
    standalone = grafana.dashboard_json(dashboards.LOANS)
    charted = grafana.dashboard_json(dashboards.LOANS, helm=True)
    assert "{{ .Values.operator.reclaimDeadlineSeconds }}" in charted
    assert '"legendFormat": "{{ "{{" }}gpu_type{{ "}}" }}"' in charted
    # Undo exactly what Helm would do to the two kinds of template actions: the documents are then equal.
    rendered = charted.replace('{{ "{{" }}', "{{").replace('{{ "}}" }}', "}}")
    rendered = rendered.replace("{{ .Values.operator.reclaimDeadlineSeconds }}", "300")
    assert json.loads(rendered) == json.loads(standalone)
    [deadline] = [
        step["value"]
        for panel in json.loads(standalone)["panels"]
        for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        if step["value"] is not None
    ]
    assert deadline == 300


def test_the_model_refuses_what_grafana_would_not_take() -> None:
    query = grafana.Query("sum(x)", "x")
    with pytest.raises(ValueError, match="no query"):
        grafana.Panel("empty", "", (), grafana.COUNT)
    with pytest.raises(ValueError, match="width 25"):
        grafana.Panel("wide", "", (query,), grafana.COUNT, width=25)
    panel = grafana.Panel("p", "", (query,), grafana.COUNT)
    with pytest.raises(ValueError, match="uid"):
        grafana.Dashboard("Lyra Loans", "t", "", (panel,))
    with pytest.raises(ValueError, match="share a title"):
        grafana.Dashboard("d", "t", "", (panel, panel))
    with pytest.raises(ValueError, match="strictly rising"):
        grafana.Panel("p", "", (query,), grafana.COUNT, colors=(grafana.ColorStep(1, "red"),))
    falling = (grafana.ColorStep(None, "red"), grafana.ColorStep(2, "green"), grafana.ColorStep(1, "red"))
    with pytest.raises(ValueError, match="strictly rising"):
        grafana.Panel("p", "", (query,), grafana.COUNT, colors=falling)
    with pytest.raises(ValueError, match="values path"):
        grafana.HelmValue("operator.{{ evil }}", 1)


def test_the_leader_stat_is_green_only_at_exactly_one() -> None:
    [leader] = [p for p in dashboards.INTERNALS.document()["panels"] if p["title"] == "Leader"]
    steps = leader["fieldConfig"]["defaults"]["thresholds"]["steps"]

    def colour(value: float) -> str:
        return str([step["color"] for step in steps if step["value"] is None or value >= step["value"]][-1])

    assert [colour(v) for v in (0, 1, 2, 3)] == ["red", "green", "red", "red"]
    assert leader["fieldConfig"]["defaults"]["color"] == {"mode": "thresholds"}
