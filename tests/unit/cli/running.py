"""Running ``lyra`` in the test's process as a shell would: the exit code, whether the command returned it or
argparse exited with it."""

from __future__ import annotations

from lyra.cli import main


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
