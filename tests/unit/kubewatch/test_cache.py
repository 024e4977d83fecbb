"""The list-and-watch cache against an in-memory API server: paginated list, events in order, resuming after the
server ends a stream or refuses one, re-listing only on 410, bookmarks, and waiting for a version."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lyra.kubewatch import Kind, WatchCache
from lyra.kubewatch.cache import decoded
from lyra.localcluster.waiting import wait_for
from tests.unit.kubewatch.fake_server import FakeServer

PLAIN = Kind("things", lambda api: api)
TIMEOUT_S = 10.0


def thing(name: str, value: int = 0, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"value": value}}


class Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple[str, int | None]] = []

    def __call__(self, key: str, obj: dict[str, Any] | None) -> None:
        self.changes.append((key, None if obj is None else obj["spec"]["value"]))


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def cache(server: FakeServer, recorder: Recorder) -> Iterator[WatchCache]:
    for i in range(7):
        server.put(thing(f"t{i}", i))
    watched = WatchCache(PLAIN, server, on_change=recorder, page_size=3, initial_backoff_s=0.01)
    watched.start()
    assert watched.wait_synced(TIMEOUT_S)
    yield watched
    watched.stop()


def values(cache: WatchCache) -> dict[str, int]:
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["spec"]["value"] for o in cache.snapshot()}


def settled(cache: WatchCache, server: FakeServer) -> bool:
    expected = {key: obj["spec"]["value"] for key, obj in server.objects.items()}
    return values(cache) == expected and cache.version == str(server.version)


def test_the_first_list_is_paginated_and_fills_the_cache(cache: WatchCache, server: FakeServer) -> None:
    assert values(cache) == {f"ns/t{i}": i for i in range(7)}
    assert server.pages == 3  # 3 + 3 + 1
    assert cache.lists == 1
    assert cache.version == "7"


def test_events_update_the_cache_in_order_and_report_each_change(
    cache: WatchCache, server: FakeServer, recorder: Recorder
) -> None:
    recorder.changes.clear()
    server.put(thing("t1", 10))
    server.delete("ns/t2")
    server.put(thing("new", 5))
    wait_for(lambda: settled(cache, server), TIMEOUT_S, "the cache to follow the events")
    assert recorder.changes == [("ns/t1", 10), ("ns/t2", None), ("ns/new", 5)]
    assert cache.lists == 1


def test_an_event_that_changes_nothing_kept_but_the_version_is_stored_and_not_reported(
    cache: WatchCache, server: FakeServer, recorder: Recorder
) -> None:
    recorder.changes.clear()
    heartbeat = server.put(thing("t1", 1))  # the same fields, a new resourceVersion
    server.put(thing("t3", 30))
    wait_for(lambda: settled(cache, server), TIMEOUT_S, "the cache to follow the events")
    assert recorder.changes == [("ns/t3", 30)]
    stored = next(o for o in cache.snapshot() if o["metadata"]["name"] == "t1")
    assert stored["metadata"]["resourceVersion"] == heartbeat  # what a conditional write must carry


def test_a_stream_the_server_ends_is_resumed_from_the_last_version_without_listing(
    cache: WatchCache, server: FakeServer
) -> None:
    server.put(thing("t0", 100))
    wait_for(lambda: settled(cache, server), TIMEOUT_S, "the first event")
    server.end_streams()
    wait_for(lambda: len(server.watches) >= 2, TIMEOUT_S, "a second watch")
    server.put(thing("t3", 300))
    wait_for(lambda: settled(cache, server), TIMEOUT_S, "the event after the resume")
    assert server.watches[:2] == ["7", "8"]
    assert cache.lists == 1


def test_a_refused_watch_is_retried_from_the_same_version_without_listing(
    cache: WatchCache, server: FakeServer
) -> None:
    server.refusing = 500
    server.end_streams()
    wait_for(lambda: cache.errors >= 2, TIMEOUT_S, "refused watches")
    server.refusing = None
    server.put(thing("t4", 400))
    wait_for(lambda: settled(cache, server), TIMEOUT_S, "the event after the retries")
    assert set(server.watches) == {"7"}
    assert cache.lists == 1


def test_410_gone_lists_again_and_reports_what_changed_meanwhile(
    cache: WatchCache, server: FakeServer, recorder: Recorder
) -> None:
    server.refusing = 503  # watches are refused: the changes below happen while the cache is away
    server.end_streams()
    wait_for(lambda: cache.errors >= 1, TIMEOUT_S, "a refused watch")
    recorder.changes.clear()
    server.delete("ns/t5")
    server.put(thing("t6", 60))
    server.compact()  # and the server forgets them: the resumed watch gets 410
    server.refusing = None
    wait_for(lambda: cache.lists == 2 and settled(cache, server), TIMEOUT_S, "a second list")
    assert ("ns/t5", None) in recorder.changes
    assert ("ns/t6", 60) in recorder.changes
    assert ("ns/t0", 0) not in recorder.changes  # unchanged objects are not reported again


def test_a_bookmark_moves_the_version_on_and_a_waiter_sees_it(cache: WatchCache, server: FakeServer) -> None:
    version = server.bookmark()
    assert cache.wait_for(version, TIMEOUT_S)
    assert values(cache) == {f"ns/t{i}": i for i in range(7)}


def test_waiting_for_a_version_not_yet_seen_times_out(cache: WatchCache) -> None:
    assert not cache.wait_for("1000", 0.05)
    assert cache.wait_for("3", 0.05)  # an older version was seen long ago
    assert cache.wait_for("", 0.05)


def test_resume_on_request_reopens_a_stalled_watch_from_its_last_version_without_listing(
    cache: WatchCache, server: FakeServer
) -> None:
    server.stall_streams()  # the stream under way hangs: the change below never comes through it
    version = server.put(thing("t1", 11))
    assert not cache.wait_for(version, 0.2)
    opened = len(server.watches)
    cache.resume()
    assert cache.wait_for(version, TIMEOUT_S)
    assert server.watches[opened:] == [str(int(version) - 1)]  # from the last version seen, before the change
    wait_for(lambda: settled(cache, server), TIMEOUT_S, "the change, through the new stream")
    assert cache.lists == 1


def test_objects_the_kind_does_not_keep_are_dropped_and_forgotten_when_they_stop_qualifying(
    server: FakeServer, recorder: Recorder
) -> None:
    big = Kind("big", lambda api: api, keep=lambda raw: raw["spec"]["value"] >= 10)
    server.put(thing("small", 1))
    server.put(thing("large", 20))
    watched = WatchCache(big, server, on_change=recorder)
    watched.start()
    try:
        assert watched.wait_synced(TIMEOUT_S)
        assert values(watched) == {"ns/large": 20}
        recorder.changes.clear()
        version = server.put(thing("large", 2))  # no longer kept
        server.put(thing("small", 1))  # never kept: no change to report
        assert watched.wait_for(version, TIMEOUT_S)
        wait_for(lambda: watched.version == str(server.version), TIMEOUT_S, "the last event")
        assert values(watched) == {}
        assert recorder.changes == [("ns/large", None)]
    finally:
        watched.stop()


def test_streams_that_end_at_once_empty_are_reopened_after_a_growing_backoff(
    cache: WatchCache, server: FakeServer
) -> None:
    server.cutting = True
    server.end_streams()
    opened = len(server.watches)
    wait_for(lambda: len(server.watches) >= opened + 4, TIMEOUT_S, "four reopened streams")
    assert len(server.watches) - opened < 10  # the backoff doubles (0.01 s, 0.02 s ...): no tight loop
    server.cutting = False
    server.put(thing("t1", 1000))
    wait_for(lambda: settled(cache, server), TIMEOUT_S, "the event once streams stay open")
    assert cache.lists == 1


def test_events_decode_as_json_reads_them_integers_past_64_bits_included() -> None:
    event = {"type": "MODIFIED", "object": {**thing("t", 3), "status": {"big": 2**70, "ratio": 0.25, "ok": True}}}
    raw = json.dumps(event).encode()
    assert decoded(raw) == json.loads(raw) == event
    with pytest.raises(json.JSONDecodeError):
        decoded(b'{"type": "ADDED", "object": {')
