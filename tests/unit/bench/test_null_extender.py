"""The do-nothing extenders the scheduling benchmark measures the floor with (Python, and Go built by the benchmark)
answer every request at once: ``[]`` to a verb, ``ok`` to a readiness probe, over one keep-alive connection."""

from __future__ import annotations

import http.client
import subprocess
import sys
from collections.abc import Iterator

import pytest
from bench.scheduling_bench import null_extender_go

from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.waiting import wait_for


@pytest.fixture(params=["python", "go"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    [port] = allocate_ports(1)
    command = [sys.executable, "-m", "bench.null_extender"] if request.param == "python" else [str(null_extender_go())]
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


def test_every_verb_is_answered_with_no_scores_over_one_connection(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for path in ("/prioritize", "/preempt", "/prioritize"):
            connection.request("POST", path, body=b'{"Pod": {}, "NodeNames": ["a", "b"]}')
            answer = connection.getresponse()
            assert (answer.status, answer.getheader("content-type"), answer.read()) == (200, "application/json", b"[]")
    finally:
        connection.close()
