"""The cluster's network namespace and the two relays that join it to the control plane on loopback.

``python -m lyra.localcluster.realnodes.network CONFIG.json`` is one long-running process of the local cluster. It
creates a network namespace of its own (``unshare(CLONE_NEWNET)``) and holds it: the real nodes' kubelets and
containerds are started inside it (``nsenter --net=/proc/<pid>/ns/net``), so node, pod and Service addresses exist
only there, and the namespace disappears with the last process in it. Nothing is added to the machine's own
namespace. Inside, it puts every node address and the ``kubernetes`` Service address on its loopback interface and turns
on forwarding (for pod to pod traffic between the nodes' bridges).

The control plane stays on 127.0.0.1 in the machine's namespace; two relays cross over, each using sockets created
in the namespace that side lives in (a socket keeps the namespace it was created in):

* in-cluster -> API server: a TCP listener on the ``kubernetes`` Service address (10.96.0.1:443) inside the
  namespace forwards to the API server on loopback. Kubelets and pods (``KUBERNETES_SERVICE_HOST``) use it; the API
  server's certificate names that address.
* API server -> nodes and pods (logs, exec, proxy): an HTTP CONNECT proxy on a Unix socket, named to the API server
  as its ``cluster`` egress (the way konnectivity does it). Targets on 127.0.0.0/8 are dialled in the machine's
  namespace (webhooks served on loopback), every other one inside the cluster's.

It also serves the cluster's other Services and its DNS (no kube-proxy, no CoreDNS here): see
:mod:`lyra.localcluster.realnodes.services`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import ipaddress
import json
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lyra.child_processes import run_to_end
from lyra.localcluster.realnodes import dns, services

CLONE_NEWNET = 0x40000000
SERVICE_PORT = 443
_CONNECT_HEADER_LIMIT = 8192
_BUFFER = 64 * 1024


@dataclass(frozen=True)
class NetworkConfig:
    """What the network process sets up; written as JSON by the cluster, read by the process."""

    api_server_port: int
    service_ip: str
    node_ips: tuple[str, ...]
    egress_socket: Path
    ready_file: Path
    #: The cluster's CA and an admin token, to list Services and EndpointSlices (the file is the owner's only).
    ca_cert: Path
    token: str
    dns_ip: str = dns.DNS_IP
    cluster_domain: str = dns.CLUSTER_DOMAIN

    def to_json(self) -> dict[str, object]:
        return {
            "api_server_port": self.api_server_port,
            "service_ip": self.service_ip,
            "node_ips": list(self.node_ips),
            "egress_socket": str(self.egress_socket),
            "ready_file": str(self.ready_file),
            "ca_cert": str(self.ca_cert),
            "token": self.token,
            "dns_ip": self.dns_ip,
            "cluster_domain": self.cluster_domain,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> NetworkConfig:
        port, service_ip, node_ips = data["api_server_port"], data["service_ip"], data["node_ips"]
        if not (isinstance(port, int) and isinstance(service_ip, str) and isinstance(node_ips, list)):
            raise ValueError("malformed network configuration")
        return cls(
            api_server_port=port,
            service_ip=service_ip,
            node_ips=tuple(str(ip) for ip in node_ips),
            egress_socket=Path(str(data["egress_socket"])),
            ready_file=Path(str(data["ready_file"])),
            ca_cert=Path(str(data["ca_cert"])),
            token=str(data["token"]),
            dns_ip=str(data.get("dns_ip", dns.DNS_IP)),
            cluster_domain=str(data.get("cluster_domain", dns.CLUSTER_DOMAIN)),
        )


def namespace_path(pid: int) -> str:
    """The network namespace held by the network process ``pid``, for ``nsenter --net=``."""
    return f"/proc/{pid}/ns/net"


def egress_configuration(egress_socket: Path) -> dict[str, object]:
    """The API server's EgressSelectorConfiguration: traffic to nodes, pods and Services goes through the proxy."""
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {"proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(egress_socket)}}},
            }
        ],
    }


