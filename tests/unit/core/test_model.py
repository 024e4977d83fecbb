"""The cluster model: every value object refuses a bad field with a message naming the object and the field; the
speed model (pace of the slowest worker, scaling efficiency) and where a job may run."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest

from lyra.core import (
    MAX_WORKERS,
    ClusterSnapshot,
    GpuCatalog,
    GpuType,
    InferenceDemand,
    InvalidClusterError,
    LoanState,
    Pool,
    Server,
    TrainingJob,
)

from .builders import CATALOG, T4, V100, JobBuilder, idle, job, loaned, reclaiming, serving, snapshot, training

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
    ("empty-gpu-type", {"gpu_type": ""}, r"server s1: gpu_type must be a non-empty string"),
    # Core bug: a non-string GPU type is accepted, and allocation later crashes with AttributeError.
    ("gpu-type-not-str", {"gpu_type": 7}, r"server s1: gpu_type"),
    ("zero-gpus", {"gpus": 0}, r"server s1: gpus must be a positive integer"),
    ("negative-gpus", {"gpus": -8}, r"server s1: gpus must be a positive integer"),
    ("float-gpus", {"gpus": 8.0}, r"server s1: gpus must be a positive integer"),
    ("too-many-gpus", {"gpus": 1025}, r"server s1: gpus must be a positive integer of at most 1024, got 1025"),
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
    ("zero-gpus-per-worker", {"gpus_per_worker": 0}, r"job j1: gpus_per_worker must be an integer in \[1, 1024\]"),
    ("float-gpus-per-worker", {"gpus_per_worker": 1.5}, r"job j1: gpus_per_worker must be an integer in \[1, 1024\]"),
    ("bool-gpus-per-worker", {"gpus_per_worker": True}, r"job j1: gpus_per_worker must be an integer"),
    ("huge-gpus-per-worker", {"gpus_per_worker": 1025}, r"job j1: gpus_per_worker .* got 1025"),
    ("zero-min-workers", {"min_workers": 0}, r"job j1: min_workers must be an integer >= 1"),
    ("max-below-min", {"max_workers": 1}, r"job j1: max_workers \(1\) must be an integer >= min_workers \(2\)"),
    ("float-max", {"max_workers": 6.0}, r"job j1: max_workers \(6.0\) must be an integer >= min_workers"),
    (
        "max-above-the-bound",
        {"max_workers": MAX_WORKERS + 1},
        r"job j1: max_workers must be at most 100,000, got 100001",
    ),
    ("negative-work", {"remaining_work": -1.0}, r"job j1: remaining_work must be finite and >= 0"),
    ("infinite-work", {"remaining_work": math.inf}, r"job j1: remaining_work must be finite and >= 0"),
    ("nan-work", {"remaining_work": math.nan}, r"job j1: remaining_work must be finite and >= 0"),
    ("bool-work", {"remaining_work": True}, r"job j1: remaining_work must be finite and >= 0"),
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
    ("empty-gpu-types", {"gpu_types": frozenset()}, r"job j1: gpu_types must be non-empty GPU type names .* got \[\]"),
    ("blank-gpu-type", {"gpu_types": frozenset({"V100", ""})}, r"job j1: gpu_types must be non-empty GPU type names"),
    ("gpu-type-not-str", {"gpu_types": frozenset({"V100", 4})}, r"job j1: gpu_types must be non-empty GPU type names"),
    # Core bug: a bare string is split into its characters ({"V", "1", "0"}), a job that may use no real type.
    ("gpu-types-a-bare-string", {"gpu_types": "V100"}, r"job j1: gpu_types"),
    ("zero-memory", {"gpu_memory_gib": 0}, r"job j1: gpu_memory_gib must be > 0 \(or None\), got 0"),
    ("nan-memory", {"gpu_memory_gib": math.nan}, r"job j1: gpu_memory_gib must be > 0"),
    ("zero-speed", {"speeds": {"T4": 0}}, r"job j1: speed on 'T4' must be in \(0, 1000\], got 0"),
    ("negative-speed", {"speeds": {"T4": -0.5}}, r"job j1: speed on 'T4' must be in \(0, 1000\]"),
    ("infinite-speed", {"speeds": {"T4": math.inf}}, r"job j1: speed on 'T4' must be in \(0, 1000\]"),
    ("speed-on-blank-type", {"speeds": {"": 1.0}}, r"job j1: speed on '' must be in \(0, 1000\]"),
    ("mix-not-bool", {"mix_gpu_types": 1}, r"job j1: mix_gpu_types must be a bool"),
    ("negative-overhead", {"scaling_overhead": -0.1}, r"job j1: scaling_overhead must be in \[0, 1\], got -0.1"),
    ("overhead-above-one", {"scaling_overhead": 1.5}, r"job j1: scaling_overhead must be in \[0, 1\], got 1.5"),
    ("nan-overhead", {"scaling_overhead": math.nan}, r"job j1: scaling_overhead must be in \[0, 1\]"),
]


@pytest.mark.parametrize(("overrides", "message"), [c[1:] for c in BAD_JOBS], ids=[c[0] for c in BAD_JOBS])
def test_training_job_refuses_bad_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidClusterError, match=message):
        TrainingJob(**(GOOD_JOB | overrides))


def test_training_job_accepts_the_bounds() -> None:
    widest = TrainingJob(**(GOOD_JOB | {"max_workers": MAX_WORKERS, "scaling_overhead": 1.0}))
    assert widest.max_workers == MAX_WORKERS
    assert TrainingJob(**(GOOD_JOB | {"speeds": {"T4": 1000}})).speeds == {"T4": 1000.0}


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


# Pace = w * s * e(w), e(w) = 1 / (1 + overhead * (w - 1)). (id, overhead, workers, speed, efficiency, pace)
PACES = [
    ("linear-one-worker", 0.0, 1, 1.0, 1.0, 1.0),
    ("linear-six-workers", 0.0, 6, 1.0, 1.0, 6.0),
    ("linear-on-a-slow-type", 0.0, 4, 0.5, 1.0, 2.0),
    ("overhead-one-worker-is-free", 0.5, 1, 1.0, 1.0, 1.0),
    ("overhead-two-workers", 0.5, 2, 1.0, 1 / 1.5, 2 / 1.5),
    ("overhead-five-workers", 0.25, 5, 0.5, 0.5, 1.25),
    ("full-overhead", 1.0, 4, 1.0, 0.25, 1.0),
    ("no-workers", 0.5, 0, 1.0, 1.0, 0.0),
]


@pytest.mark.parametrize(
    ("overhead", "workers", "speed", "efficiency", "pace"), [c[1:] for c in PACES], ids=[c[0] for c in PACES]
)
def test_pace_is_workers_times_speed_times_efficiency(
    overhead: float, workers: int, speed: float, efficiency: float, pace: float
) -> None:
    spec = job("a").workers(1, 8).work(120).overhead(overhead).build()
    assert spec.efficiency(workers) == pytest.approx(efficiency)
    assert spec.pace(workers, speed) == pytest.approx(pace)
    assert spec.time_at(workers, speed) == (pytest.approx(120 / pace) if pace else math.inf)


def test_another_worker_of_the_same_type_never_slows_a_job_down() -> None:
    for overhead in (0.0, 0.1, 0.5, 1.0):
        spec = job("a").workers(1, 64).overhead(overhead).build()
        paces = [spec.pace(w, 0.5) for w in range(1, 65)]
        # Flat at overhead 1 (w / w): compare with a rounding margin.
        assert all(later >= earlier * (1 - 1e-12) for earlier, later in itertools.pairwise(paces)), overhead
    rising = job("a").workers(1, 64).overhead(0.5).build()
    assert rising.pace(64, 1.0) > rising.pace(63, 1.0)


def test_one_v100_and_one_t4_worker_run_at_the_t4_pace() -> None:
    """Synchronous training runs at its slowest worker's pace: 2 x 0.5 = 1.0, not 1 + 0.5."""
    snap = snapshot([training("v0"), loaned("l0")], [job("a").workers(2).work(100).mixing().on({"v0": 1, "l0": 1})])
    spec = snap.job("a")
    assert snap.job_speed(spec) == 0.5
    assert spec.pace(spec.workers, snap.job_speed(spec)) == 1.0
    assert spec.time_at(spec.workers, snap.job_speed(spec)) == 100.0
    assert snap.job_speed(job("q").build()) == 0.0, "a queued job has no speed"


