"""Fluent builders for the policy core's value objects, so each test states only what matters to it.

``job("a").gpus(1).workers(2, 6).work(300).on({"v0": 2}).types("V100").memory(24).build()``,
``training("v0")`` (an 8-GPU V100 training server), ``loaned("l0")`` (an 8-GPU T4 inference server lent to
training), ``cluster(training("v0"), loaned("l0")).jobs(job("a")).build()``, ``node("n").loaned(3)``.
Every builder has defaults that form a valid object; ``snapshot(...)`` and ``cluster(...)`` accept job builders or
built jobs, and describe the GPU types with :data:`CATALOG` unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Self

from lyra.core import (
    ClusterSnapshot,
    GpuCatalog,
    GpuType,
    LoanState,
    NodeView,
    PodRequest,
    PodRole,
    Pool,
    Server,
    TrainingJob,
)

#: The two GPU types of most tests, with round numbers: a V100 trains at the reference speed and has 32 GiB; a T4
#: trains at half that speed and has 16 GiB (so ``memory(24)`` excludes T4s only).
V100 = "V100"
T4 = "T4"
CATALOG = GpuCatalog.of(GpuType(V100, 1.0, 32.0), GpuType(T4, 0.5, 16.0))


class JobBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._gpus_per_worker = 1
        self._min = 1
        self._max = 1
        self._work = 100.0
        self._submit = 0.0
        self._priority = 0
        self._placement: dict[str, int] = {}
        self._since_checkpoint = 0.0
        self._types: frozenset[str] | None = None
        self._memory: float | None = None
        self._speeds: dict[str, float] = {}
        self._mix = False
        self._overhead = 0.0

    def gpus(self, per_worker: int) -> Self:
        self._gpus_per_worker = per_worker
        return self

    def workers(self, low: int, high: int | None = None) -> Self:
        """Worker range; one argument makes the job inelastic."""
        self._min = low
        self._max = low if high is None else high
        return self

    def work(self, worker_seconds: float) -> Self:
        self._work = worker_seconds
        return self

    def on(self, placement: Mapping[str, int]) -> Self:
        self._placement = dict(placement)
        return self

    def priority(self, value: int) -> Self:
        self._priority = value
        return self

    def submitted(self, at: float) -> Self:
        self._submit = at
        return self

    def checkpointed(self, seconds_ago: float) -> Self:
        self._since_checkpoint = seconds_ago
        return self

    def types(self, *names: str) -> Self:
        """The GPU types the job may use (none given: any)."""
        self._types = frozenset(names) if names else None
        return self

    def memory(self, gib: float) -> Self:
        """Per-GPU memory need: excludes types known to have less."""
        self._memory = gib
        return self

    def speed(self, gpu_type: str, value: float) -> Self:
        """The job's own measured speed on ``gpu_type`` (overrides the catalogue's)."""
        self._speeds[gpu_type] = value
        return self

    def mixing(self, allowed: bool = True) -> Self:
        self._mix = allowed
        return self

    def overhead(self, value: float) -> Self:
        """Scaling overhead: efficiency ``1 / (1 + overhead * (w - 1))``."""
        self._overhead = value
        return self

    def build(self) -> TrainingJob:
        return TrainingJob(
            name=self._name,
            gpus_per_worker=self._gpus_per_worker,
            min_workers=self._min,
            max_workers=self._max,
            remaining_work=self._work,
            submit_time=self._submit,
            priority=self._priority,
            placement=self._placement,
            seconds_since_checkpoint=self._since_checkpoint,
            gpu_types=self._types,
            gpu_memory_gib=self._memory,
            speeds=self._speeds,
            mix_gpu_types=self._mix,
            scaling_overhead=self._overhead,
        )


def job(name: str) -> JobBuilder:
    return JobBuilder(name)


# Servers: V100 training servers and T4 inference servers in each loan state, 8 GPUs unless told otherwise.


def training(name: str, gpus: int = 8, gpu_type: str = V100) -> Server:
    return Server(name, Pool.TRAINING, gpu_type, gpus)


def inference(name: str, state: LoanState, gpus: int = 8, gpu_type: str = T4) -> Server:
    return Server(name, Pool.INFERENCE, gpu_type, gpus, state)


def loaned(name: str, gpus: int = 8, gpu_type: str = T4) -> Server:
    return inference(name, LoanState.LOANED, gpus, gpu_type)


def reclaiming(name: str, gpus: int = 8, gpu_type: str = T4) -> Server:
    return inference(name, LoanState.RECLAIMING, gpus, gpu_type)


def serving(name: str, gpus: int = 8, gpu_type: str = T4) -> Server:
    return inference(name, LoanState.SERVING, gpus, gpu_type)


def idle(name: str, gpus: int = 8, gpu_type: str = T4) -> Server:
    return inference(name, LoanState.IDLE, gpus, gpu_type)


class ClusterBuilder:
    """Servers, jobs and the GPU catalogue of one snapshot."""

    def __init__(self, servers: Iterable[Server], gpus: GpuCatalog) -> None:
        self._servers = list(servers)
        self._jobs: list[TrainingJob] = []
        self._gpus = gpus

    def servers(self, *servers: Server) -> Self:
        self._servers.extend(servers)
        return self

    def jobs(self, *jobs: TrainingJob | JobBuilder) -> Self:
        self._jobs.extend(j.build() if isinstance(j, JobBuilder) else j for j in jobs)
        return self

    def catalog(self, gpus: GpuCatalog) -> Self:
        self._gpus = gpus
        return self

    def build(self) -> ClusterSnapshot:
        return ClusterSnapshot(tuple(self._servers), tuple(self._jobs), self._gpus)


def cluster(*servers: Server, gpus: GpuCatalog = CATALOG) -> ClusterBuilder:
    return ClusterBuilder(servers, gpus)


def snapshot(
    servers: Iterable[Server], jobs: Iterable[TrainingJob | JobBuilder] = (), gpus: GpuCatalog = CATALOG
) -> ClusterSnapshot:
    return cluster(*servers, gpus=gpus).jobs(*jobs).build()


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._pool = Pool.TRAINING
        self._state: LoanState | None = None
        self._gpus = 8
        self._free: int | None = None
        self._rank = 0
        self._type: str | None = None

    def training(self) -> Self:
        self._pool, self._state = Pool.TRAINING, None
        return self

    def _inference(self, state: LoanState) -> Self:
        self._pool, self._state = Pool.INFERENCE, state
        return self

    def serving(self) -> Self:
        return self._inference(LoanState.SERVING)

    def idle(self) -> Self:
        return self._inference(LoanState.IDLE)

    def reclaiming(self) -> Self:
        return self._inference(LoanState.RECLAIMING)

    def loaned(self, rank: int = 0) -> Self:
        """A loaned node at position ``rank`` of the reclaim order (0 = reclaimed first)."""
        self._rank = rank
        return self._inference(LoanState.LOANED)

    def gpus(self, total: int) -> Self:
        self._gpus = total
        return self

    def free(self, gpus: int) -> Self:
        self._free = gpus
        return self

    def type(self, gpu_type: str) -> Self:
        """The node's GPU type (default: V100 for a training node, T4 for an inference node)."""
        self._type = gpu_type
        return self

    def build(self) -> NodeView:
        free = self._gpus if self._free is None else self._free
        gpu_type = self._type if self._type is not None else (V100 if self._pool is Pool.TRAINING else T4)
        return NodeView(self._name, self._pool, self._state, self._gpus, free, self._rank, gpu_type)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def pod(
    role: PodRole,
    gpus: int = 1,
    job: str | None = None,
    on: Mapping[str, int] | None = None,
    types: Iterable[str] | None = None,
) -> PodRequest:
    return PodRequest(role, gpus, job, dict(on or {}), None if types is None else frozenset(types))
