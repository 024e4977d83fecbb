"""The text files a user gives Lyra (a snapshot, a scenario, a cluster profile, a GPU catalogue, a kubeconfig, a
trace, a load series), decoded one way: UTF-8, a leading byte-order mark skipped (an editor's "UTF-8 with BOM"), and
a byte that is not UTF-8 said with where it is, in the line and column an editor shows (``not UTF-8: byte 0xff at
line 3, column 7``), and what to do, instead of the codec's ``'utf-8' codec can't decode byte 0xff in position
4117``, which names neither the file nor the line.

Reading a file whole (:func:`read_text_file`) or line by line (:func:`decoded_lines`, for a long CSV) says a fault
the same way; the reader that calls them names the file. Both read a bounded amount: a file given by mistake
(``/dev/zero``, a disk image) is refused once it passes the limit, instead of filling the memory.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

#: What a user can do about a file that is not UTF-8.
SAVE_AS_UTF8 = "save the file as UTF-8"

_MIB = 1024 * 1024
#: A file read whole (a scenario, a profile: a few KiB) larger than this is not one.
MAX_TEXT_FILE_BYTES = 16 * _MIB
#: A line (a row of a trace or a load series: under a hundred bytes) longer than this, its end not counted, is not
#: one.
MAX_LINE_BYTES = 1 * _MIB


class TextFileError(ValueError):
    """A text file that cannot be read, is larger than a limit or is not UTF-8; the message says where, in one
    line."""


def decode_utf8(data: bytes) -> str:
    """``data`` as text (a leading byte-order mark skipped); :class:`TextFileError` naming the line and column of
    the first byte that is not UTF-8."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as error:
        offset = skip + error.start
        line_start = max(data.rfind(b"\n", 0, offset) + 1, skip)
        line = data.count(b"\n", 0, offset) + 1
        raise TextFileError(
            f"not UTF-8: byte 0x{data[offset]:02x} at line {line}, column {_column(data[line_start:offset])}; "
            f"{SAVE_AS_UTF8}"
        ) from None


def read_at_most(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of the file ``path``, or ``None`` when it holds more than ``max_bytes`` (read no further: a file
    given by mistake never fills the memory); an ``OSError`` is the caller's to say."""
    with path.open("rb") as file:
        data = file.read(max_bytes + 1)
    return data if len(data) <= max_bytes else None


def read_text_file(path: Path, what: str, max_bytes: int = MAX_TEXT_FILE_BYTES) -> str:
    """The text of the file ``path``, which holds a ``what`` (``"scenario"``); a file that cannot be read, is larger
    than ``max_bytes`` or is not UTF-8 raises :class:`TextFileError` naming the file."""
    try:
        data = read_at_most(path, max_bytes)
    except OSError as error:
        raise TextFileError(f"{path}: cannot read the {what}: {error.strerror or error}") from None
    if data is None:
        raise TextFileError(f"{path}: larger than {_size(max_bytes)}, not a {what}")
    try:
        return decode_utf8(data)
    except TextFileError as error:
        raise TextFileError(f"{path}: {error}") from None


def decoded_lines(handle: BinaryIO, source: object) -> Iterator[str]:
    """Each line of ``handle`` (a file opened in binary) as text with its ending, for :mod:`csv` (which takes lines
    as a file opened with ``newline=""`` gives them); a line that is not UTF-8, or longer than
    :data:`MAX_LINE_BYTES`, raises :class:`TextFileError` naming ``source`` and the line."""
    number = 0
    while line := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):  # its end not within the limit
            raise TextFileError(f"{source}:{number}: a line longer than {_size(MAX_LINE_BYTES)}; is it a text file?")
        skip = len(codecs.BOM_UTF8) if number == 1 and line.startswith(codecs.BOM_UTF8) else 0
        try:
            text = line[skip:].decode("utf-8")
        except UnicodeDecodeError as error:
            bad = skip + error.start
            raise TextFileError(
                f"{source}:{number}: not UTF-8: byte 0x{line[bad]:02x} at column {_column(line[skip:bad])}; "
                f"{SAVE_AS_UTF8}"
            ) from None
        yield text


def _column(before: bytes) -> int:
    """The column, as an editor counts it (characters, a byte-order mark not one), of the byte after ``before``, the
    valid UTF-8 that precedes it on its line."""
    return len(before.decode("utf-8")) + 1


def _size(limit: int) -> str:
    return f"{limit // _MIB} MiB"
