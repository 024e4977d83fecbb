"""The chart's generated files match their sources, the values schema refuses bad values with messages that name
the value, and the bundled scheduler's configuration carries the extender stanza of the local cluster."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from lyra.api.scheduler_extender import ExtenderClientTls, extender_stanza
from lyra.chart import sources, values
from lyra.cli import main
from lyra.localcluster.componentconfig import scheduler_config

REPOSITORY = Path(__file__).resolve().parents[3]
CHART = REPOSITORY / "helm" / "lyra"
DOCS = REPOSITORY / "docs" / "operations.md"
DASHBOARDS = REPOSITORY / "dashboards"
DASHBOARDS_DIR = ["--dashboards-dir", str(DASHBOARDS)]
NEWCOMER_SCRIPT = REPOSITORY / "hack" / "newcomer.sh"


def test_the_generated_chart_files_and_values_reference_are_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    where = ["--chart-dir", str(CHART), "--docs", str(DOCS), *DASHBOARDS_DIR, "--newcomer-script", str(NEWCOMER_SCRIPT)]
    code = main(["chart", "generate", "--check", *where])
    assert code == 0, capsys.readouterr().err


def test_check_names_a_file_edited_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "lyra"
    shutil.copytree(CHART, chart)
    docs = tmp_path / "operations.md"
    docs.write_text(DOCS.read_text())
    dashboards = tmp_path / "dashboards"
    shutil.copytree(DASHBOARDS, dashboards)
    (chart / "values.schema.json").write_text("{}\n")
    where = ["--chart-dir", str(chart), "--docs", str(docs), "--dashboards-dir", str(dashboards)]
    where += ["--newcomer-script", str(NEWCOMER_SCRIPT)]
    assert main(["chart", "generate", "--check", *where]) == 1
    assert "values.schema.json" in capsys.readouterr().err
    assert main(["chart", "generate", *where]) == 0
    assert main(["chart", "generate", "--check", *where]) == 0


def test_values_yaml_holds_exactly_the_models_defaults() -> None:
    assert yaml.safe_load((CHART / "values.yaml").read_text()) == values.defaults()


def schema_errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(values.json_schema())
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document))


def test_the_defaults_satisfy_the_schema() -> None:
    assert schema_errors(values.defaults()) == []


BAD_VALUES = [
    ({"operator": {"replicas": 0}}, "operator/replicas", "minimum"),
    ({"operator": {"replica": 2}}, "operator", "'replica' was unexpected"),
    ({"operator": {"httpPort": 70000}}, "operator/httpPort", "maximum"),
    ({"operator": {"lendDelaySeconds": "soon"}}, "operator/lendDelaySeconds", "not of type 'integer'"),
    ({"operator": {"inferenceGpuCaps": {"Serving": 8}}}, "operator/inferenceGpuCaps", "does not match any"),
    ({"operator": {"inferenceGpuCaps": {"serving": -1}}}, "operator/inferenceGpuCaps/serving", "minimum"),
    ({"scheduler": {"image": {"tag": "v1.29.0"}}}, "scheduler/image/tag", "does not match"),
    ({"scheduler": {"name": "Lyra Scheduler"}}, "scheduler/name", "does not match"),
    ({"image": {"pullPolicy": "Sometimes"}}, "image/pullPolicy", "is not one of"),
    ({"extender": {"resources": {"limits": {"memory": "lots"}}}}, "extender/resources/limits/memory", "not valid"),
    ({"monitoring": {"serviceMonitor": {"interval": "30 seconds"}}}, "monitoring/serviceMonitor/interval", "match"),
    ({"extender": {"tls": {"enabled": "yes"}}}, "extender/tls/enabled", "not of type 'boolean'"),
    ({"extender": {"tls": {"secretName": 1}}}, "extender/tls/secretName", "not of type 'string'"),
]


@pytest.mark.parametrize(("override", "path", "message"), BAD_VALUES)
def test_the_schema_refuses_a_bad_value_naming_it(override: dict[str, Any], path: str, message: str) -> None:
    document = merge(values.defaults(), override)
    errors = schema_errors(document)
    assert any(e.startswith(f"{path}:") and message in e for e in errors), errors


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = merge(base.get(key, {}), value) if isinstance(value, dict) and value else value
    return merged


def test_the_schema_is_closed_and_self_contained() -> None:
    text = json.dumps(values.json_schema())
    assert "$ref" not in text
    assert "$defs" not in text

    def closed(node: Any, where: str) -> list[str]:
        if not isinstance(node, dict):
            return []
        found = []
        if node.get("type") == "object" and "properties" in node and node.get("additionalProperties") is not False:
            found.append(where)
        for key, child in node.get("properties", {}).items():
            found += closed(child, f"{where}.{key}")
        return found

    assert closed(values.json_schema(), "") == []


def test_the_bundled_scheduler_calls_the_extender_with_the_local_clusters_stanza() -> None:
    template = (CHART / "templates" / "scheduler" / "configmap.yaml").read_text()
    body = template.split("config.yaml: |\n", 1)[1]
    common, _, branches = body.partition("{{- if .Values.extender.tls.enabled }}\n")
    over_tls, _, plain = branches.rpartition("{{- else }}\n")
    with_client, _, ca_only = over_tls.removeprefix("{{- if .Values.extender.tls.clientSecretName }}\n").partition(
        "{{- else }}\n"
    )

    def parsed(text: str) -> dict[str, Any]:
        document: dict[str, Any] = yaml.safe_load(
            "\n".join(line[4:] for line in text.splitlines() if "{{-" not in line)
        )
        return document

    url = '{{ include "lyra.extenderUrl" . }}'
    client = Path(values.SCHEDULER_EXTENDER_CLIENT_DIR)
    tls = ExtenderClientTls(client / "ca.crt", client / "tls.crt", client / "tls.key")
    assert parsed(plain)["extenders"] == [extender_stanza(url)]
    assert parsed(with_client)["extenders"] == [extender_stanza(url, tls)]
    assert parsed(ca_only)["extenders"] == [extender_stanza(url, ExtenderClientTls(client / "ca.crt"))]
    assert parsed(ca_only)["extenders"][0]["tlsConfig"] == {"caFile": str(client / "ca.crt")}
    assert scheduler_config(Path("k"), "http://x")["extenders"] == [extender_stanza("http://x")]
    assert parsed(common)["profiles"] == [{"schedulerName": "{{ .Values.scheduler.name }}"}]


def test_the_values_reference_lists_every_leaf_value() -> None:
    reference = sources.values_reference()
    for path in leaves(values.defaults()):
        assert f"| `{path}` |" in reference, path


def leaves(document: dict[str, Any], prefix: str = "") -> list[str]:
    found = []
    for key, value in document.items():
        path = f"{prefix}.{key}" if prefix else key
        found += leaves(value, path) if isinstance(value, dict) and value and key not in UNTYPED_MAPS else [path]
    return found


UNTYPED_MAPS = ("nodeSelector", "affinity", "labels", "inferenceGpuCaps", "maxPriorities")  # keyed by names


def test_the_alerts_table_in_the_operations_guide_names_exactly_the_charts_alerts() -> None:
    """The table is written by hand (its "first check" column is advice); its alerts and severities are the
    chart's."""
    section = DOCS.read_text().split("## Alerts", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `Lyra"):
            name, _, severity = cells[0].partition(" ")
            documented[name.strip("`")] = severity.strip("()")
    generated = {rule["alert"]: rule["labels"]["severity"] for rule in sources.alerts()}
    assert documented == generated
