"""The real nodes' Service routes: listeners and DNS names from Services and EndpointSlices, and endpoint choice."""

from __future__ import annotations

from typing import Any

from lyra.localcluster.realnodes.services import rotation, routes_from


def service(name: str, namespace: str, cluster_ip: str, *ports: dict[str, Any], kind: str = "ClusterIP") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": kind, "clusterIP": cluster_ip, "ports": list(ports)},
    }


def endpoint_slice(
    service_name: str, namespace: str, endpoints: list[tuple[str, bool | None]], *ports: dict[str, Any]
) -> dict:
    return {
        "metadata": {"namespace": namespace, "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [address], "conditions": {} if ready is None else {"ready": ready}}
            for address, ready in endpoints
        ],
        "ports": list(ports),
    }


def test_a_cluster_ip_port_routes_to_its_ready_endpoints_target_ports_by_port_name() -> None:
    services = [
        service(
            "lyra-extender",
            "lyra",
            "10.96.40.2",
            {"name": "https", "port": 8888, "protocol": "TCP", "targetPort": "https"},
            {"name": "metrics", "port": 9000, "protocol": "TCP"},
        )
    ]
    slices = [
        endpoint_slice(
            "lyra-extender",
            "lyra",
            [("10.244.0.4", True), ("10.244.1.6", None), ("10.244.1.7", False)],
            {"name": "https", "port": 8443, "protocol": "TCP"},
            {"name": "metrics", "port": 9100, "protocol": "TCP"},
        )
    ]
    routes = routes_from(services, slices)
    assert routes.listeners == {
        ("10.96.40.2", 8888): (("10.244.0.4", 8443), ("10.244.1.6", 8443)),
        ("10.96.40.2", 9000): (("10.244.0.4", 9100), ("10.244.1.6", 9100)),
    }
    assert routes.lookup("LYRA-EXTENDER.lyra.svc.cluster.local.") == ("10.96.40.2",)


def test_no_listener_without_ready_endpoints_but_the_name_exists() -> None:
    services = [service("idle", "ns", "10.96.3.3", {"name": "", "port": 80})]
    slices = [endpoint_slice("idle", "ns", [("10.244.0.9", False)], {"name": "", "port": 8080})]
    routes = routes_from(services, slices)
    assert routes.listeners == {}
    assert routes.lookup("idle.ns.svc.cluster.local") == ("10.96.3.3",)


def test_headless_services_name_their_ready_endpoints_and_get_no_listener() -> None:
    services = [service("workers", "jobs", "None", {"port": 80})]
    slices = [
        endpoint_slice("workers", "jobs", [("10.244.0.5", True), ("10.244.1.5", False)], {"port": 80}),
        endpoint_slice("workers", "jobs", [("10.244.1.8", True)], {"port": 80}),
    ]
    routes = routes_from(services, slices)
    assert routes.listeners == {}
    assert routes.lookup("workers.jobs.svc.cluster.local") == ("10.244.0.5", "10.244.1.8")


def test_relayed_addresses_udp_ports_external_names_and_other_namespaces_are_kept_apart() -> None:
    services = [
        service("kubernetes", "default", "10.96.0.1", {"name": "https", "port": 443}),
        service("dns", "ns", "10.96.5.5", {"name": "dns", "port": 53, "protocol": "UDP"}),
        service("outside", "ns", "", {"port": 80}, kind="ExternalName"),
        service("web", "a", "10.96.7.7", {"port": 80}),
    ]
    slices = [
        endpoint_slice("kubernetes", "default", [("10.201.0.1", True)], {"name": "https", "port": 6443}),
        endpoint_slice("dns", "ns", [("10.244.0.2", True)], {"name": "dns", "port": 53, "protocol": "UDP"}),
        endpoint_slice("web", "b", [("10.244.0.3", True)], {"port": 8080}),  # same name, another namespace
    ]
    routes = routes_from(services, slices, relayed=frozenset({"10.96.0.1"}))
    assert routes.listeners == {}
    assert routes.lookup("kubernetes.default.svc.cluster.local") == ("10.96.0.1",)
    assert routes.lookup("outside.ns.svc.cluster.local") is None
    assert routes.lookup("web.b.svc.cluster.local") is None


def test_rotation_is_round_robin_then_falls_over_to_the_others() -> None:
    backends = [("10.244.0.4", 80), ("10.244.1.6", 80), ("10.244.1.7", 80)]
    assert [rotation(backends, turn)[0] for turn in range(4)] == [*backends, backends[0]]
    assert rotation(backends, 4) == [backends[1], backends[2], backends[0]]
    assert rotation([], 3) == []
