"""A benchmark stopped from outside (``timeout``'s SIGTERM, Ctrl-C's SIGINT, a closed terminal's SIGHUP) leaves no
process behind: the processes it started, and theirs, are stopped as a group by its ``finally`` blocks."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lyra.localcluster.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]

#: A benchmark in miniature: it starts a server (in its own group) that starts a worker of its own, then waits.
BENCHMARK = """
import signal, subprocess, sys, time
from bench import start_process, stop_process_group, stopped_on_signals

# As when started from a terminal: a suite run from a shell's background job inherits SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

SERVER = "import subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])" \\
    "; print(w.pid, flush=True); time.sleep(600)"
with stopped_on_signals():
    server = start_process([sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        worker = int(server.stdout.readline())
        print(server.pid, worker, flush=True)
        time.sleep(600)
    finally:
        stop_process_group(server)
"""


def gone(pid: int) -> bool:
    """No such process, or only its exit status left (a zombie nobody reaps in a container)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def where(*pids: int) -> str:
    """Each process's state, the kernel function it waits in and its signal masks, to tell a stopped, blocked or
    starved process apart when it does not exit."""
    said = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
            wchan = Path(f"/proc/{pid}/wchan").read_text(encoding="utf-8")
        except OSError:
            said.append(f"{pid}: gone")
            continue
        fields = [
            line.replace("\t", " ")
            for line in status
            if line.split(":")[0] in ("State", "SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd")
        ]
        said.append(f"{pid}: {'; '.join(fields)}; wchan {wchan or '-'}")
    return " | ".join(said)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda signum: signum.name)
def test_a_benchmark_stopped_from_outside_leaves_no_process(signum: int) -> None:
    environment = os.environ | {"PYTHONPATH": str(ROOT)}
    started: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-c", BENCHMARK], stdout=subprocess.PIPE, env=environment, cwd=ROOT, text=True
    ) as benchmark:
        try:
            assert benchmark.stdout is not None
            started = [int(pid) for pid in benchmark.stdout.readline().split()]
            assert len(started) == 2, "the benchmark did not start its server and worker"
            benchmark.send_signal(signum)
            try:
                returncode = benchmark.wait(timeout=30)
            except subprocess.TimeoutExpired:
                name = signal.Signals(signum).name
                pytest.fail(f"the benchmark did not exit within 30 s of {name}: {where(benchmark.pid, *started)}")
            assert returncode == 128 + signum  # as a shell reports a process the signal stopped
            wait_for(lambda: all(gone(pid) for pid in started), 15, "the server and its worker to be stopped")
        finally:
            benchmark.kill()
            for pid in started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
