"""A command that starts processes, stopped from outside, stops them first: Ctrl-C (SIGINT), ``timeout`` or a
service manager (SIGTERM) and a closed terminal (SIGHUP) all unwind the command's ``finally`` blocks, where SIGTERM
and SIGHUP would otherwise end Python at once and leave what it started running, holding its ports.

The command exits as a shell reports a process stopped by the signal: 128 plus its number (130 for Ctrl-C, 143 for
SIGTERM, 129 for SIGHUP). A second signal while the command stops is passed over, so that the stopping finishes.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

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


def stopped_exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 plus the number of the signal that stopped the command (SIGINT's for Ctrl-C)."""
    return 128 + (interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT)


def stopped_by(interrupt: KeyboardInterrupt) -> str:
    """What stopped the command, as a user would name it."""
    return signal.Signals(interrupt.signum).name if isinstance(interrupt, Stopped) else "Ctrl-C"
