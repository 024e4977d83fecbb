"""`lyra simulate` commands (being built; see the open issue)."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: "argparse._SubParsersAction[Any]") -> None:
    """Register the `simulate` command group. Filled in by the simulate work."""
