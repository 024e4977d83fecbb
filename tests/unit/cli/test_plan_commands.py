"""`lyra plan`: JSON in, JSON out, exit code 2 with a named field on bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from lyra.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "snapshot.json"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_reclaim_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", str(EXAMPLE), "--servers", "2")
    assert code == 0
    # Both {t4-0, t4-1} and {t4-2, t4-3} cost two preemptions; the second loses less work (1200 vs 2640 GPU-s).
    assert plan["servers"] == ["t4-2", "t4-3"]
    assert plan["preempted"] == ["b", "c"]
    assert plan["scaledIn"] == {"p": 2}
    assert plan["lostGpuSeconds"] == 1200.0
    assert plan["evictions"] == {"t4-2": {"b": 2}, "t4-3": {"c": 1, "p": 2}}


def test_reclaim_of_one_server_loses_the_least_work(capsys: pytest.CaptureFixture[str]) -> None:
    # Every loaned server holds some base worker, so one preemption is the minimum; t4-3 costs job c
    # (4 GPUs x 60 s since its checkpoint = 240 GPU-s) and scales p in, t4-2 would cost b (8 x 120 = 960).
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", str(EXAMPLE), "--servers", "1")
    assert code == 0
    assert plan["servers"] == ["t4-3"]
    assert plan["preempted"] == ["c"]
    assert plan["scaledIn"] == {"p": 2}
    assert plan["lostGpuSeconds"] == 240.0


def test_allocate_names_every_job(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "allocate", "--snapshot", str(EXAMPLE))
    assert code == 0
    assert set(plan["workers"]) == {"a", "b", "c", "p", "q"}
    assert plan["capacityGpus"] == 40
    assert plan["gpusUsed"] <= 40
    assert plan["started"] == ["q"]


def test_allocate_with_a_smaller_capacity_queues_work(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "allocate", "--snapshot", str(EXAMPLE), "--capacity", "20")
    assert code == 0
    assert plan["gpusUsed"] <= 20
    assert plan["workers"]["q"] == 0 or plan["preempted"]


def test_loans(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "loans", "--snapshot", str(EXAMPLE), "--demand", "1")
    assert code == 0
    assert plan == {"lend": ["t4-5"], "reclaim": 0, "shortfall": 0, "neededServers": 1, "heldServers": 2}


def test_snapshot_from_standard_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(EXAMPLE.read_text()))
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", "-", "--servers", "0")
    assert code == 0
    assert plan["servers"] == []


@pytest.mark.parametrize(
    ("snapshot", "servers", "message"),
    [
        (str(EXAMPLE), "5", "cannot reclaim 5 servers: only 4 are loaned (t4-0, t4-1, t4-2, t4-3)"),
        ("does-not-exist.json", "1", "snapshot does-not-exist.json: no such file"),
    ],
    ids=["too-many-servers", "missing-file"],
)
def test_bad_requests_exit_2(capsys: pytest.CaptureFixture[str], snapshot: str, servers: str, message: str) -> None:
    code, out, err = run(capsys, "plan", "reclaim", "--snapshot", snapshot, "--servers", servers)
    assert code == 2
    assert out is None
    assert message in err


def test_malformed_snapshot_exits_2_naming_the_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    document = json.loads(EXAMPLE.read_text())
    document["jobs"][2]["minWorkers"] = -1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    code, _, err = run(capsys, "plan", "allocate", "--snapshot", str(path))
    assert code == 2
    assert "jobs[2].minWorkers (job 'c')" in err


def test_negative_server_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", "reclaim", "--snapshot", str(EXAMPLE), "--servers", "-1"])
    assert caught.value.code == 2
    assert "expected a number >= 0" in capsys.readouterr().err
