"""`lyra demo` starts and stops cleanly (issue 29, item 5), as a user at a terminal sees it: Ctrl-C (SIGINT to a
real ``lyra demo`` while it plays the day) stops every process it started and leaves no port any of them listened
on, nor the run's state directory; a second run on the same ports then plays its day to the end; and a demo asked
to use a port something else listens on refuses to start, saying so, before it starts anything.

The processes and ports are found, not assumed: every descendant of the demo's process (the control plane's etcd,
kube-apiserver, controller-manager, scheduler and KWOK; the extender, operator, emulator and Prometheus in their own
sessions) and every TCP port they listen on, read from ``/proc`` while the day plays.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lyra.cli.demo_commands import port_taken
from lyra.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.waiting import wait_for
from tests.operator_support import REPOSITORY

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

#: A short day: 3 trace hours in 30 s, 3 jobs, Lyra on only.
SHORT = ("--plain", "--only", "lyra", "--duration", "30", "--speed-up", "360", "--jobs", "3")
PLAYING = re.compile(r"^\[lyra\]\s+\d+% ", re.MULTILINE)  # a progress line: the day is being played


def demo(out: Path, ports: tuple[int, int, int], log: Path, *, piped: bool = False) -> subprocess.Popen[bytes]:
    """``lyra demo`` as started at a terminal: with SIGINT not ignored. (A test run in the background of a shell
    inherits SIGINT ignored, and so would the demo, where Ctrl-C could not reach it; a handler, unlike an ignored
    signal, is reset to the default when the child starts.) Its output and errors go to ``log``; ``piped``: its
    output to a pipe the test reads (as ``lyra demo | head``), its errors to ``log``."""
    command = [
        sys.executable, "-m", "lyra", "demo", *SHORT, "--out-dir", str(out),
        "--extender-port", str(ports[0]), "--operator-port", str(ports[1]), "--prometheus-port", str(ports[2]),
    ]  # fmt: skip
    was = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with log.open("wb") as output:
            if piped:
                return subprocess.Popen(command, cwd=REPOSITORY, stdout=subprocess.PIPE, stderr=output)
            return subprocess.Popen(command, cwd=REPOSITORY, stdout=output, stderr=subprocess.STDOUT)
    finally:
        signal.signal(signal.SIGINT, was)


def _stat(pid: int, thread: int | None = None) -> tuple[int, str, int] | None:
    """(parent, state, start time) of a live process (or of one of its threads), None for one that is gone."""
    try:
        text = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every process below ``root``, with its start time (so a reused PID is not taken for it)."""
    parents: dict[int, int] = {}
    started: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            parents[int(entry)], started[int(entry)] = stat[0], stat[2]
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = started[pid]
                frontier.append(pid)
    return found


def alive(processes: dict[int, int]) -> list[int]:
    """Those of ``processes`` still running: any of whose threads has not ended. (A zombie holds no port and is gone
    but for its exit status; but a process's first thread is a zombie as soon as that thread has ended, while its
    other threads, still exiting, hold its sockets: a killed Go server on a busy machine.)"""
    left = []
    for pid, start in processes.items():
        stat = _stat(pid)
        if stat is None or stat[2] != start:
            continue
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        if any((thread := _stat(pid, int(tid))) is not None and thread[1] not in ("Z", "X") for tid in threads):
            left.append(pid)
    return left


def command_name(pid: int) -> str:
    """The program a process runs (the name of its executable's first argument), "" for one that is gone."""
    try:
        return Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")).name
    except OSError:
        return ""


def listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes listen on (their sockets' inodes matched in /proc/net/tcp and tcp6)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue  # gone meanwhile
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def assert_ports_free(ports: set[int]) -> None:
    """None of ``ports`` is listened on; else which processes listen there (every process's sockets read)."""
    taken = sorted(port for port in ports if port_taken(port) is not None)
    if not taken:
        return
    holders = {pid: command_name(pid) for pid in (int(e) for e in os.listdir("/proc") if e.isdigit())}
    listening = {pid: sorted(listening_ports([pid]) & set(taken)) for pid in holders}
    named = {f"{pid} {holders[pid]}": found for pid, found in listening.items() if found}
    raise AssertionError(f"ports {taken} are still listened on, by: {named or 'no process found'}")


def run_state_dirs(pids: list[int]) -> set[Path]:
    """The run's state directories (``lyra-demo-<mode>-*`` under the temporary directory) its processes name."""
    pattern = re.compile(re.escape(tempfile.gettempdir()) + r"/lyra-demo-lyra-[^/\x00]+")
    found: set[Path] = set()
    for pid in pids:
        try:
            found.update(Path(m) for m in pattern.findall(Path(f"/proc/{pid}/cmdline").read_text(errors="replace")))
        except OSError:
            continue
    return found


def playing(run: subprocess.Popen[bytes], log: Path, ports: tuple[int, int, int]) -> tuple[dict[int, int], set[int]]:
    """Once ``run`` plays its day: every process below it (with start times) and the ports they listen on, the
    demo's three among them."""
    wait_for(
        lambda: run.poll() is not None or PLAYING.search(log.read_text(errors="replace")),
        300,
        "the run playing its day",
    )
    assert run.poll() is None, log.read_text(errors="replace")[-4000:]
    started = descendants(run.pid)
    listened = listening_ports(list(started))
    assert set(ports) <= listened, f"the extender, operator and Prometheus listen on {ports}: {sorted(listened)}"
    assert len(started) >= 9, f"the control plane, extender, operator, emulator and Prometheus run: {started}"
    return started, listened


def test_ctrl_c_stops_everything_and_a_second_run_plays_its_day(tmp_path: Path) -> None:
    extender, operator, prometheus = allocate_ports(3)
    ports = (extender, operator, prometheus)
    log = tmp_path / "first.log"
    first = demo(tmp_path / "first", ports, log)
    try:
        started, listened = playing(first, log, ports)
        prometheus_pids = [pid for pid in started if command_name(pid) == "prometheus"]
        assert len(prometheus_pids) == 1, f"one Prometheus runs: {started}"
        state_dirs = run_state_dirs(list(started))
        assert state_dirs, "the control plane's processes name the run's state directory"
        first.send_signal(signal.SIGINT)
        code = first.wait(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
    output = log.read_text(errors="replace")
    assert code == EXIT_INTERRUPTED, output[-4000:]
    assert "interrupted (Ctrl-C); everything it started is stopped" in output
    assert "Traceback" not in output
    wait_for(lambda: not alive(started), 60, f"the demo's {len(started)} processes gone")
    assert not alive({pid: started[pid] for pid in prometheus_pids}), "Prometheus is stopped"
    assert port_taken(prometheus) is None, "Prometheus' port is free"
    assert_ports_free(listened)
    assert not [d for d in state_dirs if d.exists()], "the run's state directory is removed"
    print(f"Ctrl-C stopped {len(started)} processes listening on {len(listened)} ports: {sorted(listened)}")

    second_log = tmp_path / "second.log"
    second = demo(tmp_path / "second", ports, second_log)
    try:
        code = second.wait(timeout=420)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(timeout=30)
    output = second_log.read_text(errors="replace")
    assert code == EXIT_OK, output[-4000:]
    assert (tmp_path / "second" / "results.json").stat().st_size > 0
    assert all(port_taken(p) is None for p in ports)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_demo_stopped_from_outside_leaves_no_process_and_no_port(signum: int, tmp_path: Path) -> None:
    """`timeout` or a service manager sends SIGTERM: Python would end at once, and the extender, operator and
    emulator, in sessions of their own, kept running and held the demo's ports. Stopped as by Ctrl-C now (exit
    143, its state directory removed); and killed outright (SIGKILL: nothing of the demo runs), what it started dies
    with it (the state directory stays: nothing is left to remove it)."""
    extender, operator, prometheus = allocate_ports(3)
    ports = (extender, operator, prometheus)
    log = tmp_path / "run.log"
    run = demo(tmp_path / "out", ports, log)
    try:
        started, listened = playing(run, log, ports)
        lyra_children = [pid for pid in started if command_name(pid).startswith("python")]
        assert len(lyra_children) == 3, f"the extender, operator and emulator run: {started}"
        state_dirs = run_state_dirs(list(started))
        run.send_signal(signum)
        code = run.wait(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
    output = log.read_text(errors="replace")
    wait_for(lambda: not alive(started), 60, f"the demo's {len(started)} processes gone")
    assert_ports_free(listened)
    if signum == signal.SIGTERM:
        assert code == 128 + signal.SIGTERM, output[-4000:]
        assert "interrupted (SIGTERM); everything it started is stopped" in output
        assert "Traceback" not in output
        assert not [d for d in state_dirs if d.exists()], "the run's state directory is removed"
    else:
        assert code == -signal.SIGKILL
        for directory in state_dirs:  # what a killed demo cannot remove; the test does
            shutil.rmtree(directory, ignore_errors=True)
    print(f"{signal.Signals(signum).name}: {len(started)} processes stopped, ports {sorted(listened)} free")


def test_a_demo_whose_output_is_closed_stops_everything(tmp_path: Path) -> None:
    """`lyra demo | head -3`: the reader of the demo's output goes away while the day plays. Python ignores SIGPIPE
    and raised BrokenPipeError from the next progress line, an OSError the demo took for a failure of its run
    (`the lyra run failed: [Errno 32] Broken pipe`, exit 1; while the control plane started, a traceback). It now
    stops as SIGPIPE stops a command: everything it started is stopped, its state removed, exit 141."""
    extender, operator, prometheus = allocate_ports(3)
    ports = (extender, operator, prometheus)
    log = tmp_path / "errors.log"
    run = demo(tmp_path / "out", ports, log, piped=True)
    try:
        assert run.stdout is not None
        for line in run.stdout:
            if PLAYING.search(line.decode(errors="replace")):
                break
        assert run.poll() is None, log.read_text(errors="replace")[-4000:]
        started = descendants(run.pid)
        listened = listening_ports(list(started))
        assert set(ports) <= listened, f"the extender, operator and Prometheus listen on {ports}: {sorted(listened)}"
        state_dirs = run_state_dirs(list(started))
        run.stdout.close()  # the reader goes away: the demo's next line of progress finds no one
        code = run.wait(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
    errors = log.read_text(errors="replace")
    assert code == 128 + signal.SIGPIPE, errors[-4000:]
    assert "interrupted (SIGPIPE: the reader of its output went away); everything it started is stopped" in errors
    assert "Traceback" not in errors
    wait_for(lambda: not alive(started), 60, f"the demo's {len(started)} processes gone")
    assert_ports_free(listened)
    assert not [d for d in state_dirs if d.exists()], "the run's state directory is removed"
    print(f"output closed: {len(started)} processes stopped, ports {sorted(listened)} free")


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    extender, operator, prometheus = allocate_ports(3)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", operator))
        holder.listen()
        run = subprocess.run(
            [sys.executable, "-m", "lyra", "demo", *SHORT, "--out-dir", str(tmp_path / "out"),
             "--extender-port", str(extender), "--operator-port", str(operator),
             "--prometheus-port", str(prometheus)],
            cwd=REPOSITORY, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert run.returncode == EXIT_FAILED
    assert run.stderr.strip() == (
        f"lyra demo: port {operator} is in use (on 127.0.0.1): stop what listens there or pick another port"
    )
    assert not (tmp_path / "out" / "inputs").exists(), "nothing was started or written"
