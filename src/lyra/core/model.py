"""The cluster model: frozen value objects that check their own invariants.

Everything the policies see is built from these types. They are plain Python (no Kubernetes, no pydantic):
the operator, the extender, the simulator and the what-if planner each convert their own inputs into them,
call a policy, and apply the plan that comes back.

Units: GPUs are counted in whole devices; time is in seconds; *work* is in worker-seconds on a reference GPU
(speed 1.0, see :mod:`lyra.core.gpus`), so a job with ``remaining_work = 300`` finishes in 50 s with 6 workers on
reference GPUs under linear scaling.

The speed model (``docs/policies.md``, "Pace"): a job with ``w`` workers whose slowest worker's GPU type has speed
``s`` progresses at ``pace = w * s * e(w)`` reference worker-seconds per second, where the scaling efficiency
``e(w) = 1 / (1 + overhead * (w - 1))`` is 1 for the poster's linear model (``scaling_overhead = 0``). Synchronous
data-parallel training runs at the pace of its slowest worker: speeds never add across GPU types.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lyra.core.errors import InvalidClusterError
from lyra.core.gpus import GpuCatalog, GpuType


class Pool(enum.StrEnum):
    """Which cluster a server belongs to. Loaning never changes the pool; it changes the loan state."""

    TRAINING = "training"
    INFERENCE = "inference"


class LoanState(enum.StrEnum):
    """Where an inference server stands in the loan cycle.

    ``serving`` runs inference pods; ``idle`` is an inference server with no inference work that has not been lent;
    ``loaned`` is lent to training; ``reclaiming`` is on its way back (training work is leaving it).
    The cycle is serving <-> idle -> loaned -> reclaiming -> idle.
    """

    SERVING = "serving"
    IDLE = "idle"
    LOANED = "loaned"
    RECLAIMING = "reclaiming"


#: Upper bounds that keep every policy's work bounded whatever the input says (a job with a billion workers is a
#: typo, not a plan). Adapters reject larger values with these numbers in the message.
MAX_WORKERS = 100_000
MAX_GPUS_PER_SERVER = 1_024

#: Loan states in which training workers may run on an inference server.
TRAINING_STATES = frozenset({LoanState.LOANED, LoanState.RECLAIMING})


def _require(condition: bool, message: str | Callable[[], str]) -> None:
    """Raise :class:`InvalidClusterError` unless ``condition``; a callable message is built only then (value
    objects are made millions of times in a simulation, and most messages format numbers)."""
    if not condition:
        raise InvalidClusterError(message if isinstance(message, str) else message())


_NO_SPEEDS: Mapping[str, float] = MappingProxyType({})


#: A server's or a job's name: the key every snapshot is sorted by.
_name = operator.attrgetter("name")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A finite float, or an int (not a bool) that a float can hold."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1e300


def _require_name(kind: str, name: str) -> None:
    _require(isinstance(name, str) and name != "", lambda: f"{kind} name must be a non-empty string, got {name!r}")


@dataclass(frozen=True, slots=True)
class Server:
    """One GPU server (a Kubernetes node). Whole servers are the unit of loaning and reclaiming.

    ``state`` is the loan state of an inference server; training servers have no loan state (``None``).
    """

    name: str
    pool: Pool
    gpu_type: str
    gpus: int
    state: LoanState | None = None

    def __post_init__(self) -> None:
        _require_name("server", self.name)
        _require(isinstance(self.pool, Pool), lambda: f"server {self.name}: pool must be a Pool, got {self.pool!r}")
        _require(
            isinstance(self.gpu_type, str) and self.gpu_type != "",
            lambda: f"server {self.name}: gpu_type must be a non-empty string, got {self.gpu_type!r}",
        )
        _require(
            isinstance(self.gpus, int) and 0 < self.gpus <= MAX_GPUS_PER_SERVER,
            lambda: (
                f"server {self.name}: gpus must be a positive integer of at most {MAX_GPUS_PER_SERVER}, "
                f"got {self.gpus!r}"
            ),
        )
        if self.pool is Pool.INFERENCE:
            _require(
                isinstance(self.state, LoanState),
                lambda: f"server {self.name}: an inference server needs a loan state, got {self.state!r}",
            )
        else:
            _require(
                self.state is None,
                lambda: f"server {self.name}: a training server has no loan state, got {self.state!r}",
            )

    @property
    def hosts_training(self) -> bool:
        """Training workers may run here: a training server, or an inference server that is loaned or reclaiming."""
        return self.pool is Pool.TRAINING or self.state in TRAINING_STATES


def pace(workers: int, speed: float, overhead: float = 0.0) -> float:
    """The pace of a data-parallel job, written once for the allocator, the fluid model, the simulator and the
    operator: reference worker-seconds per second of ``workers`` workers whose slowest GPU has ``speed``, with the
    scaling efficiency ``e(w) = 1 / (1 + overhead * (w - 1))`` (1 under linear scaling)."""
    if workers <= 0:
        return 0.0
    return workers * speed / (1.0 + overhead * (workers - 1))


@dataclass(frozen=True, slots=True)
class TrainingJob:
    """An elastic (or, with ``min_workers == max_workers``, inelastic) data-parallel training job.

    ``placement`` maps server name to the number of this job's workers on it; an empty placement means the job is
    queued. Workers are interchangeable: any ``workers - min_workers`` of them are *flexible* and can leave by
    scale-in; the first ``min_workers`` are the *base* gang, and losing any of them preempts the whole job.

    Where it may run: ``gpu_types`` lists the GPU types it may use (``None``: any); ``gpu_memory_gib`` is its
    per-GPU memory need, which excludes types known to have less. ``speeds`` overrides the cluster's speed of a
    GPU type with this job's own measured one. A job runs on one GPU type at a time unless ``mix_gpu_types`` is
    set, and then at the pace of its slowest worker. ``scaling_overhead`` shapes the scaling efficiency.
    """

    name: str
    gpus_per_worker: int
    min_workers: int
    max_workers: int
    remaining_work: float
    submit_time: float = 0.0
    priority: int = 0
    placement: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    seconds_since_checkpoint: float = 0.0
    gpu_types: frozenset[str] | None = None
    gpu_memory_gib: float | None = None
    speeds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    mix_gpu_types: bool = False
    scaling_overhead: float = 0.0

    def __post_init__(self) -> None:
        name = self.name
        _require_name("job", name)
        gpw, low, high = self.gpus_per_worker, self.min_workers, self.max_workers
        if not (_is_int(gpw) and 0 < gpw <= MAX_GPUS_PER_SERVER):
            raise InvalidClusterError(
                f"job {name}: gpus_per_worker must be an integer in [1, {MAX_GPUS_PER_SERVER}], got {gpw!r}"
            )
        if not (_is_int(low) and low >= 1):
            raise InvalidClusterError(f"job {name}: min_workers must be an integer >= 1, got {low!r}")
        if not (_is_int(high) and high >= low):
            raise InvalidClusterError(f"job {name}: max_workers ({high!r}) must be an integer >= min_workers ({low})")
        if high > MAX_WORKERS:
            raise InvalidClusterError(f"job {name}: max_workers must be at most {MAX_WORKERS:,}, got {high!r}")
        if not (_is_number(self.remaining_work) and self.remaining_work >= 0):
            raise InvalidClusterError(
                f"job {name}: remaining_work must be finite and >= 0, got {self.remaining_work!r}"
            )
        if not _is_number(self.submit_time):
            raise InvalidClusterError(f"job {name}: submit_time must be finite, got {self.submit_time!r}")
        if not (_is_number(self.seconds_since_checkpoint) and self.seconds_since_checkpoint >= 0):
            raise InvalidClusterError(f"job {name}: seconds_since_checkpoint must be finite and >= 0")
        if not _is_int(self.priority):
            raise InvalidClusterError(f"job {name}: priority must be an integer, got {self.priority!r}")
        if self.gpu_types is not None:
            given: object = self.gpu_types
            if isinstance(given, str):
                raise InvalidClusterError(
                    f"job {name}: gpu_types must be a set of GPU type names, got the string {self.gpu_types!r}"
                )
            types = frozenset(self.gpu_types)
            if not types or not all(isinstance(t, str) and t for t in types):
                raise InvalidClusterError(
                    f"job {name}: gpu_types must be non-empty GPU type names (or None for any), got "
                    f"{sorted(map(str, types))!r}"
                )
            object.__setattr__(self, "gpu_types", types)
        memory = self.gpu_memory_gib
        if memory is not None and not (_is_number(memory) and memory > 0):
            raise InvalidClusterError(f"job {name}: gpu_memory_gib must be > 0 (or None), got {memory!r}")
        if self.speeds:
            speeds: dict[str, float] = {}
            for gpu_type, speed in sorted(dict(self.speeds).items()):
                if not (isinstance(gpu_type, str) and gpu_type and _is_number(speed) and 0 < speed <= 1000):
                    raise InvalidClusterError(f"job {name}: speed on {gpu_type!r} must be in (0, 1000], got {speed!r}")
                speeds[gpu_type] = float(speed)
            object.__setattr__(self, "speeds", MappingProxyType(speeds))
        elif not isinstance(self.speeds, MappingProxyType):
            object.__setattr__(self, "speeds", _NO_SPEEDS)
        if not isinstance(self.mix_gpu_types, bool):
            raise InvalidClusterError(f"job {name}: mix_gpu_types must be a bool")
        if not (_is_number(self.scaling_overhead) and 0 <= self.scaling_overhead <= 1):
            raise InvalidClusterError(f"job {name}: scaling_overhead must be in [0, 1], got {self.scaling_overhead!r}")
        frozen: dict[str, int] = {}
        for server, count in sorted(dict(self.placement).items()):
            if not isinstance(server, str) or not server:
                raise InvalidClusterError(
                    f"job {name}: placement server name must be a non-empty string, got {server!r}"
                )
            if not _is_int(count) or count < 0:
                raise InvalidClusterError(
                    f"job {name}: worker count on {server} must be an integer >= 0, got {count!r}"
                )
            if count:
                frozen[server] = count
        object.__setattr__(self, "placement", MappingProxyType(frozen))
        workers = sum(frozen.values())
        _require(
            workers == 0 or self.min_workers <= workers <= self.max_workers,
            lambda: f"job {self.name}: runs {workers} workers, outside [{self.min_workers}, {self.max_workers}]",
        )

    @property
    def workers(self) -> int:
        return sum(self.placement.values())

    @property
    def is_running(self) -> bool:
        return bool(self.placement)

    @property
    def is_elastic(self) -> bool:
        return self.max_workers > self.min_workers

    @property
    def flexible_workers(self) -> int:
        """Workers above the base gang: they can leave by scale-in without preempting the job."""
        return max(0, self.workers - self.min_workers)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    def efficiency(self, workers: int) -> float:
        """Scaling efficiency ``e(w) = 1 / (1 + overhead * (w - 1))``: 1 under linear scaling. ``w * e(w)`` rises
        with ``w``, so a worker of the job's own GPU type never slows it down."""
        return 1.0 / (1.0 + self.scaling_overhead * (workers - 1)) if workers > 1 else 1.0

    def pace(self, workers: int, speed: float = 1.0) -> float:
        """Reference worker-seconds per second with ``workers`` workers whose slowest GPU has ``speed``."""
        return pace(workers, speed, self.scaling_overhead)

    def time_at(self, workers: int, speed: float = 1.0) -> float:
        """Remaining running time with ``workers`` workers whose slowest GPU has ``speed``."""
        pace = self.pace(workers, speed)
        if pace <= 0:
            return math.inf
        return self.remaining_work / pace

    def may_use(self, gpu: GpuType) -> bool:
        """True if the job may run on ``gpu``: listed in ``gpu_types`` (if given), and not known to be too small."""
        if self.gpu_types is not None and gpu.name not in self.gpu_types:
            return False
        return not (
            self.gpu_memory_gib is not None and gpu.memory_gib is not None and gpu.memory_gib < self.gpu_memory_gib
        )

    def speed_on(self, gpu: GpuType) -> float:
        """The job's speed on ``gpu``: its own measured speed if it has one, else the type's."""
        return self.speeds.get(gpu.name, gpu.speed)

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True, slots=True)
class InferenceDemand:
    """What inference needs right now, in whole servers, after the operator sized each service from its load."""

    servers: int

    def __post_init__(self) -> None:
        _require(
            isinstance(self.servers, int) and self.servers >= 0,
            lambda: f"inference demand must be an integer number of servers >= 0, got {self.servers!r}",
        )


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Servers and training jobs at one instant, checked for consistency as a whole.

    Servers and jobs are kept sorted by name, which is the final tie-break of every policy. ``gpus`` describes the
    GPU types (speed, memory); a type it does not list gets its family's defaults (:mod:`lyra.core.gpus`).
    A running job uses only GPU types it may use, and only one of them unless it opts in to mixing.
    """

    servers: tuple[Server, ...]
    jobs: tuple[TrainingJob, ...] = ()
    gpus: GpuCatalog = field(default_factory=GpuCatalog)

    def __post_init__(self) -> None:
        servers = tuple(sorted(self.servers, key=_name))
        jobs = tuple(sorted(self.jobs, key=_name))
        object.__setattr__(self, "servers", servers)
        object.__setattr__(self, "jobs", jobs)
        by_name = {s.name: s for s in servers}
        if len(by_name) != len(servers):
            _require_unique("server", (s.name for s in servers))
        if len({j.name for j in jobs}) != len(jobs):
            _require_unique("job", (j.name for j in jobs))
        used: dict[str, int] = {}
        gpus = self.gpus
        for job in jobs:
            constrained = job.gpu_types is not None or job.gpu_memory_gib is not None
            first_type = None
            for server_name, count in job.placement.items():
                server = by_name.get(server_name)
                if server is None:
                    raise InvalidClusterError(f"job {job.name}: runs on unknown server {server_name!r}")
                if not server.hosts_training:
                    raise InvalidClusterError(
                        f"job {job.name}: has workers on {server.name}, an inference server in state "
                        f"{server.state}; training may only run on training or loaned/reclaiming servers"
                    )
                if constrained and not job.may_use(gpus[server.gpu_type]):
                    raise InvalidClusterError(
                        f"job {job.name}: has workers on {server.name}, a {server.gpu_type} server, which the job "
                        f"may not use ({_excluded_because(job, gpus[server.gpu_type])})"
                    )
                if first_type is None:
                    first_type = server.gpu_type
                elif server.gpu_type != first_type and not job.mix_gpu_types:
                    kinds = sorted({by_name[s].gpu_type for s in job.placement})
                    raise InvalidClusterError(
                        f"job {job.name}: runs on several GPU types ({', '.join(kinds)}) without mix_gpu_types"
                    )
                used[server_name] = used.get(server_name, 0) + count * job.gpus_per_worker
        for name, taken in used.items():
            if taken > by_name[name].gpus:
                raise InvalidClusterError(
                    f"server {name}: training uses {taken} GPUs but the server has {by_name[name].gpus}"
                )

    def server(self, name: str) -> Server:
        for server in self.servers:
            if server.name == name:
                return server
        raise KeyError(name)

    def job(self, name: str) -> TrainingJob:
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    def used_gpus(self) -> dict[str, int]:
        """GPUs used by training on each server (every server appears, unused ones with 0)."""
        used = dict.fromkeys((s.name for s in self.servers), 0)
        for job in self.jobs:
            for server, count in job.placement.items():
                used[server] += count * job.gpus_per_worker
        return used

    def servers_in(self, *states: LoanState) -> tuple[Server, ...]:
        wanted = frozenset(states)
        return tuple(s for s in self.servers if s.state in wanted)

    def gpu_type_of(self, server: Server) -> GpuType:
        return self.gpus[server.gpu_type]

    def job_speed(self, job: TrainingJob) -> float:
        """The speed of a running job's slowest worker (0.0 for a queued job)."""
        by_name = {s.name: s for s in self.servers}
        return min((job.speed_on(self.gpus[by_name[s].gpu_type]) for s in job.placement), default=0.0)

    def training_capacity(self) -> int:
        """GPUs that training may use now: training servers plus loaned (not reclaiming) inference servers."""
        return sum(s.gpus for s in self.servers if s.pool is Pool.TRAINING or s.state is LoanState.LOANED)


def _excluded_because(job: TrainingJob, gpu: GpuType) -> str:
    if job.gpu_types is not None and gpu.name not in job.gpu_types:
        return f"its gpu_types are {', '.join(sorted(job.gpu_types))}"
    return f"it needs {job.gpu_memory_gib:g} GiB per GPU, a {gpu.name} has {gpu.memory_gib:g}"


def _require_unique(kind: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidClusterError(f"duplicate {kind} name {name!r}")
        seen.add(name)
