"""SIGTERM and SIGHUP stop a command as Ctrl-C does: its ``finally`` blocks run, a second signal does not cut them
short, and the exit code is the shell's for the signal. So does the reader of its output going away (SIGPIPE's
case), without a word when the command has nothing to stop."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lyra.cli.stopping import (
    Stopped,
    output_closed,
    stopped_by,
    stopped_exit_code,
    stopped_like_ctrl_c,
    stopped_when_output_is_closed,
)

ROOT = Path(__file__).resolve().parents[3]


def _signalled(signum: int, stopping: list[str], *, again: bool = False) -> None:
    """Signal this process (Python runs the handler before ``os.kill`` returns), recording the ``finally``'s steps;
    with ``again``, signal it once more from the ``finally``."""
    try:
        os.kill(os.getpid(), signum)
        stopping.append("not stopped")
    finally:
        stopping.append("finally began")
        if again:
            os.kill(os.getpid(), signum)
        stopping.append("finally ended")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_the_signal_unwinds_the_block_and_names_itself(signum: int, code: int) -> None:
    stopping: list[str] = []
    with pytest.raises(Stopped) as raised, stopped_like_ctrl_c():
        _signalled(signum, stopping)
    assert stopping == ["finally began", "finally ended"]
    assert isinstance(raised.value, KeyboardInterrupt)
    assert stopped_exit_code(raised.value) == code
    assert stopped_by(raised.value) == signal.Signals(signum).name


def test_ctrl_c_is_130_and_named_so() -> None:
    assert stopped_exit_code(KeyboardInterrupt()) == 130
    assert stopped_by(KeyboardInterrupt()) == "Ctrl-C"


def test_a_second_signal_while_stopping_is_passed_over() -> None:
    stopping: list[str] = []
    with pytest.raises(Stopped), stopped_like_ctrl_c():
        _signalled(signal.SIGTERM, stopping, again=True)
    assert stopping == ["finally began", "finally ended"]


def test_the_handlers_before_are_restored() -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    with stopped_like_ctrl_c():
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {signum: signal.getsignal(signum) for signum in before} == before


class _GoneReader(io.StringIO):
    """Standard output whose reader went away: every write and flush is a broken pipe."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_write_its_reader_is_gone_from_stops_as_sigpipe_and_is_not_an_oserror(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = _GoneReader()
    monkeypatch.setattr(sys, "stdout", gone)
    stopping: list[str] = []

    def progress() -> None:
        try:
            print("a line of progress")
        except OSError:  # a command's own handling of its work's failures does not take it
            stopping.append("taken for a failure")
        finally:
            stopping.append("finally")

    with pytest.raises(Stopped) as raised, stopped_when_output_is_closed():
        progress()
    assert stopping == ["finally"]
    assert output_closed(raised.value)
    assert stopped_exit_code(raised.value) == 141
    assert stopped_by(raised.value) == "SIGPIPE: the reader of its output went away"
    assert sys.stdout is gone


@pytest.mark.parametrize(
    "argv",
    [["api", "crds", "--check", "--out-dir", str(ROOT / "manifests" / "crds")], ["plan", "schema"], ["--help"]],
    ids=["a-line", "a-document", "the-help"],
)
def test_a_command_whose_reader_went_away_exits_141_without_a_word(argv: list[str]) -> None:
    """`lyra ... | head -0`: the pipe's reading end is closed before the command writes."""
    reading, writing = os.pipe()
    os.close(reading)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "lyra", *argv], stdout=writing, stderr=subprocess.PIPE, text=True, timeout=120,
            cwd=ROOT, check=False,
        )  # fmt: skip
    finally:
        os.close(writing)
    assert (run.returncode, run.stderr) == (141, "")
