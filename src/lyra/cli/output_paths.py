"""Where a command writes its results, checked before its work and written after it without a traceback.

A simulation or a report runs for minutes and writes at the end. A path that cannot be written must be refused
before that work (exit 2), and a write that fails anyway (the disk filled meanwhile) must be said in one line.

Permission bits do not answer whether a directory can be written: root passes every ``os.access`` check, and a
read-only file system or a kernel's own tree (``/proc``) refuses even root. So the check makes, and removes at once,
an empty directory where the first missing part of the path would go: the same call the run will make.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The prefix of the empty directory made and removed to learn whether a place can be written.
PROBE_PREFIX = ".lyra-write-check-"


class OutputError(ValueError):
    """An output path cannot be written: before the run (bad input) or while writing its results."""


def check_directory(directory: Path, flag: str) -> None:
    """Raise :class:`OutputError` unless ``directory`` is, or could be created as, a directory this process can
    write into. Nothing is left behind: the check's probe directory is removed."""
    existing = _nearest_existing(directory)
    if not existing.is_dir():
        raise OutputError(f"{flag} {directory} is not writable: {existing} is a file, not a directory")
    try:
        probe = tempfile.mkdtemp(prefix=PROBE_PREFIX, dir=existing)
    except OSError as error:
        why = _why(error, existing, f"{existing} takes no new directory")
        raise OutputError(f"{flag} {directory} is not writable: {why}") from None
    shutil.rmtree(probe, ignore_errors=True)


def check_file(path: Path, flag: str) -> None:
    """Raise :class:`OutputError` unless ``path`` names a file this process can create or overwrite."""
    if path.is_dir():
        raise OutputError(f"{flag} {path} is a directory; give a file name, e.g. {path / 'results.json'}")
    if not path.exists():
        check_directory(path.parent, f"{flag} {path}: its directory")
    else:  # overwritten in place: its directory need take no new entry
        try:
            with path.open("a", encoding="utf-8"):  # appends nothing: the file is left as it is
                pass
        except OSError as error:
            why = _why(error, path, "it cannot be opened for writing")
            raise OutputError(f"{flag} {path} exists and is not writable: {why}") from None


def write_text(path: Path, text: str, flag: str) -> None:
    """Write ``text`` into ``path`` (its directories created); a failure becomes an :class:`OutputError`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise OutputError(f"cannot write {flag} {path}: {_why(error, path, 'the write failed')}") from None


@contextmanager
def writing_into(directory: Path, flag: str) -> Iterator[None]:
    """Create ``directory`` and its parents, then run the block that writes into it; a failure of either becomes an
    :class:`OutputError` naming ``flag``."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        yield
    except OSError as error:
        why = _why(error, directory, "the write failed")
        raise OutputError(f"cannot write into {flag} {directory}: {why}") from None


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (resolved against the working directory)."""
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def _why(error: OSError, where: Path, otherwise: str) -> str:
    """What a user can act on: permission, a read-only file system, a full disk; else ``otherwise`` and the system's
    own words."""
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"no write permission on {where}"
    if error.errno == errno.EROFS:
        return f"{where} is on a read-only file system"
    if error.errno == errno.ENOSPC:
        return f"no space left on the device of {where}"
    return f"{otherwise} ({error.strerror or type(error).__name__})"
