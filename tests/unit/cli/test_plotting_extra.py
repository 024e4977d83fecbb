"""Without the `report` extra (matplotlib), as in Lyra's image: the commands that draw say how to get it, exit 1 and
print no traceback, and the simulator still runs with --no-plots (no plotting module imported on that path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lyra.cli import main
from tests.unit.sim.builders import TINY, write


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name.split(".")[0] == "matplotlib" or name == "lyra.sim.plots"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises, find_spec answers None


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    rows = "".join(f"{i * 900},{600 + 300 * (i % 5)},{1 + i % 3}\n" for i in range(20))
    load = "t_sec,req_per_s\n" + "".join(f"{i * 600},{50 + i}\n" for i in range(144))
    return [
        "simulate",
        "--trace", str(write(tmp_path / "jobs.csv", "submit_time,duration,num_gpus\n" + rows)),
        "--load", str(write(tmp_path / "load.csv", load)),
        "--scenario", str(write(tmp_path / "scenario.yaml", TINY)),
        "--days", "1", "--start", "0", "--quiet",
    ]  # fmt: skip


@pytest.mark.usefixtures("no_matplotlib")
def test_report_says_to_install_the_extra(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", "--prometheus", "http://127.0.0.1:9", "--out-dir", str(tmp_path / "out")])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("lyra report: lyra report draws with matplotlib, which is not installed")
    assert "lyra-scheduler[report]" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("no_matplotlib")
def test_simulate_asks_for_the_extra_or_no_plots_before_simulating(
    inputs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*inputs, "--scheme", "baseline", "--out-dir", str(tmp_path / "o")])
    assert code == 1
    err = capsys.readouterr().err
    assert "lyra-scheduler[report]" in err
    assert err.rstrip().endswith("or pass --no-plots")
    assert not (tmp_path / "o").exists()


@pytest.mark.usefixtures("no_matplotlib")
@pytest.mark.parametrize("sweep", [[], ["--sweep", "fit-share=0.5"]])
def test_simulate_with_no_plots_runs_without_matplotlib(
    inputs: list[str], tmp_path: Path, sweep: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    code = main([*inputs, "--scheme", "baseline", *sweep, "--jobs", "1", "--no-plots", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads(out.read_text())
    assert "matplotlib" not in {name.split(".")[0] for name in sys.modules if sys.modules[name] is not None}
