"""Where the binary cache and the cluster state live, outside the repository.

The cache (built binaries, the Go module and build caches) is keyed by version and shared by every checkout and
every test session; the state of a running cluster is per cluster name. Both follow the XDG base directories and
can be moved with environment variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$LYRA_CACHE_DIR``, else ``$XDG_CACHE_HOME/lyra``, else ``~/.cache/lyra``."""
    env = os.environ if environ is None else environ
    if env.get("LYRA_CACHE_DIR"):
        return Path(env["LYRA_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "lyra"


def state_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$LYRA_STATE_DIR``, else ``$XDG_STATE_HOME/lyra``, else ``~/.local/state/lyra``."""
    env = os.environ if environ is None else environ
    if env.get("LYRA_STATE_DIR"):
        return Path(env["LYRA_STATE_DIR"]).expanduser()
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser() / "lyra"


def cluster_state_dir(name: str, environ: Mapping[str, str] | None = None) -> Path:
    return state_root(environ) / "cluster" / name
