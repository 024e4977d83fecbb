"""How `lyra emulate` reports its steps (``--report``), how the demo reads the report, and what it says of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from lyra.cli import main
from lyra.cli.demo_run import read_step_report
from lyra.cli.demo_summary import emulator_steps
from lyra.emulator import StepReport

ON_BEAT = StepReport(interval_s=0.2, steps=376, late_steps=0, longest_step_s=0.087, span_s=75.0)
BEHIND = StepReport(interval_s=0.2, steps=211, late_steps=40, longest_step_s=5.035, span_s=75.0)


def test_the_mean_period_is_the_span_over_the_gaps_between_steps() -> None:
    assert ON_BEAT.mean_period_s == pytest.approx(0.2)
    assert BEHIND.mean_period_s == pytest.approx(75.0 / 210)
    assert StepReport(interval_s=0.2, steps=1, late_steps=0, longest_step_s=0.0, span_s=0.0).mean_period_s is None


@pytest.mark.parametrize(
    "fields",
    [
        {"interval_s": 0.0},
        {"steps": -1},
        {"late_steps": -1},
        {"longest_step_s": -0.1},
        {"span_s": -1.0},
        {"extra": 1},
    ],
)
def test_a_report_out_of_range_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        StepReport.model_validate(ON_BEAT.model_dump() | fields)


def test_the_demo_reads_back_what_the_emulator_writes_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "emulate-steps.json"
    assert read_step_report(path) is None  # the emulator wrote none (killed outright)
    path.write_text(ON_BEAT.model_dump_json())
    assert read_step_report(path) == ON_BEAT
    for text in ("", "{", '{"interval_s": 0.2}', "[]"):
        path.write_text(text)
        assert read_step_report(path) is None, text


def test_steps_on_the_beat_are_said_without_a_warning() -> None:
    said, warning = emulator_steps("lyra", ON_BEAT, 720)
    assert said == (
        "[lyra] the emulator stepped every 0.200 s (interval 0.2 s); 0 of 376 steps took longer, the longest 0.087 s"
    )
    assert warning is None
    # Within a tenth of the interval: still on the beat.
    assert emulator_steps("lyra", ON_BEAT.model_copy(update={"span_s": 375 * 0.219}), 720)[1] is None


def test_steps_behind_the_beat_are_warned_of_with_the_trace_seconds_they_cost() -> None:
    said, warning = emulator_steps("off", BEHIND, 720)
    assert said.startswith("[off] the emulator stepped every 0.357 s (interval 0.2 s); 40 of 211 steps took longer")
    assert warning == (
        "[off] the emulator stepped every 0.357 s, not every 0.2 s: each job's first progress and its end waited "
        "about 113 trace seconds longer than the simulator charges; this host is too busy for --speed-up 720"
    )


def test_a_missing_report_or_a_single_step_is_warned_of_as_unknown() -> None:
    assert "whether they kept their interval is unknown" in (emulator_steps("lyra", None, 720)[1] or "")
    one = StepReport(interval_s=0.2, steps=1, late_steps=0, longest_step_s=0.01, span_s=0.0)
    said, warning = emulator_steps("lyra", one, 720)
    assert said == "[lyra] the emulator ran 1 step(s)"
    assert warning is not None
    assert "fewer than two steps" in warning


@pytest.mark.parametrize(
    ("where", "fault"),
    [("dir", "is a directory; give a file name"), ("/proc/lyra-test/steps.json", "is not writable")],
)
def test_a_report_path_that_cannot_be_written_is_bad_input(
    where: str, fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path if where == "dir" else Path(where)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    assert main(["emulate", "--kubeconfig", str(kubeconfig), "--report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lyra emulate: --report {path}"), err
    assert fault in err
    assert err.count("\n") == 1
