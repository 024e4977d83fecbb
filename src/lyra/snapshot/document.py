"""The cluster snapshot document: the JSON the what-if planner reads and the operator exports.

It is the wire format of :class:`lyra.core.model.ClusterSnapshot`, with camelCase keys::

    {
      "servers": [{"name": "t4-0", "pool": "inference", "gpuType": "Tesla-T4", "gpus": 8, "state": "loaned"}],
      "jobs": [{"name": "bert", "gpusPerWorker": 1, "minWorkers": 2, "maxWorkers": 6,
                "remainingWork": 3600, "submitTime": 0, "workers": {"t4-0": 4}, "gpuMemoryGiB": 12}],
      "gpuCatalog": {"Tesla-T4": {"speed": 0.4, "memoryGiB": 16}},
      "heldGpus": {"t4-0": 2},
      "inferenceDemand": {"Tesla-T4": 1}
    }

``remainingWork`` is in worker-seconds on a reference GPU (speed 1); a job with no workers is queued. ``heldGpus``
(optional) counts GPUs on a server that work outside the document's jobs uses, and a server may say it is
``cordoned`` or ``unhealthy``, and an idle one for how long it has been idle (``idleSeconds``): the planner treats
them as the operator does (:class:`PlannerInput`).
``inferenceDemand`` (optional) is what inference needs now, in servers per GPU type (``lyra plan loans`` balances
each type against it). Unknown keys are rejected so a typo never passes silently. Every error names the offending
field with its path, e.g. ``jobs[1].minWorkers (job 'bert')``, in the document's own camelCase terms.

Parsing never raises anything but :class:`SnapshotError`, whatever the input: the size, the nesting, the numbers
and every count are bounded (``docs/snapshot.md``, "Limits"), so no document can make a policy run away.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lyra.api import names
from lyra.core import (
    MAX_GPUS_PER_SERVER,
    MAX_WORKERS,
    ClusterSnapshot,
    GpuCatalog,
    GpuType,
    InvalidClusterError,
    LoanState,
    Pool,
    Server,
    TrainingJob,
)
from lyra.text_files import TextFileError, decode_utf8
from lyra.yaml_files import YamlError, load_yaml

SNAPSHOT_API_VERSION = names.API_VERSION

#: Limits of a document (the core bounds workers and GPUs per server itself: MAX_WORKERS, MAX_GPUS_PER_SERVER).
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
MAX_SERVERS = 100_000
MAX_JOBS = 100_000
MAX_GPU_TYPES = 1_000
#: A Kubernetes object name (DNS subdomain) is at most 253 characters; so are server, job and GPU type names here.
MAX_NAME_LENGTH = 253
#: Times and work: about 31,700 years, far beyond any real job, and small enough that no sum overflows.
MAX_SECONDS = 1e12
#: Priorities are Kubernetes PriorityClass values: 32-bit integers.
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1
#: Integers longer than this are no count or time (Python would refuse them past 4,300 digits anyway).
_MAX_INTEGER_DIGITS = 20


class SnapshotError(ValueError):
    """The snapshot document is malformed; the message names the field."""


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]
Seconds = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-MAX_SECONDS, le=MAX_SECONDS)]
Duration = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=MAX_SECONDS)]
Speed = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=1000)]
MemoryGiB = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=1e6)]
WorkerCount = Annotated[int, Field(strict=True, ge=0, le=MAX_WORKERS)]
GpuCount = Annotated[int, Field(strict=True, ge=0, le=MAX_GPUS_PER_SERVER)]
ServerCount = Annotated[int, Field(strict=True, ge=0, le=MAX_SERVERS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ServerDocument(_Strict):
    name: Name
    pool: Pool
    gpu_type: Name = Field(alias="gpuType")
    gpus: Annotated[int, Field(strict=True, gt=0, le=MAX_GPUS_PER_SERVER)]
    state: LoanState | None = None
    cordoned: Annotated[bool, Field(strict=True)] = False
    unhealthy: Annotated[bool, Field(strict=True)] = False
    idle_seconds: Duration | None = Field(default=None, alias="idleSeconds")

    @model_validator(mode="after")
    def _state_matches_pool(self) -> ServerDocument:
        if self.pool is Pool.INFERENCE and self.state is None:
            raise ValueError("an inference server needs a state: serving, idle, loaned or reclaiming")
        if self.idle_seconds is not None and (self.pool is not Pool.INFERENCE or self.state is not LoanState.IDLE):
            raise ValueError(
                f"idleSeconds: only an idle inference server has been idle for a time (this one is "
                f"{self.pool} and {self.state or 'has no loan state'})"
            )
        if self.pool is Pool.TRAINING and self.state not in (None, LoanState.SERVING):
            raise ValueError(
                f"a training server has no loan state (it is never lent), got {self.state}; "
                "omit 'state' or write 'serving'"
            )
        return self

    def to_core(self) -> Server:
        state = self.state if self.pool is Pool.INFERENCE else None
        return Server(self.name, self.pool, self.gpu_type, self.gpus, state)


class GpuTypeDocument(_Strict):
    """One ``gpuCatalog`` entry: how fast the type trains, relative to a reference GPU, and its memory."""

    speed: Speed
    memory_gib: MemoryGiB | None = Field(default=None, alias="memoryGiB")


class JobDocument(_Strict):
    name: Name
    gpus_per_worker: Annotated[int, Field(alias="gpusPerWorker", strict=True, gt=0, le=MAX_GPUS_PER_SERVER)]
    min_workers: Annotated[int, Field(alias="minWorkers", strict=True, ge=1, le=MAX_WORKERS)]
    max_workers: Annotated[int, Field(alias="maxWorkers", strict=True, ge=1, le=MAX_WORKERS)]
    remaining_work: Annotated[Duration, Field(alias="remainingWork")]
    submit_time: Annotated[Seconds, Field(alias="submitTime")] = 0.0
    priority: Annotated[int, Field(strict=True, ge=MIN_PRIORITY, le=MAX_PRIORITY)] = 0
    seconds_since_checkpoint: Annotated[Duration, Field(alias="secondsSinceCheckpoint")] = 0.0
    gpu_types: Annotated[list[Name], Field(min_length=1, max_length=MAX_GPU_TYPES)] | None = Field(
        default=None, alias="gpuTypes"
    )
    gpu_memory_gib: MemoryGiB | None = Field(default=None, alias="gpuMemoryGiB")
    speeds: Annotated[dict[Name, Speed], Field(max_length=MAX_GPU_TYPES)] = Field(default_factory=dict)
    mix_gpu_types: Annotated[bool, Field(alias="mixGpuTypes", strict=True)] = False
    scaling_overhead: Annotated[float, Field(alias="scalingOverhead", strict=True, allow_inf_nan=False, ge=0, le=1)] = (
        0.0
    )
    workers: Annotated[dict[Name, WorkerCount], Field(max_length=MAX_SERVERS)] = Field(default_factory=dict)

    @field_validator("gpu_types")
    @classmethod
    def _unique_types(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            seen: set[str] = set()
            for name in value:
                if name in seen:
                    raise ValueError(f"lists the GPU type {name!r} twice; list each type once")
                seen.add(name)
        return value

    @model_validator(mode="after")
    def _range(self) -> JobDocument:
        if self.max_workers < self.min_workers:
            raise ValueError(f"maxWorkers ({self.max_workers}) is below minWorkers ({self.min_workers})")
        running = sum(self.workers.values())
        if running and not self.min_workers <= running <= self.max_workers:
            raise ValueError(
                f"runs {running} workers, outside [minWorkers, maxWorkers] = [{self.min_workers}, {self.max_workers}]"
            )
        return self

    def to_core(self) -> TrainingJob:
        return TrainingJob(
            name=self.name,
            gpus_per_worker=self.gpus_per_worker,
            min_workers=self.min_workers,
            max_workers=self.max_workers,
            remaining_work=self.remaining_work,
            submit_time=self.submit_time,
            priority=self.priority,
            placement=dict(self.workers),
            seconds_since_checkpoint=self.seconds_since_checkpoint,
            gpu_types=frozenset(self.gpu_types) if self.gpu_types is not None else None,
            gpu_memory_gib=self.gpu_memory_gib,
            speeds=dict(self.speeds),
            mix_gpu_types=self.mix_gpu_types,
            scaling_overhead=self.scaling_overhead,
        )

    @classmethod
    def from_core(cls, job: TrainingJob) -> JobDocument:
        return cls(
            name=job.name,
            gpus_per_worker=job.gpus_per_worker,
            min_workers=job.min_workers,
            max_workers=job.max_workers,
            remaining_work=job.remaining_work,
            submit_time=job.submit_time,
            priority=job.priority,
            seconds_since_checkpoint=job.seconds_since_checkpoint,
            gpu_types=sorted(job.gpu_types) if job.gpu_types is not None else None,
            gpu_memory_gib=job.gpu_memory_gib,
            speeds=dict(job.speeds),
            mix_gpu_types=job.mix_gpu_types,
            scaling_overhead=job.scaling_overhead,
            workers=dict(job.placement),
        )


class SnapshotDocument(_Strict):
    api_version: str = Field(default=SNAPSHOT_API_VERSION, alias="apiVersion")
    kind: str = "ClusterSnapshot"
    servers: Annotated[list[ServerDocument], Field(max_length=MAX_SERVERS)]
    jobs: Annotated[list[JobDocument], Field(max_length=MAX_JOBS)] = Field(default_factory=list)
    gpu_catalog: Annotated[dict[Name, GpuTypeDocument], Field(alias="gpuCatalog", max_length=MAX_GPU_TYPES)] = Field(
        default_factory=dict
    )
    held_gpus: Annotated[dict[Name, GpuCount], Field(alias="heldGpus", max_length=MAX_SERVERS)] = Field(
        default_factory=dict
    )
    #: Servers inference needs now, per GPU type, as the operator sizes the InferenceServices (``lyra plan loans``
    #: plans with it when no ``--demand`` is given); absent: unknown.
    inference_demand: Annotated[dict[Name, ServerCount], Field(max_length=MAX_GPU_TYPES)] | None = Field(
        default=None, alias="inferenceDemand"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_speed_factors(cls, data: Any) -> Any:
        if isinstance(data, dict) and "speedFactors" in data:
            raise ValueError(f"'speedFactors' was replaced by 'gpuCatalog': {_catalog_hint(data['speedFactors'])}")
        return data

    @field_validator("api_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        if value != SNAPSHOT_API_VERSION:
            raise ValueError(f"unsupported apiVersion {value[:80]!r}; this Lyra reads {SNAPSHOT_API_VERSION!r}")
        return value

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value != "ClusterSnapshot":
            raise ValueError(f"kind must be 'ClusterSnapshot', got {value[:80]!r}")
        return value

    def to_core(self) -> ClusterSnapshot:
        catalog = _catalog_to_core(self.gpu_catalog)
        return ClusterSnapshot(tuple(s.to_core() for s in self.servers), tuple(j.to_core() for j in self.jobs), catalog)

    def to_planner_input(self) -> PlannerInput:
        """The snapshot, its held GPUs and its cordoned servers, checked together (:class:`PlannerInput`)."""
        return PlannerInput(
            self.to_core(),
            {name: gpus for name, gpus in self.held_gpus.items() if gpus},
            frozenset(s.name for s in self.servers if s.cordoned),
            self.inference_demand,
            frozenset(s.name for s in self.servers if s.unhealthy),
            {s.name: s.idle_seconds for s in self.servers if s.idle_seconds is not None},
        )

    @classmethod
    def from_core(
        cls,
        snapshot: ClusterSnapshot,
        held: Mapping[str, int] | None = None,
        cordoned: Collection[str] = (),
        *,
        demand: Mapping[str, int] | None = None,
        unhealthy: Collection[str] = (),
        idle_seconds: Mapping[str, float] | None = None,
    ) -> SnapshotDocument:
        """The document of ``snapshot``, with ``held`` (its servers' GPUs used outside its jobs) as ``heldGpus``, in
        the servers' order and without zeros, the ``cordoned`` and ``unhealthy`` servers marked, ``demand`` (servers
        inference needs per GPU type) as ``inferenceDemand``, by GPU type, and each idle server's ``idleSeconds``."""
        idle_seconds = idle_seconds or {}
        held = held or {}
        return cls(
            held_gpus={s.name: held[s.name] for s in snapshot.servers if held.get(s.name)},
            inference_demand=None if demand is None else dict(sorted(demand.items())),
            servers=[
                ServerDocument(
                    name=s.name,
                    pool=s.pool,
                    gpu_type=s.gpu_type,
                    gpus=s.gpus,
                    state=s.state,
                    cordoned=s.name in cordoned,
                    unhealthy=s.name in unhealthy,
                    idle_seconds=idle_seconds.get(s.name),
                )
                for s in snapshot.servers
            ],
            jobs=[JobDocument.from_core(j) for j in snapshot.jobs],
            gpu_catalog={
                name: GpuTypeDocument(speed=gpu.speed, memory_gib=gpu.memory_gib)
                for name, gpu in snapshot.gpus.types.items()
            },
        )


