from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from lyra.cli import main
from tests.unit.sim.builders import TINY, write


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    rows = "".join(f"{i * 900},{600 + 300 * (i % 5)},{1 + i % 3}\n" for i in range(40))
    return {
        "trace": write(tmp_path / "jobs.csv", "submit_time,duration,num_gpus\n" + rows),
        "load": write(
            tmp_path / "load.csv", "t_sec,req_per_s\n" + "".join(f"{i * 600},{50 + i}\n" for i in range(144))
        ),
        "scenario": write(tmp_path / "scenario.yaml", TINY),
    }


def test_simulate_prints_the_table_and_writes_json_csv_and_plots(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "simulate", "--trace", str(inputs["trace"]), "--load", str(inputs["load"]),
            "--scenario", str(inputs["scenario"]), "--scheme", "baseline,lyra", "--json", str(out / "r.json"),
            "--out-dir", str(out), "--days", "1", "--start", "0",
        ]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert "queue mean/median/p95" in captured.out
    assert "lyra" in captured.out
    assert "100%" in captured.err  # the progress bar
    figures = json.loads((out / "r.json").read_text())["schemes"]
    assert set(figures) == {"baseline", "lyra"}
    for key in (
        "queue_mean_s", "queue_median_s", "queue_p95_s", "jct_mean_s", "jct_median_s", "jct_p95_s",
        "usage_training", "usage_overall", "preemption_ratio", "inference_short_server_s", "reclaim_wait_server_s",
        "reclaim_wait_share",
    ):  # fmt: skip
        assert isinstance(figures["lyra"][key], float)
    assert isinstance(figures["lyra"]["migrations"], int)
    assert "inf. wait" in captured.out
    assert figures["baseline"]["queue_mean_reduction"] in (1.0, None)
    lines = (out / "jobs.csv").read_text().splitlines()
    assert len(lines) == 1 + 2 * 40
    assert lines[0].endswith(",preemptions,resizes,migrations")
    for name in ("jct_cdf.png", "loans.png", "queue.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_calibrate_prints_the_sizes_it_chose(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "simulate", "--trace", str(inputs["trace"]), "--load", str(inputs["load"]),
            "--scenario", str(inputs["scenario"]), "--scheme", "baseline", "--calibrate", "--quiet",
            "--no-plots", "--out-dir", str(tmp_path / "o"),
        ]
    )  # fmt: skip
    assert code == 0
    assert "calibrated: " in capsys.readouterr().out


