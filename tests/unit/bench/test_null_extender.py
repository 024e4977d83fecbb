"""The do-nothing extenders the scheduling benchmark measures the floor with (Python, and Go built by the benchmark)
answer every request at once: ``[]`` to a verb, ``ok`` to a readiness probe, over one keep-alive connection."""

from __future__ import annotations

import http.client
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from bench.scheduling_bench import null_extender_go

from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.waiting import wait_for


@contextmanager
def _started(command: list[str]) -> Iterator[int]:
    """The extender ``command`` serving on a free port until the block ends; the port."""
    [port] = allocate_ports(1)
    server = subprocess.Popen([*command, "--port", str(port)])
    try:

        def answering() -> bool:
            assert server.poll() is None, "the null extender exited"
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            try:
                connection.request("GET", "/readyz")
                return connection.getresponse().read() == b"ok\n"
            except OSError:
                return False
            finally:
                connection.close()

        wait_for(answering, 30, "the null extender to answer")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(params=["python", "go"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    command = [sys.executable, "-m", "bench.null_extender"] if request.param == "python" else [str(null_extender_go())]
    with _started(command) as port:
        yield port


def test_every_verb_is_answered_with_no_scores_over_one_connection(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for path in ("/prioritize", "/preempt", "/prioritize"):
            connection.request("POST", path, body=b'{"Pod": {}, "NodeNames": ["a", "b"]}')
            answer = connection.getresponse()
            assert (answer.status, answer.getheader("content-type"), answer.read()) == (200, "application/json", b"[]")
    finally:
        connection.close()


def test_the_go_probe_scores_the_first_nodes_named_and_refuses_a_body_that_is_not_extender_args() -> None:
    with _started([str(null_extender_go()), "--answer-nodes", "2", "--delay", "1ms"]) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("POST", "/prioritize", body=b'{"pod": {}, "nodenames": ["a", "b", "c"]}')
            answer = connection.getresponse()
            assert (answer.status, answer.read()) == (200, b'[{"Host":"a","Score":1},{"Host":"b","Score":2}]')
            connection.request("POST", "/prioritize", body=b'{"pod": {}, "nodenames": ["a"]}')
            assert connection.getresponse().read() == b'[{"Host":"a","Score":1}]'
            connection.request("POST", "/prioritize", body=b"not json")
            answer = connection.getresponse()
            assert answer.status == 400
            assert b"the body is not ExtenderArgs" in answer.read()
        finally:
            connection.close()


@pytest.mark.parametrize("argv", [["--delay", "-1ms"], ["--answer-nodes", "-3"]])
def test_the_go_probe_refuses_negative_settings(argv: list[str]) -> None:
    [port] = allocate_ports(1)
    refused = subprocess.run(
        [str(null_extender_go()), "--port", str(port), *argv], capture_output=True, timeout=30, check=False
    )
    assert refused.returncode == 2
    assert b"--delay and --answer-nodes must not be negative" in refused.stderr
