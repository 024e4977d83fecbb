"""Plan documents: every field present, consistent with the plan, finite, and JSON all the way down."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lyra.core import AllocationPlan, ClusterSnapshot, allocate_workers, plan_reclaim
from lyra.snapshot import allocation_plan_document, migration_plan_document, parse_snapshot, reclaim_plan_document

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "snapshot.json"


def _snapshot(document: dict[str, Any]) -> ClusterSnapshot:
    return parse_snapshot(json.dumps(document))


def _server(
    name: str, gpus: int, *, pool: str = "training", gpu: str = "V100", state: str | None = None
) -> dict[str, Any]:
    server: dict[str, Any] = {"name": name, "pool": pool, "gpuType": gpu, "gpus": gpus}
    if state is not None:
        server["state"] = state
    return server


def _job(name: str, low: int, high: int, work: float, **fields: Any) -> dict[str, Any]:
    return {"name": name, "gpusPerWorker": 1, "minWorkers": low, "maxWorkers": high, "remainingWork": work} | fields


def _check_allocation(snapshot: ClusterSnapshot, document: dict[str, Any]) -> None:
    """``placement`` realises ``workers`` within every server's GPUs, on the types ``gpuTypes`` names."""
    servers = {s.name: s for s in snapshot.servers}
    used = dict.fromkeys(servers, 0)
    assert set(document["workers"]) == {j.name for j in snapshot.jobs}
    for job in snapshot.jobs:
        count = document["workers"][job.name]
        if count == 0:
            assert job.name not in document["placement"]
            assert job.name not in document["gpuTypes"]
            assert job.name in document["queued"]
            continue
        placement = document["placement"][job.name]
        assert sum(placement.values()) == count
        assert sorted({servers[s].gpu_type for s in placement}) == document["gpuTypes"][job.name]
        for server, workers in placement.items():
            used[server] += workers * job.gpus_per_worker
    assert all(used[name] <= servers[name].gpus for name in used)
    assert sum(used.values()) == document["gpusUsed"]
    json.dumps(document, allow_nan=False)


def test_the_allocation_document_places_every_job_that_runs() -> None:
    snapshot = parse_snapshot(EXAMPLE.read_bytes())
    document = allocation_plan_document(allocate_workers(snapshot))
    assert list(document) == [
        "workers",
        "gpuTypes",
        "placement",
        "started",
        "preempted",
        "resized",
        "migrated",
        "queued",
        "gpusUsed",
        "capacityGpus",
        "fluidAverageJctSeconds",
    ]
    _check_allocation(snapshot, document)
    # Running jobs are placed too, and q (24 GiB per GPU) only where the memory is.
    assert set(document["placement"]) == {"a", "b", "c", "p", "q"}
    assert document["gpuTypes"]["q"] == ["NVIDIA-A100-SXM4-80GB"]
    assert document["gpuTypes"]["b"] == ["Tesla-T4"]


def test_a_waiting_job_says_why() -> None:
    snapshot = _snapshot(
        {"servers": [_server("v0", 4)], "jobs": [_job("run", 4, 4, 100, workers={"v0": 4}), _job("wait", 2, 2, 50)]}
    )
    document = allocation_plan_document(allocate_workers(snapshot))
    assert document["workers"] == {"run": 4, "wait": 0}
    assert document["queued"] == {"wait": "base of 2 workers x 1 GPU does not fit: V100 holds 0 now, at most 4"}
    _check_allocation(snapshot, document)


#: The issue's case: five queued jobs on 11 GPUs of one type, on two servers; their bases (9 GPUs) all fit.
FIVE_QUEUED = {
    "servers": [_server("big", 8), _server("small", 3)],
    "jobs": [
        _job("j1", 2, 5, 12),
        _job("j2", 3, 8, 104),
        _job("j3", 2, 7, 111),
        _job("j4", 1, 3, 318),
        _job("j5", 1, 4, 359),
    ],
}


def test_every_job_whose_base_fits_starts() -> None:
    snapshot = _snapshot(FIVE_QUEUED)
    document = allocation_plan_document(allocate_workers(snapshot))
    assert all(workers > 0 for workers in document["workers"].values()), document["workers"]
    assert document["started"] == ["j1", "j2", "j3", "j4", "j5"]
    assert document["queued"] == {}
    _check_allocation(snapshot, document)


