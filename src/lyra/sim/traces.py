"""Training traces: read a job list from the Philly, openb or generic CSV format into plain records.

Every number must be finite and every duration in (0 s, a year]: a longer job could never finish inside a run's
window. Every reader returns jobs sorted by (submit time, line number), so the order never depends on how the file was
sorted (Philly's rows are not). A malformed row stops the read with ``file:line`` and what is wrong, except for
the openb rows that are not training jobs at all, which are skipped by the documented rule and counted.

Formats (detected from the header):

* **philly**: ``timestamp,duration,num_gpus,gpu_time,cluster``; ``timestamp`` is wall clock
  (``YYYY-MM-DD HH:MM:SS``, read as UTC so the result does not depend on the machine's time zone).
* **generic**: ``submit_time,duration,num_gpus`` in seconds (any further columns are ignored).
* **openb**: the Alibaba GPU trace pod list. A pod becomes a training job when it asks for a GPU
  (``num_gpu >= 1``), has QoS ``BE`` (best effort, training-like; ``LS`` is latency-sensitive serving, and
  ``Burstable``/``Guaranteed`` are not identifiable as training), was scheduled (``scheduled_time`` present:
  pending pods never ran) and was deleted after it was scheduled. Its duration is
  ``deletion_time - scheduled_time`` (the time it held the GPU), its submit time ``creation_time``.
  A fractional GPU share (``gpu_milli < 1000``) counts as one whole GPU.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lyra.sim.csvfiles import csv_with_header


class TraceError(ValueError):
    """A trace file cannot be read. The message starts with ``file:line``."""


class TraceFormat(enum.StrEnum):
    PHILLY = "philly"
    GENERIC = "generic"
    OPENB = "openb"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One training job as the trace states it: submitted at ``submit_s``, ran ``duration_s`` on ``num_gpus``."""

    name: str
    submit_s: float
    duration_s: float
    num_gpus: int


