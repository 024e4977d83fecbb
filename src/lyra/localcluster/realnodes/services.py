"""ClusterIP Services and cluster DNS for the real nodes, served by the network process inside the cluster's namespace.

The local cluster has no kube-proxy and no CoreDNS. The network process lists Services and EndpointSlices every
:data:`POLL_SECONDS` (with the cluster's admin credentials, on loopback) and turns them into :class:`Routes`:

* for each TCP port of a Service with a ClusterIP and at least one ready endpoint, a listener on ``ClusterIP:port``
  (the address added to the namespace's loopback, like the ``kubernetes`` Service's) that relays each connection to
  a ready endpoint, round robin, trying the next one when a connection is refused (kube-proxy's old userspace
  mode). Pods reach it through their bridge's gateway: every node's bridge is in this one namespace;
* names for the DNS server (:mod:`lyra.localcluster.realnodes.dns`) on :data:`~lyra.localcluster.realnodes.dns.DNS_IP`
  port 53, UDP and TCP: ``<service>.<namespace>.svc.<domain>`` -> the ClusterIP, or a headless Service's ready
  endpoint addresses.

:func:`routes_from` is pure (unit-tested); :class:`ServiceProxy` applies routes to sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import struct
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lyra.child_processes import run_to_end
from lyra.localcluster.realnodes import dns

POLL_SECONDS = 1.0
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_TCP_DNS_TIMEOUT = 10.0

Backend = tuple[str, int]
Listener = tuple[str, int]


@dataclass(frozen=True)
class Routes:
    """What the proxy listens on and the DNS answers, from one listing of Services and EndpointSlices."""

    listeners: Mapping[Listener, tuple[Backend, ...]] = field(default_factory=dict)
    names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def lookup(self, name: str) -> tuple[str, ...] | None:
        return self.names.get(name.lower().rstrip("."))


def _ready_endpoints(slices: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[str, list[Mapping[str, Any]]]]]:
    """Per ``namespace/service``: each IPv4 slice's ready addresses with the slice's ports."""
    found: dict[str, list[tuple[str, list[Mapping[str, Any]]]]] = {}
    for item in slices:
        metadata = item.get("metadata") or {}
        service = (metadata.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not service or item.get("addressType") != "IPv4":
            continue
        ports = [port for port in item.get("ports") or [] if (port.get("protocol") or "TCP") == "TCP"]
        key = f"{metadata.get('namespace')}/{service}"
        for endpoint in item.get("endpoints") or []:
            # An absent ready condition means ready (the EndpointSlice API's rule).
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                found.setdefault(key, []).append((str(address), ports))
    return found


def routes_from(
    services: Sequence[Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    *,
    cluster_domain: str = dns.CLUSTER_DOMAIN,
    relayed: frozenset[str] = frozenset(),
) -> Routes:
    """The routes of a listing. ``relayed`` are ClusterIPs served otherwise (the ``kubernetes`` Service's): named in
    the DNS, no listener."""
    endpoints = _ready_endpoints(slices)
    listeners: dict[Listener, tuple[Backend, ...]] = {}
    names: dict[str, tuple[str, ...]] = {}
    for service in services:
        metadata, spec = service.get("metadata") or {}, service.get("spec") or {}
        name, namespace = metadata.get("name"), metadata.get("namespace")
        if not name or not namespace or spec.get("type") == "ExternalName":
            continue
        key = f"{namespace}/{name}"
        fqdn = f"{name}.{namespace}.svc.{cluster_domain}".lower()
        cluster_ip = spec.get("clusterIP")
        ready = endpoints.get(key, [])
        if cluster_ip in (None, "", "None"):
            addresses = tuple(dict.fromkeys(address for address, _ports in ready))
            names[fqdn] = addresses
            continue
        names[fqdn] = (str(cluster_ip),)
        if cluster_ip in relayed:
            continue
        for port in spec.get("ports") or []:
            if (port.get("protocol") or "TCP") != "TCP":
                continue
            backends = tuple(
                (address, int(target["port"]))
                for address, ports in ready
                for target in ports
                if (target.get("name") or "") == (port.get("name") or "") and target.get("port")
            )
            if backends:
                listeners[(str(cluster_ip), int(port["port"]))] = backends
    return Routes(listeners, names)


def rotation(backends: Sequence[Backend], turn: int) -> list[Backend]:
    """The order in which connection ``turn`` tries the backends: round robin, then the others in turn."""
    if not backends:
        return []
    start = turn % len(backends)
    return [*backends[start:], *backends[:start]]


Connect = Callable[[str, int], Awaitable[Any]]
Splice = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Any], Awaitable[None]]


class ServiceProxy:
    """Listeners for the routes' ClusterIP ports and the DNS server, kept in step with each new :class:`Routes`.
    Runs in the cluster's namespace; ``connect`` dials an endpoint there, ``splice`` relays a connection."""

    def __init__(self, connect: Connect, splice: Splice, fixed_addresses: frozenset[str]) -> None:
        self.routes = Routes()
        self._connect = connect
        self._splice = splice
        self._fixed = fixed_addresses
        self._servers: dict[Listener, asyncio.Server] = {}
        self._addresses: set[str] = set()
        self._turns: dict[Listener, int] = {}

    def _address(self, verb: str, address: str) -> None:
        completed = run_to_end(
            ["ip", "addr", verb, f"{address}/32", "dev", "lo"], capture_output=True, text=True, check=False, timeout=30
        )
        if completed.returncode != 0 and "File exists" not in completed.stderr:
            raise RuntimeError(f"`ip addr {verb} {address}/32 dev lo` failed: {completed.stderr.strip()}")

    async def apply(self, routes: Routes) -> None:
        self.routes = routes
        for key in [key for key in self._servers if key not in routes.listeners]:
            server = self._servers.pop(key)
            server.close()
            self._turns.pop(key, None)
        for key in routes.listeners:
            if key in self._servers:
                continue
            address, port = key
            if address not in self._addresses and address not in self._fixed:
                self._address("add", address)
                self._addresses.add(address)
            try:
                self._servers[key] = await asyncio.start_server(functools.partial(self._relay, key), address, port)
            except OSError as error:
                print(f"cannot serve the Service address {address}:{port}: {error}", file=sys.stderr)
        in_use = {address for address, _port in self._servers}
        for address in sorted(self._addresses - in_use):
            self._address("del", address)
            self._addresses.discard(address)

    async def _relay(self, key: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        for host, port in rotation(self.routes.listeners.get(key, ()), turn):
            try:
                target = await self._connect(host, port)
            except (OSError, TimeoutError):
                continue
            await self._splice(reader, writer, target)
            return
        writer.close()

    async def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()
        for address in sorted(self._addresses):
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                self._address("del", address)
        self._addresses.clear()

    # DNS

    def _lookup(self, name: str) -> tuple[str, ...] | None:
        return self.routes.lookup(name)

    async def serve_dns(self, address: str) -> tuple[asyncio.DatagramTransport, asyncio.Server]:
        loop = asyncio.get_running_loop()
        lookup = self._lookup

        class _Udp(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

            def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
                reply = dns.answer(data, lookup, limit=dns.UDP_LIMIT)
                if reply is not None:
                    self.transport.sendto(reply, addr)

        transport, _protocol = await loop.create_datagram_endpoint(_Udp, local_addr=(address, 53))
        tcp = await asyncio.start_server(self._dns_tcp, address, 53)
        return transport, tcp

    async def _dns_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                async with asyncio.timeout(_TCP_DNS_TIMEOUT):
                    (size,) = struct.unpack("!H", await reader.readexactly(2))
                    packet = await reader.readexactly(size)
                reply = dns.answer(packet, self._lookup, limit=None)
                if reply is None:
                    break
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError, OSError):
            pass
        finally:
            writer.close()


@dataclass(frozen=True)
class ApiAccess:
    """How the network process lists Services: the API server on loopback, the cluster's CA and an admin token."""

    api_server_port: int
    ca_cert: Path
    token: str

    def list_items(self, path: str) -> list[dict[str, Any]]:
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.api_server_port}{path}", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            document = json.loads(response.read())
        items = document.get("items") if isinstance(document, dict) else None
        if not isinstance(items, list):
            raise ValueError(f"{path}: no items in the answer")
        return items

    def routes(self, cluster_domain: str, relayed: frozenset[str]) -> Routes:
        services = self.list_items("/api/v1/services")
        slices = self.list_items("/apis/discovery.k8s.io/v1/endpointslices")
        return routes_from(services, slices, cluster_domain=cluster_domain, relayed=relayed)
