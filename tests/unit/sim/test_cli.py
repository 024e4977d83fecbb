from __future__ import annotations

import json
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
        (["--start", "someday"], "--start must be"),
        (["--days", "-1"], "--days must be > 0"),
    ],
)
def test_bad_options_exit_2(
    inputs: dict[str, Path], extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", "--trace", str(inputs["trace"]), "--load", str(inputs["load"]), "--quiet", *extra])
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
    assert set(document["points"][0]["schemes"]) == {"basic", "lyra", "ideal"}
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
