"""The snapshot document: what it accepts, what it rejects, and how it names the bad field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lyra.core import MAX_GPUS_PER_SERVER, MAX_WORKERS, GpuType, InvalidClusterError, LoanState, Pool
from lyra.snapshot import (
    PlannerInput,
    SnapshotDocument,
    SnapshotError,
    parse_planner_input,
    parse_snapshot,
    snapshot_json_schema,
)

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

#: Every optional field set, on a cluster of two GPU types.
FULL: dict[str, Any] = {
    "apiVersion": "lyra.dev/v1alpha1",
    "kind": "ClusterSnapshot",
    "gpuCatalog": {"T4": {"speed": 0.4, "memoryGiB": 16}, "A100": {"speed": 1.0}},
    "servers": [
        {"name": "t0", "pool": "training", "gpuType": "A100", "gpus": 8},
        {"name": "t1", "pool": "training", "gpuType": "A100", "gpus": 4, "state": "serving"},
        {"name": "i0", "pool": "inference", "gpuType": "T4", "gpus": 8, "state": "loaned"},
        {"name": "i1", "pool": "inference", "gpuType": "T4", "gpus": 8, "state": "reclaiming"},
    ],
    "jobs": [
        {
            "name": "mixed",
            "gpusPerWorker": 2,
            "minWorkers": 2,
            "maxWorkers": 6,
            "remainingWork": 3600,
            "submitTime": 5,
            "priority": -3,
            "secondsSinceCheckpoint": 42,
            "gpuTypes": ["T4", "A100"],
            "gpuMemoryGiB": 12,
            "speeds": {"T4": 0.35, "A100": 1.2},
            "mixGpuTypes": True,
            "scalingOverhead": 0.1,
            "workers": {"t0": 2, "i0": 1},
        },
        {"name": "big", "gpusPerWorker": 1, "minWorkers": 1, "maxWorkers": 2, "remainingWork": 10, "gpuMemoryGiB": 24},
    ],
}


def _with(path: str, value: Any, base: dict[str, Any] = MINIMAL) -> str:
    """``base`` with one field replaced (``jobs.0.minWorkers``); a value of ``...`` deletes the field."""
    document = copy.deepcopy(base)
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


def test_every_new_field_reaches_the_core() -> None:
    snapshot = parse_snapshot(json.dumps(FULL))
    assert snapshot.gpus["T4"] == GpuType("T4", 0.4, 16.0)
    assert snapshot.gpus["A100"] == GpuType("A100", 1.0, None)
    mixed = snapshot.job("mixed")
    assert mixed.gpu_types == frozenset({"T4", "A100"})
    assert mixed.gpu_memory_gib == 12
    assert dict(mixed.speeds) == {"A100": 1.2, "T4": 0.35}
    assert mixed.mix_gpu_types is True
    assert mixed.scaling_overhead == 0.1
    assert (mixed.priority, mixed.submit_time, mixed.seconds_since_checkpoint) == (-3, 5, 42)
    assert dict(mixed.placement) == {"i0": 1, "t0": 2}
    big = snapshot.job("big")
    assert (big.gpu_types, big.gpu_memory_gib, big.mix_gpu_types, big.scaling_overhead) == (None, 24, False, 0)
    assert not big.may_use(snapshot.gpus["T4"])


def test_a_training_server_may_say_it_is_serving() -> None:
    """The one state that fits a training server (it serves training); the core has no loan state for it."""
    server = parse_snapshot(json.dumps(FULL)).server("t1")
    assert server.pool is Pool.TRAINING
    assert server.state is None
    assert server.hosts_training


@pytest.mark.parametrize("document", [MINIMAL, FULL], ids=["minimal", "full"])
def test_from_core_round_trips_every_field(document: dict[str, Any]) -> None:
    snapshot = parse_snapshot(json.dumps(document))
    exported = SnapshotDocument.from_core(snapshot)
    assert parse_snapshot(exported.model_dump_json(by_alias=True)) == snapshot
    assert parse_snapshot(exported.model_dump_json(by_alias=True, exclude_none=True)) == snapshot


def test_held_gpus_are_read_checked_and_round_trip() -> None:
    """``heldGpus``: GPUs used outside the document's jobs, per server; zeros are dropped, a server holds at most
    what its jobs' workers leave free (i0 runs 2 GPUs of j's: 6 may be held beside them)."""
    given = parse_planner_input(_with("heldGpus", {"t0": 8, "i0": 6}))
    assert dict(given.held) == {"t0": 8, "i0": 6}
    assert given.snapshot == parse_snapshot(json.dumps(MINIMAL))
    exported = SnapshotDocument.from_core(given.snapshot, given.held).model_dump_json(by_alias=True)
    assert json.loads(exported)["heldGpus"] == {"i0": 6, "t0": 8}
    assert parse_planner_input(exported) == given
    assert dict(parse_planner_input(_with("heldGpus", {"t0": 0})).held) == {}
    assert "heldGpus" not in json.loads(SnapshotDocument.from_core(given.snapshot, {"t0": 0}).model_dump_json())
    assert parse_planner_input(json.dumps(MINIMAL)).held == {}


@pytest.mark.parametrize(
    ("held", "message"),
    [
        ({"nowhere": 1}, "heldGpus names 'nowhere', which is no server of the snapshot"),
        ({"i0": 7}, "heldGpus.i0: 7 GPUs held beside 2 used by the jobs' workers, on a server of 8"),
        ({"t0": 9}, "heldGpus.t0: 9 GPUs held beside 0 used by the jobs' workers, on a server of 8"),
        ({"t0": -1}, "heldGpus.t0: Input should be greater than or equal to 0"),
        ({"t0": "2"}, "heldGpus.t0: Input should be a valid integer"),
        ({"t0": 1.5}, "heldGpus.t0: Input should be a valid integer"),
        ({"t0": MAX_GPUS_PER_SERVER + 1}, "heldGpus.t0: Input should be less than or equal to 1024"),
        ([1], "heldGpus: Input should be a valid dictionary"),
    ],
)
def test_bad_held_gpus_are_refused_naming_the_field(held: Any, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        parse_planner_input(_with("heldGpus", held))
    assert message in str(caught.value)
    with pytest.raises(SnapshotError):
        parse_snapshot(_with("heldGpus", held))  # every verb refuses it, even those that do not read it


def test_cordoned_servers_are_read_and_round_trip() -> None:
    given = parse_planner_input(_with("servers.1.cordoned", True))
    assert given.cordoned == {"i0"}
    exported = SnapshotDocument.from_core(given.snapshot, given.held, given.cordoned).model_dump_json(by_alias=True)
    assert [s["cordoned"] for s in json.loads(exported)["servers"]] == [True, False]  # i0, t0
    assert parse_planner_input(exported) == given
    with pytest.raises(SnapshotError, match=r"servers\[1\]\.cordoned \(server 'i0'\): Input should be a valid boolean"):
        parse_planner_input(_with("servers.1.cordoned", "yes"))


def test_inference_demand_is_read_checked_and_round_trips() -> None:
    """``inferenceDemand``: servers inference needs per GPU type; absent is unknown (``None``), not zero."""
    given = parse_planner_input(_with("inferenceDemand", {"Tesla-T4": 3, "NVIDIA-A100": 0}))
    assert given.demand == {"NVIDIA-A100": 0, "Tesla-T4": 3}
    exported = SnapshotDocument.from_core(given.snapshot, demand=given.demand).model_dump_json(by_alias=True)
    assert json.loads(exported)["inferenceDemand"] == {"NVIDIA-A100": 0, "Tesla-T4": 3}
    assert parse_planner_input(exported) == given
    assert parse_planner_input(json.dumps(MINIMAL)).demand is None
    assert parse_planner_input(_with("inferenceDemand", None)).demand is None


@pytest.mark.parametrize(
    ("demand", "message"),
    [
        ({"Tesla-T4": -1}, "inferenceDemand.Tesla-T4: Input should be greater than or equal to 0"),
        ({"Tesla-T4": 1.5}, "inferenceDemand.Tesla-T4: Input should be a valid integer"),
        ({"Tesla-T4": True}, "inferenceDemand.Tesla-T4: Input should be a valid integer"),
        ({"Tesla-T4": 100_001}, "inferenceDemand.Tesla-T4: Input should be less than or equal to 100000"),
        ({"": 1}, "inferenceDemand. (key): String should have at least 1 character"),
        ([1], "inferenceDemand: Input should be a valid dictionary"),
    ],
)
def test_a_bad_inference_demand_is_refused_naming_the_field(demand: Any, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        parse_planner_input(_with("inferenceDemand", demand))
    assert message in str(caught.value)


def test_unhealthy_servers_are_read_round_trip_and_hold_their_free_gpus() -> None:
    """``servers[].unhealthy``: like a cordoned server, it takes no new work (i0's 6 GPUs beside j's 2 are held);
    unlike one, it stays in the loan cycle, as room for inference that is never lent."""
    given = parse_planner_input(_with("servers.1.unhealthy", True))
    assert given.unhealthy == {"i0"}
    assert given.unlendable() == {"i0"}
    assert given.allocation_held() == {"i0": 6}
    assert given.loan_cycle() is None
    exported = SnapshotDocument.from_core(given.snapshot, unhealthy=given.unhealthy).model_dump_json(by_alias=True)
    assert [s["unhealthy"] for s in json.loads(exported)["servers"]] == [True, False]  # i0, t0
    assert parse_planner_input(exported) == given
    with pytest.raises(
        SnapshotError, match=r"servers\[1\]\.unhealthy \(server 'i0'\): Input should be a valid boolean"
    ):
        parse_planner_input(_with("servers.1.unhealthy", 1))
    with pytest.raises(InvalidClusterError, match="unhealthy server 'x' is no server of the snapshot"):
        PlannerInput(given.snapshot, unhealthy=frozenset({"x"}))


def test_a_cordoned_server_holds_what_its_workers_leave_free_and_an_idle_or_loaned_one_leaves_the_loan_cycle() -> None:
    """The operator's rules, applied by the planner: t0 (8 GPUs, no worker) and i0 (8 GPUs, 2 of j's) cordoned hold
    8 and 6 GPUs from an allocation (at least what ``heldGpus`` says); the loaned i0 leaves the loan cycle."""
    document = json.loads(_with("heldGpus", {"i0": 1}))
    for server in document["servers"]:
        server["cordoned"] = True
    given = parse_planner_input(json.dumps(document))
    assert given.allocation_held() == {"t0": 8, "i0": 6}
    assert given.loan_cycle() == {"t0"}
    assert parse_planner_input(json.dumps(MINIMAL)).loan_cycle() is None, "nothing cordoned: every server"
    assert parse_planner_input(json.dumps(MINIMAL)).allocation_held() == {}


def test_a_planner_input_built_in_code_is_checked_too() -> None:
    snapshot = parse_snapshot(json.dumps(MINIMAL))
    with pytest.raises(InvalidClusterError, match=r"heldGpus\.t0: must be an integer >= 0, got True"):
        PlannerInput(snapshot, {"t0": True})
    with pytest.raises(InvalidClusterError, match="no server of the snapshot"):
        PlannerInput(snapshot, {"x": 1})
    with pytest.raises(InvalidClusterError, match="cordoned server 'x' is no server of the snapshot"):
        PlannerInput(snapshot, cordoned=frozenset({"x"}))
    with pytest.raises(InvalidClusterError, match=r"inferenceDemand\.T4: must be an integer number of servers >= 0"):
        PlannerInput(snapshot, demand={"T4": -2})


def test_the_shipped_example_parses_and_round_trips() -> None:
    snapshot = parse_snapshot(EXAMPLE.read_bytes())
    again = parse_snapshot(SnapshotDocument.from_core(snapshot).model_dump_json(by_alias=True))
    assert again == snapshot
    # What docs/snapshot.md says the example shows: two GPU types, a T4 entry, a job limited by type, one by memory.
    assert {s.gpu_type for s in snapshot.servers} == {"NVIDIA-A100-SXM4-80GB", "Tesla-T4"}
    assert snapshot.gpus["Tesla-T4"] == GpuType("Tesla-T4", 0.4, 16.0)
    assert snapshot.job("b").gpu_types == frozenset({"Tesla-T4"})
    assert snapshot.job("q").gpu_memory_gib == 24


BAD_FIELDS = [
    # The fields that were there before.
    ("jobs.0.minWorkers", 0, "jobs[0].minWorkers (job 'j'): Input should be greater than or equal to 1, got 0"),
    ("jobs.0.maxWorkers", "many", "jobs[0].maxWorkers (job 'j')"),
    ("jobs.0.remainingWork", -1, "jobs[0].remainingWork (job 'j')"),
    ("jobs.0.remainingWork", "100", "jobs[0].remainingWork (job 'j'): Input should be a valid number"),
    ("jobs.0.gpusPerWorker", 1.5, "jobs[0].gpusPerWorker (job 'j')"),
    ("jobs.0.workers", {"i0": 9}, "jobs[0] (job 'j'): runs 9 workers"),
    ("jobs.0.workers", {"nowhere": 1}, "unknown server 'nowhere'"),
    ("jobs.0.workers", {"i0": 2, "t0": 2}, "job j: runs on several GPU types (A100, T4) without mixGpuTypes"),
    ("jobs.0.name", ..., "jobs[0].name"),
    ("jobs.0.colour", "red", "jobs[0].colour (job 'j'): Extra inputs are not permitted"),
    ("servers.1.state", "lent", "servers[1].state (server 'i0')"),
    ("servers.1.state", ..., "servers[1] (server 'i0'): an inference server needs a state"),
    ("servers.0.state", "idle", "servers[0] (server 't0'): a training server has no loan state"),
    ("servers.0.state", "loaned", "omit 'state' or write 'serving'"),
    ("servers.0.gpus", 0, "servers[0].gpus (server 't0')"),
    ("servers.0.pool", "batch", "servers[0].pool (server 't0')"),
    ("servers.1.name", "t0", "duplicate server name 't0'"),
    ("servers", ..., "servers: Field required"),
    ("apiVersion", "lyra.dev/v9", "unsupported apiVersion"),
    # The GPU catalogue.
    ("gpuCatalog", {"T4": {"speed": 0}}, "gpuCatalog.T4.speed: Input should be greater than 0"),
    ("gpuCatalog", {"T4": {"speed": 1001}}, "gpuCatalog.T4.speed: Input should be less than or equal to 1000"),
    ("gpuCatalog", {"T4": {"speed": "fast"}}, "gpuCatalog.T4.speed: Input should be a valid number"),
    ("gpuCatalog", {"T4": {"memoryGiB": 16}}, "gpuCatalog.T4.speed: Field required"),
    ("gpuCatalog", {"T4": {"speed": 1, "memoryGiB": 0}}, "gpuCatalog.T4.memoryGiB: Input should be greater than 0"),
    ("gpuCatalog", {"T4": {"speed": 1, "fp16": True}}, "gpuCatalog.T4.fp16: Extra inputs are not permitted"),
    ("gpuCatalog", {"": {"speed": 1}}, "gpuCatalog. (key): String should have at least 1 character"),
    ("gpuCatalog", [], "gpuCatalog: Input should be a valid dictionary"),
    ("speedFactors", {"T4": 0.35}, "'speedFactors' was replaced by 'gpuCatalog': write \"gpuCatalog\": {\"T4\": {"),
    # Where a job may run, and how fast.
    ("jobs.0.gpuTypes", [], "jobs[0].gpuTypes (job 'j'): List should have at least 1 item"),
    ("jobs.0.gpuTypes", "T4", "jobs[0].gpuTypes (job 'j'): Input should be a valid list"),
    ("jobs.0.gpuTypes", [""], "jobs[0].gpuTypes[0] (job 'j'): String should have at least 1 character"),
    ("jobs.0.gpuTypes", ["T4", "T4"], "jobs[0].gpuTypes (job 'j'): lists the GPU type 'T4' twice"),
    ("jobs.0.gpuTypes", ["A100"], "job j: has workers on i0, a T4 server, which the job may not use (its gpuTypes"),
    ("jobs.0.gpuMemoryGiB", 0, "jobs[0].gpuMemoryGiB (job 'j'): Input should be greater than 0"),
    ("jobs.0.gpuMemoryGiB", "24Gi", "jobs[0].gpuMemoryGiB (job 'j'): Input should be a valid number"),
    ("jobs.0.gpuMemoryGiB", 24, "which the job may not use (it needs 24 GiB per GPU, a T4 has 16)"),
    ("jobs.0.speeds", {"T4": 0}, "jobs[0].speeds.T4 (job 'j'): Input should be greater than 0"),
    ("jobs.0.speeds", {"T4": 2000}, "jobs[0].speeds.T4 (job 'j'): Input should be less than or equal to 1000"),
    ("jobs.0.speeds", [0.5], "jobs[0].speeds (job 'j'): Input should be a valid dictionary"),
    ("jobs.0.mixGpuTypes", "yes", "jobs[0].mixGpuTypes (job 'j'): Input should be a valid boolean"),
    ("jobs.0.mixGpuTypes", 1, "jobs[0].mixGpuTypes (job 'j'): Input should be a valid boolean"),
    ("jobs.0.scalingOverhead", 1.5, "jobs[0].scalingOverhead (job 'j'): Input should be less than or equal to 1"),
    ("jobs.0.scalingOverhead", -0.1, "jobs[0].scalingOverhead (job 'j'): Input should be greater than or equal to 0"),
    # The limits that keep every policy bounded.
    (
        "jobs.0.maxWorkers",
        MAX_WORKERS + 1,
        f"jobs[0].maxWorkers (job 'j'): Input should be less than or equal to {MAX_WORKERS}",
    ),
    ("jobs.0.maxWorkers", 1e9, "jobs[0].maxWorkers (job 'j'): Input should be a valid integer, got 1000000000.0"),
    ("jobs.0.minWorkers", MAX_WORKERS + 1, "jobs[0].minWorkers (job 'j'): Input should be less than or equal to"),
    (
        "jobs.0.gpusPerWorker",
        MAX_GPUS_PER_SERVER + 1,
        f"jobs[0].gpusPerWorker (job 'j'): Input should be less than or equal to {MAX_GPUS_PER_SERVER}",
    ),
    (
        "servers.0.gpus",
        MAX_GPUS_PER_SERVER + 1,
        f"servers[0].gpus (server 't0'): Input should be less than or equal to {MAX_GPUS_PER_SERVER}",
    ),
    ("jobs.0.workers", {"i0": MAX_WORKERS + 1}, "jobs[0].workers.i0 (job 'j'): Input should be less than or equal to"),
    ("jobs.0.priority", 2**31, "jobs[0].priority (job 'j'): Input should be less than or equal to 2147483647"),
    ("jobs.0.remainingWork", 1e13, "jobs[0].remainingWork (job 'j'): Input should be less than or equal to"),
    ("jobs.0.secondsSinceCheckpoint", 1e13, "jobs[0].secondsSinceCheckpoint (job 'j'): Input should be less than"),
    ("jobs.0.submitTime", -1e13, "jobs[0].submitTime (job 'j'): Input should be greater than or equal to"),
    ("jobs.0.name", "j" * 254, "jobs[0].name (job 'jjjj"),
    ("servers.0.gpuType", "A" * 254, "servers[0].gpuType (server 't0'): String should have at most 253 characters"),
    ("jobs.0.gpuTypes", ["T"] * 1001, "jobs[0].gpuTypes (job 'j'): List should have at most 1000 items"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_FIELDS, ids=[f"{p}={str(v)[:30]}" for p, v, _ in BAD_FIELDS])
def test_a_bad_field_is_named(path: str, value: Any, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        parse_snapshot(_with(path, value))
    assert message in str(caught.value)


def test_a_limit_says_it_is_one() -> None:
    with pytest.raises(SnapshotError, match=r"a limit of Lyra's: docs/snapshot.md lists them"):
        parse_snapshot(_with("jobs.0.maxWorkers", MAX_WORKERS + 1))


def test_over_capacity_is_rejected() -> None:
    text = _with("jobs.0.gpusPerWorker", 8)
    with pytest.raises(SnapshotError, match="server i0: training uses 16 GPUs but the server has 8"):
        parse_snapshot(text)


def test_training_on_a_serving_inference_server_is_rejected() -> None:
    with pytest.raises(SnapshotError, match="an inference server in state serving"):
        parse_snapshot(_with("servers.1.state", "serving"))


def test_the_published_schema_has_not_drifted() -> None:
    """docs/snapshot.schema.json is generated: `lyra plan schema > docs/snapshot.schema.json`."""
    assert json.loads(SCHEMA.read_text()) == snapshot_json_schema()


def test_the_schema_names_the_new_fields() -> None:
    schema = snapshot_json_schema()
    assert "gpuCatalog" in schema["properties"]
    assert "speedFactors" not in schema["properties"]
    job = schema["$defs"]["JobDocument"]["properties"]
    assert {"gpuTypes", "gpuMemoryGiB", "speeds", "mixGpuTypes", "scalingOverhead"} <= set(job)
