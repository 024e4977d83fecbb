"""A command that starts processes, stopped from outside, stops them first: Ctrl-C (SIGINT), ``timeout`` or a
service manager (SIGTERM) and a closed terminal (SIGHUP) all unwind the command's ``finally`` blocks, where SIGTERM
and SIGHUP would otherwise end Python at once and leave what it started running, holding its ports.

The command exits as a shell reports a process stopped by the signal: 128 plus its number (130 for Ctrl-C, 143 for
SIGTERM, 129 for SIGHUP). A second signal while the command stops is passed over, so that the stopping finishes.

The reader of standard output going away (``lyra status | head -1``) stops a command the same way, as SIGPIPE stops
``cat`` (141): Python ignores SIGPIPE and raises ``BrokenPipeError`` from the write instead, an ``OSError`` that a
command's own handling would take for a failure of its work (``the lyra run failed: [Errno 32] Broken pipe``).
:func:`stopped_when_output_is_closed` turns it into :class:`Stopped` at the write.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO, cast

#: The signals turned into :class:`Stopped` besides SIGINT, which Python turns into ``KeyboardInterrupt`` itself.
STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The command was told to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stopped_like_ctrl_c() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise :class:`Stopped` (a ``KeyboardInterrupt``), as SIGINT does."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        for each in STOPPING_SIGNALS:  # once: a second signal must not cut the stopping short
            signal.signal(each, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, stop) for signum in STOPPING_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def stopped_when_output_is_closed() -> Iterator[None]:
    """While the block runs, a write to standard output whose reader went away raises :class:`Stopped` for SIGPIPE,
    which unwinds the command as Ctrl-C does."""
    watched = sys.stdout
    sys.stdout = cast(TextIO, _ClosedOutputStops(watched))
    try:
        yield
    finally:
        sys.stdout = watched


def output_closed(interrupt: KeyboardInterrupt) -> bool:
    """Whether ``interrupt`` is the reader of standard output gone away, which a command says nothing about."""
    return isinstance(interrupt, Stopped) and interrupt.signum == signal.SIGPIPE


class _ClosedOutputStops:
    """Standard output as it is, but for a write or flush its reader is gone from, which raises :class:`Stopped`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise Stopped(signal.SIGPIPE) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise Stopped(signal.SIGPIPE) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def stopped_exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 plus the number of the signal that stopped the command (SIGINT's for Ctrl-C)."""
    return 128 + (interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT)


def stopped_by(interrupt: KeyboardInterrupt) -> str:
    """What stopped the command, as a user would name it."""
    if output_closed(interrupt):
        return "SIGPIPE: the reader of its output went away"
    return signal.Signals(interrupt.signum).name if isinstance(interrupt, Stopped) else "Ctrl-C"
