"""What `lyra demo` reads from its Prometheus (lyra.cli.demo_metrics): the targets it scrapes, the operator's counts
at the end of a run, its durations and the GPU-hours lent over the day turned into trace hours, and the table that
shows them beside the cluster's reading."""

from __future__ import annotations

import pytest

from lyra.cli.demo_metrics import (
    FIGURES,
    decision_cost,
    pass_seconds,
    prometheus_figures,
    scrape_targets,
)

START, END, DAY_WALL_S, SPEED_UP = 1_000.0, 1_250.5, 180.0, 480.0


class FakeReader:
    """``value_at`` over a table of answers by the metric an expression names; records what was asked, and when."""

    def __init__(self, answers: dict[str, float | None]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, float]] = []

    def __call__(self, expression: str, time: float) -> float | None:
        self.asked.append((expression, time))
        matches = [
            value for metric, value in self.answers.items() if f"{metric}[" in expression or f"{metric}{{" in expression
        ]
        assert len(matches) <= 1, expression
        return matches[0] if matches else None


def test_the_demo_scrapes_the_operator_and_the_extender_on_loopback() -> None:
    assert scrape_targets(8888, 8080) == {"lyra-operator": ["127.0.0.1:8080"], "lyra-extender": ["127.0.0.1:8888"]}


def test_counts_are_read_at_the_end_and_durations_in_trace_hours() -> None:
    reader = FakeReader(
        {
            "lyra_gpus": 3_600.0,  # GPU-seconds of wall time: 8 GPUs lent for 450 s of the day
            "lyra_reclaims_total": 8.0,
            "lyra_reclaim_duration_seconds_sum": 30.0,
            "lyra_reclaim_duration_seconds_count": 8.0,
            "lyra_preemptions_total": 2.0,
            "lyra_workers_scaled_in_total": 5.0,
            "lyra_training_job_queue_wait_seconds_sum": 90.0,
            "lyra_training_job_queue_wait_seconds_count": 45.0,
            "lyra_inference_reclaim_wait_seconds_sum": None,
            "lyra_inference_reclaim_wait_seconds_count": 0.0,
            "lyra_reconcile_passes_total": 41.0,  # one failed: it observed, and its phases count
            "lyra_reconcile_pass_duration_seconds_count": 40.0,  # the observe phase's
            "lyra_reconcile_pass_duration_seconds_sum": 1.6,  # all phases'
        }
    )
    figures = prometheus_figures(reader, start=START, end=END, day_wall_s=DAY_WALL_S, speed_up=SPEED_UP)
    assert set(figures) == set(FIGURES)
    assert figures["lent_gpu_h"] == pytest.approx(3_600 * SPEED_UP / 3600)
    assert figures["reclaims"] == 8
    assert figures["reclaim_mean_h"] == pytest.approx(30 / 8 * SPEED_UP / 3600)
    assert figures["preemptions"] == 2
    assert figures["workers_scaled_in"] == 5
    assert figures["queue_wait_per_start_mean_h"] == pytest.approx(2 * SPEED_UP / 3600)
    assert figures["reclaim_wait_mean_h"] is None  # nothing observed: no mean
    assert figures["passes"] == 41
    assert figures["pass_mean_ms"] == pytest.approx(1.6 / 40 * 1000)
    observed = [e for e, _ in reader.asked if "lyra_reconcile_pass_duration_seconds_count" in e]
    assert observed == ['sum(max_over_time(lyra_reconcile_pass_duration_seconds_count{phase="observe"}[252s]))']
    lent = [(e, t) for e, t in reader.asked if "lyra_gpus" in e]
    # The day only, at its end, one point a second; every count over the whole run, at its end.
    assert lent == [('sum_over_time(sum(lyra_gpus{state="loaned"})[180s:1s])', START + DAY_WALL_S)]
    counts = [(e, t) for e, t in reader.asked if "lyra_gpus" not in e]
    assert counts
    assert all(t == END and e.startswith("sum(max_over_time(") and "[252s])" in e for e, t in counts)


def test_a_run_without_loans_reads_zero_counts_and_no_means() -> None:
    figures = prometheus_figures(FakeReader({}), start=START, end=END, day_wall_s=DAY_WALL_S, speed_up=SPEED_UP)
    assert figures == {
        "lent_gpu_h": 0.0,
        "reclaims": 0.0,
        "reclaim_mean_h": None,
        "preemptions": 0.0,
        "workers_scaled_in": 0.0,
        "queue_wait_per_start_mean_h": None,
        "reclaim_wait_mean_h": None,
        "passes": 0.0,
        "pass_mean_ms": None,
    }


def test_the_decision_cost_is_the_wait_for_a_pass_and_the_pass_as_the_run_measured_it() -> None:
    measured: dict[str, float | None] = {"passes": 400.0, "pass_mean_ms": 25.0}
    assert pass_seconds(measured) == pytest.approx(0.025)
    assert decision_cost(90.0, 720.0, measured) == (
        "The simulator charges each decision 108 trace s after the change that calls for it: the wait for the next "
        "pass (90), and the pass itself as long as the operator's 400 passes took on average (25 ms of wall time, "
        "18 trace s)."
    )
    unread: dict[str, float | None] = {"passes": 0.0, "pass_mean_ms": None}
    assert pass_seconds(unread) is None
    assert decision_cost(90.0, 720.0, unread) == (
        "Prometheus read no pass of the operator's: the simulator charges each decision the wait for the next pass "
        "alone (90 trace s), not the pass itself."
    )
