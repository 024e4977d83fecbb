"""Fluent builders for the policy core's value objects, so each test states only what matters to it.

``job("a").gpus(1).workers(2, 6).work(300).on({"l0": 2}).build()``, ``loaned("l0")``, ``node("n").loaned(3)``.
Every builder has defaults that form a valid object; ``snapshot(...)`` accepts builders or built objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Self

from lyra.core import ClusterSnapshot, LoanState, NodeView, PodRequest, PodRole, Pool, Server, TrainingJob


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
        )


def job(name: str) -> JobBuilder:
    return JobBuilder(name)


def training(name: str, gpus: int = 8, gpu_type: str = "A100") -> Server:
    return Server(name, Pool.TRAINING, gpu_type, gpus)


def inference(name: str, state: LoanState, gpus: int = 8, gpu_type: str = "T4") -> Server:
    return Server(name, Pool.INFERENCE, gpu_type, gpus, state)


def loaned(name: str, gpus: int = 8) -> Server:
    return inference(name, LoanState.LOANED, gpus)


def reclaiming(name: str, gpus: int = 8) -> Server:
    return inference(name, LoanState.RECLAIMING, gpus)


def serving(name: str, gpus: int = 8) -> Server:
    return inference(name, LoanState.SERVING, gpus)


def idle(name: str, gpus: int = 8) -> Server:
    return inference(name, LoanState.IDLE, gpus)


def snapshot(servers: Iterable[Server], jobs: Iterable[TrainingJob | JobBuilder] = ()) -> ClusterSnapshot:
    built = tuple(j.build() if isinstance(j, JobBuilder) else j for j in jobs)
    return ClusterSnapshot(tuple(servers), built)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._pool = Pool.TRAINING
        self._state: LoanState | None = None
        self._gpus = 8
        self._free: int | None = None
        self._rank = 0

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

    def build(self) -> NodeView:
        free = self._gpus if self._free is None else self._free
        return NodeView(self._name, self._pool, self._state, self._gpus, free, self._rank)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def pod(role: PodRole, gpus: int = 1, job: str | None = None, on: Mapping[str, int] | None = None) -> PodRequest:
    return PodRequest(role, gpus, job, dict(on or {}))
