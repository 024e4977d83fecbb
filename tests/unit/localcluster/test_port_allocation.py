"""Free loopback ports: distinct, actually free, never on another interface."""

from __future__ import annotations

import socket

import pytest

from lyra.localcluster import ports
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


class _ScriptedSocket:
    """A socket whose port 0 binds to the next port of a script: the kernel offering a port again."""

    def __init__(self, script: list[int]) -> None:
        self.script = script
        self.port = 0

    def __enter__(self) -> _ScriptedSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def bind(self, address: tuple[str, int]) -> None:
        self.port = self.script.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return (LOOPBACK, self.port)


def test_a_port_handed_out_once_is_not_handed_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extender's port is chosen before the control plane starts; the control plane's own ports, chosen
    after the extender's probe socket closed, must not include it even when the kernel offers it again."""
    script = [40001, 40001, 40002, 40001, 40001, 40003]
    monkeypatch.setattr(ports, "_HANDED_OUT", set())
    monkeypatch.setattr(ports.socket, "socket", lambda *args: _ScriptedSocket(script))
    assert allocate_ports(1) == [40001]
    assert allocate_ports(1) == [40002]
    assert allocate_ports(1) == [40003]
    assert not script