def test_job_speed_uses_the_jobs_own_measured_speed() -> None:
    snap = snapshot([loaned("l0")], [job("a").speed(T4, 0.8).on({"l0": 1})])
    assert snap.job_speed(snap.job("a")) == 0.8
    assert snap.job("a").speed_on(CATALOG[V100]) == 1.0, "other types keep the catalogue's speed"


# (id, job builder, GPU type, may use)
MAY_USE = [
    ("any-type", job("a"), GpuType("T4", 0.5, 16.0), True),
    ("listed-type", job("a").types("V100", "T4"), GpuType("T4", 0.5, 16.0), True),
    ("unlisted-type", job("a").types("V100"), GpuType("T4", 0.5, 16.0), False),
    ("memory-fits", job("a").memory(16), GpuType("T4", 0.5, 16.0), True),
    ("memory-too-small", job("a").memory(24), GpuType("T4", 0.5, 16.0), False),
    ("memory-unknown-excludes-nothing", job("a").memory(80), GpuType("Mystery"), True),
    ("listed-but-too-small", job("a").types("T4").memory(24), GpuType("T4", 0.5, 16.0), False),
    ("big-enough-but-unlisted", job("a").types("T4").memory(24), GpuType("V100", 1.0, 32.0), False),
]


@pytest.mark.parametrize(("builder", "gpu", "allowed"), [c[1:] for c in MAY_USE], ids=[c[0] for c in MAY_USE])
def test_may_use_by_type_and_memory(builder: JobBuilder, gpu: GpuType, allowed: bool) -> None:
    assert builder.build().may_use(gpu) is allowed


