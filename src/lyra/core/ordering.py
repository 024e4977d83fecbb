"""The orderings of the core, each written once; every one ends in a deterministic tie-break by name.

* **Admission** (:func:`admission_key`): queued jobs start in order of priority (higher first), shortest time at
  base on the fastest GPU type they may use, submit time, name. The allocator's phase 1 admits in it, the fluid model
  starts queued jobs in it, the simulator's queue and ``lyra status`` list them in it.
* **Lend** (:func:`lend_order`): idle inference servers are lent most GPUs first, then by name.
* **Serve** (:func:`serve_order`): empty inference servers are kept for inference in the reverse of the lend
  order, those already serving first, so the servers lent next are the ones inference gives up first.
* **Idle first** (:func:`idle_first`): loaned servers by the GPUs training uses on them, fewest first, then by name:
  the naive reclaim order and the start of the reclaim search.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from lyra.core.model import ClusterSnapshot, LoanState, TrainingJob

T = TypeVar("T", str, int)
AdmissionKey = tuple[int, float, float, str]


def queue_key(priority: int, time_at_base: float, submit_time: float, tie: T) -> tuple[int, float, float, T]:
    """The admission order from its parts, for callers that hold a job as numbers (the fluid model, the simulator's
    queue): ``tie`` is the job's name, or its index where jobs come in name order."""
    return (-priority, time_at_base, submit_time, tie)


def admission_key(job: TrainingJob, best_speed: float) -> AdmissionKey:
    """Where ``job`` stands in the queue: ``best_speed`` is its speed on the fastest GPU type it may use."""
    return queue_key(job.priority, job.time_at(job.min_workers, best_speed), job.submit_time, job.name)


def admission_order(snapshot: ClusterSnapshot) -> tuple[str, ...]:
    """The queued jobs (no placement) of ``snapshot`` in admission order. A job's fastest type is the fastest type
    it may use among the servers that may host training (training servers, loaned or reclaiming inference ones)."""
    gpus = snapshot.gpus
    types = [gpus[name] for name in sorted({s.gpu_type for s in snapshot.servers if s.hosts_training})]

    def best_speed(job: TrainingJob) -> float:
        return max((job.speed_on(gpu) for gpu in types if job.may_use(gpu)), default=0.0)

    queued = [job for job in snapshot.jobs if not job.placement]
    return tuple(job.name for job in sorted(queued, key=lambda job: admission_key(job, best_speed(job))))


class ServerLike(Protocol):
    """What the server orders read of a server: its name and its GPUs."""

    @property
    def name(self) -> str: ...
    @property
    def gpus(self) -> int: ...


class _InLoanState(ServerLike, Protocol):
    @property
    def state(self) -> LoanState | None: ...


S = TypeVar("S", bound=ServerLike)
L = TypeVar("L", bound=_InLoanState)


def lend_key(server: ServerLike) -> tuple[int, str]:
    return (-server.gpus, server.name)


def lend_order(servers: Iterable[S]) -> list[S]:
    """Idle servers in the order they are lent: most GPUs first, then by name."""
    return sorted(servers, key=lend_key)


def serve_order(servers: Iterable[L]) -> list[L]:
    """Empty inference servers in the order they are kept for inference: those already serving first, then the
    reverse of the lend order (fewest GPUs, then the name backwards)."""
    by_name_backwards = sorted(servers, key=lambda s: s.name, reverse=True)
    return sorted(by_name_backwards, key=lambda s: (s.state is not LoanState.SERVING, s.gpus))  # stable


def idle_first(servers: Iterable[str], used_gpus: Mapping[str, int]) -> list[str]:
    """Servers by the GPUs training uses on them, fewest (idle) first, then by name."""
    return sorted(servers, key=lambda s: (used_gpus[s], s))
