"""A TCP relay on loopback in front of the local control plane's API server whose network a test can cut, for the
faults a partition (or an API server that hangs) leaves behind: connections that stay open and carry nothing.

A client gets a kubeconfig naming the relay instead of the API server. The relay forwards bytes as they are, so TLS
is the client's with the API server itself (the local CA signed the server's certificate for 127.0.0.1, which the
relay's address is too). :meth:`PartitionProxy.partition` silences every connection open at that moment, and every
connection made until :meth:`PartitionProxy.heal`: no byte is carried either way, and none is closed, as a partition
leaves a connection (the client's kernel still takes its writes; no answer ever comes). After the heal, new
connections are carried again; a silenced one stays silent for good, as a connection a partition broke does (its
peer has long given up on it). :attr:`PartitionProxy.silenced` counts the connections silenced (open ones when the
network is cut, and new ones until it heals), so a test can show the fault was hit.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: How often the relay's threads look up from their sockets to see a partition or the end.
POLL_S = 0.05


class _Connection:
    def __init__(self, client: socket.socket, upstream: socket.socket | None) -> None:
        self.client = client
        self.upstream = upstream
        self.silent = upstream is None
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()


class PartitionProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._partitioned = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._connections: list[_Connection] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL_S)
        self.port = self._listener.getsockname()[1]
        #: What a kubeconfig names to reach the API server through the relay.
        self.url = f"https://127.0.0.1:{self.port}"
        self._threads = [threading.Thread(target=self._accept, daemon=True, name="partition-proxy")]
        self._threads[0].start()

    def partition(self) -> None:
        """Silence every open connection, and every one made until :meth:`heal`."""
        with self._lock:
            self._partitioned = True
            for connection in self._connections:
                connection.silent = connection.silent or not connection.closed

    @property
    def silenced(self) -> int:
        """The connections silenced so far: open when the network was cut, or made while it was."""
        with self._lock:
            return sum(1 for connection in self._connections if connection.silent)

    def heal(self) -> None:
        """Carry the connections made from now on (the silenced ones stay silent)."""
        with self._lock:
            self._partitioned = False

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        with self._lock:
            for connection in self._connections:
                connection.close()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            with self._lock:
                partitioned = self._partitioned
            try:
                upstream = None if partitioned else socket.create_connection(self.upstream, timeout=10)
            except OSError:  # the API server is gone: the client sees its connection closed
                client.close()
                continue
            connection = _Connection(client, upstream)
            with self._lock:
                self._connections.append(connection)
            if upstream is not None:
                relay = threading.Thread(target=self._relay, args=(connection,), daemon=True, name="partition-relay")
                self._threads.append(relay)
                relay.start()

    def _relay(self, connection: _Connection) -> None:
        """Carry bytes both ways until either side closes, the relay stops, or the connection is silenced (then
        nothing more is read or sent, and both sockets stay open)."""
        assert connection.upstream is not None
        ends = {connection.client: connection.upstream, connection.upstream: connection.client}
        while not self._stop.is_set() and not connection.silent:
            readable, _, _ = select.select(list(ends), [], [], POLL_S)
            for sock in readable:
                if connection.silent:
                    break
                try:
                    data = sock.recv(65536)
                    if not data:
                        connection.close()
                        return
                    ends[sock].sendall(data)
                except OSError:
                    connection.close()
                    return


@contextmanager
def partition_proxy(server_url: str) -> Iterator[PartitionProxy]:
    """A relay in front of the API server at ``server_url`` (``https://127.0.0.1:PORT``), stopped when the block
    ends."""
    host, _, port = server_url.removeprefix("https://").partition(":")
    proxy = PartitionProxy((host, int(port)))
    try:
        yield proxy
    finally:
        proxy.stop()
