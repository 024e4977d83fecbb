"""The snapshot document: what it accepts, what it rejects, and how it names the bad field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lyra.core.model import LoanState, Pool
from lyra.snapshot import SnapshotDocument, SnapshotError, parse_snapshot, snapshot_json_schema

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "docs" / "examples" / "snapshot.json"
SCHEMA = REPO / "docs" / "snapshot.schema.json"

MINIMAL: dict[str, Any] = {
    "servers": [
        {"name": "t0", "pool": "training", "gpuType": "A100", "gpus": 8},
        {"name": "i0", "pool": "inference", "gpuType": "T4", "gpus": 8, "state": "loaned"},
    ],
    "jobs": [
        {
            "name": "j",
            "gpusPerWorker": 1,
            "minWorkers": 1,
            "maxWorkers": 4,
            "remainingWork": 100,
            "submitTime": 0,
            "workers": {"i0": 2},
        }
    ],
}


def _with(path: str, value: Any) -> str:
    """MINIMAL with one field replaced (``jobs.0.minWorkers``); a value of ``...`` deletes the field."""
    document = copy.deepcopy(MINIMAL)
    *parents, leaf = path.split(".")
    node: Any = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    key: Any = int(leaf) if leaf.isdigit() else leaf
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return json.dumps(document)


def test_the_issue_format_is_accepted() -> None:
    snapshot = parse_snapshot(json.dumps(MINIMAL))
    assert [s.name for s in snapshot.servers] == ["i0", "t0"]
    assert snapshot.server("i0").state is LoanState.LOANED
    assert snapshot.server("t0").pool is Pool.TRAINING
    assert snapshot.job("j").workers == 2


def test_the_shipped_example_parses_and_round_trips() -> None:
    snapshot = parse_snapshot(EXAMPLE.read_text())
    again = parse_snapshot(SnapshotDocument.from_core(snapshot).model_dump_json(by_alias=True))
    assert again == snapshot


BAD_FIELDS = [
    ("jobs.0.minWorkers", 0, "jobs[0].minWorkers (job 'j')"),
    ("jobs.0.maxWorkers", "many", "jobs[0].maxWorkers (job 'j')"),
    ("jobs.0.remainingWork", -1, "jobs[0].remainingWork (job 'j')"),
    ("jobs.0.gpusPerWorker", 1.5, "jobs[0].gpusPerWorker (job 'j')"),
    ("jobs.0.workers", {"i0": 9}, "jobs[0] (job 'j'): runs 9 workers"),
    ("jobs.0.workers", {"nowhere": 1}, "unknown server 'nowhere'"),
    ("jobs.0.name", ..., "jobs[0].name"),
    ("jobs.0.colour", "red", "jobs[0].colour (job 'j'): Extra inputs are not permitted"),
    ("servers.1.state", "lent", "servers[1].state (server 'i0')"),
    ("servers.1.state", ..., "servers[1] (server 'i0'): an inference server needs a state"),
    ("servers.0.state", "idle", "servers[0] (server 't0'): a training server has no loan state"),
    ("servers.0.gpus", 0, "servers[0].gpus (server 't0')"),
    ("servers.0.pool", "batch", "servers[0].pool (server 't0')"),
    ("servers.1.name", "t0", "duplicate server name 't0'"),
    ("servers", ..., "servers: Field required"),
    ("apiVersion", "lyra.dev/v9", "unsupported apiVersion"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_FIELDS, ids=[f"{p}={v!r}" for p, v, _ in BAD_FIELDS])
def test_a_bad_field_is_named(path: str, value: Any, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        parse_snapshot(_with(path, value))
    assert message in str(caught.value)


def test_over_capacity_is_rejected() -> None:
    text = _with("jobs.0.gpusPerWorker", 8)
    with pytest.raises(SnapshotError, match="server i0: training uses 16 GPUs but the server has 8"):
        parse_snapshot(text)


def test_training_on_a_serving_server_is_rejected() -> None:
    with pytest.raises(SnapshotError, match="an inference server in state serving"):
        parse_snapshot(_with("servers.1.state", "serving"))


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "not valid JSON"), ("[]", "must be a JSON object"), ("null", "must be a JSON object")],
)
def test_not_a_document(text: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        parse_snapshot(text)


def test_the_published_schema_has_not_drifted() -> None:
    """docs/snapshot.schema.json is generated: `lyra plan schema > docs/snapshot.schema.json`."""
    assert json.loads(SCHEMA.read_text()) == snapshot_json_schema()
