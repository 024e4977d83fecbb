"""The real nodes' cluster DNS: DNS messages (RFC 1035) read and answered from a table of names, no I/O.

Pods on real nodes get ``nameserver`` :data:`DNS_IP` and the search path ``<ns>.svc.<domain> svc.<domain> <domain>``
from their kubelet, so every name a pod looks up reaches this server in full. :func:`answer` answers one query: A
records for a known name (a Service's ClusterIP, or a headless Service's ready endpoints), an empty answer (NODATA)
for other types of a known name, NXDOMAIN for any other name. A packet that is not one well-formed query with one
question gets FORMERR when its header can be read, and no answer at all when it cannot (or when it is a response).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
TTL_SECONDS = 5
TYPE_A = 1
CLASS_IN = 1
RCODE_OK = 0
RCODE_FORMERR = 1
RCODE_NXDOMAIN = 3
RCODE_NOTIMP = 4
_HEADER = struct.Struct("!HHHHHH")
_MAX_NAME = 255
_MAX_LABEL = 63
#: The largest UDP answer sent without EDNS (RFC 1035 4.2.1); more addresses are cut and TC set.
UDP_LIMIT = 512

Lookup = Callable[[str], Sequence[str] | None]


class MalformedQueryError(ValueError):
    """The packet is not a query this server can read."""


@dataclass(frozen=True)
class Question:
    ident: int
    flags: int
    name: str
    qtype: int
    qclass: int
    wire: bytes  # the question section as received, echoed in the answer


def parse_query(packet: bytes) -> Question:
    """The one question of a standard query; :class:`MalformedQueryError` for anything else."""
    if len(packet) < _HEADER.size:
        raise MalformedQueryError("shorter than a DNS header")
    ident, flags, qdcount, _ancount, _nscount, _arcount = _HEADER.unpack_from(packet)
    if flags & 0x8000:
        raise MalformedQueryError("a response, not a query")
    if (flags >> 11) & 0xF != 0:
        raise MalformedQueryError("not a standard query")
    if qdcount != 1:
        raise MalformedQueryError(f"{qdcount} questions; exactly one is answered")
    labels: list[str] = []
    offset, length = _HEADER.size, 0
    while True:
        if offset >= len(packet):
            raise MalformedQueryError("the name runs past the end of the packet")
        size = packet[offset]
        offset += 1
        if size == 0:
            break
        if size > _MAX_LABEL:
            # Compression pointers (0xC0) never appear in a lone question; other high bits are reserved.
            raise MalformedQueryError("a label longer than 63 bytes or a compression pointer in the question")
        label = packet[offset : offset + size]
        if len(label) != size:
            raise MalformedQueryError("the name runs past the end of the packet")
        length += size + 1
        if length > _MAX_NAME:
            raise MalformedQueryError("a name longer than 255 bytes")
        labels.append(label.decode("latin-1").lower())
        offset += size
    if offset + 4 > len(packet):
        raise MalformedQueryError("the question has no type and class")
    qtype, qclass = struct.unpack_from("!HH", packet, offset)
    return Question(ident, flags, ".".join(labels), qtype, qclass, packet[_HEADER.size : offset + 4])


def _reply(question: Question, rcode: int, addresses: Sequence[str], limit: int | None) -> bytes:
    records = b""
    count = 0
    truncated = False
    for address in addresses:
        # The name is a pointer to the question's (offset 12); type A, class IN, TTL, 4 bytes of address.
        record = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_SECONDS, 4) + ipaddress.IPv4Address(address).packed
        if limit is not None and _HEADER.size + len(question.wire) + len(records) + len(record) > limit:
            truncated = True
            break
        records += record
        count += 1
    # QR, the query's opcode (0) and RD, AA (the server owns the zone), RA off, TC if cut.
    flags = 0x8000 | 0x0400 | (question.flags & 0x0100) | (0x0200 if truncated else 0) | rcode
    return _HEADER.pack(question.ident, flags, 1, count, 0, 0) + question.wire + records


def _error(packet: bytes, rcode: int) -> bytes | None:
    if len(packet) < _HEADER.size:
        return None
    ident, flags = struct.unpack_from("!HH", packet)
    if flags & 0x8000:
        return None
    return _HEADER.pack(ident, 0x8000 | (flags & 0x7900) | rcode, 0, 0, 0, 0)


def answer(packet: bytes, lookup: Lookup, *, limit: int | None = UDP_LIMIT) -> bytes | None:
    """The reply to ``packet``, or None when nothing should be sent (no readable header, or a response).
    ``lookup(name)`` gives a name's IPv4 addresses, or None when the name does not exist. ``limit`` bounds a UDP
    reply (None over TCP)."""
    try:
        question = parse_query(packet)
    except MalformedQueryError:
        return _error(packet, RCODE_FORMERR)
    if question.qclass != CLASS_IN:
        return _reply(question, RCODE_NOTIMP, (), limit)
    addresses = lookup(question.name)
    if addresses is None:
        return _reply(question, RCODE_NXDOMAIN, (), limit)
    return _reply(question, RCODE_OK, addresses if question.qtype == TYPE_A else (), limit)


def encode_query(ident: int, name: str, qtype: int = TYPE_A) -> bytes:
    """A query for ``name`` (for tests and probes)."""
    wire = b"".join(bytes([len(label)]) + label.encode("ascii") for label in name.strip(".").split(".") if label)
    return _HEADER.pack(ident, 0x0100, 1, 0, 0, 0) + wire + b"\x00" + struct.pack("!HH", qtype, CLASS_IN)


def decode_addresses(reply: bytes) -> tuple[int, list[str]]:
    """(rcode, A addresses) of a reply of :func:`answer` (answers whose names are pointers, as it writes them)."""
    _ident, flags, _qd, ancount, _ns, _ar = _HEADER.unpack_from(reply)
    offset = _HEADER.size
    while reply[offset] != 0:
        offset += reply[offset] + 1
    offset += 5
    addresses = []
    for _ in range(ancount):
        _pointer, rtype, _class, _ttl, size = struct.unpack_from("!HHHIH", reply, offset)
        offset += 12
        if rtype == TYPE_A and size == 4:
            addresses.append(str(ipaddress.IPv4Address(reply[offset : offset + 4])))
        offset += size
    return flags & 0xF, addresses
