"""Files generated from Lyra's sources (CRDs, the chart's files, ``manifests/``): written, or checked for drift.

The drift check compares bytes: a checked-in file edited into something that is not UTF-8, a directory where a file
should be, or a file that cannot be read all count as differing, named, never a traceback. Writing goes through
:mod:`lyra.cli.output_paths`, so a place that cannot be written is said in one line naming the flag.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lyra.cli.output_paths import write_text


def differing(wanted: Mapping[Path, str]) -> list[Path]:
    """The paths of ``wanted`` whose file is missing, unreadable or not byte for byte its text in UTF-8, in
    ``wanted``'s order."""
    return [path for path, text in wanted.items() if not _holds(path, text.encode("utf-8"))]


def write_all(wanted: Mapping[Path, str]) -> None:
    """Write every file of ``wanted`` (directories created), in ``wanted``'s order; the first failure raises
    :class:`lyra.cli.output_paths.OutputError` naming the file."""
    for path, text in wanted.items():
        write_text(path, text, "the generated file")


def _holds(path: Path, content: bytes) -> bool:
    try:
        return path.is_file() and path.read_bytes() == content
    except OSError:
        return False
