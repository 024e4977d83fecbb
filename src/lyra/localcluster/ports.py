"""Free TCP ports on the loopback interface.

Every component of the local control plane listens on 127.0.0.1 only, on ports the kernel hands out, so a test
session and a developer's ``lyra cluster up`` never collide and nothing is reachable from the network.
"""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"


def allocate_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Return ``count`` distinct ports that were free on ``host`` a moment ago.

    All sockets stay bound until every port is chosen, so the kernel cannot hand out the same port twice; they
    are closed before returning because the components bind the ports themselves. Another program could take one
    in between; the component then fails to start and its log says so.
    """
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    if host != LOOPBACK and not host.startswith("127."):
        raise ValueError(f"the local control plane listens on loopback addresses only, not {host!r}")
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def is_listening(port: int, host: str = LOOPBACK, timeout: float = 0.2) -> bool:
    """Tell whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
