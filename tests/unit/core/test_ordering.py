"""The shared orderings and the one pace function, against hand-computed orders and the pace formula."""

from __future__ import annotations

import pytest

from lyra.core import LoanState
from lyra.core.fluid import FluidJob, queue_order
from lyra.core.model import pace
from lyra.core.ordering import admission_order, idle_first, lend_order, serve_order

from .builders import T4, cluster, idle, job, serving, training


def test_admission_is_priority_then_time_at_base_on_the_fastest_type_then_submit_time_then_name() -> None:
    # Times at base on the fastest type each may use (V100 1.0, T4 0.5): "short" 100 / 1 = 100 s; "t4-only"
    # 100 / (1 x 0.5) = 200 s; "wide" 400 / 4 = 100 s, submitted before "short"; "twin" ties "short" on time and
    # submit time and comes after it by name; "urgent" is long but has a higher priority; "running" runs.
    snapshot = (
        cluster(training("v0"), training("t0", gpu_type=T4))
        .jobs(
            job("short").work(100).submitted(5),
            job("t4-only").work(100).types(T4),
            job("wide").workers(4).work(400).submitted(1),
            job("twin").work(100).submitted(5),
            job("urgent").work(10_000).priority(1).submitted(99),
            job("running").on({"v0": 1}),
        )
        .build()
    )
    assert admission_order(snapshot) == ("urgent", "wide", "short", "twin", "t4-only")


def test_the_fluid_models_start_order_is_the_admission_order() -> None:
    # The same jobs as numbers, in name order: short, t4-only, twin, urgent, wide (speeds V100, T4).
    jobs = [
        FluidJob(100, 1, 1, 1, (1.0, 0.5), submit_time=5),
        FluidJob(100, 1, 1, 1, (0.0, 0.5)),
        FluidJob(100, 1, 1, 1, (1.0, 0.5), submit_time=5),
        FluidJob(10_000, 1, 1, 1, (1.0, 0.5), priority=1, submit_time=99),
        FluidJob(400, 1, 4, 4, (1.0, 0.5), submit_time=1),
    ]
    assert queue_order(jobs) == [3, 4, 0, 2, 1]


def test_lend_order_is_most_gpus_then_name_and_serve_order_keeps_serving_servers_then_reverses_it() -> None:
    servers = [idle("b"), idle("a"), idle("c", gpus=4), serving("s", gpus=4), serving("z")]
    assert [s.name for s in lend_order(servers)] == ["a", "b", "z", "c", "s"]
    assert [s.name for s in serve_order(servers)] == ["s", "z", "c", "b", "a"]
    assert all(s.state is LoanState.SERVING for s in serve_order(servers)[:2])


def test_idle_first_is_fewest_used_gpus_then_name() -> None:
    assert idle_first(["c", "a", "b", "d"], {"a": 4, "b": 0, "c": 0, "d": 8}) == ["b", "c", "a", "d"]


@pytest.mark.parametrize(
    ("workers", "speed", "overhead", "expected"),
    [(0, 1.0, 0.0, 0.0), (1, 0.4, 0.5, 0.4), (4, 1.0, 0.0, 4.0), (4, 0.5, 0.1, 4 * 0.5 / 1.3), (-1, 1.0, 0.0, 0.0)],
)
def test_one_pace_for_every_caller(workers: int, speed: float, overhead: float, expected: float) -> None:
    assert pace(workers, speed, overhead) == pytest.approx(expected)
    model = job("j").workers(1, 8).overhead(overhead).build()
    assert model.pace(workers, speed) == pytest.approx(expected)
    assert FluidJob(1.0, 1, 1, 8, (speed,), overhead=overhead).pace(workers, speed) == pytest.approx(expected)
