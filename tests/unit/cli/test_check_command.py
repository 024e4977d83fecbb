"""`lyra check`: its exit codes (0 clean, 3 a violation, 1 unreadable cluster, 2 bad input), its human and JSON output
(stable field names), with the listing replaced by objects given as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lyra.check.invariants import Invariant, Limits, Report, Violation
from lyra.cli import check_commands, main
from tests.unit.cli.running import exit_code

UNREACHABLE = (
    "apiVersion: v1\nkind: Config\n"
    "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
    "users: [{name: u, user: {token: t}}]\n"
    "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
)
VIOLATION = Violation(Invariant.NODE_STATE, "Node", "", "t4-3", "no lyra.dev/state taint (the label says 'loaned')")


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(UNREACHABLE)
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gang-timeout", "-1"], "expected seconds between 0 and 86400"),
        (["--reclaim-deadline", "later"], "expected seconds"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "no such file"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["check", *argv]) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_cluster_exits_1_with_a_message(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--kubeconfig", str(kubeconfig)]) == 1
    error = capsys.readouterr().err
    assert error.startswith("lyra check: cannot read the cluster:")
    assert "Traceback" not in error


def _listed(report: Report, seen: list[Limits]) -> Any:
    def fake(api: object, now: float, limits: Limits) -> Report:
        seen.append(limits)
        return report

    return fake


def test_a_violation_exits_3_and_is_printed(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Limits] = []
    monkeypatch.setattr(check_commands, "check_cluster", _listed(Report(12, 30, 2, (VIOLATION,)), seen))
    code = main(["check", "--kubeconfig", str(kubeconfig), "--gang-timeout", "60", "--reclaim-deadline", "90"])
    assert code == 3
    assert seen == [Limits(gang_timeout_s=60, reclaim_deadline_s=90)]
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "1 violation (12 nodes, 30 Lyra pods, 2 TrainingJobs, 0 InferenceServices checked):",
        "  node-state  Node t4-3: no lyra.dev/state taint (the label says 'loaned')",
    ]


def test_json_has_stable_field_names(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(check_commands, "check_cluster", _listed(Report(12, 30, 2, (VIOLATION,)), []))
    assert main(["check", "--kubeconfig", str(kubeconfig), "--json"]) == 3
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {
        "clean", "checkedAt", "gangTimeoutSeconds", "reclaimDeadlineSeconds", "checked", "violations",
    }  # fmt: skip
    assert document["clean"] is False
    assert document["checked"] == {"nodes": 12, "pods": 30, "trainingJobs": 2, "inferenceServices": 0}
    assert document["violations"] == [
        {"invariant": "node-state", "kind": "Node", "namespace": "", "name": "t4-3", "message": VIOLATION.message}
    ]


def test_a_clean_cluster_exits_0(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(check_commands, "check_cluster", _listed(Report(12, 30, 1, ()), []))
    assert main(["check", "--kubeconfig", str(kubeconfig)]) == 0
    assert capsys.readouterr().out == "clean: 12 nodes, 30 Lyra pods, 1 TrainingJob, 0 InferenceServices checked\n"
    assert main(["check", "--kubeconfig", str(kubeconfig), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clean"] is True
