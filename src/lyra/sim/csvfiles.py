"""Opening the simulator's CSV inputs, with errors that name the file (and line) the way every reader does."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def csv_with_header(
    source: Path, what: str, error: type[ValueError]
) -> Iterator[tuple[list[str], Iterator[list[str]]]]:
    """Yield the stripped header row and a reader positioned on the first data row (line 2).

    A file that cannot be opened, or that has no header row, raises ``error`` naming the file and ``what`` it is.
    """
    try:
        handle = source.open(newline="", encoding="utf-8")
    except OSError as failure:
        raise error(f"{source}: cannot open the {what}: {failure.strerror}") from failure
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header:
            raise error(f"{source}:1: the {what} is empty (expected a header row)")
        yield [column.strip() for column in header], reader
