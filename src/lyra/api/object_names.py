"""Kubernetes' rules for names, spelled once: a DNS label (RFC 1123: a namespace, a node group's name) and a DNS
subdomain (an object's name, a scheduler's name, a label key's prefix), as the API server validates them.

A name the API server would refuse must be refused where it enters Lyra (a flag, a profile), before it is written
into an object that every later call fails on.
"""

from __future__ import annotations

import re
from typing import Final

#: The longest DNS label, and the longest DNS subdomain.
MAX_LABEL: Final = 63
MAX_SUBDOMAIN: Final = 253

#: Lower-case letters, digits and inner hyphens.
DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: DNS labels joined by dots.
DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_dns_label(text: str) -> bool:
    return len(text) <= MAX_LABEL and DNS_LABEL.fullmatch(text) is not None


def is_dns_subdomain(text: str) -> bool:
    return len(text) <= MAX_SUBDOMAIN and DNS_SUBDOMAIN.fullmatch(text) is not None


def dns_label_problem(text: str) -> str | None:
    """Why ``text`` is not a DNS label, or ``None``."""
    if is_dns_label(text):
        return None
    return f"expected a DNS label (at most {MAX_LABEL} lower-case letters, digits and inner '-'), got {text!r}"


def dns_subdomain_problem(text: str) -> str | None:
    """Why ``text`` is not a DNS subdomain, or ``None``."""
    if is_dns_subdomain(text):
        return None
    return (
        f"expected a DNS subdomain (at most {MAX_SUBDOMAIN} lower-case letters, digits, inner '-' and '.'), "
        f"got {text!r}"
    )
