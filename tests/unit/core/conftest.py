"""Shared fixtures of the policy-core tests, and the proof figures printed at the end of every run.

Proof tests record their measured figures (optimality rates, gaps, ratios) through the session-scoped ``figures``
fixture; ``pytest_terminal_summary`` prints them in a "Lyra policy-core proof figures" section, so a plain
``uv run pytest tests/unit/core -m proof`` shows them without ``-s``.
"""

from __future__ import annotations

import pytest


class Figures:
    """Lines of measured figures, grouped by section, in the order the tests recorded them."""

    def __init__(self) -> None:
        self.sections: dict[str, list[str]] = {}

    def record(self, section: str, line: str) -> None:
        self.sections.setdefault(section, []).append(line)


FIGURES = pytest.StashKey[Figures]()


@pytest.fixture(scope="session")
def figures(request: pytest.FixtureRequest) -> Figures:
    config = request.config
    if FIGURES not in config.stash:
        config.stash[FIGURES] = Figures()
    return config.stash[FIGURES]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    collected = config.stash.get(FIGURES, None)
    if collected is None or not collected.sections:
        return
    terminalreporter.section("Lyra policy-core proof figures")
    for section, lines in collected.sections.items():
        terminalreporter.write_line(section)
        for line in lines:
            terminalreporter.write_line(f"  {line}")
