"""Where the operator's and the extender's HTTP servers listen: their sockets bound before anything else starts, and
a failure said in one line (``cannot listen on 10.0.0.9:8888: cannot assign requested address``) instead of a
traceback or the web server's own exit code.

A host name is resolved as the servers always did: the extender listens on every address it resolves to (as asyncio
does), the operator's endpoints on the first; an empty host means every interface.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any


class ListenError(Exception):
    """A server cannot listen: the port is taken, the address is not this host's, or the name does not resolve."""


def listen_failure(host: str, port: int, error: OSError) -> ListenError:
    """The one line that says why ``host``:``port`` cannot be listened on."""
    shown = f"[{host}]" if ":" in host else (host or "*")
    reason = error.strerror.lower() if error.strerror else (str(error) or type(error).__name__)
    return ListenError(f"cannot listen on {shown}:{port}: {reason}")


def addresses(host: str, port: int) -> list[tuple[socket.AddressFamily, Any]]:
    """Each (family, address) ``host`` resolves to for listening on ``port``, in the resolver's order, without
    repeats; ``OSError`` when it resolves to none."""
    found: list[tuple[socket.AddressFamily, Any]] = []
    for family, _, _, _, address in socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        if family in (socket.AF_INET, socket.AF_INET6) and (family, address) not in found:
            found.append((family, address))
    if not found:
        raise OSError(f"{host or '*'} has no IPv4 or IPv6 address")
    return found


def bound_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address of ``host`` at ``port`` (not yet listening); :class:`ListenError` if any
    cannot be bound, with the ones bound so far closed."""
    bound: list[socket.socket] = []
    try:
        found = addresses(host, port)
        for family, address in found:
            sock = socket.socket(family, socket.SOCK_STREAM)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and len(found) > 1:  # the IPv4 address has a socket of its own
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as error:
        for sock in bound:
            with contextlib.suppress(OSError):
                sock.close()
        raise listen_failure(host, port, error) from None
    return bound
