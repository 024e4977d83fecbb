"""The ``lyra`` command line.

Each command group lives in its own module and registers a sub-parser; the adapters behind them are imported
only when their command runs, so ``lyra --help`` stays fast and a missing optional tool never breaks another
command.

Exit codes (`lyra.cli.exit_codes`): 0 success, 1 the command ran and failed, 2 bad input (usage, flags, files),
3 `lyra check` found a violated invariant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lyra import __version__
from lyra.cli import (
    api_commands,
    chart_commands,
    check_commands,
    cluster_commands,
    demo_commands,
    emulate_commands,
    extender_commands,
    image_commands,
    nodes_commands,
    operator_commands,
    plan_commands,
    report_commands,
    simulate_commands,
    status_commands,
)
from lyra.cli.exit_codes import EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lyra",
        description="Lend idle inference GPU servers to elastic training jobs, and take them back cheaply.",
    )
    parser.add_argument("--version", action="version", version=f"lyra {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    plan_commands.register(commands)
    cluster_commands.register(commands)
    simulate_commands.register(commands)
    extender_commands.register(commands)
    operator_commands.register(commands)
    status_commands.register(commands)
    check_commands.register(commands)
    emulate_commands.register(commands)
    api_commands.register(commands)
    chart_commands.register(commands)
    report_commands.register(commands)
    nodes_commands.register(commands)
    image_commands.register(commands)
    demo_commands.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = args.run
    try:
        code: int = run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code
