"""Hypothesis strategies for random clusters, job mixes and node views, and the settings every property uses.

Clusters have two GPU types (:data:`builders.CATALOG`: V100 training servers, T4 inference servers, and now and
then the other way round), servers of 2, 4, 6 or 8 GPUs, jobs with multi-GPU workers, some limited to one type or
needing more memory than a T4 has, some allowed to mix types. Running jobs are placed consistently (types they may
use, one type unless they mix, within each server's GPUs).

``derandomize=True`` seeds each property from its own source, so CI runs the same examples every time; no
example database is written.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from lyra.core import ClusterSnapshot, LoanState, NodeView, Pool, Server, TrainingJob

from .builders import CATALOG, T4, V100

PROPERTY = settings(
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Server kinds of the allocation strategy: (name prefix, pool, loan state, GPU type), the common ones repeated.
_KINDS = [
    ("v", Pool.TRAINING, None, V100),
    ("v", Pool.TRAINING, None, V100),
    ("l", Pool.INFERENCE, LoanState.LOANED, T4),
    ("l", Pool.INFERENCE, LoanState.LOANED, T4),
    ("r", Pool.INFERENCE, LoanState.RECLAIMING, T4),
    ("s", Pool.INFERENCE, LoanState.SERVING, T4),
    ("t", Pool.TRAINING, None, T4),
    ("m", Pool.INFERENCE, LoanState.LOANED, V100),
]


def _placement(
    draw: st.DrawFn, spec: TrainingJob, hosts: list[Server], free: dict[str, int], max_servers: int = 3
) -> dict[str, int]:
    """Up to ``max_servers`` of ``hosts`` (which the job may use) with a few workers each, within their free GPUs;
    one GPU type unless the job mixes. Empty if fewer than ``min_workers`` fit."""
    usable = [s for s in hosts if spec.may_use(CATALOG[s.gpu_type]) and free[s.name] >= spec.gpus_per_worker]
    if not usable:
        return {}
    chosen = draw(
        st.lists(st.sampled_from([s.name for s in usable]), min_size=1, max_size=max_servers, unique=True),
        label=f"{spec.name} hosts",
    )
    by_name = {s.name: s for s in usable}
    if not spec.mix_gpu_types:
        first = by_name[chosen[0]].gpu_type
        chosen = [name for name in chosen if by_name[name].gpu_type == first]
    placement: dict[str, int] = {}
    left = spec.max_workers
    for name in chosen:
        count = min(draw(st.integers(1, 3), label=f"{spec.name} on {name}"), free[name] // spec.gpus_per_worker, left)
        if count:
            placement[name] = count
            left -= count
    if sum(placement.values()) < spec.min_workers:
        return {}
    for name, count in placement.items():
        free[name] -= count * spec.gpus_per_worker
    return placement


@st.composite
def allocation_cases(
    draw: st.DrawFn, max_servers: int = 6, max_jobs: int = 7
) -> tuple[ClusterSnapshot, dict[str, int]]:
    """A two-type cluster, running and queued jobs on it, and GPUs held by work outside the decision."""
    servers = []
    for i in range(draw(st.integers(1, max_servers), label="servers")):
        prefix, pool, state, gpu_type = draw(st.sampled_from(_KINDS), label=f"server {i}")
        servers.append(Server(f"{prefix}{i}", pool, gpu_type, draw(st.sampled_from([2, 4, 6, 8])), state))
    hosts = [s for s in servers if s.hosts_training]
    free = {s.name: s.gpus for s in servers}
    jobs = []
    for i in range(draw(st.integers(0, max_jobs), label="jobs")):
        low = draw(st.integers(1, 3))
        restriction = draw(st.sampled_from([None, None, None, None, "v100", "t4", "memory"]))
        spec = TrainingJob(
            name=f"j{i}",
            gpus_per_worker=draw(st.sampled_from([1, 1, 2, 4])),
            min_workers=low,
            max_workers=low + draw(st.sampled_from([0, 0, 1, 2, 4])),
            remaining_work=float(draw(st.integers(0, 2000))),
            submit_time=float(draw(st.integers(0, 3))),
            priority=draw(st.sampled_from([0, 0, 0, 1])),
            gpu_types={"v100": frozenset({V100}), "t4": frozenset({T4})}.get(restriction or ""),
            gpu_memory_gib=24.0 if restriction == "memory" else None,
            mix_gpu_types=draw(st.sampled_from([False, False, True])),
            scaling_overhead=draw(st.sampled_from([0.0, 0.0, 0.2])),
        )
        if draw(st.booleans(), label=f"j{i} running"):
            placement = _placement(draw, spec, hosts, free)
            if placement:
                spec = dataclasses.replace(spec, placement=placement)
        jobs.append(spec)
    held: dict[str, int] = {}
    for server in servers:
        if server.pool is Pool.TRAINING or server.state is LoanState.LOANED:
            count = min(draw(st.sampled_from([0, 0, 0, 1, 2]), label=f"held on {server.name}"), free[server.name])
            if count:
                held[server.name] = count
    return ClusterSnapshot(tuple(servers), tuple(jobs), CATALOG), held


@st.composite
def reclaim_snapshots(draw: st.DrawFn, max_loaned: int = 7) -> ClusterSnapshot:
    """A cluster with loaned, reclaiming, training and inference-only servers, and jobs spread over the first three
    (on one GPU type each, except jobs that mix types)."""
    servers: list[Server] = []
    counts = {
        LoanState.LOANED: draw(st.integers(0, max_loaned)),
        LoanState.RECLAIMING: draw(st.integers(0, 2)),
        LoanState.SERVING: draw(st.integers(0, 1)),
        LoanState.IDLE: draw(st.integers(0, 1)),
    }
    for state, count in counts.items():
        for i in range(count):
            servers.append(Server(f"{state.value[0]}{i}", Pool.INFERENCE, T4, draw(st.sampled_from([4, 8])), state))
    for i in range(draw(st.integers(0, 2))):
        servers.append(Server(f"t{i}", Pool.TRAINING, V100, 8))
    hosts = [s for s in servers if s.hosts_training]
    free = {s.name: s.gpus for s in hosts}
    jobs: list[TrainingJob] = []
    for j in range(draw(st.integers(0, 8)) if hosts else 0):
        gpw = draw(st.sampled_from([1, 1, 2, 4]))
        shape = TrainingJob(f"j{j}", gpw, 1, 12, 1000.0, mix_gpu_types=draw(st.sampled_from([False, False, True])))
        placement = _placement(draw, shape, hosts, free)
        workers = sum(placement.values())
        if not workers:
            continue
        jobs.append(
            TrainingJob(
                name=shape.name,
                gpus_per_worker=gpw,
                min_workers=draw(st.integers(1, workers)),
                max_workers=workers + draw(st.integers(0, 3)),
                remaining_work=1000.0,
                placement=placement,
                seconds_since_checkpoint=float(draw(st.sampled_from([0, 60, 600]))),
                mix_gpu_types=shape.mix_gpu_types,
            )
        )
    return ClusterSnapshot(tuple(servers), tuple(jobs), CATALOG)


@st.composite
def node_views(draw: st.DrawFn) -> list[NodeView]:
    kinds = [(Pool.TRAINING, None), *((Pool.INFERENCE, state) for state in LoanState)]
    views: list[NodeView] = []
    for i in range(draw(st.integers(1, 12))):
        pool, state = draw(st.sampled_from(kinds))
        gpus = draw(st.sampled_from([1, 4, 8, 16]))
        views.append(
            NodeView(
                f"n{i}",
                pool,
                state,
                gpus,
                draw(st.integers(0, gpus)),
                draw(st.integers(0, 20)),
                draw(st.sampled_from([V100, T4])),
            )
        )
    return views
