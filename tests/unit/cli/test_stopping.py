"""SIGTERM and SIGHUP stop a command as Ctrl-C does: its ``finally`` blocks run, a second signal does not cut them
short, and the exit code is the shell's for the signal."""

from __future__ import annotations

import os
import signal

import pytest

from lyra.cli.stopping import Stopped, stopped_by, stopped_exit_code, stopped_like_ctrl_c


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
