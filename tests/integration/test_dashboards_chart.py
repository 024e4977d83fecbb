"""The dashboards in the chart, rendered by the real helm, and their queries parsed by the real promtool (both from
the binary cache, no control plane): the ConfigMaps carry exactly ``dashboards/*.json`` (the reclaim deadline
from the values), labelled for Grafana's sidecar, and vanish when disabled; promtool accepts every query."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lyra.chart.rendering import helm_template
from lyra.dashboards.definitions import DASHBOARDS
from lyra.dashboards.grafana import concrete
from lyra.localcluster.binaries import KUBECTL_LAYER, BinaryCache
from tests.prometheus_support import promtool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPOSITORY = Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "helm" / "lyra"


def dashboard_configmaps(*settings: str) -> dict[str, dict[str, Any]]:
    helm = BinaryCache().component_dir(KUBECTL_LAYER) / "helm"
    rendered = helm_template(helm, CHART, settings=settings)
    return {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboards"
    }


def deadlines(document: dict[str, Any]) -> list[Any]:
    return [
        step["value"]
        for panel in document["panels"]
        for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        if step["value"] is not None
    ]


def test_the_configmaps_hold_the_dashboard_files_labelled_for_the_sidecar() -> None:
    maps = dashboard_configmaps()
    assert sorted(maps) == ["lyra-dashboard-internals", "lyra-dashboard-loans", "lyra-dashboard-training"]
    for dashboard in DASHBOARDS:
        configmap = maps[f"lyra-dashboard-{dashboard.uid.removeprefix('lyra-')}"]
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        [(key, text)] = configmap["data"].items()
        assert key == f"{dashboard.uid}.json"
        assert json.loads(text) == json.loads((REPOSITORY / "dashboards" / key).read_text())


def test_the_values_move_the_deadline_and_labels_and_can_turn_them_off() -> None:
    maps = dashboard_configmaps(
        "operator.reclaimDeadlineSeconds=45",
        "monitoring.dashboards.labels.team=ml",
        "monitoring.dashboards.annotations.grafana_folder=Lyra",
    )
    loans = maps["lyra-dashboard-loans"]
    assert deadlines(json.loads(loans["data"]["lyra-loans.json"])) == [45]
    assert loans["metadata"]["labels"]["team"] == "ml"
    assert loans["metadata"]["annotations"] == {"grafana_folder": "Lyra"}
    assert dashboard_configmaps("monitoring.dashboards.enabled=false") == {}


def test_promtool_parses_every_query(tmp_path: Path) -> None:
    rules = [
        {
            "record": f"lyra:panel_{n}_{q}:{dashboard.uid.replace('-', '_')}",
            "expr": concrete(query.expr, dashboard.variables),
        }
        for dashboard in DASHBOARDS
        for n, panel in enumerate(dashboard.panels)
        for q, query in enumerate(panel.queries)
    ]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [str(promtool()), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout, result.stdout + result.stderr
