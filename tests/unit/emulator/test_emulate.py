"""The workload emulator: progress at the slowest worker's pace, workers finished when the work is done."""

from __future__ import annotations

import pytest

from lyra.core.gpus import GpuCatalog
from lyra.emulator import Progress, advance
from lyra.operator.decide import OperatorConfig, decide
from tests.unit.operator.fake_cluster import A100, T4, FakeCluster, node, training_job


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


def scale_in(cluster: FakeCluster, job: str) -> str:
    """Delete the highest-indexed worker as a scale-in does (it is terminating until its grace period ends)."""
    name = max((p["metadata"]["name"] for p in cluster.workers(job)), key=lambda n: int(n.rsplit("-w", 1)[1]))
    cluster.pods[f"ml/{name}"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return name


def work_after(cluster: FakeCluster, progress: Progress, seconds: float) -> float:
    before = progress.done["ml/j"]
    cluster.tick(seconds)
    advance(progress, cluster.world(), GpuCatalog())
    return progress.done["ml/j"] - before


# Lyra's rendezvous settings (lyra.operator.manifests): a leaver is found dead after 2 s x 3 missed keep-alives, and
# a round below maxWorkers waits 5 s for latecomers.
FOUND_DEAD_S, LAST_CALL_S = 6.0, 5.0


def test_a_scale_in_pauses_training_while_the_survivors_re_rendezvous() -> None:
    cluster = FakeCluster([node("n0", "training", A100)])
    cluster.add_job(training_job("j", 1, 4, duration=1000))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    progress = Progress()
    advance(progress, cluster.world(), GpuCatalog())
    four, three = 4.0, 3.0  # reference worker-seconds per second (A100, linear scaling)
    assert work_after(cluster, progress, 10) == pytest.approx(10 * four)

    scale_in(cluster, "j")
    assert work_after(cluster, progress, 1) == pytest.approx(1 * four), "until the change is seen, 4 trained"
    pause = FOUND_DEAD_S + LAST_CALL_S
    assert work_after(cluster, progress, pause - 1) == 0.0, "no progress while the agents meet again"
    assert work_after(cluster, progress, 2) == pytest.approx(1 * three), "training resumes with 3 workers"


def test_a_scale_out_to_max_workers_costs_no_wait_but_one_below_it_waits_for_latecomers() -> None:
    cluster = FakeCluster([node("n0", "training", A100)])
    cluster.add_job(training_job("j", 1, 4, duration=1000))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    progress = Progress()
    advance(progress, cluster.world(), GpuCatalog())
    cluster.tick(1)
    advance(progress, cluster.world(), GpuCatalog())
    first, second = scale_in(cluster, "j"), scale_in(cluster, "j")
    advance(progress, cluster.world(), GpuCatalog())
    assert work_after(cluster, progress, FOUND_DEAD_S + LAST_CALL_S) == 0.0
    cluster.finish_terminations()  # the two leave; the operator starts them again (a scale-out)
    for _ in range(2):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    assert sorted(p["metadata"]["name"] for p in cluster.workers("j")) == sorted(["j-w0", "j-w1", first, second])
    assert work_after(cluster, progress, 1) == pytest.approx(1 * 2.0), "until the join is seen, 2 trained"
    assert work_after(cluster, progress, 1) == pytest.approx(1 * 4.0), "4 of 4: the round closes at once"


def test_a_template_s_own_rendezvous_settings_set_the_pause() -> None:
    env = [{"name": "PET_RDZV_CONF", "value": "keep_alive_interval=10,join_timeout=600"}]
    template = {"spec": {"containers": [{"name": "main", "image": "x.invalid/a:1", "env": env}]}}
    cluster = FakeCluster([node("n0", "training", A100)])
    cluster.add_job(training_job("j", 1, 4, duration=1000, template=template))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    progress = Progress()
    advance(progress, cluster.world(), GpuCatalog())
    scale_in(cluster, "j")
    advance(progress, cluster.world(), GpuCatalog())
    # 10 s x torch's 3 attempts, then torch's 30 s last call: the template replaced Lyra's settings whole.
    assert work_after(cluster, progress, 59.5) == 0.0
    assert work_after(cluster, progress, 1) == pytest.approx(0.5 * 3.0)
