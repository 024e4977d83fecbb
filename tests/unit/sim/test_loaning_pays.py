"""`lyra simulate --loaning-pays` and `--loaning-pays-map` (lyra.sim.loaning_pays): the regime of the inputs, the
scenario set to a regime, the gain, the command's output and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lyra.cli import main
from lyra.sim.bound import jct_bound
from lyra.sim.calibration import inference_utilisation
from lyra.sim.load import LoadSeries
from lyra.sim.loaning_pays import (
    Answer,
    LoaningPaysError,
    Regime,
    answer,
    format_answers,
    measure,
    parse_axes,
    scenario_at,
    shortfall_warning,
    training_work,
)
from lyra.sim.workload import Window, build_workload
from tests.unit.sim.builders import TINY, scenario, trace, write

#: Two hours of one- and two-GPU jobs, more than one V100 server holds: queues form, loaned T4s have work.
JOBS = trace(*[(i * 120.0, 1800.0 + 300 * (i % 4), 1 + i % 2) for i in range(40)])
#: Demand of one inference server in half of the steps (100 req/s per server in TINY).
LOAD = LoadSeries("<test>", 600.0, tuple(100.0 if i % 2 else 0.0 for i in range(144)))
WINDOW = Window(0.0, 6 * 3600.0)


def test_the_regime_of_the_inputs_is_measured_by_the_stated_rules() -> None:
    setup = scenario("memory: {inference_fit_share: 0.5, size_exponent: 0}")
    regime = measure(JOBS, LOAD, setup, WINDOW)
    jobs = build_workload(JOBS, setup, WINDOW).jobs
    assert regime.idle_share == pytest.approx(0.75)  # one server of two, half of the time
    assert regime.fit_share == sum(j.fits_inference_gpu for j in jobs) / 40
    work = sum((1800.0 + 300 * (i % 4)) * (1 + i % 2) for i in range(40))
    assert training_work(JOBS, setup, WINDOW) == pytest.approx(work)
    assert regime.offered_load == pytest.approx(work / (8 * WINDOW.length_s))
    assert regime.inference_speed == 0.4


def test_a_scenario_set_to_a_regime_has_that_regime() -> None:
    setup = scenario()
    work = training_work(JOBS, setup, WINDOW)
    target = Regime(idle_share=0.5, fit_share=0.3, offered_load=0.2, inference_speed=0.25)
    varied = scenario_at(setup, LOAD, work, WINDOW, target)
    (training,), (inference,) = varied.training.groups, varied.inference.groups
    assert training.servers == round(work / (0.2 * 8 * WINDOW.length_s))
    assert inference.servers == 2
    assert inference_utilisation(LOAD, 2, varied.inference.req_per_server) == pytest.approx(0.5)
    assert (varied.memory.inference_fit_share, varied.memory.size_exponent) == (0.3, 0.0)
    assert varied.speed_of("T4") == 0.25
    measured = measure(JOBS, LOAD, varied, WINDOW)
    assert measured.idle_share == pytest.approx(0.5)
    assert measured.offered_load == pytest.approx(work / (training.servers * 8 * WINDOW.length_s))


def test_the_gain_is_lyra_against_lyra_without_loaning() -> None:
    assert Answer(Regime(0.5, 0.5, 1, 0.4), 900.0, 1000.0, 1, 1.0, 500.0, 0.0, 0.0).gain == pytest.approx(0.1)
    assert Answer(Regime(0.5, 0.5, 1, 0.4), 900.0, 1000.0, 1, 1.0, 500.0, 0.0, 0.0).pays
    assert not Answer(Regime(0.5, 0.5, 1, 0.4), 901.0, 1000.0, 1, 1.0, 500.0, 0.0, 0.0).pays
    setup = scenario("elasticity: {share: 0.5}\nmemory: {inference_fit_share: 1}")
    # Every job fits a T4, the pool is idle most of the time, and jobs queue: loaning pays.
    (got,) = answer(JOBS, LOAD, setup, WINDOW, [None])
    assert got.jct_lyra_s < got.jct_no_loaning_s
    assert got.pays
    # The bound is the inputs' own, and neither scheme goes below it.
    assert got.bound_s == jct_bound(build_workload(JOBS, setup, WINDOW), setup).mean_jct_s
    assert 0 < got.bound_s <= got.jct_lyra_s
    # No job fits a T4: loaning can lend nothing useful, the two schemes run the same jobs the same way.
    (none,) = answer(JOBS, LOAD, setup, WINDOW, [Regime(0.75, 0.0001, 2.0, 0.4)])
    assert none.gain == pytest.approx(0.0, abs=1e-9)
    # The regime's bound is of the regime's scenario, not of the inputs as given.
    at = scenario_at(setup, LOAD, training_work(JOBS, setup, WINDOW), WINDOW, Regime(0.75, 0.0001, 2.0, 0.4))
    assert none.bound_s == jct_bound(build_workload(JOBS, at, WINDOW), at).mean_jct_s
    assert 0 < none.bound_s <= none.jct_lyra_s


def test_the_maps_table_shows_the_bound_and_lyras_inference_shortfall() -> None:
    paying = Answer(Regime(0.5, 0.75, 2.4, 0.5), 900.0, 1000.0, 31, 52.5, 600.0, 1234.0, 0.00567)
    empty = Answer(Regime(0.5, 0.75, 2.4, 0.5), 0.0, 0.0, 31, 52.5, 0.0, 0.0, 0.0)
    header, row, none = format_answers([paying, empty]).splitlines()
    assert header.endswith("bound (lyra/bound) lyra inf. short (s / share)")
    assert row.split()[-7:] == ["10.0%", "yes", "600", "(1.50x)", "1234", "/", "0.5670%"]
    assert none.split()[-5:] == ["no", "-", "0", "/", "0.0000%"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("idle=0.5", "give AXIS=V1,V2,... with AXIS one of idle-share, fit-share, offered-load, inference-speed"),
        ("idle-share", "give AXIS=V1,V2,..."),
        ("idle-share=0.5,x", "--regime idle-share: 'x' is not a number"),
        ("idle-share=1", "--regime idle-share: 1 is outside [0, 0.99]"),
        ("fit-share=0", "--regime fit-share: 0 is outside [0.01, 1]"),
        ("offered-load=nan", "--regime offered-load: nan is outside [0.05, 5]"),
        ("inference-speed=-1", "--regime inference-speed: -1 is outside [0.05, 2]"),
        ("fit-share=0.1,0.2,0.3,0.4,0.5", "--regime fit-share: at most 4 values"),
    ],
)
def test_bad_regimes_are_refused_naming_the_axis(spec: str, message: str) -> None:
    with pytest.raises(LoaningPaysError) as caught:
        parse_axes([spec])
    assert message in str(caught.value)


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    rows = "".join(f"{i * 120},{1800 + 300 * (i % 4)},{1 + i % 2}\n" for i in range(40))
    load = "t_sec,req_per_s\n" + "".join(f"{i * 600},{100 if i % 2 else 0}\n" for i in range(144))
    setup = TINY.replace("elasticity: {share: 0,", "elasticity: {share: 0.5,")
    return [
        "simulate", "--trace", str(write(tmp_path / "jobs.csv", "submit_time,duration,num_gpus\n" + rows)),
        "--load", str(write(tmp_path / "load.csv", load)), "--scenario", str(write(tmp_path / "s.yaml", setup)),
        "--start", "0", "--days", "0.25", "--no-plots", "--out-dir", str(tmp_path / "o"),
    ]  # fmt: skip


def test_loaning_pays_answers_for_the_inputs_with_progress(
    inputs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*inputs, "--loaning-pays", "--jobs", "1", "--json", str(tmp_path / "p.json")]) == 0
    captured = capsys.readouterr()
    assert "these inputs: idle share 0.75, T4 fit" in captured.out
    assert "loaning pays here: lyra's mean JCT is" in captured.out or "loaning does not pay here" in captured.out
    assert "loaning-pays 1/2: lyra (idle share 0.75" in captured.err
    assert "loaning-pays 2/2: lyra-no-loaning" in captured.err
    document = json.loads((tmp_path / "p.json").read_text())
    assert document["measured"]["idle_share"] == pytest.approx(0.75)
    (only,) = document["answers"]
    assert only["gain"] == pytest.approx(1 - only["jct_lyra_s"] / only["jct_no_loaning_s"])
    assert 0 < only["bound_s"] <= min(only["jct_lyra_s"], only["jct_no_loaning_s"])
    assert {"inference_short_server_s", "inference_short_share"} <= set(only)


def test_the_map_runs_every_combination_in_parallel(
    inputs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [*inputs, "--loaning-pays-map", "--regime", "idle-share=0.5", "--regime", "fit-share=0.2,0.9",
         "--regime", "offered-load=1.5", "--regime", "inference-speed=0.4", "--jobs", "2",
         "--json", str(tmp_path / "m.json")]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert "loaning-pays 4/4" in captured.err
    answers = json.loads((tmp_path / "m.json").read_text())["answers"]
    assert [(a["regime"]["fit_share"], a["regime"]["idle_share"]) for a in answers] == [(0.2, 0.5), (0.9, 0.5)]
    assert "regimes" in captured.out.splitlines()[-1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--loaning-pays", "--loaning-pays-map"], "give --loaning-pays or --loaning-pays-map, not both"),
        (["--loaning-pays", "--sweep"], "do not combine with --sweep"),
        (["--regime", "idle-share=0.5"], "--regime sets an axis of --loaning-pays-map; give that flag too"),
        (["--loaning-pays-map", "--regime", "speed=1"], "give AXIS=V1,V2,..."),
    ],
)
def test_bad_loaning_pays_options_exit_2_with_one_message(
    inputs: list[str], extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*inputs, *extra]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lyra simulate: ")]
    assert len(errors) == 1
    assert message in errors[0]


def test_a_scenario_of_several_groups_is_refused(
    inputs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = (
        "training:\n  groups: [{gpu_type: A100, servers: 1}, {gpu_type: V100, servers: 1}]\n"
        "inference:\n  groups: [{gpu_type: T4, servers: 2}]\n  req_per_server: 100.0\n"
    )
    tiny = "\n".join(line for line in TINY.splitlines() if not line.startswith(("training:", "inference:")))
    where = inputs.index("--scenario") + 1
    inputs[where] = str(write(tmp_path / "three.yaml", groups + tiny))
    assert main([*inputs, "--loaning-pays"]) == 2
    assert "--loaning-pays sizes one training and one inference group; this scenario has 2 and 1" in (
        capsys.readouterr().err
    )


def test_regimes_that_leave_inference_short_are_flagged() -> None:
    def at(idle: float, share: float) -> Answer:
        return Answer(Regime(idle, 0.5, 1.2, 0.4), 900.0, 1000.0, 62, 50.0, 600.0, share * 1e6, share)

    assert shortfall_warning([at(0.5, 0.0), at(0.8, 0.01)]) is None  # 1% of the demand is within tolerance
    warning = shortfall_warning([at(0.1, 0.112), at(0.1, 0.0101), at(0.5, 0.0)])
    assert warning == (
        "WARNING: inference demand went unmet by more than 1% under lyra at 2 of 3 regimes (idle share 0.10; up to "
        "11.2% of the demand): the pool there is too small for its load, so read those gains with the shortfall "
        "beside them"
    )


def test_the_map_prints_the_shortfall_warning_where_the_pool_is_too_small(
    inputs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [*inputs, "--loaning-pays-map", "--regime", "idle-share=0.05", "--regime", "fit-share=0.9",
         "--regime", "offered-load=1.5", "--regime", "inference-speed=0.4", "--jobs", "1"]
    )  # fmt: skip
    assert code == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("WARNING: inference demand went unmet by more than 1% under lyra at 1 of 1 regimes")
