"""What the report shows of the faithful model: the inference wait column, the JSON keys, migrations per job."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from lyra.sim.metrics import SchemeMetrics, summarise
from lyra.sim.report import JOB_COLUMNS, format_table, results_json, where_the_gain_comes_from, write_jobs_csv
from tests.unit.sim.builders import scenario, simulate, stepped_load, trace

#: basic with B on a lent T4 server when inference wants both servers back at 600 s: grace 60 s and drain 30 s
#: leave one server short for 90 s of 2 x 2400 demanded server-seconds (see test_loans).
SLOW_RECLAIM = scenario("preemption: {checkpoint_grace_s: 60}\nloaning: {drain_s: 30}")
RECLAIMED = simulate(
    "basic", trace((0, 1000, 8), (1, 1000, 8)), setup=SLOW_RECLAIM, load=stepped_load(0, 200), length_s=3000
)


def test_the_table_shows_the_reclaim_wait_share() -> None:
    metrics = {"baseline": summarise(simulate("baseline", trace((0, 10, 1)))), "basic": summarise(RECLAIMED)}
    table = format_table(metrics)
    header = table.splitlines()[0]
    assert "inf. wait" in header
    basic = next(line for line in table.splitlines() if line.startswith("basic "))
    assert "1.875%" in basic  # 90 / 4800
    poster = next(line for line in table.splitlines() if line.startswith("  basic"))
    assert " - " in poster  # the poster reports no inference wait


def test_the_json_holds_the_new_figures() -> None:
    metrics = {"basic": summarise(RECLAIMED)}
    figures = json.loads(results_json(metrics, {}))["schemes"]["basic"]
    assert figures["inference_short_server_s"] == pytest.approx(90)
    assert figures["reclaim_wait_server_s"] == pytest.approx(90)
    assert figures["reclaim_wait_share"] == pytest.approx(90 / 4800)
    assert figures["migrations"] == 0
    assert figures["reclaimed_servers"] == 2
    assert figures["queue_mean_reduction"] is None  # no baseline in this comparison


def test_the_jobs_csv_has_a_migrations_column(tmp_path: Path) -> None:
    moved = replace(
        RECLAIMED, scheme="lyra", records=tuple(replace(r, migrations=i) for i, r in enumerate(RECLAIMED.records))
    )
    path = tmp_path / "jobs.csv"
    write_jobs_csv(path, [RECLAIMED, moved])
    with path.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == JOB_COLUMNS
    assert JOB_COLUMNS[-1] == "migrations"
    assert [(r["scheme"], r["name"], r["preemptions"], r["migrations"]) for r in rows] == [
        ("basic", "job-0", "0", "0"),
        ("basic", "job-1", "1", "0"),
        ("lyra", "job-0", "0", "0"),
        ("lyra", "job-1", "1", "1"),
    ]


def test_inference_utilisation_and_loaned_usage() -> None:
    metrics = summarise(RECLAIMED)
    # Serving: 1 server for 600-690 s, 2 from 690 s to 3000 s: (90 + 2 x 2310) x 8 GPU-seconds of 16 x 3000.
    assert metrics.inference_utilisation == pytest.approx((90 + 2 * 2310) * 8 / (16 * 3000))
    # Lent: 2 servers for 600 s; busy: B's 8 GPUs for 599 s.
    assert metrics.loaned_usage == pytest.approx(8 * 599 / (16 * 600))


def _with(jct: float, usage: float = 0.5, lent: float = 0.0) -> SchemeMetrics:
    return replace(summarise(RECLAIMED), jct_mean_s=jct, usage_overall=usage, loaned_usage=lent)


def test_the_gain_is_split_between_elasticity_and_loaning() -> None:
    metrics = {
        "baseline": _with(1000.0, usage=0.52),
        "lyra-no-loaning": _with(800.0),
        "lyra-no-elasticity": _with(900.0),
        "lyra": _with(700.0, usage=0.6, lent=0.25),
    }
    sentence = where_the_gain_comes_from(metrics)
    assert sentence == (
        "where the gain comes from (mean JCT, baseline 1000 s): elasticity without loaning saves 200 s, loaning "
        "without elasticity 100 s; lyra (both) saves 300 s, 100 s more than elasticity alone; overall usage "
        "0.52 -> 0.60, lent GPU-time used 25%"
    )
    assert sentence in format_table(metrics)


def test_a_part_that_beats_the_whole_is_called_out() -> None:
    metrics = {
        "baseline": _with(1000.0),
        "lyra-no-loaning": _with(700.0),
        "lyra-no-elasticity": _with(900.0),
        "lyra": _with(750.0),
    }
    sentence = where_the_gain_comes_from(metrics)
    assert sentence is not None
    assert "lyra (both) saves 250 s, 50 s LESS than elasticity alone" in sentence
    del metrics["lyra-no-elasticity"]
    assert where_the_gain_comes_from(metrics) is None
