"""Several writers in one thread, each giving way to the others only while it waits for its answer.

A busy pass writes thousands of objects, each a round trip to the API server, with several requests in flight at
once (:data:`lyra.operator.commit.WRITERS`). With a thread for each writer, every request cost the operator's
process a sleep and a wake-up of a thread and a hand-over of the interpreter's lock: measured, the kernel's task
switching was about a quarter of the CPU of the writes (docs/benchmarks.md, "Writers in one thread"). Here each
writer is a greenlet of the thread that runs the pass. A writer runs until it has sent a request and must wait for
the answer: the answer's reader (:mod:`lyra.operator.http_answers`) calls :func:`wait_readable` before each read of
its socket, and the writer is parked there; the thread then polls every parked writer's socket at once and resumes
each whose answer has come, in the order the poll gives them.

Nothing else gives way. Between two waits a writer runs alone, so state the writers share (the commit step's
``_Pass``, the backoff, the caches' versions) is changed by one writer at a time; a lock taken by a writer must not
be held across a request (another writer would wait on it forever: none of the commit step's locks is).

A wait longer than its timeout raises :class:`TimeoutError` in its writer, as a socket's timeout does. Outside an
interleaving (one writer, a short run, a one-shot command, any other thread) :func:`wait_readable` returns at once
and the read blocks as a socket's read does.
"""

from __future__ import annotations

import math
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence

import greenlet

#: The interleaving running in each thread, if any.
_running = threading.local()
#: What a poll reports for a socket to be read: its answer came, the peer closed, or an error is pending (each
#: shown to the writer by its read).
_READABLE = select.POLLIN | select.POLLPRI


def wait_readable(sock: socket.socket | ssl.SSLSocket) -> None:
    """Park the calling writer until ``sock`` has something to read, if it runs in an :class:`Interleaving` and
    nothing is held for it already (TLS bytes decrypted and not yet read), for at most the socket's timeout;
    otherwise return at once."""
    interleaving: Interleaving | None = getattr(_running, "now", None)
    if interleaving is not None:
        interleaving.wait(sock)


class Interleaving:
    """Writers run as greenlets of the calling thread by :meth:`run`, each parked in :meth:`wait` until its socket
    can be read (see the module docstring)."""

    def __init__(self) -> None:
        self._hub = greenlet.getcurrent()
        self._poll = select.poll()
        #: Each parked writer by its socket's file descriptor, with when its wait ends (monotonic seconds).
        self._parked: dict[int, tuple[greenlet.greenlet, float]] = {}

    def wait(self, sock: socket.socket | ssl.SSLSocket) -> None:
        """Park the calling writer until ``sock`` can be read (see :func:`wait_readable`)."""
        me = greenlet.getcurrent()
        if me is self._hub or (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            return
        fd = sock.fileno()
        timeout_s = sock.gettimeout()
        self._poll.register(fd, _READABLE)
        self._parked[fd] = (me, math.inf if timeout_s is None else time.monotonic() + timeout_s)
        try:
            self._hub.switch()
        finally:
            self._poll.unregister(fd)
            del self._parked[fd]

    def run(self, writers: Sequence[Callable[[], None]]) -> None:
        """Run each of ``writers`` as a greenlet of this thread until all have returned, in order until each first
        waits; then resume each as its answer comes. The first exception a writer raised is raised here once all
        have ended (a writer that should stop the others says so to them itself)."""
        if getattr(_running, "now", None) is not None:
            raise RuntimeError("an interleaving already runs in this thread")
        errors: list[BaseException] = []

        def guarded(writer: Callable[[], None]) -> None:
            try:
                writer()
            except BaseException as error:  # raised below, in the calling greenlet
                errors.append(error)

        _running.now = self
        try:
            for writer in writers:
                greenlet.greenlet(guarded).switch(writer)
            while self._parked:
                self._serve_one_poll()
        finally:
            for parked, _ in list(self._parked.values()):  # only when the thread itself was interrupted
                parked.throw(greenlet.GreenletExit)
            _running.now = None
        if errors:
            raise errors[0]

    def _serve_one_poll(self) -> None:
        """One poll of every parked writer's socket: resume those that can read, or end the waits that timed out."""
        soonest = min(deadline for _, deadline in self._parked.values())
        left_ms = None if soonest == math.inf else max(0, math.ceil((soonest - time.monotonic()) * 1000))
        for fd, _ in self._poll.poll(left_ms):
            parked = self._parked.get(fd)
            if parked is not None:
                parked[0].switch()
        now = time.monotonic()
        if now < soonest:
            return
        for writer, deadline in list(self._parked.values()):  # checked even while others' answers keep coming
            if deadline <= now:
                writer.throw(TimeoutError("timed out waiting for the API server's answer"))
