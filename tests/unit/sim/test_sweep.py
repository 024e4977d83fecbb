"""The sensitivity sweep: knob specifications, the grid's order, and when a point holds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lyra.sim.bound import JctBound, jct_bound
from lyra.sim.engine import Simulation
from lyra.sim.metrics import SchemeMetrics, summarise
from lyra.sim.schemes import SCHEMES
from lyra.sim.sweep import (
    KNOBS,
    SWEPT_SCHEMES,
    SweepError,
    SweepPoint,
    SweepResult,
    format_sweep,
    parse_knobs,
    run_sweep,
)
from lyra.sim.workload import Window, build_workload
from tests.unit.sim.builders import flat_load, scenario, simulate, trace

#: Enough to keep the V100s busy, so that the lent T4s matter.
JOBS = trace((0, 400, 8), (10, 300, 4), (20, 200, 2), (30, 100, 8))
LOAD = flat_load(0.0)
WINDOW = Window(0.0, 1000.0)
SETUP = scenario("elasticity: {share: 0.5}\nmemory: {inference_fit_share: 0.5}")

# ---------------------------------------------------------------------------------------------- parse_knobs


@pytest.mark.parametrize(
    ("specs", "knobs"),
    [
        (["inference-speed=0.3,0.5"], {"inference-speed": (0.3, 0.5)}),
        (["fit-share"], {"fit-share": KNOBS["fit-share"].values}),
        (["elastic-share=0.25", "scaling-overhead=0,0.05"], {"elastic-share": (0.25,), "scaling-overhead": (0, 0.05)}),
        (["inference-speed = 0.4"], {"inference-speed": (0.4,)}),
        ([], {name: knob.values for name, knob in KNOBS.items()}),
    ],
)
def test_parse_knobs_accepts(specs: list[str], knobs: dict[str, tuple[float, ...]]) -> None:
    assert parse_knobs(specs) == knobs


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("speed=0.3", "unknown sweep knob 'speed'; choose from inference-speed, elastic-share, scaling-overhead"),
        ("inference-speed=fast", "--sweep inference-speed=fast: values must be numbers separated by commas"),
        ("inference-speed=0.3,,0.5", "values must be numbers separated by commas"),
        ("fit-share=nan", "--sweep fit-share=nan: values must be finite numbers"),
        ("fit-share=0.5,inf", "values must be finite numbers"),
    ],
)
def test_parse_knobs_refuses_with_a_message(spec: str, message: str) -> None:
    with pytest.raises(SweepError) as error:
        parse_knobs([spec])
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("knob", "value", "field"),
    [
        ("fit-share", 2.0, "inference_fit_share"),
        ("elastic-share", 1.5, "share"),
        ("scaling-overhead", 3.0, "overhead"),
        ("inference-speed", 0.0, "speed"),
    ],
)
def test_an_out_of_range_value_is_refused_naming_the_field(knob: str, value: float, field: str) -> None:
    """``_scenario_for`` says pydantic re-checks the field; the refusal must come before any simulation runs."""
    with pytest.raises(SweepError) as error:
        run_sweep(JOBS, LOAD, SETUP, WINDOW, {knob: (value,)})
    assert f"--sweep {knob}={value:g}" in str(error.value)
    assert field in str(error.value)


# ------------------------------------------------------------------------------------------------ run_sweep


def test_points_come_back_in_grid_order_with_the_metrics_of_their_scenario() -> None:
    done: list[tuple[str, float, str]] = []
    result = run_sweep(
        JOBS,
        LOAD,
        SETUP,
        WINDOW,
        {"inference-speed": (0.5, 0.3), "fit-share": (1.0,)},
        workers=1,
        on_done=lambda knob, value, scheme: done.append((knob, value, scheme)),
    )
    assert all(tuple(p.metrics) == SWEPT_SCHEMES for p in result.points)
    # Every (knob, value, scheme) in grid order, then the one baseline.
    grid = [("inference-speed", 0.5), ("inference-speed", 0.3), ("fit-share", 1.0)]
    assert [(p.knob, p.value) for p in result.points] == grid
    assert done[:-1] == [(knob, value, scheme) for knob, value in grid for scheme in SWEPT_SCHEMES]
    assert (done[-1][0], done[-1][2]) == ("", "baseline")
    # A point is the simulation of the scenario with that one knob changed.
    slow = SETUP.model_copy(update={"speed": {"V100": 1.0, "T4": 0.3}})
    workload = build_workload(JOBS, slow, WINDOW)
    direct = summarise(Simulation(workload, slow, SCHEMES["lyra"], LOAD).run())
    assert result.points[1].metrics["lyra"] == direct
    # Each point's bound is the bound of its own workload and cluster; the baseline's of the scenario as given.
    assert result.points[1].bound == jct_bound(workload, slow)
    assert result.baseline_bound == jct_bound(build_workload(JOBS, SETUP, WINDOW), SETUP)
    assert result.points[0].bound.mean_jct_s < result.points[1].bound.mean_jct_s  # faster T4s: a lower floor
    for point in result.points:
        assert all(point.jct(s) >= point.bound.mean_jct_s - 1e-9 for s in SWEPT_SCHEMES)
    assert result.baseline == summarise(simulate("baseline", JOBS, setup=SETUP, length_s=WINDOW.length_s))
    for point in result.points:
        lyra = point.jct("lyra")
        rivals = (point.jct(s) for s in ("basic", "lyra-no-loaning", "lyra-no-elasticity"))
        expected = all(lyra <= rival * 1.01 for rival in rivals) and lyra < result.baseline.jct_mean_s
        assert result.holds(point) == expected


def with_jct(metrics: SchemeMetrics, jct: float) -> SchemeMetrics:
    return replace(metrics, jct_mean_s=jct)


TEMPLATE = summarise(simulate("baseline", trace((0, 10, 1))))
BOUND = JctBound(mean_jct_s=40.0, alone_mean_s=40.0, capacity_mean_s=10.0, capacity_gpus=14.4, alone_s=(40.0,))


@pytest.mark.parametrize(
    ("basic", "no_loaning", "no_elasticity", "lyra", "holds"),
    [
        (90.0, 85.0, 88.0, 80.0, True),
        (90.0, 85.0, 88.0, 85.8, True),  # lyra within 1% of lyra-no-loaning (85 x 1.01)
        (90.0, 85.0, 88.0, 86.0, False),  # elasticity alone is faster: the combination does not pay
        (90.0, 95.0, 80.0, 80.8, True),  # lyra within 1% of lyra-no-elasticity
        (90.0, 95.0, 80.0, 81.0, False),  # loaning alone is faster
        (90.0, 95.0, 95.0, 90.9, True),  # lyra within 1% of basic (90 x 1.01)
        (90.0, 95.0, 95.0, 91.0, False),
        (110.0, 120.0, 120.0, 100.0, False),  # lyra must beat baseline (100) strictly
        (110.0, 120.0, 120.0, 99.9, True),
    ],
)
def test_a_point_holds_when_lyra_beats_basic_each_ablation_and_baseline(
    basic: float, no_loaning: float, no_elasticity: float, lyra: float, holds: bool
) -> None:
    figures = {"basic": basic, "lyra-no-loaning": no_loaning, "lyra-no-elasticity": no_elasticity, "lyra": lyra}
    point = SweepPoint("inference-speed", 0.4, {name: with_jct(TEMPLATE, jct) for name, jct in figures.items()}, BOUND)
    result = SweepResult(with_jct(TEMPLATE, 100.0), (point,), tolerance=0.01, baseline_bound=BOUND)
    assert result.holds(point) is holds
    assert result.as_dict()["points"][0]["holds"] is holds
    assert format_sweep(result).splitlines()[-1].endswith("yes" if holds else "NO")


def test_the_sweeps_document_lists_every_point() -> None:
    point = SweepPoint("fit-share", 0.5, {s: with_jct(TEMPLATE, 50.0) for s in SWEPT_SCHEMES}, BOUND)
    document = SweepResult(with_jct(TEMPLATE, 100.0), (point,), tolerance=0.02, baseline_bound=BOUND).as_dict()
    assert set(document) == {"baseline", "baseline_jct_bound", "tolerance", "points"}
    assert document["tolerance"] == 0.02
    assert document["baseline_jct_bound"]["mean_jct_s"] == 40.0
    (entry,) = document["points"]
    assert (entry["knob"], entry["value"], entry["holds"]) == ("fit-share", 0.5, True)
    assert entry["jct_bound"] == BOUND.as_dict()
    assert set(entry["schemes"]) == set(SWEPT_SCHEMES)
    assert entry["schemes"]["lyra"]["jct_mean_s"] == 50.0


def test_the_sweeps_table_shows_lyras_inference_shortfall_and_each_points_bound() -> None:
    lyra = replace(TEMPLATE, jct_mean_s=50.0, inference_short_server_s=1234.0, inference_short_share=0.00567)
    figures = {s: with_jct(TEMPLATE, 60.0) for s in SWEPT_SCHEMES} | {"lyra": lyra}
    point = SweepPoint("inference-speed", 0.3, figures, BOUND)
    floor = replace(BOUND, mean_jct_s=25.0)
    table = format_sweep(SweepResult(with_jct(TEMPLATE, 100.0), (point,), tolerance=0.01, baseline_bound=floor))
    first, header, _, row = table.splitlines()
    assert first == (
        "baseline (unaffected by these knobs): mean JCT 100 s; bound 25 (4.00x) (each point's bound is its own, below)"
    )
    assert "lyra inf. short (s / share)" in header
    assert "bound (lyra/bound)" in header
    assert "1234 / 0.5670%" in row
    assert row.split()[-3:] == ["40", "(1.25x)", "yes"]
    # A window without jobs has no bound to divide by.
    empty = replace(BOUND, mean_jct_s=0.0)
    table = format_sweep(SweepResult(with_jct(TEMPLATE, 100.0), (replace(point, bound=empty),), 0.01, empty))
    assert table.splitlines()[-1].split()[-2:] == ["-", "yes"]
    assert "bound - (each point's bound" in table.splitlines()[0]
