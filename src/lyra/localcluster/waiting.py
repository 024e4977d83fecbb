"""Polling with deadlines: the one place allowed to sleep.

Everything that waits for the control plane (a port answering, nodes turning Ready, a pod being bound) polls a
predicate until a deadline instead of sleeping a fixed time, so a fast machine is not slowed down and a slow one
fails with a message that says what never happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL = 0.1
MAX_INTERVAL = 1.0


class WaitTimeoutError(TimeoutError):
    """Raised when a condition did not hold before its deadline; the message names the condition."""

    def __init__(self, what: str, timeout: float, last_error: BaseException | None = None) -> None:
        detail = f" (last error: {last_error})" if last_error is not None else ""
        super().__init__(f"timed out after {timeout:.1f}s waiting for {what}{detail}")
        self.what = what
        self.timeout = timeout
        self.last_error = last_error


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = DEFAULT_INTERVAL,
    max_interval: float = MAX_INTERVAL,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` until it returns something truthy and return that value.

    The interval grows from ``interval`` up to ``max_interval`` (one second) so short waits stay snappy and long ones
    do not spin; a caller that times what it waits for keeps both small.
    Exceptions listed in ``retry_on`` count as "not yet" (an API server that refuses connections while it boots);
    any other exception propagates at once, because it means the wait itself is wrong.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    deadline = time.monotonic() + timeout
    delay = interval
    last_error: BaseException | None = None
    while True:
        try:
            result = predicate()
        except retry_on as error:
            last_error = error
        else:
            if result:
                return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeoutError(what, timeout, last_error)
        # The one sleep allowed in tests: between polls, bounded by the deadline, backing off.
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, max_interval)
