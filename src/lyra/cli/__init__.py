"""The ``lyra`` command line.

Each command group lives in its own module and registers a sub-parser; the adapters behind them are imported
only when their command runs, so ``lyra --help`` stays fast and a missing optional tool never breaks another
command.

Exit codes (`lyra.cli.exit_codes`): 0 success, 1 the command ran and failed, 2 bad input (usage, flags, files),
3 `lyra check` found a violated invariant, 130 Ctrl-C, 141 the reader of standard output went away (1 when it
cannot be written otherwise: a full disk, a closed descriptor).
"""

from __future__ import annotations

import argparse
import os
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
from lyra.cli.stopping import OutputFailed, output_closed, stopped_by, stopped_exit_code, stopped_when_output_fails


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser sets ``run`` (what runs it) and ``prog`` (its name in messages: ``lyra plan
    allocate``)."""
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
    _discard_closed_standard_error()
    try:
        with stopped_when_output_fails():
            try:
                return _parse_and_run(argv)
            finally:  # what the command printed reaches its reader here, where a failed output is caught
                sys.stdout.flush()
    except KeyboardInterrupt as stopped:  # from the flush above, or from argparse's --help or --version
        if isinstance(stopped, OutputFailed):
            print(f"lyra: {stopped_by(stopped)}", file=sys.stderr)
        elif not output_closed(stopped):
            raise
        return stopped_exit_code(stopped)


def _parse_and_run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = args.run
    try:
        code: int = run(args)
    except KeyboardInterrupt as interrupt:
        if isinstance(interrupt, OutputFailed):
            print(f"{args.prog}: {stopped_by(interrupt)}", file=sys.stderr)
        elif not output_closed(interrupt):
            print("interrupted", file=sys.stderr)
        return stopped_exit_code(interrupt)
    return code


def _discard_closed_standard_error() -> None:
    """Standard error closed before the command started (``2>&-``: Python's ``sys.stderr`` is None): its messages go
    nowhere, where ``print(..., file=sys.stderr)`` would write them to standard output, into the command's output."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (open for the process' life)
