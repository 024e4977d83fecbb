"""Free TCP ports on the loopback interface.

Every component of the local control plane listens on 127.0.0.1 only, on ports the kernel hands out, so a test
session and a developer's ``lyra cluster up`` never collide and nothing is reachable from the network.
"""

from __future__ import annotations

import contextlib
import socket
import threading

LOOPBACK = "127.0.0.1"


#: Every port this process has handed out. Later calls never hand one out again: a port chosen for a component
#: that starts later (the extender, whose URL the scheduler's configuration names before the control plane starts)
#: is not given to the control plane's own components meanwhile, which the kernel could otherwise do once the port's
#: probe socket is closed.
_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()
#: How many sockets one call may bind looking for ports it has not handed out before.
_MOST_PROBES = 4096


def allocate_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Return ``count`` distinct ports that were free on ``host`` a moment ago and that this process has not handed
    out before.

    All sockets stay bound until every port is chosen, so the kernel cannot hand out the same port twice; they
    are closed before returning because the components bind the ports themselves. Another program could take one
    in between; the component then fails to start and its log says so.
    """
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    if host != LOOPBACK and not host.startswith("127."):
        raise ValueError(f"the local control plane listens on loopback addresses only, not {host!r}")
    with _HANDED_OUT_LOCK, contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(_MOST_PROBES):
            if len(ports) == count:
                break
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
            if port not in _HANDED_OUT:  # one handed out before stays bound here, so the kernel offers another
                ports.append(port)
        else:
            if len(ports) < count:
                raise OSError(f"found {len(ports)} of {count} free ports on {host} not handed out before")
        _HANDED_OUT.update(ports)
        return ports


def is_listening(port: int, host: str = LOOPBACK, timeout: float = 0.2) -> bool:
    """Tell whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
