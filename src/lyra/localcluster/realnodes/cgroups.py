"""The cgroups of the real nodes: one subtree per cluster in every mounted hierarchy, and its removal.

A node's runner moves itself into ``<cluster parent>/<node>/runtime`` before it starts containerd, the kubelet and
the device plugin (children inherit it; so do containerd's shims), and the kubelet puts every pod under
``<cluster parent>/<node>/pods``. So everything a node started is found by its cgroups, and ``lyra cluster down``
kills what is left there and removes the directories, deepest first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CPUSET_FILES = ("cpuset.cpus", "cpuset.mems")


def hierarchies(root: Path = CGROUP_ROOT) -> list[Path]:
    """Every mounted hierarchy (cgroup v1 controllers, the named systemd one, the unified v2 one, or v2 alone)."""
    if (root / "cgroup.controllers").exists():
        return [root]
    return sorted(path for path in root.iterdir() if path.is_dir() and (path / "cgroup.procs").exists())


def create(relative: str, root: Path = CGROUP_ROOT) -> None:
    """Create ``relative`` in every hierarchy; in cpuset, each new level copies its parent's CPUs and memory nodes
    (a cpuset cgroup without them accepts no process)."""
    for hierarchy in hierarchies(root):
        current = hierarchy
        for part in Path(relative).parts:
            parent, current = current, current / part
            if not current.is_dir():
                current.mkdir()
            for name in _CPUSET_FILES:
                target = current / name
                if target.exists() and not target.read_text(encoding="ascii").strip():
                    target.write_text((parent / name).read_text(encoding="ascii"), encoding="ascii")


def join(relative: str, pid: int, root: Path = CGROUP_ROOT) -> None:
    for hierarchy in hierarchies(root):
        (hierarchy / relative / "cgroup.procs").write_text(f"{pid}\n", encoding="ascii")


def processes(relative: str, root: Path = CGROUP_ROOT) -> set[int]:
    """Every process in the subtree, in any hierarchy."""
    found: set[int] = set()
    for hierarchy in hierarchies(root):
        top = hierarchy / relative
        if not top.is_dir():
            continue
        for directory, _subdirectories, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    text = (Path(directory) / "cgroup.procs").read_text(encoding="ascii")
                    found.update(int(line) for line in text.split())
    return found


def remove(relative: str, timeout: float = 30.0, root: Path = CGROUP_ROOT) -> list[str]:
    """SIGKILL every process in the subtree until none is left, then remove its directories, deepest first.
    Returns what could not be removed (empty when all went)."""
    deadline = time.monotonic() + timeout
    while (pids := processes(relative, root)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)  # the kernel needs a moment to reap them; polled with a deadline
    left = []
    for hierarchy in hierarchies(root):
        top = hierarchy / relative
        if not top.is_dir():
            continue
        directories = [Path(directory) for directory, _sub, _files in os.walk(top)]
        for directory in sorted(directories, key=lambda path: len(path.parts), reverse=True):
            removed = False
            while not removed and time.monotonic() < deadline:
                try:
                    directory.rmdir()
                    removed = True
                except FileNotFoundError:
                    removed = True
                except OSError:
                    time.sleep(0.1)
            if not removed:
                left.append(str(directory))
    # The cluster's own parent levels, when they are empty now.
    for hierarchy in hierarchies(root):
        parent = (hierarchy / relative).parent
        while parent != hierarchy:
            with contextlib.suppress(OSError):
                parent.rmdir()
            parent = parent.parent
    return left
