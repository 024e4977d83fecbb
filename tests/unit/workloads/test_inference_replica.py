"""The inference replica (lyra/workloads/inference_replica.py) as a plain process on 127.0.0.1: /healthz answers
503 while it warms up and 200 once ready, /predict serves the model, SIGTERM stops it with exit 0, bad input exits 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lyra.localcluster.waiting import wait_for
from lyra.workloads import inference_replica

PROGRAM = Path(inference_replica.__file__)


def start(**env: str) -> subprocess.Popen[str]:
    environment = {"PATH": os.environ.get("PATH", ""), "LYRA_LISTEN_HOST": "127.0.0.1", "LYRA_PORT": "0", **env}
    return subprocess.Popen(
        [sys.executable, str(PROGRAM)], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def listening_port(replica: subprocess.Popen[str]) -> int:
    assert replica.stdout is not None
    line = replica.stdout.readline()
    assert line.startswith("listening on 127.0.0.1:"), line
    return int(line.split(";")[0].rpartition(":")[2])


def test_readiness_turns_200_after_the_warm_up_and_sigterm_stops_the_server() -> None:
    replica = start(LYRA_WARMUP_SECONDS="0.5")
    try:
        port = listening_port(replica)
        first = get(port, "/healthz")
        ready = wait_for(lambda: get(port, "/healthz")[0] == 200 or None, 30, "/healthz to answer 200")
        assert ready
        assert first[0] in (200, 503)  # 503 unless the machine took the whole warm-up to answer once
        status, body = get(port, "/predict?x=2")
        assert status == 200
        answer = json.loads(body)
        assert answer["y"] == 7.0
        assert answer["replica"]
        assert get(port, "/predict?x=nan")[0] == 400
        assert get(port, "/predict?x=two")[0] == 400
        assert get(port, "/nothing")[0] == 404
    finally:
        replica.send_signal(signal.SIGTERM)
        out, err = replica.communicate(timeout=30)
    assert replica.returncode == 0, err
    assert "SIGTERM: stopped serving" in out


def test_it_is_not_ready_while_warming_up() -> None:
    replica = start(LYRA_WARMUP_SECONDS="3600")
    try:
        port = listening_port(replica)
        assert get(port, "/healthz") == (503, b"warming up\n")
    finally:
        replica.send_signal(signal.SIGTERM)
        replica.communicate(timeout=30)
    assert replica.returncode == 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LYRA_PORT": "http"}, "LYRA_PORT='http' is not a port number"),
        ({"LYRA_PORT": "70000"}, "is not a port number"),
        ({"LYRA_WARMUP_SECONDS": "-1"}, "must be a finite number >= 0"),
        ({"LYRA_WARMUP_SECONDS": "inf"}, "must be a finite number >= 0"),
    ],
)
def test_bad_settings_exit_with_a_message(env: dict[str, str], message: str) -> None:
    replica = start(**env)
    _out, err = replica.communicate(timeout=30)
    assert replica.returncode in (1, 2)
    assert message in err
    assert "Traceback" not in err


def test_a_port_in_use_is_an_error_without_a_traceback() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        replica = start(LYRA_PORT=str(busy.getsockname()[1]))
        _out, err = replica.communicate(timeout=30)
    assert replica.returncode == 1
    assert "cannot listen: Address already in use" in err
    assert "Traceback" not in err
