"""The simulated cluster and workload assumptions, read from YAML and checked field by field.

Pydantic lives only at this edge: the engine receives the frozen :class:`Scenario` model and reads plain values
from it. The shipped default (``scenarios/default.yaml``) documents every field and why it has its value.
"""

from __future__ import annotations

import enum
import math
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lyra.core.gpus import default_gpu_type
from lyra.core.model import MAX_GPUS_PER_SERVER
from lyra.text_files import TextFileError, read_text_file
from lyra.yaml_files import YamlError, load_yaml


class ScenarioError(ValueError):
    """The scenario file is unreadable or a field is invalid. The message names the file and the field."""


#: The longest cost or decision interval a scenario may set, in seconds (a week). Past it the setting is an input
#: error, and an infinite one never let a simulation end (every load step of an endless tail is an event).
MAX_SECONDS = 7 * 86_400


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerGroup(_Strict):
    """Servers alike: how many, their GPU type (its speed is the scenario's ``speed`` entry, else the core's
    catalogue default for the type's family, :func:`lyra.core.gpus.default_gpu_type`) and GPUs per server."""

    gpu_type: str = Field(min_length=1)
    servers: int = Field(ge=1)
    gpus_per_server: int = Field(default=8, ge=1, le=MAX_GPUS_PER_SERVER)

    def describe(self) -> str:
        return f"{self.servers} x {self.gpus_per_server} {self.gpu_type}"


#: The fields of a pool written as one group (the original format, still accepted: ``servers``, ``gpus_per_server``
#: and ``gpu_type`` directly under the pool).
_ONE_GROUP_FIELDS = ("servers", "gpus_per_server", "gpu_type")