@dataclass(frozen=True)
class PlannerInput:
    """What the what-if planner decides on: a snapshot; the GPUs on its servers that work outside its jobs uses
    (``heldGpus``: inference replicas, GPU pods Lyra does not manage, workers still leaving, the free GPUs of an
    unhealthy node); its cordoned servers (``kubectl cordon`` or ``drain``) and its unhealthy ones (NotReady, not heard
    from, GPUs gone or misread), which take no new work; and the servers inference needs now per GPU type
    (``inferenceDemand``, ``None`` when unknown), as the operator sizes its services.

    The planner applies the operator's rules to them: an allocation leaves held GPUs alone, and every GPU of a
    cordoned or unhealthy server that its jobs' workers leave free (:meth:`allocation_held`); reclaims and loans
    leave out a cordoned inference server that is idle or loaned, as the operator's loan cycle does (it serves no
    replica: lent it would take no worker, counted as room it would leave replicas pending, reclaimed it would give
    inference nothing; :meth:`loan_cycle`); loans never lend an unhealthy one, nor an idle one not yet idle for the
    operator's lend delay (``idle_seconds``, how long each idle server has been idle; one it does not name has been
    idle for longer than any delay; :meth:`unlendable`).

    Checked on creation: every held, cordoned, unhealthy or idle-timed server is in the snapshot, no server's held GPUs
    and its jobs' workers' GPUs together exceed the GPUs it has, only idle servers have an idle time and each is a
    finite number of seconds >= 0, and every demand is a count of servers (:class:`InvalidClusterError`, in the
    document's terms). A demand may name a GPU type no inference server has:
    inference then falls short of it by as many servers."""

    snapshot: ClusterSnapshot
    held: Mapping[str, int] = field(default_factory=dict)
    cordoned: frozenset[str] = frozenset()
    demand: Mapping[str, int] | None = None
    unhealthy: frozenset[str] = frozenset()
    idle_seconds: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        servers = {s.name: s for s in self.snapshot.servers}
        used = self._used()
        for name, gpus in self.held.items():
            server = servers.get(name)
            if server is None:
                raise InvalidClusterError(f"heldGpus names {_short(name)!r}, which is no server of the snapshot")
            if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
                raise InvalidClusterError(f"heldGpus.{name}: must be an integer >= 0, got {gpus!r}")
            if gpus + used.get(name, 0) > server.gpus:
                raise InvalidClusterError(
                    f"heldGpus.{name}: {gpus} GPUs held beside {used.get(name, 0)} used by the jobs' workers, on a "
                    f"server of {server.gpus}"
                )
        for name in sorted(self.cordoned):
            if name not in servers:
                raise InvalidClusterError(f"cordoned server {_short(name)!r} is no server of the snapshot")
        for name in sorted(self.unhealthy):
            if name not in servers:
                raise InvalidClusterError(f"unhealthy server {_short(name)!r} is no server of the snapshot")
        for name, seconds in sorted(self.idle_seconds.items()):
            server = servers.get(name)
            if server is None:
                raise InvalidClusterError(f"idle server {_short(name)!r} is no server of the snapshot")
            if server.state is not LoanState.IDLE:
                raise InvalidClusterError(f"server {_short(name)!r} is not idle, and has no idle time")
            if not (isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds < math.inf):
                raise InvalidClusterError(f"servers.{_short(name)}.idleSeconds: must be seconds >= 0, got {seconds!r}")
        for gpu_type, servers_needed in (self.demand or {}).items():
            if not isinstance(servers_needed, int) or isinstance(servers_needed, bool) or servers_needed < 0:
                raise InvalidClusterError(
                    f"inferenceDemand.{_short(gpu_type)}: must be an integer number of servers >= 0, "
                    f"got {servers_needed!r}"
                )
        object.__setattr__(self, "held", dict(self.held))
        object.__setattr__(self, "cordoned", frozenset(self.cordoned))
        object.__setattr__(self, "unhealthy", frozenset(self.unhealthy))
        object.__setattr__(self, "idle_seconds", dict(sorted(self.idle_seconds.items())))
        if self.demand is not None:
            object.__setattr__(self, "demand", dict(sorted(self.demand.items())))

    def _used(self) -> dict[str, int]:
        """GPUs the jobs' workers use on each server."""
        used: dict[str, int] = {}
        for job in self.snapshot.jobs:
            for where, workers in job.placement.items():
                used[where] = used.get(where, 0) + workers * job.gpus_per_worker
        return used

    def allocation_held(self) -> dict[str, int]:
        """The GPUs an allocation leaves alone on each server: those held, and on a cordoned or unhealthy server every
        GPU its jobs' workers leave free (its workers stay; nothing new goes there)."""
        held = dict(self.held)
        used = self._used()
        for server in self.snapshot.servers:
            if server.name in self.cordoned or server.name in self.unhealthy:
                held[server.name] = max(held.get(server.name, 0), server.gpus - used.get(server.name, 0))
        return held

    def loan_cycle(self) -> frozenset[str] | None:
        """The inference servers reclaims and loans decide among: all but the cordoned ones that are idle or loaned.
        ``None`` when none is left out (every server)."""
        out = {
            s.name
            for s in self.snapshot.servers
            if s.name in self.cordoned and s.state in (LoanState.IDLE, LoanState.LOANED)
        }
        return frozenset(s.name for s in self.snapshot.servers if s.name not in out) if out else None

    def unlendable(self, lend_delay_s: float = 0.0) -> frozenset[str]:
        """The servers a loan plan never lends: the unhealthy ones (lent, they would take no training work; the
        operator keeps them as room for inference), and the idle ones idle for less than ``lend_delay_s`` (the
        operator's ``--lend-delay``: they stay room for inference, and the headroom is kept among the others)."""
        recent = {name for name, seconds in self.idle_seconds.items() if seconds < lend_delay_s}
        return self.unhealthy | recent


