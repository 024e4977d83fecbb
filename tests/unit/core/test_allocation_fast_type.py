"""Phase 1's second opinion: a base started on free slow GPUs, or on fast ones taken from flexible workers.

a (elastic, 1..4 workers, long) holds all four V100s; b (2 workers, 100 worker-seconds) is queued and may use the
four free T4s (speed 0.5) or the V100s. On the T4s b takes 100 / (2 x 0.5) = 100 s and a keeps its four workers.
On the V100s, after scaling a in to two workers, b takes 50 s and a loses 2 x 50 = 100 worker-seconds: 25 s later
at four workers. Sum of completion times: T4s 100 + W/4, V100s 75 + W/4: the V100s win by 25 s. With b's own T4
speed 0.9 the T4s take 100 / 1.8 = 55.6 s: they win.
"""

from __future__ import annotations

from lyra.core import allocate_workers

from .builders import T4, V100, cluster, job, loaned, training

A = job("a").workers(1, 4).work(40_000).on({"v0": 4}).types(V100)


def test_a_base_takes_fast_gpus_from_flexible_workers_when_the_objective_says_so() -> None:
    snapshot = cluster(training("v0", 4), loaned("t0", 4)).jobs(A, job("b").workers(2).work(100)).build()
    plan = allocate_workers(snapshot)
    assert plan.placement["b"] == {"v0": 2}
    assert plan.placement["a"] == {"v0": 2}


def test_a_base_keeps_the_free_slow_gpus_when_they_are_nearly_as_fast() -> None:
    b = job("b").workers(2).work(100).speed(T4, 0.9)
    plan = allocate_workers(cluster(training("v0", 4), loaned("t0", 4)).jobs(A, b).build())
    assert plan.placement["b"] == {"t0": 2}
    assert plan.placement["a"] == {"v0": 4}
