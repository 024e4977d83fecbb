"""The state file of a local cluster: what ``up`` started, so ``down`` and ``status`` can find it again.

The file is rewritten atomically after every process start, so even an ``up`` that is killed half-way leaves
a record of exactly the processes it started. A state directory is only ever deleted when it holds such a file
(or nothing at all), so a mistyped ``--state-dir`` cannot wipe someone's files.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from lyra.localcluster.processes import ProcessRecord, is_running, read_start_ticks

STATE_FILE = "state.json"
FORMAT_VERSION = 1


class StateError(RuntimeError):
    """The state directory cannot be used as it is; the message says what to do."""


class Phase(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    FAILED = "failed"


class Liveness(enum.Enum):
    """What the recorded processes are doing now, which decides what ``up`` may do with the directory."""

    RUNNING = "running"  # every recorded process is alive and the start had finished
    STARTING = "starting"  # an ``up`` is still at work on this directory
    PARTIAL = "partial"  # some processes live, some are gone: needs ``down``
    STALE = "stale"  # nothing recorded is alive: safe to clean


@dataclass(frozen=True)
class ClusterState:
    name: str
    state_dir: Path
    phase: Phase
    owner_pid: int
    owner_start_ticks: int
    kubeconfig: Path
    api_server: str
    profile: str
    extender_url: str | None
    started_at: float
    endpoints: Mapping[str, str] = field(default_factory=dict)
    processes: tuple[ProcessRecord, ...] = ()
    start_seconds: float | None = None

    def with_process(self, record: ProcessRecord, endpoint: str | None = None) -> ClusterState:
        endpoints = dict(self.endpoints)
        if endpoint is not None:
            endpoints[record.name] = endpoint
        return replace(self, processes=(*self.processes, record), endpoints=endpoints)

    def to_json(self) -> dict[str, object]:
        return {
            "version": FORMAT_VERSION,
            "name": self.name,
            "state_dir": str(self.state_dir),
            "phase": self.phase.value,
            "owner_pid": self.owner_pid,
            "owner_start_ticks": self.owner_start_ticks,
            "kubeconfig": str(self.kubeconfig),
            "api_server": self.api_server,
            "profile": self.profile,
            "extender_url": self.extender_url,
            "started_at": self.started_at,
            "start_seconds": self.start_seconds,
            "endpoints": dict(self.endpoints),
            "processes": [record.to_json() for record in self.processes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ClusterState:
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported state format version {data.get('version')!r}")
        endpoints = data["endpoints"]
        processes = data["processes"]
        extender_url = data["extender_url"]
        start_seconds = data.get("start_seconds")
        owner_pid, owner_ticks, started_at = data["owner_pid"], data["owner_start_ticks"], data["started_at"]
        if not (
            isinstance(endpoints, dict)
            and isinstance(processes, list)
            and (extender_url is None or isinstance(extender_url, str))
            and (start_seconds is None or isinstance(start_seconds, int | float))
            and isinstance(owner_pid, int)
            and isinstance(owner_ticks, int)
            and isinstance(started_at, int | float)
        ):
            raise ValueError("malformed state file")
        return cls(
            name=str(data["name"]),
            state_dir=Path(str(data["state_dir"])),
            phase=Phase(str(data["phase"])),
            owner_pid=owner_pid,
            owner_start_ticks=owner_ticks,
            kubeconfig=Path(str(data["kubeconfig"])),
            api_server=str(data["api_server"]),
            profile=str(data["profile"]),
            extender_url=extender_url,
            started_at=float(started_at),
            start_seconds=None if start_seconds is None else float(start_seconds),
            endpoints={str(key): str(value) for key, value in endpoints.items()},
            processes=tuple(ProcessRecord.from_json(record) for record in processes),
        )


def write_state(state: ClusterState) -> None:
    """Replace the state file atomically (write a temporary file, then rename it over the old one)."""
    state.state_dir.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=state.state_dir, prefix=".state-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(state.to_json(), out, indent=2)
            out.write("\n")
        os.replace(temporary, state.state_dir / STATE_FILE)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_state(state_dir: Path) -> ClusterState | None:
    """The recorded state, or None when the directory has no state file."""
    path = state_dir / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return ClusterState.from_json(data)
    except (ValueError, KeyError) as error:
        raise StateError(
            f"{path} is not a readable Lyra cluster state file ({error}). Check that none of the processes "
            f"it lists still runs, then remove {state_dir}."
        ) from error


def liveness(state: ClusterState) -> Liveness:
    alive = [record for record in state.processes if is_running(record)]
    if state.phase is Phase.STARTING and read_start_ticks(state.owner_pid) == state.owner_start_ticks:
        return Liveness.STARTING
    if not alive:
        return Liveness.STALE
    if state.phase is Phase.RUNNING and len(alive) == len(state.processes):
        return Liveness.RUNNING
    return Liveness.PARTIAL


def remove_state_dir(state_dir: Path) -> None:
    """Delete a cluster state directory, but only one that is recognisably ours (or empty)."""
    if not state_dir.exists():
        return
    if not state_dir.is_dir():
        raise StateError(f"{state_dir} is not a directory; refusing to use it as a cluster state directory")
    if any(state_dir.iterdir()) and not (state_dir / STATE_FILE).exists():
        raise StateError(
            f"{state_dir} is not empty and holds no {STATE_FILE}: it is not a Lyra cluster state directory, "
            "so it is left alone. Choose another --state-dir."
        )
    shutil.rmtree(state_dir)
