"""Kubernetes' name rules, checked on the cases the API server's own validation draws the line at."""

from __future__ import annotations

import pytest

from lyra.api.object_names import dns_label_problem, dns_subdomain_problem, is_dns_label, is_dns_subdomain


@pytest.mark.parametrize("name", ["a", "0", "lyra", "lyra-system", "a1-b2", "x" * 63])
def test_dns_labels(name: str) -> None:
    assert is_dns_label(name)
    assert dns_label_problem(name) is None


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a_b", "a.b", "a b", "x" * 64, "é"])
def test_not_dns_labels(name: str) -> None:
    assert not is_dns_label(name)
    assert dns_label_problem(name) == (
        f"expected a DNS label (at most 63 lower-case letters, digits and inner '-'), got {name!r}"
    )


@pytest.mark.parametrize("name", ["a", "lyra-scheduler", "scheduler.lyra.dev", "a.b-c.d", "x" * 253])
def test_dns_subdomains(name: str) -> None:
    assert is_dns_subdomain(name)
    assert dns_subdomain_problem(name) is None


@pytest.mark.parametrize("name", ["", ".a", "a.", "a..b", "-a.b", "a.-b", "A.b", "a_b", "x" * 254])
def test_not_dns_subdomains(name: str) -> None:
    assert not is_dns_subdomain(name)
    problem = dns_subdomain_problem(name)
    assert problem is not None
    assert problem.startswith("expected a DNS subdomain (at most 253 lower-case letters, digits, inner '-' and '.')")
