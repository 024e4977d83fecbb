"""Lyra's threads named for the operating system, so that ``top -H``, ``ps -L`` and ``/proc/<pid>/task/*/comm`` tell
them apart (Python 3.11 names a thread for itself only: every thread of a process shows the process's name).

The extender serves kube-scheduler from its main thread while watch threads parse events and another recomputes
reclaim ranks; which of them takes the CPU is what an operator (and ``bench.scheduling_bench``) needs to see. Linux
keeps the first 15 bytes of a name. Elsewhere, or without the C library's ``prctl``, naming does nothing: a name
is a diagnostic, never a reason to fail.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections.abc import Callable

#: ``prctl`` option that names the calling thread (``linux/prctl.h``).
PR_SET_NAME = 15
#: Bytes of a thread's name the kernel keeps, without the terminating NUL (``TASK_COMM_LEN`` - 1).
MAX_NAME_BYTES = 15


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, the C library's among them
    except OSError:
        return None
    prctl: Callable[..., int] | None = getattr(libc, "prctl", None)
    return prctl


def name_os_thread(name: str | None = None) -> None:
    """Give the calling thread ``name`` (default: its Python name) for the operating system, cut to
    :data:`MAX_NAME_BYTES`."""
    prctl = _prctl()
    if prctl is None:
        return
    wanted = (name if name is not None else threading.current_thread().name).encode(errors="replace")
    prctl(PR_SET_NAME, ctypes.c_char_p(wanted[:MAX_NAME_BYTES]), 0, 0, 0)
