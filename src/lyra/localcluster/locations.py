"""Where the binary cache and the cluster state live, outside the repository.

The cache (built binaries, the Go module and build caches) is keyed by version and shared by every checkout and
every test session; the state of a running cluster is per cluster name. Both follow the XDG base directories and
can be moved with environment variables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

#: A cluster's name: its state directory is ``cluster/<name>`` and ``down`` removes that directory, so a name is one
#: path segment of its own (no ``/``, not ``.``, ``..`` or empty, which would name the directory of every cluster or
#: one outside it).
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")

#: The environment variables that move the cache and the state.
CACHE_DIR_ENV = "LYRA_CACHE_DIR"
STATE_DIR_ENV = "LYRA_STATE_DIR"


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$LYRA_CACHE_DIR``, else ``$XDG_CACHE_HOME/lyra``, else ``~/.cache/lyra``."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "lyra"


def state_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$LYRA_STATE_DIR``, else ``$XDG_STATE_HOME/lyra``, else ``~/.local/state/lyra``."""
    env = os.environ if environ is None else environ
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]).expanduser()
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser() / "lyra"


def cluster_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a cluster (``None`` if it can)."""
    if CLUSTER_NAME.fullmatch(name):
        return None
    return f"expected 1 to 63 letters, digits, '-', '_' or '.', starting with a letter or a digit, got {name[:80]!r}"


def cluster_state_dir(name: str, environ: Mapping[str, str] | None = None) -> Path:
    """The state directory of the cluster ``name`` (a :data:`CLUSTER_NAME`: anything else is refused, as it could
    name the directory of every cluster, which ``down`` would remove)."""
    problem = cluster_name_problem(name)
    if problem is not None:
        raise ValueError(f"cluster name: {problem}")
    return state_root(environ) / "cluster" / name
