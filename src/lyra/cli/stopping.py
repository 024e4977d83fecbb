"""A command that starts processes, stopped from outside, stops them first: Ctrl-C (SIGINT), ``timeout`` or a
service manager (SIGTERM) and a closed terminal (SIGHUP) all unwind the command's ``finally`` blocks, where SIGTERM
and SIGHUP would otherwise end Python at once and leave what it started running, holding its ports.

The command exits as a shell reports a process stopped by the signal: 128 plus its number (130 for Ctrl-C, 143 for
SIGTERM, 129 for SIGHUP). A second signal while the command stops is passed over, so that the stopping finishes.

The reader of standard output going away (``lyra status | head -1``) stops a command the same way, as SIGPIPE stops
``cat`` (141): Python ignores SIGPIPE and raises ``BrokenPipeError`` from the write instead, an ``OSError`` that a
command's own handling would take for a failure of its work (``the lyra run failed: [Errno 32] Broken pipe``).
:func:`stopped_when_output_fails` turns it into :class:`Stopped` at the write.

Standard output that cannot be written for another reason (a full disk, ``>&-``) stops a command the same way, as
:class:`OutputFailed`: what it would print next is lost, and a command's ``except OSError`` must not take the failure
for one of its work's. The command says why and exits 1, as ``cat`` does on a write error.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO, cast

from lyra.child_processes import signals_handled_by
from lyra.cli.exit_codes import EXIT_BROKEN_PIPE, EXIT_FAILED

#: The signals turned into :class:`Stopped` besides SIGINT, which Python turns into ``KeyboardInterrupt`` itself.
STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The command was told to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class OutputFailed(KeyboardInterrupt):
    """Standard output cannot be written (``reason``: a full disk, a closed descriptor). A ``KeyboardInterrupt``, so
    that it unwinds the command as Ctrl-C does: through its ``except Exception`` and ``except OSError``, into the
    ``finally`` blocks that stop what it started."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@contextmanager
def stopped_like_ctrl_c() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise :class:`Stopped` (a ``KeyboardInterrupt``), as SIGINT does."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        for each in STOPPING_SIGNALS:  # once: a second signal must not cut the stopping short
            signal.signal(each, signal.SIG_IGN)
        raise Stopped(signum)

    with signals_handled_by(stop, STOPPING_SIGNALS):
        yield


@contextmanager
def stopped_when_output_fails() -> Iterator[None]:
    """While the block runs, a write to standard output whose reader went away raises :class:`Stopped` for SIGPIPE,
    and one that fails otherwise :class:`OutputFailed`; both unwind the command as Ctrl-C does. Standard output
    closed before the command started (``>&-``: Python's ``sys.stdout`` is None) fails at the first write, so that a
    command that prints nothing (the operator, which logs to standard error) still runs."""
    watched = sys.stdout
    stream = watched if watched is not None else cast(TextIO, _ClosedOutput())
    sys.stdout = cast(TextIO, _FailedOutputStops(stream))
    try:
        yield
    finally:
        sys.stdout = watched


def output_closed(interrupt: KeyboardInterrupt) -> bool:
    """Whether ``interrupt`` is the reader of standard output gone away, which a command says nothing about."""
    return isinstance(interrupt, Stopped) and interrupt.signum == signal.SIGPIPE


class _FailedOutputStops:
    """Standard output as it is, but for a write or flush that fails: :class:`Stopped` for SIGPIPE when its reader
    is gone, :class:`OutputFailed` for any other failure. From then on its output goes nowhere, so that the flushes
    still to come (the command's last, Python's at exit) do not fail a second time."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._failed = False

    def write(self, text: str) -> int:
        if self._failed:
            return len(text)
        try:
            return self._stream.write(text)
        except OSError as error:
            raise self._stopping(error) from None

    def flush(self) -> None:
        if self._failed:
            return
        try:
            self._stream.flush()
        except OSError as error:
            raise self._stopping(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _stopping(self, error: OSError) -> KeyboardInterrupt:
        self._failed = True
        with contextlib.suppress(OSError, ValueError):  # what the stream still holds is flushed into /dev/null
            discard = os.open(os.devnull, os.O_WRONLY)
            os.dup2(discard, self._stream.fileno())
            os.close(discard)
        if isinstance(error, BrokenPipeError):
            return Stopped(signal.SIGPIPE)
        return OutputFailed(f"standard output cannot be written: {error.strerror or error}")


class _ClosedOutput(io.TextIOBase):
    """Standard output closed before the command started: nothing to flush, and a write fails."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "it is closed")


def stopped_exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 plus the number of the signal that stopped the command (SIGINT's for Ctrl-C); 1 for standard output that
    cannot be written."""
    if isinstance(interrupt, OutputFailed):
        return EXIT_FAILED
    if output_closed(interrupt):
        return EXIT_BROKEN_PIPE
    return 128 + (interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT)


def stopped_by(interrupt: KeyboardInterrupt) -> str:
    """What stopped the command, as a user would name it."""
    if output_closed(interrupt):
        return "SIGPIPE: the reader of its output went away"
    if isinstance(interrupt, OutputFailed):
        return interrupt.reason
    return signal.Signals(interrupt.signum).name if isinstance(interrupt, Stopped) else "Ctrl-C"