def _rebuild_trace(path: str, fmt: TraceFormat, jobs: tuple[TraceJob, ...], skipped: dict[str, int]) -> Trace:
    return Trace(path, fmt, jobs, MappingProxyType(skipped))


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs sorted by submit time. ``skipped`` counts rows left out by a documented rule, by reason."""

    path: str
    format: TraceFormat
    jobs: tuple[TraceJob, ...]
    skipped: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __reduce__(self) -> tuple[Any, ...]:
        # A read-only mapping does not pickle; sweeps send traces to worker processes.
        return (_rebuild_trace, (self.path, self.format, self.jobs, dict(self.skipped)))

    @property
    def first_submit_s(self) -> float:
        return self.jobs[0].submit_s if self.jobs else 0.0

    @property
    def last_submit_s(self) -> float:
        return self.jobs[-1].submit_s if self.jobs else 0.0


_PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")
_GENERIC_COLUMNS = ("submit_time", "duration", "num_gpus")
_OPENB_COLUMNS = ("num_gpu", "qos", "creation_time", "deletion_time", "scheduled_time")


def read_trace(path: str | Path) -> Trace:
    """Read a training trace, detecting its format from the header row."""
    source = Path(path)
    with csv_with_header(source, "trace", TraceError) as (columns, reader):
        fmt = _detect(source, columns)
        index = {name: i for i, name in enumerate(columns)}
        rows = _numbered(reader)
        if fmt is TraceFormat.PHILLY:
            jobs, skipped = _read_philly(source, index, rows), Counter[str]()
        elif fmt is TraceFormat.GENERIC:
            jobs, skipped = _read_generic(source, index, rows), Counter[str]()
        else:
            jobs, skipped = _read_openb(source, index, rows)
    ordered = tuple(job for _, job in sorted(jobs, key=lambda item: (item[1].submit_s, item[0])))
    if not ordered:
        raise TraceError(f"{source}: no training jobs in the trace")
    return Trace(str(source), fmt, ordered, MappingProxyType(dict(sorted(skipped.items()))))


def _detect(source: Path, columns: list[str]) -> TraceFormat:
    present = set(columns)
    if present.issuperset(_PHILLY_COLUMNS):
        return TraceFormat.PHILLY
    if present.issuperset(_GENERIC_COLUMNS):
        return TraceFormat.GENERIC
    if present.issuperset(_OPENB_COLUMNS):
        return TraceFormat.OPENB
    raise TraceError(
        f"{source}:1: unknown trace header {','.join(columns)!r}; expected Philly "
        f"({','.join(_PHILLY_COLUMNS)},...), generic ({','.join(_GENERIC_COLUMNS)}) "
        f"or openb ({','.join(_OPENB_COLUMNS)},...)"
    )


def _numbered(reader: Iterator[list[str]]) -> Iterator[tuple[int, list[str]]]:
    for offset, row in enumerate(reader):
        if row and any(cell.strip() for cell in row):
            yield offset + 2, row


def _cell(source: Path, line: int, row: list[str], index: Mapping[str, int], column: str) -> str:
    position = index[column]
    if position >= len(row):
        raise TraceError(f"{source}:{line}: missing column {column!r}")
    return row[position].strip()


def _number(source: Path, line: int, row: list[str], index: Mapping[str, int], column: str) -> float:
    text = _cell(source, line, row, index, column)
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{source}:{line}: {column} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise TraceError(f"{source}:{line}: {column} must be finite, got {text!r}")
    return value


def _gpus(source: Path, line: int, row: list[str], index: Mapping[str, int], column: str) -> int:
    value = _number(source, line, row, index, column)
    if value < 1 or value != int(value):
        raise TraceError(f"{source}:{line}: {column} must be a whole number >= 1, got {value:g}")
    return int(value)


#: The longest job a trace may hold (one year): a longer one could never finish inside a run's window.
MAX_DURATION_S = 365 * 86_400.0


def _duration(source: Path, line: int, value: float) -> float:
    if value <= 0:
        raise TraceError(f"{source}:{line}: duration must be > 0 seconds, got {value:g}")
    if value > MAX_DURATION_S:
        raise TraceError(f"{source}:{line}: duration must be at most {MAX_DURATION_S:g} s (a year), got {value:g}")
    return value


def _read_philly(
    source: Path, index: Mapping[str, int], rows: Iterator[tuple[int, list[str]]]
) -> list[tuple[int, TraceJob]]:
    jobs = []
    for line, row in rows:
        stamp = _cell(source, line, row, index, "timestamp")
        try:
            submit = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise TraceError(f"{source}:{line}: timestamp must look like 2017-10-03 14:05:00, got {stamp!r}") from None
        duration = _duration(source, line, _number(source, line, row, index, "duration"))
        gpus = _gpus(source, line, row, index, "num_gpus")
        jobs.append((line, TraceJob(f"philly-{line:06d}", submit, duration, gpus)))
    return jobs


def _read_generic(
    source: Path, index: Mapping[str, int], rows: Iterator[tuple[int, list[str]]]
) -> list[tuple[int, TraceJob]]:
    jobs = []
    for line, row in rows:
        submit = _number(source, line, row, index, "submit_time")
        duration = _duration(source, line, _number(source, line, row, index, "duration"))
        gpus = _gpus(source, line, row, index, "num_gpus")
        jobs.append((line, TraceJob(f"job-{line:06d}", submit, duration, gpus)))
    return jobs


def _read_openb(
    source: Path, index: Mapping[str, int], rows: Iterator[tuple[int, list[str]]]
) -> tuple[list[tuple[int, TraceJob]], Counter[str]]:
    jobs = []
    skipped: Counter[str] = Counter()
    named = "name" in index
    for line, row in rows:
        gpus = _number(source, line, row, index, "num_gpu")
        if gpus < 0 or gpus != int(gpus):
            raise TraceError(f"{source}:{line}: num_gpu must be a whole number >= 0, got {gpus:g}")
        qos = _cell(source, line, row, index, "qos")
        if gpus == 0:
            skipped["no GPU"] += 1
            continue
        if qos != "BE":
            skipped[f"qos {qos or 'empty'} (not training-like)"] += 1
            continue
        if not _cell(source, line, row, index, "scheduled_time"):
            skipped["never scheduled"] += 1
            continue
        if not _cell(source, line, row, index, "deletion_time"):
            skipped["no deletion time"] += 1
            continue
        created = _number(source, line, row, index, "creation_time")
        scheduled = _number(source, line, row, index, "scheduled_time")
        deleted = _number(source, line, row, index, "deletion_time")
        if deleted <= scheduled:
            skipped["deleted before it ran"] += 1
            continue
        name = _cell(source, line, row, index, "name") if named else ""
        jobs.append(
            (
                line,
                TraceJob(name or f"openb-{line:06d}", created, _duration(source, line, deleted - scheduled), int(gpus)),
            )
        )
    return jobs, skipped
