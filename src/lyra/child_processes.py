"""Running a program to its end, such that a command stopped meanwhile never leaves it running unowned.

``subprocess.run`` kills its child when the wait for it is interrupted (Ctrl-C, or :class:`lyra.cli.stopping.Stopped`
for SIGTERM and SIGHUP), but not when the interruption comes while the child is still being created: the exception
then leaves ``Popen``'s constructor after the fork, the child runs on, and nothing refers to it any more. Measured: a
``lyra image verify`` sent SIGTERM as it started its first ``ctr image import`` left that ``ctr`` running, orphaned and
still waiting 50 minutes later on a containerd that was gone. :func:`run_to_end` holds the stopping signals
while the child is created (recorded, not acted on) and delivers them once it exists, where the interruption kills
the child and waits for it.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FrameType
from typing import Any, Literal, overload

#: The signals a command is stopped by (Ctrl-C, ``timeout`` or a service manager, a closed terminal).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """While the block runs, the stopping signals are recorded instead of handled; on leaving it, the handlers the
    block found are back and each recorded signal is raised again, once, in the order it came: what it does (an
    exception, the default action) happens then. Only the main thread has signal handlers; elsewhere nothing is
    held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        if signum not in came:
            came.append(signum)

    try:
        with signals_handled_by(record, HELD_SIGNALS):
            yield
    finally:
        for held in came:
            signal.raise_signal(held)


@contextlib.contextmanager
def signals_handled_by(handler: Callable[[int, FrameType | None], Any], signums: Iterable[int]) -> Iterator[None]:
    """While the block runs, ``handler`` handles ``signums``; the handlers it found are back when it is left."""
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, found in previous.items():
            signal.signal(signum, found)


@overload
def run_to_end(
    args: Sequence[str],
    *,
    text: Literal[True],
    timeout: float | None = None,
    check: bool = False,
    capture_output: bool = False,
    popen: Callable[..., subprocess.Popen[Any]] = subprocess.Popen,
    **options: Any,
) -> subprocess.CompletedProcess[str]: ...


@overload
def run_to_end(
    args: Sequence[str],
    *,
    text: Literal[False] = False,
    timeout: float | None = None,
    check: bool = False,
    capture_output: bool = False,
    popen: Callable[..., subprocess.Popen[Any]] = subprocess.Popen,
    **options: Any,
) -> subprocess.CompletedProcess[bytes]: ...


def run_to_end(
    args: Sequence[str],
    *,
    text: bool = False,
    timeout: float | None = None,
    check: bool = False,
    capture_output: bool = False,
    popen: Callable[..., subprocess.Popen[Any]] = subprocess.Popen,
    **options: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(args, timeout=, check=, capture_output=, **options)``, except that the child is killed and
    waited for whatever interrupts the wait, an interruption that comes while it is being created included.
    ``popen`` builds the child (``subprocess.Popen``; tests pass one that is interrupted as it returns)."""
    if capture_output:
        options["stdout"] = options["stderr"] = subprocess.PIPE
    process: subprocess.Popen[Any] | None = None
    try:
        with stop_signals_held():
            process = popen(list(args), text=text, **options)
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        if process is not None:
            _kill(process)
        raise
    completed = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check:
        completed.check_returncode()
    return completed


def _kill(process: subprocess.Popen[Any]) -> None:
    """Kill ``process`` and wait for it, its pipes closed."""
    process.kill()
    with contextlib.suppress(OSError, ValueError):
        process.communicate()
    process.wait()
