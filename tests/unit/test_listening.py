"""The servers' sockets: bound to every address a host resolves to, and a failure said in one line."""

from __future__ import annotations

import errno
import socket

import pytest

from lyra.listening import ListenError, addresses, bound_sockets, listen_failure
from tests.unit.cli.running import taken_port


def test_an_ip_address_is_one_socket_bound_there() -> None:
    (sock,) = bound_sockets("127.0.0.1", 0)
    with sock:
        assert sock.getsockname()[0] == "127.0.0.1"
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)


def test_every_interface_is_both_families_each_on_its_own_socket() -> None:
    found = addresses("", 0)
    assert [family for family, _ in found] == [socket.AF_INET, socket.AF_INET6]
    assert [address[0] for _, address in found] == ["0.0.0.0", "::"]


def test_an_ipv6_address_is_bound() -> None:
    (sock,) = bound_sockets("::1", 0)
    with sock:
        assert sock.family == socket.AF_INET6
        assert sock.getsockname()[0] == "::1"


def test_a_taken_port_is_said_in_one_line() -> None:
    with taken_port() as port, pytest.raises(ListenError) as raised:
        bound_sockets("127.0.0.1", port)
    assert str(raised.value) == f"cannot listen on 127.0.0.1:{port}: address already in use"


def test_an_address_not_this_hosts_is_said() -> None:
    # 192.0.2.0/24 is documentation space (RFC 5737): no interface of this machine has it
    with pytest.raises(ListenError, match=r"^cannot listen on 192\.0\.2\.7:8080: cannot assign requested address$"):
        bound_sockets("192.0.2.7", 8080)


def test_a_name_that_does_not_resolve_is_said() -> None:
    with pytest.raises(ListenError, match=r"^cannot listen on nonexistent\.invalid:8080: "):
        bound_sockets("nonexistent.invalid", 8080)


def test_an_ipv6_address_is_shown_in_brackets_and_every_interface_as_a_star() -> None:
    refused = OSError(errno.EADDRINUSE, "Address already in use")
    assert str(listen_failure("::1", 80, refused)) == "cannot listen on [::1]:80: address already in use"
    assert str(listen_failure("", 80, refused)) == "cannot listen on *:80: address already in use"
