"""The cluster snapshot document: the JSON the what-if planner reads and the operator exports.

It is the wire format of :class:`lyra.core.model.ClusterSnapshot`, with camelCase keys::

    {
      "servers": [{"name": "t4-0", "pool": "inference", "gpuType": "Tesla-T4", "gpus": 8, "state": "loaned"}],
      "jobs": [{"name": "bert", "gpusPerWorker": 1, "minWorkers": 2, "maxWorkers": 6,
                "remainingWork": 3600, "submitTime": 0, "workers": {"t4-0": 4}}],
      "speedFactors": {"Tesla-T4": 0.35}
    }

``remainingWork`` is in worker-seconds at speed 1; a job with no workers is queued. Training servers have no
``state``. Unknown keys are rejected so a typo never passes silently. Every error names the offending field with
its path, e.g. ``jobs[1].minWorkers``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lyra.core.model import (
    ClusterSnapshot,
    InvalidClusterError,
    LoanState,
    Pool,
    Server,
    SpeedFactors,
    TrainingJob,
)

SNAPSHOT_API_VERSION = "lyra.dev/v1alpha1"


class SnapshotError(ValueError):
    """The snapshot document is malformed; the message names the field."""


Name = Annotated[str, Field(min_length=1, max_length=253)]
Seconds = Annotated[float, Field(allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ServerDocument(_Strict):
    name: Name
    pool: Pool
    gpu_type: Name = Field(alias="gpuType")
    gpus: Annotated[int, Field(gt=0, strict=True)]
    state: LoanState | None = None

    @model_validator(mode="after")
    def _state_matches_pool(self) -> ServerDocument:
        if self.pool is Pool.INFERENCE and self.state is None:
            raise ValueError("an inference server needs a state: serving, idle, loaned or reclaiming")
        if self.pool is Pool.TRAINING and self.state is not None:
            raise ValueError("a training server has no loan state; omit 'state'")
        return self


class JobDocument(_Strict):
    name: Name
    gpus_per_worker: Annotated[int, Field(alias="gpusPerWorker", gt=0, strict=True)]
    min_workers: Annotated[int, Field(alias="minWorkers", ge=1, strict=True)]
    max_workers: Annotated[int, Field(alias="maxWorkers", ge=1, strict=True)]
    remaining_work: Annotated[Seconds, Field(alias="remainingWork", ge=0)]
    submit_time: Annotated[Seconds, Field(alias="submitTime")] = 0.0
    priority: Annotated[int, Field(strict=True)] = 0
    seconds_since_checkpoint: Annotated[Seconds, Field(alias="secondsSinceCheckpoint", ge=0)] = 0.0
    workers: dict[Name, Annotated[int, Field(ge=0, strict=True)]] = Field(default_factory=dict)

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


class SnapshotDocument(_Strict):
    api_version: str = Field(default=SNAPSHOT_API_VERSION, alias="apiVersion")
    kind: str = "ClusterSnapshot"
    servers: list[ServerDocument]
    jobs: list[JobDocument] = Field(default_factory=list)
    speed_factors: dict[Name, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, alias="speedFactors"
    )

    @field_validator("api_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        if value != SNAPSHOT_API_VERSION:
            raise ValueError(f"unsupported apiVersion {value!r}; this Lyra reads {SNAPSHOT_API_VERSION!r}")
        return value

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value != "ClusterSnapshot":
            raise ValueError(f"kind must be 'ClusterSnapshot', got {value!r}")
        return value

    def to_core(self) -> ClusterSnapshot:
        servers = tuple(Server(s.name, s.pool, s.gpu_type, s.gpus, s.state) for s in self.servers)
        jobs = tuple(
            TrainingJob(
                name=j.name,
                gpus_per_worker=j.gpus_per_worker,
                min_workers=j.min_workers,
                max_workers=j.max_workers,
                remaining_work=j.remaining_work,
                submit_time=j.submit_time,
                priority=j.priority,
                placement=dict(j.workers),
                seconds_since_checkpoint=j.seconds_since_checkpoint,
            )
            for j in self.jobs
        )
        return ClusterSnapshot(servers, jobs, SpeedFactors(dict(self.speed_factors)))

    @classmethod
    def from_core(cls, snapshot: ClusterSnapshot) -> SnapshotDocument:
        return cls(
            servers=[
                ServerDocument(name=s.name, pool=s.pool, gpu_type=s.gpu_type, gpus=s.gpus, state=s.state)
                for s in snapshot.servers
            ],
            jobs=[
                JobDocument(
                    name=j.name,
                    gpus_per_worker=j.gpus_per_worker,
                    min_workers=j.min_workers,
                    max_workers=j.max_workers,
                    remaining_work=j.remaining_work,
                    submit_time=j.submit_time,
                    priority=j.priority,
                    seconds_since_checkpoint=j.seconds_since_checkpoint,
                    workers=dict(j.placement),
                )
                for j in snapshot.jobs
            ],
            speed_factors=dict(snapshot.speed.factors),
        )


def _field_path(location: tuple[int | str, ...], document: Any) -> str:
    """``('jobs', 1, 'minWorkers')`` -> ``jobs[1].minWorkers (job 'bert')``."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    if len(location) >= 2 and isinstance(location[1], int) and isinstance(document, dict):
        items = document.get(str(location[0]))
        if isinstance(items, list) and location[1] < len(items) and isinstance(items[location[1]], dict):
            name = items[location[1]].get("name")
            if isinstance(name, str):
                path += f" ({str(location[0]).rstrip('s')} {name!r})"
    return path or "snapshot"


def parse_snapshot(text: str) -> ClusterSnapshot:
    """Parse and check a snapshot document; raise :class:`SnapshotError` naming the first bad field."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise SnapshotError(f"not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    if not isinstance(raw, dict):
        raise SnapshotError(f"the snapshot must be a JSON object, got {type(raw).__name__}")
    try:
        document = SnapshotDocument.model_validate(raw)
    except ValidationError as error:
        problems = []
        for item in error.errors()[:5]:
            message = str(item["msg"]).removeprefix("Value error, ")
            problems.append(f"{_field_path(tuple(item['loc']), raw)}: {message}")
        more = f" (and {error.error_count() - 5} more)" if error.error_count() > 5 else ""
        raise SnapshotError("; ".join(problems) + more) from None
    try:
        return document.to_core()
    except InvalidClusterError as error:
        raise SnapshotError(str(error)) from None


def snapshot_json_schema() -> dict[str, Any]:
    """The JSON Schema of the snapshot document (``docs/snapshot.schema.json`` is generated from it)."""
    schema = SnapshotDocument.model_json_schema(by_alias=True)
    schema["$id"] = "https://lyra.dev/schemas/cluster-snapshot.json"
    schema["title"] = "Lyra cluster snapshot"
    return schema