def test_value_objects_are_immutable() -> None:
    built = job("a").workers(1, 2).on({"t0": 1}).types("V100").speed("T4", 0.3).build()
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.min_workers = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        built.placement["t0"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        built.speeds["T4"] = 1.0  # type: ignore[index]
    assert isinstance(built.gpu_types, frozenset)
    with pytest.raises(dataclasses.FrozenInstanceError):
        CATALOG[T4].speed = 1.0  # type: ignore[misc]


def test_jobs_hash_and_compare_by_value() -> None:
    a = job("a").types("V100").speed("T4", 0.3).build()
    assert a == job("a").types("V100").speed("T4", 0.3).build()
    assert a != job("a").types("T4").speed("T4", 0.3).build()
    assert hash(a) == hash(job("a").build())


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
    (
        "on-a-type-not-listed",
        [training("v0"), loaned("l0")],
        [job("a").types("V100").on({"l0": 1})],
        r"job a: has workers on l0, a T4 server, which the job may not use \(its gpu_types are V100\)",
    ),
    (
        "on-a-type-too-small",
        [training("v0"), loaned("l0")],
        [job("a").memory(24).on({"l0": 1})],
        r"job a: has workers on l0, a T4 server, which the job may not use \(it needs 24 GiB per GPU, a T4 has 16\)",
    ),
    (
        "two-types-without-mixing",
        [training("v0"), loaned("l0")],
        [job("a").workers(2).on({"v0": 1, "l0": 1})],
        r"job a: runs on several GPU types \(T4, V100\) without mix_gpu_types",
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


def test_snapshot_accepts_two_types_with_mixing_and_family_defaults_without_catalogue() -> None:
    mixed = snapshot([training("v0"), loaned("l0")], [job("a").workers(2).mixing().on({"v0": 1, "l0": 1})])
    assert mixed.job("a").workers == 2
    real = ClusterSnapshot(
        (Server("t4", Pool.INFERENCE, "Tesla-T4", 4, LoanState.LOANED),),
        (job("a").memory(16).on({"t4": 1}).build(),),
    )
    assert real.gpu_type_of(real.server("t4")) == GpuType("Tesla-T4", 0.4, 16.0)
    with pytest.raises(InvalidClusterError, match=r"it needs 24 GiB per GPU, a Tesla-T4 has 16"):
        ClusterSnapshot(real.servers, (job("a").memory(24).on({"t4": 1}).build(),))


def test_snapshot_views() -> None:
    snap = snapshot(
        [loaned("l1"), training("t0", gpu_type=T4), reclaiming("r0"), serving("s0"), idle("i0"), loaned("l0", gpus=4)],
        [job("b").gpus(2).workers(1, 3).on({"l1": 2, "t0": 1}), job("a").on({"r0": 1})],
    )
    assert [s.name for s in snap.servers] == ["i0", "l0", "l1", "r0", "s0", "t0"], "servers sorted by name"
    assert [j.name for j in snap.jobs] == ["a", "b"], "jobs sorted by name"
    assert snap.used_gpus() == {"i0": 0, "l0": 0, "l1": 4, "r0": 1, "s0": 0, "t0": 2}
    assert snap.training_capacity() == 8 + 8 + 4, "training servers plus loaned ones; reclaiming ones excluded"
    assert [s.name for s in snap.servers_in(LoanState.LOANED, LoanState.IDLE)] == ["i0", "l0", "l1"]
    assert snap.server("t0").pool is Pool.TRAINING
    assert snap.job("b").workers == 3
    assert snap.gpu_type_of(snap.server("l0")) == GpuType("T4", 0.5, 16.0)
    assert snap.gpus == CATALOG
    with pytest.raises(KeyError):
        snap.server("zz")
    with pytest.raises(KeyError):
        snap.job("zz")
    assert ClusterSnapshot(()).training_capacity() == 0
    assert ClusterSnapshot(()).gpus == GpuCatalog(), "no catalogue: every type gets its family's defaults"