def _catalog_to_core(entries: Mapping[str, GpuTypeDocument]) -> GpuCatalog:
    return GpuCatalog.of(*(GpuType(name, t.speed, t.memory_gib) for name, t in entries.items()))


class GpuCatalogDocument(_Strict):
    """A GPU catalogue file (``lyra operator --gpu-catalog``): the snapshot's ``gpuCatalog``, on its own."""

    gpu_catalog: Annotated[dict[Name, GpuTypeDocument], Field(alias="gpuCatalog", max_length=MAX_GPU_TYPES)]

    def to_core(self) -> GpuCatalog:
        return _catalog_to_core(self.gpu_catalog)


def _catalog_hint(factors: Any) -> str:
    """How the old ``speedFactors`` reads as a ``gpuCatalog`` (the first few entries, if they are numbers)."""
    example = '"gpuCatalog": {"Tesla-T4": {"speed": 0.4, "memoryGiB": 16}}'
    if isinstance(factors, dict) and factors:
        entries = [
            f'{json.dumps(str(name)[:MAX_NAME_LENGTH])}: {{"speed": {speed!r}}}'
            for name, speed in list(factors.items())[:3]
            if isinstance(speed, int | float) and not isinstance(speed, bool)
        ]
        if entries:
            example = '"gpuCatalog": {' + ", ".join(entries) + (", ..." if len(factors) > 3 else "") + "}"
    return f"write {example}"


