"""The cluster model: every value object refuses a bad field with a message naming the object and the field."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from lyra.core import (
    ClusterSnapshot,
    InferenceDemand,
    InvalidClusterError,
    LoanState,
    Pool,
    Server,
    SpeedFactors,
    TrainingJob,
)

from .builders import idle, job, loaned, reclaiming, serving, snapshot, training

GOOD_SERVER: dict[str, Any] = {
    "name": "s1",
    "pool": Pool.INFERENCE,
    "gpu_type": "T4",
    "gpus": 8,
    "state": LoanState.LOANED,
}

# (id, overrides, pattern the message must match: the object, then the field)
BAD_SERVERS = [
    ("empty-name", {"name": ""}, r"server name must be a non-empty string"),
    ("name-not-str", {"name": 7}, r"server name must be a non-empty string"),
    ("pool-not-enum", {"pool": "inference"}, r"server s1: pool must be a Pool"),
    ("empty-gpu-type", {"gpu_type": ""}, r"server s1: gpu_type must not be empty"),
    ("zero-gpus", {"gpus": 0}, r"server s1: gpus must be a positive integer"),
    ("negative-gpus", {"gpus": -8}, r"server s1: gpus must be a positive integer"),
    ("float-gpus", {"gpus": 8.0}, r"server s1: gpus must be a positive integer"),
    ("inference-without-state", {"state": None}, r"server s1: an inference server needs a loan state"),
    ("inference-state-not-enum", {"state": "loaned"}, r"server s1: an inference server needs a loan state"),
    (
        "training-with-state",
        {"pool": Pool.TRAINING, "state": LoanState.IDLE},
        r"server s1: a training server has no loan state",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), [c[1:] for c in BAD_SERVERS], ids=[c[0] for c in BAD_SERVERS])
def test_server_refuses_bad_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidClusterError, match=message):
        Server(**(GOOD_SERVER | overrides))


GOOD_JOB: dict[str, Any] = {
    "name": "j1",
    "gpus_per_worker": 1,
    "min_workers": 2,
    "max_workers": 6,
    "remaining_work": 300.0,
}

BAD_JOBS = [
    ("empty-name", {"name": ""}, r"job name must be a non-empty string"),
    ("zero-gpus-per-worker", {"gpus_per_worker": 0}, r"job j1: gpus_per_worker must be a positive integer"),
    ("float-gpus-per-worker", {"gpus_per_worker": 1.5}, r"job j1: gpus_per_worker must be a positive integer"),
    ("zero-min-workers", {"min_workers": 0}, r"job j1: min_workers must be an integer >= 1"),
    ("max-below-min", {"max_workers": 1}, r"job j1: max_workers \(1\) must be an integer >= min_workers \(2\)"),
    ("negative-work", {"remaining_work": -1.0}, r"job j1: remaining_work must be finite and >= 0"),
    ("infinite-work", {"remaining_work": math.inf}, r"job j1: remaining_work must be finite and >= 0"),
    ("nan-work", {"remaining_work": math.nan}, r"job j1: remaining_work must be finite and >= 0"),
    ("infinite-submit-time", {"submit_time": math.inf}, r"job j1: submit_time must be finite"),
    (
        "negative-checkpoint-age",
        {"seconds_since_checkpoint": -5.0},
        r"job j1: seconds_since_checkpoint must be finite and >= 0",
    ),
    ("empty-placement-server", {"placement": {"": 2}}, r"job j1: placement server name must be a non-empty string"),
    ("negative-count", {"placement": {"s1": -1}}, r"job j1: worker count on s1 must be an integer >= 0"),
    ("float-count", {"placement": {"s1": 2.0}}, r"job j1: worker count on s1 must be an integer >= 0"),
    ("below-min", {"placement": {"s1": 1}}, r"job j1: runs 1 workers, outside \[2, 6\]"),
    ("above-max", {"placement": {"s1": 4, "s2": 3}}, r"job j1: runs 7 workers, outside \[2, 6\]"),
]


@pytest.mark.parametrize(("overrides", "message"), [c[1:] for c in BAD_JOBS], ids=[c[0] for c in BAD_JOBS])
def test_training_job_refuses_bad_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidClusterError, match=message):
        TrainingJob(**(GOOD_JOB | overrides))


@pytest.mark.parametrize(
    ("factors", "default", "message"),
    [
        ({"T4": 0.0}, 1.0, r"speed factor for 'T4' must be finite and > 0"),
        ({"T4": -0.5}, 1.0, r"speed factor for 'T4' must be finite and > 0"),
        ({"T4": math.nan}, 1.0, r"speed factor for 'T4' must be finite and > 0"),
        ({"T4": math.inf}, 1.0, r"speed factor for 'T4' must be finite and > 0"),
        ({}, 0.0, r"default speed factor must be > 0"),
    ],
    ids=["zero", "negative", "nan", "infinite", "zero-default"],
)
def test_speed_factors_refuse_bad_factor(factors: dict[str, float], default: float, message: str) -> None:
    with pytest.raises(InvalidClusterError, match=message):
        SpeedFactors(factors, default)


@pytest.mark.parametrize("servers", [-1, 1.5, None], ids=["negative", "float", "none"])
def test_inference_demand_refuses_bad_count(servers: Any) -> None:
    with pytest.raises(InvalidClusterError, match=r"inference demand must be an integer number of servers >= 0"):
        InferenceDemand(servers)


def test_job_derived_properties() -> None:
    running = job("a").gpus(2).workers(2, 6).work(300).on({"l0": 3, "t0": 1, "t1": 0}).build()
    assert dict(running.placement) == {"l0": 3, "t0": 1}, "zero counts are dropped"
    assert running.workers == 4
    assert running.gpus == 8
    assert running.flexible_workers == 2
    assert running.is_running
    assert running.is_elastic
    assert running.time_at(6) == 50.0
    assert running.time_at(6, speed=0.5) == 100.0
    assert running.time_at(0) == math.inf
    queued = job("b").workers(3).build()
    assert (queued.workers, queued.flexible_workers, queued.is_running, queued.is_elastic) == (0, 0, False, False)


def test_value_objects_are_immutable() -> None:
    built = job("a").workers(1, 2).on({"t0": 1}).build()
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.min_workers = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        built.placement["t0"] = 2  # type: ignore[index]
    speed = SpeedFactors({"T4": 0.25})
    with pytest.raises(TypeError):
        speed.factors["T4"] = 1.0  # type: ignore[index]
    assert speed.of("T4") == 0.25
    assert speed.of("H100") == 1.0


def test_training_server_hosts_training_and_inference_only_when_loaned_or_reclaiming() -> None:
    assert training("t0").hosts_training
    assert loaned("l0").hosts_training
    assert reclaiming("r0").hosts_training
    assert not serving("s0").hosts_training
    assert not idle("i0").hosts_training


# (id, servers, jobs, pattern naming the job or server and what is wrong)
INCONSISTENT_SNAPSHOTS = [
    (
        "unknown-server",
        [training("t0")],
        [job("a").on({"nowhere": 1})],
        r"job a: runs on unknown server 'nowhere'",
    ),
    (
        "over-capacity",
        [training("t0", gpus=8)],
        [job("a").gpus(4).workers(1, 2).on({"t0": 2}), job("b").gpus(1).on({"t0": 1})],
        r"server t0: training uses 9 GPUs but the server has 8",
    ),
    (
        "training-on-serving",
        [serving("s0")],
        [job("a").on({"s0": 1})],
        r"job a: has workers on s0, an inference server in state serving",
    ),
    (
        "training-on-idle",
        [idle("i0")],
        [job("a").on({"i0": 1})],
        r"job a: has workers on i0, an inference server in state idle",
    ),
    ("duplicate-server", [training("t0"), loaned("t0")], [], r"duplicate server name 't0'"),
    ("duplicate-job", [training("t0")], [job("a"), job("a")], r"duplicate job name 'a'"),
]


@pytest.mark.parametrize(
    ("servers", "jobs", "message"),
    [c[1:] for c in INCONSISTENT_SNAPSHOTS],
    ids=[c[0] for c in INCONSISTENT_SNAPSHOTS],
)
def test_snapshot_refuses_inconsistency(servers: list[Server], jobs: list[Any], message: str) -> None:
    with pytest.raises(InvalidClusterError, match=message):
        snapshot(servers, jobs)


def test_snapshot_views() -> None:
    snap = snapshot(
        [loaned("l1"), training("t0"), reclaiming("r0"), serving("s0"), idle("i0"), loaned("l0", gpus=4)],
        [job("b").gpus(2).workers(1, 3).on({"l1": 2, "t0": 1}), job("a").on({"r0": 1})],
    )
    assert [s.name for s in snap.servers] == ["i0", "l0", "l1", "r0", "s0", "t0"], "servers sorted by name"
    assert [j.name for j in snap.jobs] == ["a", "b"], "jobs sorted by name"
    assert snap.used_gpus() == {"i0": 0, "l0": 0, "l1": 4, "r0": 1, "s0": 0, "t0": 2}
    assert snap.training_capacity() == 8 + 8 + 4, "training servers plus loaned ones; reclaiming ones excluded"
    assert [s.name for s in snap.servers_in(LoanState.LOANED, LoanState.IDLE)] == ["i0", "l0", "l1"]
    assert snap.server("t0").pool is Pool.TRAINING
    assert snap.job("b").workers == 3
    with pytest.raises(KeyError):
        snap.server("zz")
    with pytest.raises(KeyError):
        snap.job("zz")
    assert ClusterSnapshot(()).training_capacity() == 0
