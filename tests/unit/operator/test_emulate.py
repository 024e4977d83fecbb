"""The workload emulator: progress at the slowest worker's pace, workers finished when the work is done."""

from __future__ import annotations

import pytest

from lyra.core.gpus import GpuCatalog
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.emulate import Progress, advance

from .fake_cluster import A100, T4, FakeCluster, node, training_job


def running_cluster(product: str, workers: int) -> FakeCluster:
    cluster = FakeCluster([node("n0", "training", product)])
    cluster.add_job(training_job("j", workers, workers, duration=100, gpuTypes=[product]))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    assert cluster.job_status("j")["phase"] == "Running"
    return cluster


@pytest.mark.parametrize(
    ("product", "workers", "finish_after_s"),
    [
        (A100, 1, 100.0),  # a reference GPU: 100 s of work at 1 worker takes 100 s
        (A100, 4, 100.0),  # 4 workers: the work is 4 x 100 worker-seconds at 4 workers' pace, still 100 s
        (T4, 1, 250.0),  # a T4 trains at 0.4 of a reference GPU
    ],
)
def test_workers_finish_when_the_work_is_done(product: str, workers: int, finish_after_s: float) -> None:
    cluster = running_cluster(product, workers)
    progress = Progress()
    assert advance(progress, cluster.world(), GpuCatalog()) == []
    cluster.tick(finish_after_s - 1)
    assert advance(progress, cluster.world(), GpuCatalog()) == [], "not done a second early"
    cluster.tick(1)
    finished = advance(progress, cluster.world(), GpuCatalog())
    assert len(finished) == workers


def test_more_workers_than_the_base_finish_sooner() -> None:
    cluster = FakeCluster([node("n0", "training", A100)])
    cluster.add_job(training_job("j", 1, 4, duration=100))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    assert cluster.job_status("j")["workers"]["current"] == 4
    progress = Progress()
    advance(progress, cluster.world(), GpuCatalog())
    cluster.tick(25)
    assert len(advance(progress, cluster.world(), GpuCatalog())) == 4, "4 workers do 100 s of 1-worker work in 25 s"