#: The core's names for fields, as the document spells them, so a message names what to edit.
_WIRE_NAMES = {
    "gpus_per_worker": "gpusPerWorker",
    "min_workers": "minWorkers",
    "max_workers": "maxWorkers",
    "remaining_work": "remainingWork",
    "submit_time": "submitTime",
    "seconds_since_checkpoint": "secondsSinceCheckpoint",
    "gpu_types": "gpuTypes",
    "gpu_memory_gib": "gpuMemoryGiB",
    "mix_gpu_types": "mixGpuTypes",
    "scaling_overhead": "scalingOverhead",
    "gpu_type": "gpuType",
    "memory_gib": "memoryGiB",
    "placement": "workers",
}
_CORE_NAME = re.compile(r"\b(" + "|".join(sorted(_WIRE_NAMES, key=len, reverse=True)) + r")\b")

#: Pydantic error types that mean "beyond a limit of Lyra's": the message points to the list of limits.
_LIMIT_ERRORS = frozenset({"less_than_equal", "string_too_long", "too_long"})
#: Error types whose message is clear without the value that caused it.
_NO_INPUT_ERRORS = frozenset({"value_error", "extra_forbidden", "missing"})


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field_path(location: tuple[int | str, ...], document: Any) -> str:
    """``('jobs', 1, 'minWorkers')`` -> ``jobs[1].minWorkers (job 'bert')``."""
    path = ""
    for part in location:
        if part == "[key]":
            path += " (key)"
        elif isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{_short(part)}" if path else _short(part)
    if len(location) >= 2 and isinstance(location[1], int) and isinstance(document, dict):
        items = document.get(str(location[0]))
        if isinstance(items, list) and location[1] < len(items) and isinstance(items[location[1]], dict):
            name = items[location[1]].get("name")
            if isinstance(name, str):
                path += f" ({str(location[0]).rstrip('s')} {_short(name)!r})"
    return path or "snapshot"