def test_a_bad_trace_row_exits_2_naming_file_and_line(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path / "bad.csv", "submit_time,duration,num_gpus\n0,10,1\n5,ten,1\n")
    code = main(["simulate", "--trace", str(bad), "--load", str(inputs["load"]), "--quiet"])
    assert code == 2
    assert f"{bad}:3: duration must be a number" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--scheme", "nope"], "unknown scheme 'nope'"),
        (["--scheme", "ideal"], "scheme 'ideal' is now 'lyra-exact-free'"),
        (["--start", "someday"], "--start must be"),
    ],
)
def test_bad_options_exit_2(
    inputs: dict[str, Path], tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, load = str(inputs["trace"]), str(inputs["load"])
    code = main(["simulate", "--trace", trace, "--load", load, "--quiet", "--out-dir", str(tmp_path / "o"), *extra])
    assert code == 2
    assert message in capsys.readouterr().err


def sweep_args(inputs: dict[str, Path], *extra: str) -> list[str]:
    return [
        "simulate", "--trace", str(inputs["trace"]), "--load", str(inputs["load"]),
        "--scenario", str(inputs["scenario"]), "--days", "1", "--start", "0", "--quiet", *extra,
    ]  # fmt: skip


def test_sweep_prints_the_table_and_writes_json_and_the_plot(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        sweep_args(
            inputs, "--sweep", "inference-speed=0.3,0.5", "--jobs", "1", "--json", str(out / "sweep.json"),
            "--out-dir", str(out),
        )
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert "baseline (unaffected by these knobs): mean JCT" in captured.out
    rows = [line.split() for line in captured.out.splitlines() if line.startswith("inference-speed")]
    assert [(row[1], row[-1] in ("yes", "NO")) for row in rows] == [("0.3", True), ("0.5", True)]
    document = json.loads((out / "sweep.json").read_text())
    assert [(p["knob"], p["value"]) for p in document["points"]] == [("inference-speed", 0.3), ("inference-speed", 0.5)]
    assert set(document["points"][0]["schemes"]) == {"basic", "lyra-no-loaning", "lyra-no-elasticity", "lyra"}
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "jobs.csv").exists()  # a sweep writes no per-job table


def test_a_parallel_sweep_gives_the_same_figures_as_a_serial_one(inputs: dict[str, Path], tmp_path: Path) -> None:
    documents = []
    for jobs in ("1", "2"):
        path = tmp_path / f"sweep-{jobs}.json"
        args = sweep_args(inputs, "--sweep", "elastic-share=0.2,0.8", "--jobs", jobs, "--json", str(path), "--no-plots")
        assert main(args) == 0
        documents.append(json.loads(path.read_text()))
    assert documents[0] == documents[1]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ("nope", "unknown sweep knob 'nope'"),
        ("inference-speed=fast", "values must be numbers separated by commas"),
        ("fit-share=2", "inference_fit_share"),
        ("inference-speed=0", "speed"),
    ],
)
def test_a_bad_sweep_exits_2_with_a_message(
    inputs: dict[str, Path], tmp_path: Path, sweep: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(sweep_args(inputs, "--sweep", sweep, "--jobs", "1", "--no-plots", "--out-dir", str(tmp_path / "o")))
    assert code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lyra simulate: ")]
    assert len(errors) == 1
    assert message in errors[0]


@pytest.mark.parametrize(
    ("jobs", "message"), [("0", "expected a number >= 1, got 0"), ("two", "expected a whole number")]
)
def test_jobs_must_be_a_positive_whole_number(
    inputs: dict[str, Path], jobs: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(sweep_args(inputs, "--sweep", "fit-share=1", "--jobs", jobs))
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def _refused(code: int, err: str, message: str) -> None:
    """Exit 2 with one ``lyra simulate:`` line naming the problem, and nothing simulated or calibrated."""
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("lyra simulate: ")]
    assert len(errors) == 1, err
    assert message in errors[0]
    assert "calibrating" not in err
    assert "simulated in" not in err


def _run(inputs: dict[str, Path], *extra: str) -> int:
    return main(
        [
            "simulate", "--trace", str(inputs["trace"]), "--load", str(inputs["load"]),
            "--scenario", str(inputs["scenario"]), "--calibrate", "--quiet", "--no-plots", *extra,
        ]
    )  # fmt: skip


def test_a_json_path_that_is_a_directory_is_refused_before_the_run(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(inputs, "--json", str(tmp_path), "--out-dir", str(tmp_path / "o"))
    _refused(code, capsys.readouterr().err, f"--json {tmp_path} is a directory")


def test_a_json_path_under_a_file_is_refused_before_the_run(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(inputs, "--json", str(inputs["trace"] / "r.json"), "--out-dir", str(tmp_path / "o"))
    _refused(code, capsys.readouterr().err, f"is not writable: {inputs['trace']} is a file, not a directory")


def test_an_out_dir_that_is_a_file_is_refused_before_the_run(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(inputs, "--out-dir", str(inputs["trace"]))
    _refused(code, capsys.readouterr().err, f"--out-dir {inputs['trace']} is not writable: {inputs['trace']} is a file")


def test_an_out_dir_below_a_file_is_refused_before_the_run(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(inputs, "--out-dir", str(inputs["trace"] / "plots"))
    _refused(code, capsys.readouterr().err, f"--out-dir {inputs['trace'] / 'plots'} is not writable")


def test_an_unwritable_out_dir_is_refused_before_the_run(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    # root may write anywhere (CI runs as root): the directory the check makes is refused as for an ordinary user
    real_mkdtemp = tempfile.mkdtemp

    def refusing(*, prefix: str, dir: Path) -> str:
        if Path(dir) == locked:
            raise PermissionError(13, "Permission denied")
        return real_mkdtemp(prefix=prefix, dir=dir)

    monkeypatch.setattr(tempfile, "mkdtemp", refusing)
    code = _run(inputs, "--out-dir", str(locked))
    _refused(code, capsys.readouterr().err, f"--out-dir {locked} is not writable: no write permission on {locked}")


@pytest.mark.parametrize("flag", ["--out-dir", "--json"])
def test_a_place_that_takes_no_new_entry_is_refused_before_the_run(
    flag: str, inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # /proc takes no directory even from root, where permission bits say yes: the check must try, not ask
    place = ["--json", "/proc/lyra-test/r.json"] if flag == "--json" else ["--out-dir", "/proc/lyra-test"]
    code = _run(inputs, *place, *([] if flag == "--out-dir" else ["--out-dir", str(tmp_path / "o")]))
    _refused(code, capsys.readouterr().err, "/proc takes no new directory")


def test_a_write_that_fails_after_the_run_is_one_line_and_exit_1(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the place changed between the check and the write (the disk filled, a mount went away): said, not a traceback
    monkeypatch.setattr("lyra.cli.simulate_commands.check_outputs", lambda **_: None)
    code = _run(inputs, "--json", "/proc/lyra-test/r.json", "--out-dir", str(tmp_path / "o"))
    captured = capsys.readouterr()
    assert code == 1
    assert "queue mean/median/p95" in captured.out  # the run's figures were printed before the write
    errors = [line for line in captured.err.splitlines() if line.startswith("lyra simulate: ")]
    assert errors == [
        "lyra simulate: cannot write --json /proc/lyra-test/r.json: the write failed (No such file or directory) "
        "(the results printed above are the run's)"
    ]
    assert "Traceback" not in captured.err


def test_a_sweep_without_plots_does_not_need_the_out_dir(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        sweep_args(inputs, "--sweep", "fit-share=1", "--jobs", "1", "--no-plots", "--out-dir", str(inputs["trace"]))
    )
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--days", "inf"], "--days must be a finite number > 0, got inf"),
        (["--days", "nan"], "--days must be a finite number > 0, got nan"),
        (["--days", "-2"], "--days must be a finite number > 0, got -2"),
        (["--days", "0"], "--days must be a finite number > 0, got 0"),
        (["--days", "1e9"], "--days must be at most 3650 (ten years), got 1e+09"),
        (["--start", "nan"], "--start must be a finite number of seconds, got 'nan'"),
        (["--start=-inf"], "--start must be a finite number of seconds, got '-inf'"),
    ],
)
def test_non_finite_or_absurd_windows_are_refused_before_the_run(
    inputs: dict[str, Path], tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(inputs, "--out-dir", str(tmp_path / "o"), *extra)
    _refused(code, capsys.readouterr().err, message)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("0,1e300,1\n", "jobs.csv:2: duration must be at most 3.1536e+07 s (a year), got 1e+300"),
        ("0,600,1\n1e300,600,1\n", "the trace spans 1.16e+295 days from the window start, more than the 3650"),
    ],
)
def test_a_trace_that_could_never_end_is_refused(
    inputs: dict[str, Path], tmp_path: Path, rows: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(inputs["trace"], "submit_time,duration,num_gpus\n" + rows)
    code = _run(inputs, "--out-dir", str(tmp_path / "o"))
    _refused(code, capsys.readouterr().err, message)


def test_bursts_and_the_lenders_forecast_error_are_reported(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bursty = write(tmp_path / "bursty.yaml", TINY + "bursts: {per_day: 50, step_s: 60}\n")
    out = tmp_path / "out"
    code = main(
        [
            "simulate", "--trace", str(inputs["trace"]), "--load", str(inputs["load"]), "--scenario", str(bursty),
            "--scheme", "basic", "--json", str(out / "r.json"), "--out-dir", str(out), "--no-plots", "--quiet",
            "--days", "1", "--start", "0",
        ]
    )  # fmt: skip
    assert code == 0
    assert "inference load: bursts " in capsys.readouterr().err
    seen = json.loads((out / "r.json").read_text())["inference_load"]
    assert 0 < seen["burst_share"] < 1
    assert seen["forecast_mean_abs_error_servers"] >= 0


def test_a_scenario_of_several_gpu_types_runs_and_calibrating_it_is_refused(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = (
        "training:\n  groups: [{gpu_type: A100, servers: 1}, {gpu_type: V100, servers: 1}]\n"
        "inference:\n  groups: [{gpu_type: T4, servers: 2}]\n  req_per_server: 100.0\n"
    )
    tiny = "\n".join(line for line in TINY.splitlines() if not line.startswith(("training:", "inference:")))
    inputs["scenario"] = write(tmp_path / "three.yaml", groups + tiny)
    code = main(
        [
            "simulate", "--trace", str(inputs["trace"]), "--load", str(inputs["load"]),
            "--scenario", str(inputs["scenario"]), "--scheme", "baseline,lyra", "--quiet", "--no-plots",
            "--out-dir", str(tmp_path / "o"), "--days", "1", "--start", "0",
        ]
    )  # fmt: skip
    assert code == 0
    assert "training 1 x 8 A100 + 1 x 8 V100, inference 2 x 8 T4" in capsys.readouterr().out
    code = _run(inputs, "--out-dir", str(tmp_path / "o"))
    _refused(
        code, capsys.readouterr().err, "--calibrate sizes pools of one server group, and training has 2 (A100, V100)"
    )


def test_a_load_zero_in_most_steps_is_refused_by_calibrate_before_the_run(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idle = write(
        tmp_path / "idle.csv",
        "t_sec,req_per_s\n" + "".join(f"{i * 600},{50 if i % 3 == 0 else 0}\n" for i in range(144)),
    )
    code = _run({**inputs, "load": idle}, "--out-dir", str(tmp_path / "o"))
    _refused(code, capsys.readouterr().err, "its rate is zero in 67% of the 144 steps of one period")


def test_a_calibration_with_demand_beyond_the_pool_says_so_beside_the_sizes(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A third of the steps idle, the rest quiet but for a spike every six hours: the utilisation target is met only
    # by asking more of the pool than it has at the spikes.
    rates = [0 if i % 3 == 0 else (1000 if i % 36 == 1 else 10) for i in range(144)]
    spiky = write(
        tmp_path / "spiky.csv", "t_sec,req_per_s\n" + "".join(f"{i * 600},{r}\n" for i, r in enumerate(rates))
    )
    code = _run({**inputs, "load": spiky}, "--scheme", "baseline", "--out-dir", str(tmp_path / "o"))
    assert code == 0
    out = capsys.readouterr().out
    calibrated = next(line for line in out.splitlines() if line.startswith("calibrated: "))
    assert "demand beyond the whole pool" in calibrated
    warnings = [line for line in out.splitlines() if line.startswith("WARNING: calibration result in doubt: ")]
    assert any("of the inference demand beyond the whole pool" in line for line in warnings)
    assert "inf. short s / share" in out
