"""`lyra plan` commands (being built)."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: "argparse._SubParsersAction[Any]") -> None:
    """Register the `plan` command group."""
