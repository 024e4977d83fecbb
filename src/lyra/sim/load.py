"""Inference load: a request-rate series, how it repeats over a long window, and how it becomes servers.

Formats (detected from the header):

* **servegen**: ``t_sec,<model>_req_per_s...,total_req_per_s`` (the shipped ServeGen sum). A 0 in a per-model
  column is a collection gap, not an idle period: it is filled by linear interpolation between the nearest
  non-gap values of that model (the nearest one at either end), the total is recomputed, and the filled cells
  are counted in ``LoadSeries.gaps_filled``.
* **generic**: ``t_sec,req_per_s``; zeros are taken at face value.

Rows must have strictly increasing ``t_sec`` with a constant step; the value at time ``t`` is the row whose
window contains it. ``t_sec = 0`` is midnight. A series shorter than the simulated window repeats by time of day:
the period is the series length rounded down to whole days (a series shorter than one day repeats as it is).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lyra.sim.csvfiles import csv_with_header

DAY_S = 86_400.0


class LoadError(ValueError):
    """A load file cannot be read. The message starts with ``file:line``."""


@dataclass(frozen=True, slots=True)
class LoadSeries:
    """Request rate (req/s) in steps of ``step_s`` seconds starting at midnight."""

    path: str
    step_s: float
    rates: tuple[float, ...]
    gaps_filled: int = 0

    @property
    def period_s(self) -> float:
        """How often the series repeats: its length in whole days, or its length if shorter than a day."""
        length = self.step_s * len(self.rates)
        days = math.floor(length / DAY_S + 1e-9)
        return days * DAY_S if days >= 1 else length

    def index_at(self, seconds_since_midnight: float) -> int:
        """Row in force at a time measured from a midnight (any day)."""
        offset = math.fmod(seconds_since_midnight, self.period_s)
        if offset < 0:
            offset += self.period_s
        return min(int(offset // self.step_s), len(self.rates) - 1)

    def rate_at(self, seconds_since_midnight: float) -> float:
        return self.rates[self.index_at(seconds_since_midnight)]

    @property
    def mean_rate(self) -> float:
        """Mean over one period (the part of the series that repeats)."""
        used = self.rates[: max(1, round(self.period_s / self.step_s))]
        return math.fsum(used) / len(used)


def read_load(path: str | Path) -> LoadSeries:
    source = Path(path)
    with csv_with_header(source, "load series", LoadError) as (header, reader):
        if header[0] != "t_sec":
            raise LoadError(f"{source}:1: the first column must be t_sec, got {header[0]!r}")
        if "total_req_per_s" in header:
            models = [i for i, c in enumerate(header) if c.endswith("_req_per_s") and c != "total_req_per_s"]
            if not models:
                models = [header.index("total_req_per_s")]
        elif "req_per_s" in header:
            models = [header.index("req_per_s")]
        else:
            raise LoadError(
                f"{source}:1: expected a ServeGen header (t_sec,...,total_req_per_s) or t_sec,req_per_s, "
                f"got {','.join(header)!r}"
            )
        servegen = "total_req_per_s" in header
        times: list[float] = []
        columns: list[list[float]] = [[] for _ in models]
        for offset, row in enumerate(reader):
            line = offset + 2
            if not row or not any(cell.strip() for cell in row):
                continue
            times.append(_value(source, line, row, 0, "t_sec"))
            for k, position in enumerate(models):
                value = _value(source, line, row, position, header[position])
                if value < 0:
                    raise LoadError(f"{source}:{line}: {header[position]} must be >= 0, got {value:g}")
                columns[k].append(value)
            if len(times) >= 2 and times[-1] <= times[-2]:
                raise LoadError(f"{source}:{line}: t_sec must increase, got {times[-1]:g} after {times[-2]:g}")
    if len(times) < 2:
        raise LoadError(f"{source}: need at least two rows to know the step")
    step = times[1] - times[0]
    for i in range(2, len(times)):
        if not math.isclose(times[i] - times[i - 1], step, rel_tol=1e-9):
            raise LoadError(
                f"{source}:{i + 2}: t_sec steps must be constant ({step:g} s), got {times[i] - times[i - 1]:g}"
            )
    if times[0] != 0:
        raise LoadError(f"{source}:2: t_sec must start at 0 (midnight), got {times[0]:g}")
    filled = 0
    if servegen:
        for values in columns:
            filled += _fill_gaps(values)
    rates = tuple(math.fsum(values[i] for values in columns) for i in range(len(times)))
    return LoadSeries(str(source), step, rates, filled)


def _value(source: Path, line: int, row: Sequence[str], position: int, column: str) -> float:
    if position >= len(row):
        raise LoadError(f"{source}:{line}: missing column {column!r}")
    text = row[position].strip()
    try:
        value = float(text)
    except ValueError:
        raise LoadError(f"{source}:{line}: {column} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise LoadError(f"{source}:{line}: {column} must be finite, got {text!r}")
    return value


def _fill_gaps(values: list[float]) -> int:
    """Replace zeros by linear interpolation between the nearest non-zero neighbours; return how many."""
    known = [i for i, v in enumerate(values) if v > 0]
    if not known:
        return 0
    filled = 0
    for i, value in enumerate(values):
        if value > 0:
            continue
        left = max((k for k in known if k < i), default=None)
        right = min((k for k in known if k > i), default=None)
        if left is None:
            assert right is not None
            values[i] = values[right]
        elif right is None:
            values[i] = values[left]
        else:
            share = (i - left) / (right - left)
            values[i] = values[left] + share * (values[right] - values[left])
        filled += 1
    return filled
