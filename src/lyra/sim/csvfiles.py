"""Opening the simulator's CSV inputs, with errors that name the file (and line) the way every reader does: a file
that is not UTF-8 is said at its line (:mod:`lyra.text_files`), a leading byte-order mark is skipped."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from lyra.text_files import TextFileError, decoded_lines


@contextmanager
def csv_with_header(
    source: Path, what: str, error: type[ValueError]
) -> Iterator[tuple[list[str], Iterator[list[str]]]]:
    """Yield the stripped header row and a reader positioned on the first data row (line 2).

    A file that cannot be opened, or that has no header row, raises ``error`` naming the file and ``what`` it is.
    """
    try:
        handle = source.open("rb")
    except OSError as failure:
        raise error(f"{source}: cannot open the {what}: {failure.strerror}") from failure
    with handle:
        reader = csv.reader(_text_lines(handle, source, error))
        header = next(reader, None)
        if not header:
            raise error(f"{source}:1: the {what} is empty (expected a header row)")
        yield [column.strip() for column in header], reader


def _text_lines(handle: BinaryIO, source: Path, error: type[ValueError]) -> Iterator[str]:
    try:
        yield from decoded_lines(handle, source)
    except TextFileError as failure:
        raise error(str(failure)) from None
