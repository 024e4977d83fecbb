"""A watch stream that a partition or a hung API server left open: the watch cache's source ends it once it has
carried nothing (no event, no bookmark) for ``WATCH_SILENCE_S``, as if the server had ended it, and the cache resumes
from the last version it saw; before, it waited for the watch's own timeout and a minute more (6 to 11 minutes, the
cache stale meanwhile). Real sockets in the test's process; the silence shortened.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from lyra.apiserver_requests import no_read_retries
from lyra.kubewatch import cache
from lyra.kubewatch.cache import ApiSource, WatchCache
from lyra.kubewatch.kinds import NODES
from lyra.localcluster.waiting import wait_for
from tests.behaving_server import behaving_server

SILENCE_S = 0.5
NODE = {"metadata": {"name": "gpu-0", "resourceVersion": "7", "labels": {"lyra.dev/pool": "training"}}}


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def one_event_then_silence(connection: socket.socket, stop: threading.Event) -> None:
    """A watch answered with its headers and one event, then nothing, the connection kept open (as a partition or
    a hung server leaves it)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    event = json.dumps({"type": "MODIFIED", "object": NODE}).encode() + b"\n"
    connection.sendall(head + chunk(event))
    stop.wait()


@pytest.fixture(autouse=True)
def short_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "WATCH_SILENCE_S", SILENCE_S)


def source_on(url: str) -> ApiSource:
    configuration = client.Configuration()
    configuration.host = url
    api = client.ApiClient(configuration)
    no_read_retries(api)
    return ApiSource(api, NODES)


def test_a_watch_that_carries_nothing_for_the_silence_ends_after_its_events() -> None:
    accepted: list[socket.socket] = []
    with behaving_server(one_event_then_silence, accepted) as url:
        events = list(source_on(url).watch(resource_version="6", timeout_s=300))
    assert [e["object"]["metadata"]["resourceVersion"] for e in events] == ["7"]
    assert len(accepted) == 1


class ListedHere:
    """The list from memory, the watch from the real socket's server."""

    def __init__(self, watching: ApiSource) -> None:
        self.watching = watching

    def list_page(self, *, limit: int, continue_token: str) -> dict[str, object]:
        return {"metadata": {"resourceVersion": "6"}, "items": []}

    def watch(self, *, resource_version: str, timeout_s: int) -> Iterator[Mapping[str, Any]]:
        return self.watching.watch(resource_version=resource_version, timeout_s=timeout_s)

    def close(self) -> None:
        self.watching.close()


def test_the_cache_reopens_a_silent_watch_from_the_last_version_it_saw_at_once_and_counts_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A kind that does not change gets no bookmark either (kube-apiserver v1.34: none in 5 minutes), so a silent
    stream is not an error: it is reopened at once, said at debug level only."""
    accepted: list[socket.socket] = []
    with behaving_server(one_event_then_silence, accepted) as url, caplog.at_level(logging.DEBUG, "lyra.kubewatch"):
        watched = WatchCache(NODES, ListedHere(source_on(url)))
        watched.start()
        try:
            wait_for(lambda: len(accepted) >= 2, 10, "the watch reopened")
            assert watched.version == "7"
            assert watched.lists == 1, "reopened without listing"
            assert watched.errors == 0
        finally:
            watched.stop()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "carried nothing" in r.getMessage()]
    assert said[0] == (
        logging.DEBUG,
        "nodes: the watch carried nothing for 0.5 s (no event, no bookmark): reopening it",
    )


def test_a_close_while_no_watch_is_open_ends_the_next_watch_as_soon_as_it_is_open() -> None:
    """A reader's ``resume`` (or the operator reopening its watches as it begins to lead) may come while the cache is
    between two watches or opening one: it is not lost, the next watch ends at once, and the one after runs."""
    accepted: list[socket.socket] = []
    with behaving_server(one_event_then_silence, accepted) as url:
        source = source_on(url)
        source.close()
        ended_at_once = list(source.watch(resource_version="6", timeout_s=300))
        then = list(source.watch(resource_version="6", timeout_s=300))
    assert ended_at_once == []
    assert [e["object"]["metadata"]["resourceVersion"] for e in then] == ["7"]