class _Pool(_Strict):
    """Servers as a list of groups, one per GPU type. ``{servers: 65, gpus_per_server: 8, gpu_type: V100}`` is
    read as one group (an invalid field of it is named as in ``training.groups.0.servers``); ``groups: [...]``
    gives several; a pool may not give both."""

    #: The GPU type of a pool written as one group without ``gpu_type``.
    default_gpu_type: ClassVar[str]

    groups: tuple[ServerGroup, ...]

    @model_validator(mode="before")
    @classmethod
    def _one_group(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = [key for key in _ONE_GROUP_FIELDS if key in data]
        if not given:
            return data
        if "groups" in data:
            raise ValueError(
                f"give either groups or {', '.join(_ONE_GROUP_FIELDS)} (one group), not both: found groups and "
                f"{', '.join(given)}"
            )
        group = {key: data[key] for key in given}
        group.setdefault("gpu_type", cls.default_gpu_type)
        rest = {key: value for key, value in data.items() if key not in _ONE_GROUP_FIELDS}
        return {**rest, "groups": [group]}

    @model_validator(mode="after")
    def _one_group_per_type(self) -> _Pool:
        if not self.groups:
            raise ValueError("groups is empty: give at least one server group")
        seen: set[str] = set()
        for group in self.groups:
            if group.gpu_type in seen:
                raise ValueError(f"GPU type {group.gpu_type} has two groups: give each type one group")
            seen.add(group.gpu_type)
        return self

    @property
    def servers(self) -> int:
        return sum(group.servers for group in self.groups)

    @property
    def gpus(self) -> int:
        return sum(group.servers * group.gpus_per_server for group in self.groups)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The pool's GPU types, sorted by name."""
        return tuple(sorted(group.gpu_type for group in self.groups))

    def describe(self) -> str:
        """``65 x 8 V100``, or the groups joined by ``+``."""
        return " + ".join(group.describe() for group in self.groups)

    def with_servers(self, servers: int) -> Self:
        """A copy with ``servers`` servers in its one group (calibration sizes one-group pools only)."""
        if len(self.groups) != 1:
            raise ValueError(f"only a pool of one server group can be resized, this one has {len(self.groups)}")
        return self.model_copy(update={"groups": (self.groups[0].model_copy(update={"servers": servers}),)})


class TrainingPool(_Pool):
    default_gpu_type = "V100"


class InferencePool(_Pool):
    default_gpu_type = "T4"

    #: Requests per second one serving server absorbs; servers needed = ceil(rate / this). Demand beyond the whole
    #: pool is counted as inference shortfall that no scheme could serve.
    req_per_server: float = Field(gt=0)
    #: Share of the inference servers kept idle, never loaned, as a safety margin (rounded up to whole servers,
    #: so it scales with the calibrated pool). With several GPU types the loan cycle keeps one headroom per type:
    #: this share of the largest group.
    headroom_share: float = Field(default=0.0, ge=0, lt=1)

    @property
    def headroom_servers(self) -> int:
        return math.ceil(self.headroom_share * max(group.servers for group in self.groups) - 1e-9)


class Loaning(_Strict):
    #: Hysteresis, the loan cycle's lend delay: an idle server is lent only once idle for this many seconds
    #: (lending waits; reclaiming never does; :mod:`lyra.core.loan_cycle`).
    lend_hysteresis_s: float = Field(default=1800.0, ge=0)
    #: Seconds from the moment a reclaimed server's training workers are gone until it serves inference (pod
    #: deletion, device and node readiness). A server with no training workers on it is back at once.
    drain_s: float = Field(default=30.0, ge=0)


class Bursts(_Strict):
    """Inference bursts laid over the load series (:mod:`lyra.sim.bursts`): sudden rises that the lending cycle
    did not see coming, so that reclaims happen under pressure. None by default."""

    #: Bursts starting per day on average (Poisson arrivals, seeded); 0: the load as recorded.
    per_day: float = Field(default=0.0, ge=0, le=1000)
    #: During a burst the rate is multiplied by a uniform draw in [factor_min, factor_max].
    factor_min: float = Field(default=1.5, ge=1, le=100)
    factor_max: float = Field(default=2.5, ge=1, le=100)
    #: Each burst lasts a uniform draw in [duration_min_s, duration_max_s] seconds.
    duration_min_s: float = Field(default=300.0, gt=0, le=86_400)
    duration_max_s: float = Field(default=1800.0, gt=0, le=86_400)
    #: The series is resampled to this step (it must divide the series' step) so that short bursts show.
    step_s: float = Field(default=60.0, gt=0, le=86_400)

    @model_validator(mode="after")
    def _ranges(self) -> Bursts:
        if self.factor_max < self.factor_min:
            raise ValueError(f"factor_max ({self.factor_max}) must be >= factor_min ({self.factor_min})")
        if self.duration_max_s < self.duration_min_s:
            raise ValueError(
                f"duration_max_s ({self.duration_max_s}) must be >= duration_min_s ({self.duration_min_s})"
            )
        return self


class Memory(_Strict):
    #: Share of the trace's jobs whose per-GPU memory need fits an inference GPU (seeded draw per job; Philly
    #: records no memory need). The others may only use training GPUs.
    inference_fit_share: float = Field(default=0.5, ge=0, le=1)
    #: How the fit depends on the job: a job of n GPUs fits with probability ``inference_fit_share * n **
    #: -size_exponent`` (0: the same for every job). Philly records no memory; users ask for more GPUs for larger
    #: models, and data parallelism puts the whole model on every GPU, so a larger job is less likely to fit 16 GB.
    size_exponent: float = Field(default=0.0, ge=0, le=4)


class Scaling(_Strict):
    #: Scaling efficiency e(w) = 1 / (1 + overhead * (w - 1)): 0 is the poster's linear scaling.
    overhead: float = Field(default=0.0, ge=0, le=1)


class Elasticity(_Strict):
    #: Share of jobs made elastic (chosen by a seeded draw per job).
    share: float = Field(default=0.5, ge=0, le=1)
    #: An elastic job that ran as w workers gets w_min = ceil(w * min_factor) and w_max = w * max_factor workers (a
    #: job of n GPUs runs as workers of the largest divisor of n up to a server: :mod:`lyra.sim.workload`).
    min_factor: float = Field(default=0.5, gt=0, le=1)
    max_factor: int = Field(default=2, ge=1)
    #: Share of elastic jobs that opt in to mixing GPU types (then at the pace of their slowest worker).
    mixing_share: float = Field(default=0.0, ge=0, le=1)


class Rendezvous(_Strict):
    """How long an elastic job's workers wait as they re-form after a resize, by what the resize did (a c10d
    rendezvous as torchrun runs it): the others notice a worker that left only after missing its keep-alives, and a
    round below the job's maximum waits a last call for more workers, where one that reaches the maximum closes at
    once. Both are charged on top of ``resize_cost_s`` (0 here: the shipped scenarios charge only that)."""

    #: Seconds the other workers take to notice that one has left: the keep-alive interval times the attempts.
    leave_detection_s: float = Field(default=0.0, ge=0, le=MAX_SECONDS)
    #: Seconds a round below the job's maximum waits for more workers before it closes.
    last_call_s: float = Field(default=0.0, ge=0, le=MAX_SECONDS)


class Preemption(_Strict):
    #: Seconds without progress when a preempted job starts again (rescheduling, loading the checkpoint).
    restart_cost_s: float = Field(default=60.0, ge=0, le=MAX_SECONDS)
    #: Running jobs checkpoint this often; a preemption loses the work since the last checkpoint.
    checkpoint_interval_s: float = Field(default=1800.0, gt=0)
    #: A job's first start: seconds without progress while its workers are created, scheduled and started, and its
    #: end is noticed (0: none, the shipped scenarios).
    start_cost_s: float = Field(default=0.0, ge=0, le=MAX_SECONDS)
    #: Seconds without progress when an elastic job changes its worker count (it checkpoints as it resizes).
    resize_cost_s: float = Field(default=20.0, ge=0, le=MAX_SECONDS)
    #: What a resize costs on top of ``resize_cost_s`` by what it did (:class:`Rendezvous`): ``leave_detection_s`` if
    #: a worker left, plus ``last_call_s`` if the job is below its maximum after it.
    rendezvous: Rendezvous = Rendezvous()
    #: Grace period of a preempted or scaled-in worker (SIGTERM to exit): a reclaimed server waits this long for
    #: its training workers, and a preempted job re-enters the queue only after it.
    checkpoint_grace_s: float = Field(default=60.0, ge=0, le=MAX_SECONDS)
    #: Whether jobs save a checkpoint within the grace period. If not (the default, the cautious reading), a
    #: preemption loses the work since the last periodic checkpoint.
    saves_on_signal: bool = False


class DurationKnowledge(enum.StrEnum):
    EXACT = "exact"
    NOISY = "noisy"


class Durations(_Strict):
    """What the scheduler knows of job durations (the simulator always knows the truth)."""

    knowledge: DurationKnowledge = DurationKnowledge.NOISY
    #: Per-job multiplicative error exp(sigma * N(0, 1)) on every estimate of remaining work (noisy only).
    sigma: float = Field(default=0.5, ge=0)


class Scheduler(_Strict):
    #: Scheduling decisions happen at most this often: the events in between are decided together, as an
    #: operator's reconcile loop batches them (0: decide at every event).
    decision_interval_s: float = Field(default=30.0, ge=0, le=MAX_SECONDS)
    #: How long after a change its decision is made: the operator acts on a change at its next pass (0: at once).
    decision_delay_s: float = Field(default=0.0, ge=0, le=MAX_SECONDS)
    #: Full rebalancing of flexible workers over all running elastic jobs at most this often.
    rebalance_interval_s: float = Field(default=600.0, gt=0, le=MAX_SECONDS)
    #: Running elastic jobs offered to the allocator per GPU type and role (donors, receivers, movers) in a
    #: decision (see lyra.sim.decisions).
    view_jobs: int = Field(default=8, ge=1)
    #: While at most this many jobs run or wait, a decision offers the allocator all of them, as the operator's
    #: passes do, rebalancing running jobs too (see lyra.sim.decisions); above it, views.
    whole_cluster_jobs: int = Field(default=32, ge=0)
    #: Phase-2 search budget per decision, in fluid evaluations of the jobs offered (budget = this x jobs).
    search_evaluations: int = Field(default=4, ge=0)
    #: Tiresias-style least-attained-service queue thresholds for the ``las`` context policy, in GPU-seconds.
    las_thresholds_gpu_s: tuple[float, ...] = (3_600.0, 36_000.0)
    #: Whether the schemes that use Lyra's allocation move jobs from inference to training GPUs when that
    #: shortens them by more than the restart costs (``restart_cost_s`` of :func:`lyra.core.allocate_workers`).
    migration: bool = True


class Calibration(_Strict):
    #: ``baseline``'s training-GPU usage that ``--calibrate`` aims for (the poster's baseline: 0.72).
    training_usage: float = Field(default=0.72, gt=0, lt=1)
    #: Mean inference utilisation (serving servers / inference servers) aimed for (the poster: ~0.40).
    inference_utilisation: float = Field(default=0.40, gt=0, lt=1)
    #: Inference GPUs per training GPU. 5/3 follows from the poster's baseline: overall usage 0.52 from
    #: training 0.72 and inference 0.40 means 0.72 T + 0.40 I = 0.52 (T + I), i.e. I = 5/3 T.
    inference_gpus_per_training_gpu: float = Field(default=5 / 3, gt=0)


class Scenario(_Strict):
    training: TrainingPool
    inference: InferencePool
    #: Training speed per GPU type relative to the reference (1.0); a type not listed runs at its family's default
    #: in the core's catalogue (:func:`lyra.core.gpus.default_gpu_type`: A100 1.0, T4 0.4, ...; 1.0 if unknown).
    speed: dict[str, float] = Field(default_factory=lambda: {"V100": 1.0, "T4": 0.4})
    loaning: Loaning = Loaning()
    bursts: Bursts = Bursts()
    memory: Memory = Memory()
    scaling: Scaling = Scaling()
    elasticity: Elasticity = Elasticity()
    preemption: Preemption = Preemption()
    durations: Durations = Durations()
    scheduler: Scheduler = Scheduler()
    calibration: Calibration = Calibration()
    #: Seed of every random draw (elastic jobs, duration errors, random reclaim).
    seed: int = 0

    @model_validator(mode="after")
    def _speeds_positive(self) -> Scenario:
        for gpu_type, factor in self.speed.items():
            if not 0 < factor <= 1000:
                raise ValueError(f"speed.{gpu_type} must be in (0, 1000], got {factor}")
        return self

    def with_sizes(self, *, training_servers: int, inference_servers: int, req_per_server: float) -> Scenario:
        """A copy with the calibrated cluster sizes (pools of one server group each)."""
        inference = self.inference.with_servers(inference_servers)
        return self.model_copy(
            update={
                "training": self.training.with_servers(training_servers),
                "inference": inference.model_copy(update={"req_per_server": req_per_server}),
            }
        )

    def speed_of(self, gpu_type: str) -> float:
        speed = self.speed.get(gpu_type)
        return default_gpu_type(gpu_type).speed if speed is None else speed

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """Every GPU type of both pools, sorted by name."""
        return tuple(sorted({*self.training.gpu_types, *self.inference.gpu_types}))


DEFAULT_SCENARIO = "default.yaml"


def load_scenario(path: str | Path | None = None) -> Scenario:
    """Read a scenario YAML; ``None`` reads the default shipped with the package."""
    if path is None:
        text = resources.files("lyra.sim").joinpath("scenarios", DEFAULT_SCENARIO).read_text("utf-8")
        where = f"<package lyra.sim>/scenarios/{DEFAULT_SCENARIO}"
    else:
        where = str(path)
        try:
            text = read_text_file(Path(path), "scenario")
        except TextFileError as error:
            raise ScenarioError(str(error)) from None
    return parse_scenario(text, where)


def parse_scenario(text: str, where: str = "<scenario>") -> Scenario:
    try:
        data: Any = load_yaml(text)
    except YamlError as error:
        raise ScenarioError(f"{where}: {error}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: the scenario must be a mapping of fields")
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in error.errors()
        )
        raise ScenarioError(f"{where}: {problems}") from None
