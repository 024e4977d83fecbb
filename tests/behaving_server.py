"""A TCP server on loopback whose every connection behaves as the test says (silent, trickling, endless, broken), for
the unit tests of clients that must not wait for ever or read without end: each connection's request is read, then
``behaviour(connection, stop)`` answers it in a thread of its own until the block ends (``stop`` is set then)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Behaviour = Callable[[socket.socket, threading.Event], None]


@contextmanager
def behaving_server(behaviour: Behaviour, accepted: list[socket.socket] | None = None) -> Iterator[str]:
    """Serve until the block ends; yields the server's URL (``http://127.0.0.1:<port>``). ``accepted``, if given,
    receives each connection as it is accepted."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)

    def answer(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):  # the client giving up is what the test expects of it
            connection.recv(65536)
            behaviour(connection, stop)

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            if accepted is not None:
                accepted.append(connection)
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        acceptor.join()
        listener.close()


def silent(_connection: socket.socket, stop: threading.Event) -> None:
    """Connected, and never a byte: a hung server, a stale port-forward."""
    stop.wait()