class _Namespaces:
    """The machine's and the cluster's network namespace. The main thread moves into the cluster's (so
    ``/proc/<pid>/ns/net`` names it for ``nsenter``) and never leaves; sockets in the machine's namespace are made
    by one worker thread that entered it once."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.host = os.open("/proc/self/ns/net", os.O_RDONLY)
        if self._libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}")
        self.host_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, initializer=self._enter_host)

    def _enter_host(self) -> None:
        if self._libc.setns(self.host, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns: {os.strerror(ctypes.get_errno())}")


def _ip(*arguments: str) -> None:
    completed = run_to_end(["ip", *arguments], capture_output=True, text=True, check=False, timeout=30)
    if completed.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(arguments)}` failed: {completed.stderr.strip()}")


def configure_namespace(config: NetworkConfig) -> None:
    """Loopback up with the node and Service addresses on it (the namespace's own; some kernels here have no dummy
    interfaces), forwarding on (this namespace only)."""
    _ip("link", "set", "lo", "up")
    for address in (*config.node_ips, config.service_ip, config.dns_ip):
        _ip("addr", "add", f"{address}/32", "dev", "lo")
    # /proc/sys/net is the opener's network namespace: this changes the cluster's, never the machine's.
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n", encoding="ascii")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_BUFFER):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _splice(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    target: socket.socket,
) -> None:
    try:
        target_reader, target_writer = await asyncio.open_connection(sock=target)
    except OSError:
        target.close()
        client_writer.close()
        return
    try:
        await asyncio.gather(_pipe(client_reader, target_writer), _pipe(target_reader, client_writer))
    finally:
        for writer in (client_writer, target_writer):
            writer.close()


class Relays:
    def __init__(self, namespaces: _Namespaces, config: NetworkConfig) -> None:
        self.namespaces = namespaces
        self.config = config

    async def _connect(self, host: str, port: int) -> socket.socket:
        """A connected socket to ``host:port``: in the machine's namespace for loopback, else in the cluster's."""
        address = ipaddress.ip_address(host)
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        if address.is_loopback:
            loop = asyncio.get_running_loop()
            sock = await loop.run_in_executor(self.namespaces.host_thread, socket.socket, family, socket.SOCK_STREAM)
        else:
            sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (host, port)), timeout=10)
        except BaseException:
            sock.close()
            raise
        return sock

    async def connect_in_cluster(self, host: str, port: int) -> socket.socket:
        """A connected socket to an endpoint inside the cluster's namespace (never loopback)."""
        if ipaddress.ip_address(host).is_loopback:
            raise OSError(f"{host} is not an address in the cluster")
        return await self._connect(host, port)

    async def to_api_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target = await self._connect("127.0.0.1", self.config.api_server_port)
        except (OSError, TimeoutError):
            writer.close()
            return
        await _splice(reader, writer, target)

    async def connect_proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            header = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        request_line = header.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        target = _parse_connect(parts)
        if target is None:
            writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            writer.close()
            return
        try:
            sock = await self._connect(*target)
        except (OSError, TimeoutError, ValueError) as error:
            writer.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{error}".encode())
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await _splice(reader, writer, sock)


def _parse_connect(parts: Sequence[str]) -> tuple[str, int] | None:
    """``CONNECT host:port HTTP/1.1`` -> (host, port) for a literal IP address, else None."""
    if len(parts) != 3 or parts[0] != "CONNECT":
        return None
    host, _, port = parts[1].rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        return None
    return (host, number) if 0 < number < 65536 else None


async def _follow_services(namespaces: _Namespaces, config: NetworkConfig, proxy: services.ServiceProxy) -> None:
    """List Services and EndpointSlices every POLL_SECONDS (in the machine's namespace, where the API server is) and
    apply the routes; a failed listing keeps the last routes and is reported once until one succeeds again."""
    access = services.ApiAccess(config.api_server_port, config.ca_cert, config.token)
    relayed = frozenset({config.service_ip})
    loop = asyncio.get_running_loop()
    failing = False
    while True:
        try:
            routes = await loop.run_in_executor(namespaces.host_thread, access.routes, config.cluster_domain, relayed)
        except (OSError, ValueError, KeyError, TypeError) as error:
            if not failing:
                print(f"cannot list Services and EndpointSlices (retrying): {error}", file=sys.stderr)
                failing = True
        else:
            failing = False
            await proxy.apply(routes)
        await asyncio.sleep(services.POLL_SECONDS)


async def serve(config: NetworkConfig) -> None:
    namespaces = _Namespaces()
    configure_namespace(config)
    relays = Relays(namespaces, config)
    api = await asyncio.start_server(relays.to_api_server, config.service_ip, SERVICE_PORT)
    proxy = services.ServiceProxy(relays.connect_in_cluster, _splice, frozenset({config.service_ip, config.dns_ip}))
    dns_udp, dns_tcp = await proxy.serve_dns(config.dns_ip)
    follower = asyncio.create_task(_follow_services(namespaces, config, proxy))
    config.egress_socket.unlink(missing_ok=True)
    egress = await asyncio.start_unix_server(
        relays.connect_proxy, path=str(config.egress_socket), limit=_CONNECT_HEADER_LIMIT
    )
    config.egress_socket.chmod(0o600)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    config.ready_file.write_text(f"{os.getpid()}\n", encoding="ascii")
    print(
        f"network namespace ready: kubernetes Service {config.service_ip}:{SERVICE_PORT}, "
        f"egress {config.egress_socket}, DNS {config.dns_ip}:53 ({config.cluster_domain})"
    )
    sys.stdout.flush()
    async with api, egress, dns_tcp:
        await stop.wait()
    follower.cancel()
    dns_udp.close()
    await proxy.close()
    config.egress_socket.unlink(missing_ok=True)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m lyra.localcluster.realnodes.network CONFIG.json", file=sys.stderr)
        return 2
    try:
        config = NetworkConfig.from_json(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError) as error:
        print(f"cannot read the network configuration {argv[0]}: {error}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config))
    except (OSError, RuntimeError) as error:
        print(f"the cluster network failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
