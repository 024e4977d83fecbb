"""The exit codes of every ``lyra`` command: 0 success, 1 the command ran and failed, 2 bad input (usage, flags,
files); ``lyra check`` alone uses 3 for a cluster it read whose invariants are violated. Errors go to standard error
as ``lyra <command>: <message>``."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_BAD_INPUT: Final = 2
#: `lyra check` only: the cluster was read and at least one invariant is violated.
EXIT_VIOLATIONS: Final = 3
