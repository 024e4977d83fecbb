"""Decisions byte-identical to the golden record (:mod:`.allocation_golden`): every recorded input's plan, every
field of it (floats exactly), has the digest recorded before the allocation search was rebuilt."""

from __future__ import annotations

from typing import Any

import pytest

from .allocation_golden import canonical_plan, decide, digest, load_cases, load_digests

CASES = load_cases()
DIGESTS = load_digests()
SMALL = [case for case in CASES if not case["name"].startswith(("scale-", "core-bench-"))]
LARGE = [case for case in CASES if case["name"].startswith(("scale-", "core-bench-"))]


def test_the_record_is_whole() -> None:
    assert sorted(DIGESTS) == sorted(case["name"] for case in CASES)
    assert len(SMALL) >= 600
    assert {case["name"] for case in LARGE} >= {"scale-500-nodes", "scale-1000-nodes", "scale-5000-nodes"}


def test_small_decisions_are_the_recorded_ones() -> None:
    differing = [case["name"] for case in SMALL if digest(decide(case)) != DIGESTS[case["name"]]]
    assert not differing, f"{len(differing)} of {len(SMALL)} decisions differ from the record: {differing[:20]}"


@pytest.mark.parametrize("case", LARGE, ids=[case["name"] for case in LARGE])
def test_large_decisions_are_the_recorded_ones(case: dict[str, Any]) -> None:
    plan = decide(case)
    assert digest(plan) == DIGESTS[case["name"]], canonical_plan(plan)[:2000]
