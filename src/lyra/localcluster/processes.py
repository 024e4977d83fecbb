"""Starting and stopping the control-plane processes safely.

Each component runs in its own session (so its whole process group can be signalled) with its output in a log
file. A process is identified by its PID *and* its start time from ``/proc``, so ``lyra cluster down`` run hours
later never signals an unrelated process that happens to have reused the PID.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lyra.localcluster.waiting import WaitTimeoutError, wait_for

_PR_SET_PDEATHSIG = 1
DEFAULT_GRACE_SECONDS = 10.0


class ProcessStartError(RuntimeError):
    """A component could not be started at all (missing binary, unreadable log directory)."""


@dataclass(frozen=True)
class ProcessRecord:
    """What is needed to find a started process again and to prove it is still the same one."""

    name: str
    pid: int
    start_ticks: int
    argv: tuple[str, ...]
    log_path: Path

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "argv": list(self.argv),
            "log_path": str(self.log_path),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessRecord:
        name, pid, ticks, argv, log_path = (
            data["name"],
            data["pid"],
            data["start_ticks"],
            data["argv"],
            data["log_path"],
        )
        if not (
            isinstance(name, str)
            and isinstance(pid, int)
            and isinstance(ticks, int)
            and isinstance(argv, list)
            and all(isinstance(arg, str) for arg in argv)
            and isinstance(log_path, str)
        ):
            raise ValueError(f"malformed process record: {dict(data)!r}")
        return cls(name=name, pid=pid, start_ticks=ticks, argv=tuple(argv), log_path=Path(log_path))


def read_start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None when no live process has this PID.

    A zombie counts as gone: it no longer runs and only waits for its parent to collect it. But a process's first
    thread shows as a zombie as soon as that thread has ended, while the process's other threads may still run or
    still be exiting (a killed multi-threaded server, on a busy machine): those hold its files and the ports it
    listens on, so the process counts as running until none of its threads does.
    """
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    if fields is None:
        return None
    state, start_ticks = fields[0], fields[19]
    if state in _ENDED and not _a_thread_runs(pid):
        return None
    return int(start_ticks)


#: ``/proc`` states of a thread that has ended: zombie, dead.
_ENDED = ("Z", "X")


def _stat_fields(path: Path) -> list[str] | None:
    """The fields of a ``/proc`` stat file after the command name (state first), or None when it is gone."""
    try:
        stat = path.read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces and parentheses; the fields after the last ')' are fixed.
    return stat.rpartition(")")[2].split()


def _a_thread_runs(pid: int) -> bool:
    """Whether any thread of process ``pid`` has not ended."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return False
    for thread in threads:
        fields = _stat_fields(Path(f"/proc/{pid}/task/{thread}/stat"))
        if fields is not None and fields[0] not in _ENDED:
            return True
    return False


def is_running(record: ProcessRecord) -> bool:
    return read_start_ticks(record.pid) == record.start_ticks


def launch(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = False,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``argv`` in a new session with stdout and stderr appended to ``log_path``.

    ``die_with_parent`` asks the kernel to kill the process when the starting thread dies, so a test session
    that is killed outright does not leave a control plane behind.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    preexec: Callable[[], None] | None = _die_with_parent if die_with_parent else None
    try:
        with log_path.open("ab") as log:
            popen = subprocess.Popen(  # the binaries are our own cached builds
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=preexec,  # noqa: PLW1509  (only calls prctl, which is async-signal-safe)
            )
    except OSError as error:
        raise ProcessStartError(f"cannot start {name} ({argv[0]}): {error.strerror or error}") from error
    ticks = read_start_ticks(popen.pid)
    if ticks is None:
        # It died before we could look; keep a record that can never match a live process.
        ticks = -1
    return popen, ProcessRecord(name=name, pid=popen.pid, start_ticks=ticks, argv=tuple(argv), log_path=log_path)


def terminate(
    record: ProcessRecord,
    popen: subprocess.Popen[bytes] | None = None,
    grace: float = DEFAULT_GRACE_SECONDS,
) -> bool:
    """Stop a recorded process group: SIGTERM, then SIGKILL after ``grace`` seconds. Return True if it ran.

    The group is signalled only after checking that its leader is still the recorded process. When ``popen``
    is given (the process is our child) it is also reaped, so no zombie and no ResourceWarning remain.
    """
    was_running = is_running(record)
    if was_running:
        _signal_group(record.pid, signal.SIGTERM)
        try:
            wait_for(lambda: not _alive(record, popen), grace, f"{record.name} (pid {record.pid}) to exit")
        except WaitTimeoutError:
            if is_running(record):
                _signal_group(record.pid, signal.SIGKILL)
            wait_for(lambda: not _alive(record, popen), grace, f"{record.name} (pid {record.pid}) to die")
    # Members of the group other than the leader (none of our components forks, but be thorough).
    _signal_group(record.pid, signal.SIGKILL, only_if_leader_gone=True)
    if popen is not None:
        popen.wait(timeout=grace)
    return was_running


def _alive(record: ProcessRecord, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None and popen.poll() is not None:
        return False
    return is_running(record)


def _signal_group(pid: int, signum: int, only_if_leader_gone: bool = False) -> None:
    if only_if_leader_gone:
        # The process group ID is the leader's PID. Once the leader is gone, a live member can only be a
        # child it left behind in its own session; anything else would have a different group.
        if read_start_ticks(pid) is not None:
            return
        if not _group_has_members(pid):
            return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _group_has_members(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def tail(path: Path, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a log file, for error messages; empty when the file does not exist."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError as error:
        if error.errno == errno.ENOENT:
            return ""
        raise
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])


def read_from(path: Path, offset: int, max_bytes: int = 256 * 1024) -> str:
    """The text appended to a log since ``offset`` (at most the last ``max_bytes``)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(offset, size - max_bytes))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
