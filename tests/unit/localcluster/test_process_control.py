"""Process control: start in a new session, identify by PID and start time, stop with TERM then KILL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lyra.localcluster.processes import is_running, launch, read_from, read_start_ticks, tail, terminate
from lyra.localcluster.waiting import wait_for


def test_a_launched_process_runs_in_its_own_session_and_logs_to_its_file(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "echo.log"
    popen, record = launch("sleeper", ["sh", "-c", "echo started; exec sleep 60"], log)
    try:
        _wait_for_output(log, "started")
        assert is_running(record)
        assert os.getpgid(record.pid) == record.pid
        assert os.getsid(record.pid) == record.pid
    finally:
        assert terminate(record, popen, grace=5)
    assert not is_running(record)
    assert popen.returncode is not None
    assert tail(log) == "started"


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    # A child that ignores SIGTERM and would idle for a minute: only the SIGKILL after the grace period ends it.
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    )
    popen, record = launch("stubborn", [sys.executable, "-c", script], tmp_path / "stubborn.log")
    try:
        _wait_for_output(tmp_path / "stubborn.log", "up")
        assert terminate(record, popen, grace=0.5)
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()
    assert popen.returncode == -9


def test_a_reused_pid_is_not_signalled(tmp_path: Path) -> None:
    popen, record = launch("sleeper", ["sleep", "60"], tmp_path / "sleep.log")
    try:
        impostor = replace(record, start_ticks=record.start_ticks - 1)
        assert not is_running(impostor)
        assert not terminate(impostor, grace=0.5)
        assert popen.poll() is None
    finally:
        terminate(record, popen, grace=5)


def test_a_zombie_counts_as_gone() -> None:
    child = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited but not reaped: a zombie
        assert read_start_ticks(child.pid) is None
    finally:
        child.wait()


#: A process whose first thread ends (``pthread_exit``) while a second one still listens on a port, until told on its
#: standard input to stop: the state of a killed multi-threaded server whose first thread has ended and whose others
#: are still exiting.
FIRST_THREAD_ENDS = """
import ctypes, socket, sys, threading
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
threading.Thread(target=lambda: (sys.stdin.read(), server.close())).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_process_whose_first_thread_has_ended_runs_while_another_thread_does() -> None:
    child = subprocess.Popen([sys.executable, "-c", FIRST_THREAD_ENDS], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        port = int(child.stdout.readline())
        wait_for(lambda: _state(child.pid) == "Z", 10, "the first thread to end")
        with socket.socket() as probe, pytest.raises(OSError, match="in use"):
            probe.bind(("127.0.0.1", port))  # the process still holds its port
        assert read_start_ticks(child.pid) is not None
        child.stdin.close()  # the second thread closes the port and ends
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # every thread ended, not reaped: a zombie
        assert read_start_ticks(child.pid) is None
    finally:
        if not child.stdin.closed:
            child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_log_helpers_read_the_end_and_the_new_part(tmp_path: Path) -> None:
    log = tmp_path / "component.log"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    offset = log.stat().st_size
    with log.open("a") as out:
        out.write("after\n")

    assert tail(log, 2) == "line 99\nafter"
    assert read_from(log, offset) == "after\n"
    assert tail(tmp_path / "missing.log") == ""
    assert read_from(tmp_path / "missing.log", 0) == ""


def _wait_for_output(path: Path, text: str) -> None:
    from lyra.localcluster.waiting import wait_for

    wait_for(lambda: text in path.read_text(), 10, f"{text!r} in {path}", retry_on=(FileNotFoundError,))
