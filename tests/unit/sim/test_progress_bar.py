"""The simulator's progress output: redrawn in place on a terminal, sparse lines in a log."""

from __future__ import annotations

import io

from lyra.cli.simulate_commands import ProgressBar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(bar: ProgressBar) -> None:
    for step in range(201):
        bar(step / 200)


def test_a_log_gets_one_line_per_quarter() -> None:
    stream = io.StringIO()
    _drive(ProgressBar("lyra", stream))
    lines = stream.getvalue().splitlines()
    assert [line.split("]")[1].split("%")[0].strip() for line in lines] == ["0", "25", "50", "75", "100"]
    assert "\r" not in stream.getvalue()


def test_a_terminal_gets_one_redrawn_line() -> None:
    stream = _Terminal()
    _drive(ProgressBar("lyra", stream))
    text = stream.getvalue()
    assert text.count("\r") == 101
    assert "100%" in text.split("\r")[-1]
    assert text.count("\n") == 1
