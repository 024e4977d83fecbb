"""The operator's work accounting (``workDone``, ``workAsOf``, the remaining work the allocator is given), on the
in-memory cluster with passes less than a second apart, as under the demo's speed-up.

Each expected figure is worked out here from the test's own clock and worker counts (workers x seconds at speed 1 on
A100s, one worker of 8 GPUs per A100 server), not read from the operator.
"""

from __future__ import annotations

import pytest

from lyra.operator.actions import Emit
from lyra.operator.decide import decide, live_snapshot
from lyra.operator.job_work import OVERRUN_SHARE

from .fake_cluster import A100, FakeCluster, node, training_job

#: Seconds a job of the tests runs at one worker; two elastic jobs, the second a little shorter.
LONG, SHORT = 35.9, 31.3


def four_servers() -> FakeCluster:
    return FakeCluster([node(f"a{i}", "training", A100) for i in range(4)], now=1_000_000.5)


def elastic(name: str, seconds: float) -> dict[str, object]:
    return training_job(name, 1, 4, seconds, gpusPerWorker=8, gpuTypes=[A100])


def run_pass(cluster: FakeCluster) -> list[Emit]:
    decision = decide(cluster.world())
    cluster.apply(decision)
    return [a for a in decision.actions if isinstance(a, Emit)]


def remaining(cluster: FakeCluster) -> dict[str, float]:
    return {job.name: job.remaining_work for job in live_snapshot(cluster.world()).jobs}


def test_work_done_counts_the_workers_bound_for_the_time_they_were_bound_to_the_millisecond() -> None:
    cluster = four_servers()
    cluster.add_job(elastic("a", LONG))
    run_pass(cluster)  # started: 4 workers created and bound at once by the fake (none counted before the next pass)
    cluster.tick(0.3)
    run_pass(cluster)  # 4 bound from now on
    cluster.tick(0.45)
    run_pass(cluster)
    assert cluster.job_status("a")["workers"]["current"] == 4
    assert remaining(cluster)["ml/a"] == pytest.approx(LONG - 4 * 0.45, abs=2e-3)
    cluster.tick(1.7)
    assert remaining(cluster)["ml/a"] == pytest.approx(LONG - 4 * (0.45 + 1.7), abs=2e-3)


def test_two_passes_with_nothing_changed_move_no_worker_between_two_elastic_jobs() -> None:
    """The shorter job gets the spare server when it arrives, and keeps it: a second after the first job started on
    three servers (35.9 - 3 x 0.7 = 33.8 s left), the second (31.3 s) arrives; passes follow a quarter second apart.
    (With ``workAsOf`` to the second, the first was credited 6 s for its 0.7 s on three servers, came out shorter a
    pass later and took the server back.)"""
    cluster = four_servers()
    cluster.now = 1_000_000.0
    cluster.add_job(training_job("small", 1, 1, 600, gpusPerWorker=2, gpuTypes=[A100]))
    run_pass(cluster)
    cluster.tick(5.5)
    cluster.add_job(elastic("long", LONG))
    run_pass(cluster)
    cluster.tick(0.3)
    run_pass(cluster)
    cluster.finish_terminations()
    cluster.tick(0.7)
    cluster.add_job(elastic("short", SHORT))
    first = run_pass(cluster)
    assert {(e.ref.name, e.reason) for e in first} == {("long", "Resized"), ("short", "Started")}
    assert remaining(cluster)["ml/long"] == pytest.approx(LONG - 3 * 0.7, abs=2e-3)
    resizes = []
    for step in range(8):
        cluster.tick(0.25)
        if step == 2:
            cluster.finish_terminations()
        resizes += [f"{e.ref.name} {e.message}" for e in run_pass(cluster) if e.reason == "Resized"]
    assert resizes == []
    assert cluster.job_status("short")["workers"]["target"] == 2
    assert cluster.job_status("long")["workers"]["target"] == 1


def test_a_job_past_its_expected_work_keeps_a_share_of_it_left_and_the_others_still_grow() -> None:
    cluster = four_servers()
    cluster.add_job(training_job("overdue", 1, 1, 20, gpusPerWorker=2, gpuTypes=[A100]))
    run_pass(cluster)
    cluster.tick(0.5)
    run_pass(cluster)
    cluster.tick(60)  # three times its expected 20 s: its estimate ran out, it still runs
    assert remaining(cluster)["ml/overdue"] == pytest.approx(OVERRUN_SHARE * 20)
    cluster.add_job(elastic("grows", LONG))
    started = run_pass(cluster)
    assert [e.message for e in started if e.ref.name == "grows"] == [
        "started 3 workers on NVIDIA-A100-SXM4-80GB (1 on a1, 1 on a2, 1 on a3)"
    ]