def test_the_reclaim_document_reports_jobs_already_preempted() -> None:
    # "gone" lost one of its two base workers to the reclaiming server: an earlier reclaim preempted it.
    snapshot = _snapshot(
        {
            "servers": [
                _server("l0", 4, pool="inference", gpu="T4", state="loaned"),
                _server("r0", 4, pool="inference", gpu="T4", state="reclaiming"),
            ],
            "jobs": [_job("gone", 2, 2, 100, workers={"l0": 1, "r0": 1})],
        }
    )
    document = reclaim_plan_document(plan_reclaim(snapshot, 1))
    assert document["alreadyPreempted"] == ["gone"]
    assert document["preempted"] == []
    assert document["evictions"] == {"l0": {"gone": 1}}


#: A job on slow GPUs, and fast ones free: migrating pays for a short restart, not for a very long one.
MIGRATION = {
    "gpuCatalog": {"T4": {"speed": 0.25, "memoryGiB": 16}},
    "servers": [_server("v0", 4), _server("l0", 4, pool="inference", gpu="T4", state="loaned")],
    "jobs": [_job("slow", 4, 4, 4000, workers={"l0": 4})],
}


@pytest.mark.parametrize(
    ("restart", "min_gain", "moves", "declined"),
    [
        (60.0, 0.0, ["slow"], None),
        (60.0, 1e9, [], "less than --min-gain 1e+09 s"),
        (1e6, 0.0, [], None),
    ],
    ids=["pays", "below-min-gain", "restart-too-dear"],
)
def test_the_migration_document(restart: float, min_gain: float, moves: list[str], declined: str | None) -> None:
    snapshot = _snapshot(MIGRATION)
    staying = allocate_workers(snapshot)
    moving = allocate_workers(snapshot, restart_cost_s=restart)
    document = migration_plan_document(snapshot, moving, staying, restart_cost_s=restart, min_gain_s=min_gain)
    assert [m["job"] for m in document["migrations"]] == moves
    if declined is None:
        assert document["declined"] is None
    else:
        assert declined in document["declined"]
    applied = moving if moves else staying
    assert document["allocation"] == allocation_plan_document(applied)
    if moves:
        assert document["migrations"] == [
            {"job": "slow", "fromGpuTypes": ["T4"], "toGpuTypes": ["V100"], "from": {"l0": 4}, "to": {"v0": 4}}
        ]
        # 1000 s on T4s at a quarter speed: 4000 s; on V100s 1000 s plus the 60 s restart.
        assert document["gainSeconds"] == pytest.approx(2940.0)
    else:
        assert document["gainSeconds"] == 0.0
    json.dumps(document, allow_nan=False)


def _with_jct(plan: AllocationPlan, jct: float) -> AllocationPlan:
    return replace(plan, fluid_average_jct=jct)


@pytest.mark.parametrize(
    ("before", "after", "min_gain", "gain", "declined"),
    [
        (100.0, 100.0, 0.0, 0.0, "gains nothing over the plan without moves"),
        (math.inf, math.inf, 0.0, None, None),
        (math.inf, math.inf, 1.0, 0.0, "the gain of moving slow is unknown"),
    ],
    ids=["no-gain", "unknown-gain", "unknown-gain-with-a-minimum"],
)
def test_migrations_whose_gain_is_none_or_unknown(
    before: float, after: float, min_gain: float, gain: float | None, declined: str | None
) -> None:
    snapshot = _snapshot(MIGRATION)
    staying = _with_jct(allocate_workers(snapshot), before)
    moving = _with_jct(allocate_workers(snapshot, restart_cost_s=60.0), after)
    assert moving.migrated == ("slow",)
    document = migration_plan_document(snapshot, moving, staying, restart_cost_s=60.0, min_gain_s=min_gain)
    assert document["gainSeconds"] == gain
    assert (document["declined"] is None) == (declined is None)
    if declined is not None:
        assert declined in document["declined"]
    json.dumps(document, allow_nan=False)
