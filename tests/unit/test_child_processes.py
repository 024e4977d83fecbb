"""A program run to its end is killed and waited for whatever stops the command, a stop that comes while the program
is being created included (``subprocess.run`` left it running, orphaned)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from lyra.child_processes import run_to_end, stop_signals_held


class StopError(Exception):
    """What the test's SIGTERM handler raises."""


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises :class:`StopError`, as a command's own handler makes it (``lyra.cli.stopping``)."""

    def stop(_signum: int, _frame: object) -> None:
        raise StopError

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


class InterruptedAsItReturns(subprocess.Popen[Any]):
    """A child whose creation is interrupted: SIGTERM comes as the constructor is about to return."""

    created: ClassVar[list[int]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        InterruptedAsItReturns.created.append(self.pid)
        os.kill(os.getpid(), signal.SIGTERM)


#: A child that would run for a minute: the program under test, never waited for (each test kills it, or checks
#: that it was killed); the tests themselves do not sleep.
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.mark.usefixtures("sigterm_raises")
def test_a_stop_while_the_child_is_created_kills_it() -> None:
    InterruptedAsItReturns.created.clear()
    with pytest.raises(StopError):
        run_to_end(SLEEPER, popen=InterruptedAsItReturns)
    [pid] = InterruptedAsItReturns.created
    assert not alive(pid), "the child is killed and waited for"


@pytest.mark.usefixtures("sigterm_raises")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Popen's "is still running"
def test_subprocess_run_leaves_such_a_child_running() -> None:
    """What run_to_end is for: the same stop leaves subprocess.run's child running, owned by nobody."""
    InterruptedAsItReturns.created.clear()
    real = subprocess.Popen
    subprocess.Popen = InterruptedAsItReturns  # type: ignore[misc]
    try:
        with pytest.raises(StopError):
            subprocess.run(SLEEPER, check=False)
    finally:
        subprocess.Popen = real  # type: ignore[misc]
    [pid] = InterruptedAsItReturns.created
    try:
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        gc.collect()  # the orphan's Popen object goes now, in this test, which expects its warning


@pytest.mark.usefixtures("sigterm_raises")
def test_held_signals_come_once_the_block_is_left() -> None:
    reached = []

    def send_twice() -> None:
        with stop_signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # twice: raised again once
            reached.append(True)

    with pytest.raises(StopError):
        send_twice()
    assert reached, "nothing was raised inside the block"
    assert signal.getsignal(signal.SIGTERM).__name__ == "stop", "the handler is back"


def test_a_program_runs_to_its_end_with_its_output_code_and_timeout() -> None:
    done = run_to_end([sys.executable, "-c", "print('out'); import sys; sys.exit(3)"], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "")
    with pytest.raises(subprocess.CalledProcessError):
        run_to_end([sys.executable, "-c", "raise SystemExit(2)"], check=True)
    with pytest.raises(subprocess.TimeoutExpired):
        run_to_end(SLEEPER, timeout=0.2)
