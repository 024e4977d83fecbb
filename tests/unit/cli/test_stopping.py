"""SIGTERM and SIGHUP stop a command as Ctrl-C does: its ``finally`` blocks run, a second signal does not cut them
short, and the exit code is the shell's for the signal. So does the reader of its output going away (SIGPIPE's
case), without a word when the command has nothing to stop, and standard output that cannot be written (a full disk,
``>&-``), with one line and exit 1. Standard input or error closed is said or passed over, never a traceback."""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lyra.cli.stopping import (
    OutputFailed,
    Stopped,
    output_closed,
    stopped_by,
    stopped_exit_code,
    stopped_like_ctrl_c,
    stopped_when_output_fails,
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


class _FailingOutput(io.StringIO):
    """Standard output whose every write and flush fails with ``error``; each attempt is counted."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error
        self.attempts = 0

    def write(self, text: str) -> int:
        self.attempts += 1
        raise self.error

    def flush(self) -> None:
        self.attempts += 1
        raise self.error


@pytest.mark.parametrize(
    ("error", "stopped", "code", "said"),
    [
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), Stopped, 141, "SIGPIPE: the reader of its output went away"),
        (OSError(errno.ENOSPC, "No space left on device"), OutputFailed, 1,
         "standard output cannot be written: No space left on device"),
    ],
    ids=["its-reader-gone", "a-full-disk"],
)  # fmt: skip
def test_a_failed_write_stops_as_ctrl_c_says_why_and_is_not_an_oserror(
    error: OSError, stopped: type[KeyboardInterrupt], code: int, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = _FailingOutput(error)
    monkeypatch.setattr(sys, "stdout", failing)
    stopping: list[str] = []

    def progress() -> None:
        try:
            print("a line of progress")
        except (OSError, Exception):  # a command's own handling of its work's failures does not take it
            stopping.append("taken for a failure")
        finally:
            stopping.append("finally")

    with pytest.raises(stopped) as raised, stopped_when_output_fails():
        progress()
    assert stopping == ["finally"]
    assert isinstance(raised.value, KeyboardInterrupt)
    assert output_closed(raised.value) == isinstance(error, BrokenPipeError)
    assert stopped_exit_code(raised.value) == code
    assert stopped_by(raised.value) == said
    assert sys.stdout is failing


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


def test_after_a_failed_write_the_output_goes_nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's last flush and the lines of its stopping do not fail a second time."""
    full = _FailingOutput(OSError(errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(sys, "stdout", full)
    with stopped_when_output_fails():
        with pytest.raises(OutputFailed):
            print("a line")
        print("the stopping's line")
        sys.stdout.flush()
    assert full.attempts == 1


def test_output_closed_before_the_command_fails_at_the_first_write_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``>&-``: Python's ``sys.stdout`` is None; a command that writes nothing (the operator logs to standard error)
    runs, and the first write stops it."""
    monkeypatch.setattr(sys, "stdout", None)
    with stopped_when_output_fails():
        sys.stdout.flush()
        assert not sys.stdout.isatty()
        with pytest.raises(OutputFailed) as raised:
            print("a line")
    assert stopped_by(raised.value) == "standard output cannot be written: it is closed"
    assert sys.stdout is None


def _lyra(argv: list[str], *, shell_redirection: str) -> subprocess.CompletedProcess[str]:
    """``lyra ARGV`` with a shell's redirection of its standard streams (``>/dev/full``, ``<&-``)."""
    return subprocess.run(
        ["sh", "-c", f'exec "$0" "$@" {shell_redirection}', sys.executable, "-m", "lyra", *argv],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )  # fmt: skip


EXAMPLE_SNAPSHOT = str(ROOT / "docs" / "examples" / "snapshot.json")


@pytest.mark.parametrize(
    ("argv", "redirection", "said"),
    [
        (["plan", "schema"], ">/dev/full",
         "lyra plan schema: standard output cannot be written: No space left on device"),
        (["plan", "allocate", "--snapshot", EXAMPLE_SNAPSHOT], ">/dev/full",
         "lyra plan allocate: standard output cannot be written: No space left on device"),
        (["--help"], ">/dev/full", "lyra: standard output cannot be written: No space left on device"),
        (["--version"], ">/dev/full", "lyra: standard output cannot be written: No space left on device"),
        (["plan", "schema"], ">&-", "lyra plan schema: standard output cannot be written: it is closed"),
    ],
    ids=["a-document-on-a-full-disk", "a-plan-on-a-full-disk", "the-help-on-a-full-disk", "the-version-on-a-full-disk",
         "a-document-into-a-closed-output"],
)  # fmt: skip
def test_a_command_whose_output_cannot_be_written_says_so_in_one_line_and_exits_1(
    argv: list[str], redirection: str, said: str
) -> None:
    run = _lyra(argv, shell_redirection=redirection)
    assert (run.returncode, run.stderr) == (1, said + "\n")


def test_a_snapshot_read_from_a_closed_standard_input_is_refused() -> None:
    run = _lyra(["plan", "allocate", "--snapshot", "-"], shell_redirection="<&-")
    assert (run.returncode, run.stdout, run.stderr) == (
        2, "", "lyra plan allocate: snapshot -: standard input is closed\n"
    )  # fmt: skip


def test_with_standard_error_closed_a_message_stays_out_of_the_output() -> None:
    run = _lyra(["plan", "allocate", "--snapshot", "/nonexistent/snapshot.json"], shell_redirection="2>&-")
    assert (run.returncode, run.stdout) == (2, "")
