"""The text files a user gives Lyra (a snapshot, a scenario, a cluster profile, a GPU catalogue, a trace, a load
series), decoded one way: UTF-8, a leading byte-order mark skipped (an editor's "UTF-8 with BOM"), and a byte that
is not UTF-8 said with where it is (``not UTF-8: byte 0xff at line 3, column 7``) and what to do, instead of the
codec's ``'utf-8' codec can't decode byte 0xff in position 4117``, which names neither the file nor the line.

Reading a file whole (:func:`read_text_file`) or line by line (:func:`decoded_lines`, for a long CSV) says a fault
the same way; the reader that calls them names the file.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from pathlib import Path

#: What a user can do about a file that is not UTF-8.
SAVE_AS_UTF8 = "save the file as UTF-8"


class TextFileError(ValueError):
    """A text file that cannot be read or is not UTF-8; the message says where, in one line."""


def decode_utf8(data: bytes) -> str:
    """``data`` as text (a leading byte-order mark skipped); :class:`TextFileError` naming the line and column of
    the first byte that is not UTF-8."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as error:
        offset = skip + error.start
        line_start = data.rfind(b"\n", 0, offset) + 1
        line = data.count(b"\n", 0, offset) + 1
        raise TextFileError(
            f"not UTF-8: byte 0x{data[offset]:02x} at line {line}, column {offset - line_start + 1}; {SAVE_AS_UTF8}"
        ) from None


def read_text_file(path: Path, what: str) -> str:
    """The text of the file ``path``, which holds a ``what`` (``"scenario"``); a file that cannot be read or is not
    UTF-8 raises :class:`TextFileError` naming the file."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise TextFileError(f"{path}: cannot read the {what}: {error.strerror or error}") from None
    try:
        return decode_utf8(data)
    except TextFileError as error:
        raise TextFileError(f"{path}: {error}") from None


def decoded_lines(lines: Iterable[bytes], source: object) -> Iterator[str]:
    """Each of ``lines`` (a file opened in binary, read line by line) as text, for :mod:`csv` (which takes lines
    with their endings, as a file opened with ``newline=""`` gives them); a line that is not UTF-8 raises
    :class:`TextFileError` naming ``source`` and the line."""
    for number, line in enumerate(lines, start=1):
        skip = len(codecs.BOM_UTF8) if number == 1 and line.startswith(codecs.BOM_UTF8) else 0
        try:
            text = line[skip:].decode("utf-8")
        except UnicodeDecodeError as error:
            column = skip + error.start
            raise TextFileError(
                f"{source}:{number}: not UTF-8: byte 0x{line[column]:02x} at column {column + 1}; {SAVE_AS_UTF8}"
            ) from None
        yield text
