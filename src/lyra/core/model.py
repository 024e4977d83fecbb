"""The cluster model: frozen value objects that check their own invariants.

Everything the policies see is built from these types. They are plain Python (no Kubernetes, no pydantic):
the operator, the extender, the simulator and the what-if planner each convert their own inputs into them,
call a policy, and apply the plan that comes back.

Units: GPUs are counted in whole devices; time is in seconds; *work* is in worker-seconds at speed 1, so a job
with ``remaining_work = 300`` finishes in 50 s with 6 workers at speed factor 1.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class InvalidClusterError(ValueError):
    """A value object or snapshot violates an invariant. The message names the object and the field."""


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


#: Loan states in which training workers may run on an inference server.
TRAINING_STATES = frozenset({LoanState.LOANED, LoanState.RECLAIMING})


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidClusterError(message)


def _require_name(kind: str, name: str) -> None:
    _require(isinstance(name, str) and name != "", f"{kind} name must be a non-empty string, got {name!r}")


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
        _require(isinstance(self.pool, Pool), f"server {self.name}: pool must be a Pool, got {self.pool!r}")
        _require(self.gpu_type != "", f"server {self.name}: gpu_type must not be empty")
        _require(
            isinstance(self.gpus, int) and self.gpus > 0,
            f"server {self.name}: gpus must be a positive integer, got {self.gpus!r}",
        )
        if self.pool is Pool.INFERENCE:
            _require(
                isinstance(self.state, LoanState),
                f"server {self.name}: an inference server needs a loan state, got {self.state!r}",
            )
        else:
            _require(
                self.state is None,
                f"server {self.name}: a training server has no loan state, got {self.state!r}",
            )

    @property
    def hosts_training(self) -> bool:
        """Training workers may run here: a training server, or an inference server that is loaned or reclaiming."""
        return self.pool is Pool.TRAINING or self.state in TRAINING_STATES


@dataclass(frozen=True, slots=True)
class TrainingJob:
    """An elastic (or, with ``min_workers == max_workers``, inelastic) data-parallel training job.

    ``placement`` maps server name to the number of this job's workers on it; an empty placement means the job is
    queued. Workers are interchangeable: any ``workers - min_workers`` of them are *flexible* and can leave by
    scale-in; the first ``min_workers`` are the *base* gang, and losing any of them preempts the whole job.
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

    def __post_init__(self) -> None:
        _require_name("job", self.name)
        _require(
            isinstance(self.gpus_per_worker, int) and self.gpus_per_worker > 0,
            f"job {self.name}: gpus_per_worker must be a positive integer, got {self.gpus_per_worker!r}",
        )
        _require(
            isinstance(self.min_workers, int) and self.min_workers >= 1,
            f"job {self.name}: min_workers must be an integer >= 1, got {self.min_workers!r}",
        )
        _require(
            isinstance(self.max_workers, int) and self.max_workers >= self.min_workers,
            f"job {self.name}: max_workers ({self.max_workers!r}) must be an integer >= min_workers "
            f"({self.min_workers})",
        )
        _require(
            math.isfinite(self.remaining_work) and self.remaining_work >= 0,
            f"job {self.name}: remaining_work must be finite and >= 0, got {self.remaining_work!r}",
        )
        _require(math.isfinite(self.submit_time), f"job {self.name}: submit_time must be finite")
        _require(
            math.isfinite(self.seconds_since_checkpoint) and self.seconds_since_checkpoint >= 0,
            f"job {self.name}: seconds_since_checkpoint must be finite and >= 0",
        )
        frozen: dict[str, int] = {}
        for server, count in sorted(dict(self.placement).items()):
            _require_name(f"job {self.name}: placement server", server)
            _require(
                isinstance(count, int) and count >= 0,
                f"job {self.name}: worker count on {server} must be an integer >= 0, got {count!r}",
            )
            if count:
                frozen[server] = count
        object.__setattr__(self, "placement", MappingProxyType(frozen))
        workers = sum(frozen.values())
        _require(
            workers == 0 or self.min_workers <= workers <= self.max_workers,
            f"job {self.name}: runs {workers} workers, outside [{self.min_workers}, {self.max_workers}]",
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

    def time_at(self, workers: int, speed: float = 1.0) -> float:
        """Remaining running time with ``workers`` workers under linear scaling."""
        if workers <= 0 or speed <= 0:
            return math.inf
        return self.remaining_work / (workers * speed)

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True, slots=True)
class SpeedFactors:
    """Per-GPU-type speed relative to the reference type (factor 1.0). Unknown types run at ``default``."""

    factors: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    default: float = 1.0

    def __post_init__(self) -> None:
        for gpu_type, factor in self.factors.items():
            _require(
                math.isfinite(factor) and factor > 0,
                f"speed factor for {gpu_type!r} must be finite and > 0, got {factor!r}",
            )
        _require(math.isfinite(self.default) and self.default > 0, "default speed factor must be > 0")
        object.__setattr__(self, "factors", MappingProxyType(dict(sorted(self.factors.items()))))

    def of(self, gpu_type: str) -> float:
        return self.factors.get(gpu_type, self.default)


@dataclass(frozen=True, slots=True)
class InferenceDemand:
    """What inference needs right now, in whole servers, after the operator sized each service from its load."""

    servers: int

    def __post_init__(self) -> None:
        _require(
            isinstance(self.servers, int) and self.servers >= 0,
            f"inference demand must be an integer number of servers >= 0, got {self.servers!r}",
        )


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Servers and training jobs at one instant, checked for consistency as a whole.

    Servers and jobs are kept sorted by name, which is the final tie-break of every policy.
    """

    servers: tuple[Server, ...]
    jobs: tuple[TrainingJob, ...] = ()
    speed: SpeedFactors = field(default_factory=SpeedFactors)

    def __post_init__(self) -> None:
        servers = tuple(sorted(self.servers, key=lambda s: s.name))
        jobs = tuple(sorted(self.jobs, key=lambda j: j.name))
        object.__setattr__(self, "servers", servers)
        object.__setattr__(self, "jobs", jobs)
        _require_unique("server", (s.name for s in servers))
        _require_unique("job", (j.name for j in jobs))
        by_name = {s.name: s for s in servers}
        used: dict[str, int] = dict.fromkeys(by_name, 0)
        for job in jobs:
            for server_name, count in job.placement.items():
                server = by_name.get(server_name)
                _require(server is not None, f"job {job.name}: runs on unknown server {server_name!r}")
                assert server is not None
                _require(
                    server.hosts_training,
                    f"job {job.name}: has workers on {server.name}, an inference server in state "
                    f"{server.state}; training may only run on training or loaned/reclaiming servers",
                )
                used[server_name] += count * job.gpus_per_worker
        for name, gpus in used.items():
            _require(
                gpus <= by_name[name].gpus,
                f"server {name}: training uses {gpus} GPUs but the server has {by_name[name].gpus}",
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

    def training_capacity(self) -> int:
        """GPUs that training may use now: training servers plus loaned (not reclaiming) inference servers."""
        return sum(s.gpus for s in self.servers if s.pool is Pool.TRAINING or s.state is LoanState.LOANED)


def _require_unique(kind: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        _require(name not in seen, f"duplicate {kind} name {name!r}")
        seen.add(name)
