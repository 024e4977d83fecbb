"""`lyra cluster` commands (being built; see the open issue)."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: "argparse._SubParsersAction[Any]") -> None:
    """Register the `cluster` command group. Filled in by the cluster work."""
