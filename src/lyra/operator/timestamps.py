"""Times as the API server writes them (RFC 3339 in UTC) and as Lyra writes its own: each read once per text, written
to the second (the API server's precision) or to the millisecond (for durations Lyra measures itself)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 time (as the API server writes it) in seconds since the epoch, or ``None``."""
    if not text:
        return None
    # A pass reads the same few times many times (statuses, pods): each text is parsed once.
    return _parse_rfc3339(text) if isinstance(text, str) else _parse_rfc3339.__wrapped__(text)


@functools.lru_cache(maxsize=4096)
def _parse_rfc3339(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@functools.lru_cache(maxsize=256)  # a pass writes its own clock's time many times
def format_time(seconds: float) -> str:
    """Seconds since the epoch as RFC 3339 in UTC, to the second (the API server's precision)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time_ms(seconds: float) -> str:
    """Seconds since the epoch as RFC 3339 in UTC, to the millisecond (for durations Lyra measures itself)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
