"""Free loopback ports: distinct, actually free, never on another interface."""

from __future__ import annotations

import socket

import pytest

from lyra.localcluster.ports import LOOPBACK, allocate_ports, is_listening


def test_allocated_ports_are_distinct_and_can_be_bound_on_loopback() -> None:
    ports = allocate_ports(6)

    assert len(set(ports)) == 6
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, port))


def test_is_listening_tells_a_listening_port_from_a_closed_one() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind((LOOPBACK, 0))
        server.listen()
        port = server.getsockname()[1]
        assert is_listening(port)
    assert not is_listening(port)


def test_zero_ports_is_an_empty_list() -> None:
    assert allocate_ports(0) == []


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.org"])
def test_non_loopback_hosts_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        allocate_ports(1, host=host)


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        allocate_ports(-1)
