"""The real nodes' cluster DNS: queries read, names answered, malformed packets refused safely."""

from __future__ import annotations

import struct

import pytest

from lyra.localcluster.realnodes import dns

NAMES = {
    "lyra-extender.lyra.svc.cluster.local": ("10.96.12.7",),
    "workers.jobs.svc.cluster.local": ("10.244.0.5", "10.244.1.9"),
    "empty.jobs.svc.cluster.local": (),
}


def lookup(name: str) -> tuple[str, ...] | None:
    return NAMES.get(name)


def test_a_query_for_a_service_gets_its_cluster_ip_authoritatively() -> None:
    reply = dns.answer(dns.encode_query(0x1234, "lyra-extender.lyra.svc.cluster.local"), lookup)
    assert reply is not None
    ident, flags = struct.unpack_from("!HH", reply)
    assert ident == 0x1234
    assert flags & 0x8000
    assert flags & 0x0400
    assert flags & 0x0100
    assert dns.decode_addresses(reply) == (dns.RCODE_OK, ["10.96.12.7"])


def test_names_are_case_insensitive_and_headless_services_give_every_ready_address() -> None:
    reply = dns.answer(dns.encode_query(1, "Workers.JOBS.svc.cluster.local"), lookup)
    assert reply is not None
    assert dns.decode_addresses(reply) == (dns.RCODE_OK, ["10.244.0.5", "10.244.1.9"])


@pytest.mark.parametrize(
    "name",
    [
        # What a pod's search path produces for `lyra-extender.lyra.svc` before the name that exists (ndots:5).
        "lyra-extender.lyra.svc.lyra.svc.cluster.local",
        "lyra-extender.lyra.svc.svc.cluster.local",
        "lyra-extender.lyra.svc",
        "example.com",
        "",
    ],
)
def test_unknown_names_get_nxdomain(name: str) -> None:
    reply = dns.answer(dns.encode_query(7, name), lookup)
    assert reply is not None
    assert dns.decode_addresses(reply) == (dns.RCODE_NXDOMAIN, [])


def test_other_types_of_a_known_name_get_an_empty_answer_not_nxdomain() -> None:
    aaaa = 28
    reply = dns.answer(dns.encode_query(9, "lyra-extender.lyra.svc.cluster.local", aaaa), lookup)
    assert reply is not None
    assert dns.decode_addresses(reply) == (dns.RCODE_OK, [])


def test_a_service_without_ready_endpoints_exists_with_no_address() -> None:
    reply = dns.answer(dns.encode_query(9, "empty.jobs.svc.cluster.local"), lookup)
    assert reply is not None
    assert dns.decode_addresses(reply) == (dns.RCODE_OK, [])


def test_a_udp_answer_too_large_is_cut_and_marked_truncated() -> None:
    many = {"big.ns.svc.cluster.local": tuple(f"10.244.{i // 250}.{i % 250 + 1}" for i in range(100))}
    reply = dns.answer(dns.encode_query(3, "big.ns.svc.cluster.local"), many.get, limit=dns.UDP_LIMIT)
    assert reply is not None
    assert len(reply) <= dns.UDP_LIMIT
    assert struct.unpack_from("!H", reply, 2)[0] & 0x0200
    over_tcp = dns.answer(dns.encode_query(3, "big.ns.svc.cluster.local"), many.get, limit=None)
    assert over_tcp is not None
    assert len(dns.decode_addresses(over_tcp)[1]) == 100


def _header(flags: int = 0x0100, qdcount: int = 1) -> bytes:
    return struct.pack("!HHHHHH", 0xBEEF, flags, qdcount, 0, 0, 0)


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        (_header(qdcount=0), "no question"),
        (_header(qdcount=2) + b"\x01a\x00\x00\x01\x00\x01" * 2, "two questions"),
        (_header(flags=0x0900) + b"\x01a\x00\x00\x01\x00\x01", "opcode 1 (inverse query)"),
        (_header() + b"\x05ab", "a label past the end"),
        (_header() + b"\x01a", "a name without its end"),
        (_header() + b"\x01a\x00\x00\x01", "no class"),
        (_header() + b"\xc0\x0c\x00\x01\x00\x01", "a compression pointer in the question"),
        (_header() + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01", "a 64-byte label"),
        (_header() + b"\x3f" + b"a" * 63 + (b"\x3f" + b"b" * 63) * 4 + b"\x00\x00\x01\x00\x01", "a 320-byte name"),
    ],
)
def test_malformed_queries_get_formerr(packet: bytes, reason: str) -> None:
    reply = dns.answer(packet, lookup)
    assert reply is not None, reason
    ident, flags, qdcount, ancount, _ns, _ar = struct.unpack("!HHHHHH", reply)
    assert (ident, flags & 0x8000, flags & 0xF, qdcount, ancount) == (0xBEEF, 0x8000, dns.RCODE_FORMERR, 0, 0), reason


@pytest.mark.parametrize(
    "packet",
    [b"", b"\x00" * 11, _header(flags=0x8180) + b"\x01a\x00\x00\x01\x00\x01"],
    ids=["empty", "short header", "a response"],
)
def test_packets_without_a_readable_query_header_get_no_answer(packet: bytes) -> None:
    assert dns.answer(packet, lookup) is None


def test_a_class_other_than_internet_is_not_implemented() -> None:
    query = dns.encode_query(5, "lyra-extender.lyra.svc.cluster.local")[:-2] + struct.pack("!H", 3)  # class CH
    reply = dns.answer(query, lookup)
    assert reply is not None
    assert struct.unpack_from("!H", reply, 2)[0] & 0xF == dns.RCODE_NOTIMP


def test_random_bytes_never_raise() -> None:
    import random

    generator = random.Random(26)
    for _ in range(5000):
        size = generator.randrange(0, 80)
        packet = bytes(generator.randrange(256) for _ in range(size))
        reply = dns.answer(packet, lookup)
        assert reply is None or len(reply) >= 12
