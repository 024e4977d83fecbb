"""Plotting is the ``report`` extra (matplotlib), so Lyra's runtime image carries no plotting library: the commands
that draw (`lyra report`, `lyra simulate` without --no-plots) check for it first and say how to get it."""

from __future__ import annotations

import importlib.util


def missing_plotting(command: str) -> str | None:
    """None when matplotlib can be imported, else the message ``command`` should print."""
    if importlib.util.find_spec("matplotlib") is not None:
        return None
    return (
        f"{command} draws with matplotlib, which is not installed here (Lyra's image leaves it out): install Lyra "
        "with its `report` extra, `pip install 'lyra-scheduler[report]'` (a checkout's `uv sync` installs it)"
    )
