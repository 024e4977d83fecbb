"""Writers interleaved in one thread (:mod:`lyra.operator.interleaving`): each runs until it waits to read, is resumed
when its socket can be read, a wait past the socket's timeout raises in its writer, a writer's error reaches the
caller once every writer has ended, and outside an interleaving a wait returns at once. Then the commit step's own
requests: a long run on a loopback server has its writers' requests in flight at once, from the pass's thread."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import greenlet
import pytest
from kubernetes import client

from lyra.core.model import LoanState
from lyra.operator.actions import Decision, SetNodeState
from lyra.operator.commit import WRITERS, Cluster
from lyra.operator.interleaving import Interleaving, wait_readable
from lyra.operator.isolation import Backoff

Pair = tuple[socket.socket, socket.socket]


@pytest.fixture
def pairs() -> Iterator[list[Pair]]:
    made: list[Pair] = []
    yield made
    for ours, theirs in made:
        ours.close()
        theirs.close()


def pair(pairs: list[Pair], timeout_s: float = 5.0) -> Pair:
    """Our end (read by a writer, its timeout ``timeout_s``) and the peer's."""
    ours, theirs = socket.socketpair()
    ours.settimeout(timeout_s)
    pairs.append((ours, theirs))
    return ours, theirs


def test_each_writer_runs_until_it_waits_and_resumes_as_its_socket_can_be_read(pairs: list[Pair]) -> None:
    sockets = [pair(pairs) for _ in range(3)]
    seen: list[str] = []

    def writer(n: int) -> None:
        ours, _ = sockets[n]
        seen.append(f"sent {n}")
        if n == 2:  # the last one to wait answers the others, in reverse order
            for _, theirs in reversed(sockets):
                theirs.sendall(b"x")
        wait_readable(ours)
        seen.append(f"read {n} {ours.recv(1).decode()}")

    Interleaving().run([lambda n=n: writer(n) for n in range(3)])
    assert seen[:3] == ["sent 0", "sent 1", "sent 2"]  # each ran alone until its wait
    assert sorted(seen[3:]) == ["read 0 x", "read 1 x", "read 2 x"]


def never_answered(slow: socket.socket, done: list[str]) -> Callable[[], None]:
    """A writer that waits on ``slow``, to which nothing is ever sent, and says "slow" in ``done`` when it ends."""

    def waits() -> None:
        try:
            wait_readable(slow)
        finally:
            done.append("slow")

    return waits


def test_a_wait_past_its_sockets_timeout_raises_in_its_writer_and_the_others_finish(pairs: list[Pair]) -> None:
    slow, _ = pair(pairs, timeout_s=0.05)
    fast, answers = pair(pairs)
    done: list[str] = []

    def answered() -> None:
        answers.sendall(b"x")
        wait_readable(fast)
        done.append(f"fast {fast.recv(1).decode()}")

    with pytest.raises(TimeoutError, match="timed out"):
        Interleaving().run([never_answered(slow, done), answered])
    assert sorted(done) == ["fast x", "slow"]


def test_a_wait_times_out_on_time_while_other_writers_answers_keep_coming(pairs: list[Pair]) -> None:
    slow, _ = pair(pairs, timeout_s=0.05)
    busy, answers = pair(pairs)
    done: list[str] = []

    def answered_again_and_again() -> None:
        for _ in range(20_000):  # about a second of answers, unless the other writer's timeout ends it sooner
            if "slow" in done:
                return
            answers.sendall(b"x")
            wait_readable(busy)
            busy.recv(1)
        done.append("busy never saw the other time out")

    with pytest.raises(TimeoutError):
        Interleaving().run([never_answered(slow, done), answered_again_and_again])
    assert done == ["slow"]


def test_the_first_error_of_a_writer_is_raised_once_every_writer_has_ended(pairs: list[Pair]) -> None:
    ours, theirs = pair(pairs)
    ended: list[str] = []

    def fails() -> None:
        raise ValueError("refused")

    def waits() -> None:
        theirs.sendall(b"x")
        wait_readable(ours)
        ended.append("waited")

    with pytest.raises(ValueError, match="refused"):
        Interleaving().run([fails, waits, fails])
    assert ended == ["waited"]


def test_outside_an_interleaving_a_wait_returns_at_once_and_one_cannot_nest(pairs: list[Pair]) -> None:
    ours, _ = pair(pairs)
    wait_readable(ours)  # nothing to read and nobody to give way to: the caller's read would block as usual
    with pytest.raises(RuntimeError, match="already"):
        Interleaving().run([lambda: Interleaving().run([])])


class HeldAnswers(http.server.BaseHTTPRequestHandler):
    """Answers a node's patch only once ``WRITERS`` requests are in flight at once (or after 5 s, when the test
    fails), with a new resourceVersion."""

    protocol_version = "HTTP/1.1"
    server: HoldingServer

    def do_PATCH(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        held = self.server
        with held.lock:
            held.in_flight += 1
            held.most = max(held.most, held.in_flight)
            held.lock.notify_all()
            held.lock.wait_for(lambda: held.in_flight >= WRITERS or held.released, timeout=5)
            held.released = True  # from now on, each answered at once
            held.in_flight -= 1
            held.version += 1
            payload = json.dumps({"metadata": {"resourceVersion": str(held.version)}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


class HoldingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4 * WRITERS  # every writer's connection accepted at once, none left to a retried SYN

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), HeldAnswers)
        self.lock = threading.Condition()
        self.in_flight = self.most = self.version = 0
        self.released = False


def test_a_long_run_has_its_writers_requests_in_flight_at_once_from_the_pass_thread() -> None:
    server = HoldingServer()
    serving = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    serving.start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    cluster = Cluster(client.ApiClient(configuration), Backoff())
    try:
        nodes = [SetNodeState(f"t{n:02d}", LoanState.LOANED, (), {}, "1", "lent") for n in range(3 * WRITERS)]
        outcome = cluster.apply(Decision(tuple(nodes)), 0.0)
        assert outcome.applied == len(nodes)
        assert server.most == WRITERS
        assert greenlet.getcurrent().parent is None  # the pass's thread's own greenlet: no writer was left running
    finally:
        cluster.writes.close()
        server.shutdown()
        server.server_close()
