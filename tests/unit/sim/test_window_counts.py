"""Counts that compare schemes are the window's; the tail after it (while the last jobs finish) is reported apart,
and preemptions and scale-ins are also given per busy lent GPU-hour (exposure). Golden runs on the tiny world."""

from __future__ import annotations

import pytest

from lyra.sim.engine import SimulationResult
from lyra.sim.loans import WindowCount
from lyra.sim.metrics import summarise
from lyra.sim.report import format_counts, format_table
from tests.unit.sim.builders import scenario, simulate, stepped_load, trace

#: Two V100 servers. A (16 GPUs, w_min 2 workers: nothing to scale in) takes them; B (8 GPUs: one 8-GPU worker,
#: w_min 1, w_max 2) runs 2 workers on both lent T4 servers from 1 s. Inference needs one server from 600 s (a
#: reclaim that scales B in to 1 worker) and both from 1200 s (a reclaim that preempts B, which loses the 600 s since
#: the resize on its 8 GPUs: 4800 GPU-seconds).
SETUP = scenario("training: {servers: 2}\nelasticity: {share: 1, min_factor: 1}\nscheduler: {migration: false}")
JOBS = trace((0, 20_000, 16), (1, 2000, 8))
LOAD = stepped_load(0, 100, 200)


def run(window_s: float) -> SimulationResult:
    return simulate("lyra", JOBS, load=LOAD, setup=SETUP, length_s=window_s)


def test_counts_after_the_window_are_the_tail() -> None:
    # The window closes at 900 s: the scale-in (600 s) is inside it, the preemption (1200 s) after it.
    result = run(900)
    assert (result.reclaims, result.reclaimed_servers) == (WindowCount(1, 1), WindowCount(1, 1))
    assert result.scale_ins == WindowCount(1, 0)
    m = summarise(result)
    assert (m.reclaims, m.reclaims_tail, m.reclaimed_servers, m.reclaimed_servers_tail) == (1, 1, 1, 1)
    assert (m.scale_ins, m.scale_ins_tail) == (1, 0)
    assert (m.preempted_jobs, m.preempted_jobs_tail, m.preemptions, m.preemptions_tail) == (0, 1, 0, 1)
    assert m.preemption_ratio == 0
    assert (m.work_lost_gpu_h, m.work_lost_tail_gpu_h) == (0, pytest.approx(4800 / 3600))
    b = {r.name: r for r in result.records}["job-1"]
    assert (b.preemptions, b.window_preemptions) == (1, 0)


def test_a_window_that_holds_everything_has_no_tail() -> None:
    m = summarise(run(8000))
    assert (m.reclaims, m.reclaims_tail, m.scale_ins, m.scale_ins_tail) == (2, 0, 1, 0)
    assert (m.preempted_jobs, m.preempted_jobs_tail, m.preemptions, m.preemptions_tail) == (1, 0, 1, 0)
    assert m.preemption_ratio == 0.5
    assert (m.work_lost_gpu_h, m.work_lost_tail_gpu_h) == (pytest.approx(4800 / 3600), 0)


def test_preemptions_and_scale_ins_per_busy_lent_gpu_hour() -> None:
    m = summarise(run(8000))
    # B occupies 16 lent GPUs from 1 s to 600 s, then 8 until 1200 s.
    busy_h = (599 * 16 + 600 * 8) / 3600
    assert m.busy_lent_gpu_h == pytest.approx(busy_h)
    assert m.preemptions_per_busy_lent_gpu_h == pytest.approx(1 / busy_h)
    assert m.scale_ins_per_busy_lent_gpu_h == pytest.approx(1 / busy_h)
    nothing_lent = summarise(simulate("baseline", JOBS, load=LOAD, setup=SETUP, length_s=8000))
    assert nothing_lent.preemptions_per_busy_lent_gpu_h is None


def test_the_tables_show_the_window_and_the_tail() -> None:
    metrics = {
        "baseline": summarise(simulate("baseline", JOBS, load=LOAD, setup=SETUP, length_s=900)),
        "lyra": summarise(run(900)),
    }
    counts = format_counts(metrics)
    assert counts[0].startswith("counts: window [tail]")
    (lyra,) = (line for line in counts if line.startswith("lyra "))
    assert lyra.split()[1:11] == ["1", "[1]", "1", "[1]", "0", "[1]", "0", "[1]", "1", "[0]"]
    assert not any(line.startswith("baseline ") for line in counts)  # it neither lends nor preempts
    table = format_table(metrics, with_poster=False)
    row = next(line for line in table.splitlines() if line.startswith("lyra "))
    assert " 0.00% " in row  # the preemption ratio counts the window only
