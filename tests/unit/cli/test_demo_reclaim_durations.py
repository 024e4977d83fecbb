"""The demo's reading of reclaim durations from Events, which a list returns in no set order."""

from __future__ import annotations

import pytest

from lyra.cli.demo_run import reclaim_durations


def test_a_returned_listed_before_its_own_reclaiming_in_the_same_second_ends_that_reclaim() -> None:
    pending: dict[str, float] = {}
    assert reclaim_durations(pending, [(720.0, "Returned", "t4-0"), (720.0, "Reclaiming", "t4-0")]) == [0.0]
    assert pending == {}
    # Hours later the server is lent and called back again: a reclaim of its own, not one left from before.
    assert reclaim_durations(pending, [(9000.0, "Reclaiming", "t4-0")]) == []
    assert reclaim_durations(pending, [(9720.0, "Returned", "t4-0")]) == [pytest.approx(720.0)]


def test_a_returned_with_no_reclaim_under_way_ends_none_and_servers_pair_apart() -> None:
    pending: dict[str, float] = {}
    batch = [(50.0, "Returned", "t4-1"), (100.0, "Reclaiming", "t4-2"), (100.0, "Reclaiming", "t4-3")]
    assert reclaim_durations(pending, batch) == []
    assert pending == {"t4-2": 100.0, "t4-3": 100.0}
    assert reclaim_durations(pending, [(580.0, "Returned", "t4-3"), (820.0, "Returned", "t4-2")]) == [480.0, 720.0]
