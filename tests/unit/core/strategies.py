"""Hypothesis strategies for random clusters, job mixes and node views, and the settings every property uses.

``derandomize=True`` seeds each property from its own source, so CI runs the same examples every time; no
example database is written.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from lyra.core import ClusterSnapshot, LoanState, NodeView, Pool, Server, TrainingJob

PROPERTY = settings(
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def reclaim_snapshots(draw: st.DrawFn, max_loaned: int = 7) -> ClusterSnapshot:
    """A cluster with loaned, reclaiming, training and inference-only servers, and jobs spread over the first three."""
    servers: list[Server] = []
    counts = {
        LoanState.LOANED: draw(st.integers(0, max_loaned)),
        LoanState.RECLAIMING: draw(st.integers(0, 2)),
        LoanState.SERVING: draw(st.integers(0, 1)),
        LoanState.IDLE: draw(st.integers(0, 1)),
    }
    for state, count in counts.items():
        for i in range(count):
            servers.append(Server(f"{state.value[0]}{i}", Pool.INFERENCE, "T4", draw(st.sampled_from([4, 8])), state))
    for i in range(draw(st.integers(0, 2))):
        servers.append(Server(f"t{i}", Pool.TRAINING, "A100", 8))
    hosts = [s for s in servers if s.hosts_training]
    free = {s.name: s.gpus for s in hosts}
    jobs: list[TrainingJob] = []
    for j in range(draw(st.integers(0, 8)) if hosts else 0):
        gpw = draw(st.sampled_from([1, 1, 2, 4]))
        chosen = draw(st.lists(st.sampled_from([s.name for s in hosts]), min_size=1, max_size=3, unique=True))
        placement: dict[str, int] = {}
        for name in chosen:
            count = min(draw(st.integers(1, 3)), free[name] // gpw)
            if count:
                placement[name] = count
                free[name] -= count * gpw
        workers = sum(placement.values())
        if not workers:
            continue
        low = draw(st.integers(1, workers))
        jobs.append(
            TrainingJob(
                name=f"j{j}",
                gpus_per_worker=gpw,
                min_workers=low,
                max_workers=workers + draw(st.integers(0, 3)),
                remaining_work=1000.0,
                placement=placement,
                seconds_since_checkpoint=float(draw(st.sampled_from([0, 60, 600]))),
            )
        )
    return ClusterSnapshot(tuple(servers), tuple(jobs))


@st.composite
def job_mixes(draw: st.DrawFn, max_jobs: int = 8) -> list[TrainingJob]:
    """Running and queued, elastic and inelastic jobs with mixed GPUs per worker and a few priorities."""
    jobs: list[TrainingJob] = []
    for i in range(draw(st.integers(0, max_jobs))):
        low = draw(st.integers(1, 4))
        high = low + draw(st.sampled_from([0, 0, 1, 2, 4]))
        running = draw(st.booleans())
        workers = draw(st.integers(low, high)) if running else 0
        jobs.append(
            TrainingJob(
                name=f"j{i}",
                gpus_per_worker=draw(st.sampled_from([1, 1, 2, 4])),
                min_workers=low,
                max_workers=high,
                remaining_work=float(draw(st.integers(0, 5000))),
                submit_time=float(draw(st.integers(0, 3))),
                priority=draw(st.sampled_from([0, 0, 0, 1])),
                placement={f"s{i}": workers} if workers else {},
            )
        )
    return jobs


@st.composite
def node_views(draw: st.DrawFn) -> list[NodeView]:
    kinds = [(Pool.TRAINING, None), *((Pool.INFERENCE, state) for state in LoanState)]
    views: list[NodeView] = []
    for i in range(draw(st.integers(1, 12))):
        pool, state = draw(st.sampled_from(kinds))
        gpus = draw(st.sampled_from([1, 4, 8, 16]))
        views.append(NodeView(f"n{i}", pool, state, gpus, draw(st.integers(0, gpus)), draw(st.integers(0, 20))))
    return views