def _reject_constant(name: str) -> Any:
    raise _NumberError(f"{name} is not a JSON number; write a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberError(f"the number {_short(text, 40)} is too large; numbers must be finite")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _MAX_INTEGER_DIGITS:
        raise _NumberError(f"an integer of {digits:,} digits is too large ({_short(text, 24)})")
    return int(text)


class _NumberError(ValueError):
    pass


def _decode(data: str | bytes) -> str:
    limit = f"{MAX_SNAPSHOT_BYTES // (1024 * 1024)} MiB"
    if isinstance(data, bytes | bytearray):
        if len(data) > MAX_SNAPSHOT_BYTES:
            raise SnapshotError(f"the document is larger than the limit of {limit}; trim it (or split the cluster)")
        try:
            return decode_utf8(bytes(data))
        except TextFileError as error:
            raise SnapshotError(str(error)) from None
    if len(data) > MAX_SNAPSHOT_BYTES // 4 and len(data.encode("utf-8", "surrogatepass")) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"the document is larger than the limit of {limit}; trim it (or split the cluster)")
    return data


def _problems(error: ValidationError, raw: Any) -> str:
    """The first few problems of a validation, each with the path of its field, in the document's terms."""
    problems = []
    for item in error.errors(include_url=False)[:5]:
        message = str(item["msg"]).removeprefix("Value error, ")
        given = item.get("input")
        if item["type"] not in _NO_INPUT_ERRORS and isinstance(given, str | int | float | bool):
            message += f", got {_short(repr(given), 40)}"
        if item["type"] in _LIMIT_ERRORS:
            message += " (a limit of Lyra's: docs/snapshot.md lists them)"
        problems.append(f"{_field_path(tuple(item['loc']), raw)}: {message}")
    more = f" (and {error.error_count() - 5} more)" if error.error_count() > 5 else ""
    return "; ".join(problems) + more


def parse_snapshot(data: str | bytes) -> ClusterSnapshot:
    """Parse and check a snapshot document (text, or UTF-8 bytes); raise :class:`SnapshotError` naming the first
    bad fields. No input raises anything else. Its ``heldGpus`` are checked and left out (:func:`parse_planner_input`
    keeps them)."""
    return parse_planner_input(data).snapshot


def parse_planner_input(data: str | bytes) -> PlannerInput:
    """Parse and check a snapshot document with its ``heldGpus`` (:class:`PlannerInput`); raise
    :class:`SnapshotError` naming the first bad fields. No input raises anything else."""
    text = _decode(data)
    try:
        raw = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except json.JSONDecodeError as error:
        raise SnapshotError(f"not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except _NumberError as error:
        raise SnapshotError(f"not valid JSON: {error}") from None
    except RecursionError:
        raise SnapshotError("not valid JSON: nested too deeply (a snapshot is at most 4 levels deep)") from None
    if not isinstance(raw, dict):
        raise SnapshotError(f"the snapshot must be a JSON object, got {type(raw).__name__}")
    # The counts first: validating a million servers only to refuse them would take a while.
    for key, limit in (("servers", MAX_SERVERS), ("jobs", MAX_JOBS)):
        items = raw.get(key)
        if isinstance(items, list) and len(items) > limit:
            raise SnapshotError(f"{key}: {len(items):,} {key}, more than the limit of {limit:,}; split the cluster")
    try:
        document = SnapshotDocument.model_validate(raw)
    except ValidationError as error:
        raise SnapshotError(_problems(error, raw)) from None
    except RecursionError:
        raise SnapshotError("nested too deeply (a snapshot is at most 4 levels deep)") from None
    try:
        return document.to_planner_input()
    except InvalidClusterError as error:
        raise SnapshotError(_CORE_NAME.sub(lambda m: _WIRE_NAMES[m.group(1)], str(error))) from None


#: A GPU catalogue file is small: a thousand types fit in well under this.
MAX_GPU_CATALOG_BYTES = 1024 * 1024


def parse_gpu_catalog(data: str | bytes) -> GpuCatalog:
    """Parse and check a GPU catalogue file (YAML or JSON)::

        gpuCatalog:
          Tesla-T4: {speed: 0.4, memoryGiB: 16}

    Raise :class:`SnapshotError` naming the entry and field (``gpuCatalog.Tesla-T4.speed: ...``); no input raises
    anything else."""
    if len(data) > MAX_GPU_CATALOG_BYTES:
        raise SnapshotError(f"the GPU catalogue is larger than the limit of {MAX_GPU_CATALOG_BYTES // 1024} KiB")
    text = _decode(data)
    try:
        raw = load_yaml(text)
    except YamlError as error:
        raise SnapshotError(str(error)) from None
    if not isinstance(raw, dict):
        given = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise SnapshotError(f"a GPU catalogue must be a mapping with the key gpuCatalog, got {given}")
    if "gpuCatalog" not in raw and raw:
        first = _short(str(next(iter(raw))), 40)
        raise SnapshotError(f"no gpuCatalog key: write the GPU types under it, e.g. 'gpuCatalog: {{{first}: ...}}'")
    try:
        return GpuCatalogDocument.model_validate(raw).to_core()
    except ValidationError as error:
        raise SnapshotError(_problems(error, raw)) from None
    except InvalidClusterError as error:
        raise SnapshotError(_CORE_NAME.sub(lambda m: _WIRE_NAMES[m.group(1)], str(error))) from None


def snapshot_json_schema() -> dict[str, Any]:
    """The JSON Schema of the snapshot document (``docs/snapshot.schema.json`` is generated from it)."""
    schema = SnapshotDocument.model_json_schema(by_alias=True)
    schema["$id"] = f"https://{names.GROUP}/schemas/cluster-snapshot.json"
    schema["title"] = "Lyra cluster snapshot"
    return schema
