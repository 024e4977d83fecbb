"""The exit codes of every ``lyra`` command: 0 success, 1 the command ran and failed (standard output that cannot
be written included: a full disk, ``>&-``), 2 bad input (usage, flags, files); ``lyra check`` alone uses 3 for a
cluster it read whose invariants are violated; 130: stopped by Ctrl-C (``lyra demo``, ``lyra cluster up``,
``lyra image`` also 143 for SIGTERM and 129 for SIGHUP, after stopping what they started: :mod:`lyra.cli.stopping`);
141: the reader of standard output went away (``lyra status | head -1``), quietly, as a shell reports a command that
SIGPIPE stopped.
Errors go to standard error as ``lyra <command>: <message>``."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_BAD_INPUT: Final = 2
#: `lyra check` only: the cluster was read and at least one invariant is violated.
EXIT_VIOLATIONS: Final = 3
#: Stopped by Ctrl-C (SIGINT), as a shell reports it (128 + 2), after stopping what the command started.
EXIT_INTERRUPTED: Final = 130
#: The reader of standard output went away (``| head -1``): stopped quietly, as a shell reports a process that SIGPIPE
#: ended (128 + 13); Python ignores SIGPIPE and sees a BrokenPipeError instead.
EXIT_BROKEN_PIPE: Final = 141
