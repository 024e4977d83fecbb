"""No input makes ``parse_snapshot`` raise anything but ``SnapshotError``: nesting, numbers, encodings, sizes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lyra.snapshot import MAX_JOBS, MAX_SERVERS, MAX_SNAPSHOT_BYTES, SnapshotError, parse_snapshot

FUZZ = settings(
    deadline=None, derandomize=True, database=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow]
)

JOB = '{"name": "j", "gpusPerWorker": 1, "minWorkers": 1, "maxWorkers": %s, "remainingWork": 1}'

HOSTILE: list[tuple[str, str | bytes, str]] = [
    ("deep-array", "[" * 100_000, "not valid JSON: nested too deeply"),
    ("deep-object", '{"a":' * 100_000, "not valid JSON: nested too deeply"),
    ("deep-inside-a-job", '{"servers": [], "jobs": [' + "[" * 100_000 + "]}", "nested too deeply"),
    ("huge-float", '{"servers": [], "x": 1e999}', "the number 1e999 is too large; numbers must be finite"),
    ("huge-negative", '{"servers": [], "x": -1e999}', "the number -1e999 is too large"),
    ("huge-integer", '{"servers": [], "x": ' + "9" * 5_000 + "}", "an integer of 5,000 digits is too large"),
    ("nan", '{"servers": [], "jobs": [' + JOB % "NaN" + "]}", "NaN is not a JSON number"),
    ("infinity", '{"servers": [], "jobs": [' + JOB % "Infinity" + "]}", "Infinity is not a JSON number"),
    ("minus-infinity", '{"servers": [], "x": -Infinity}', "-Infinity is not a JSON number"),
    ("max-workers-1e9", '{"servers": [], "jobs": [' + JOB % "1e9" + "]}", "jobs[0].maxWorkers (job 'j')"),
    (
        "max-workers-10**18",
        '{"servers": [], "jobs": [' + JOB % (10**18) + "]}",
        "maxWorkers (job 'j'): Input should be less",
    ),
    ("max-workers-10**30", '{"servers": [], "jobs": [' + JOB % (10**30) + "]}", "an integer of 31 digits is too large"),
    ("not-utf-8", b'{"servers": [{"name": "\xff"}]}', "not UTF-8: byte 0xff at line 1, column 24"),
    ("bad-after-a-byte-order-mark", b"\xef\xbb\xbf{\xfe}", "not UTF-8: byte 0xfe at line 1, column 2"),
    ("latin-1", '{"servers": [], "kind": "Schnappschu\xdf"}'.encode("latin-1"), "not UTF-8: byte 0xdf"),
    ("empty", b"", "not valid JSON"),
    ("binary", bytes(range(256)), "not UTF-8"),
    ("long-key", json.dumps({"servers": [], "k" * 100_000: 1}), "kkk…: Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in HOSTILE], ids=[i for i, _, _ in HOSTILE])
def test_hostile_input_is_refused_with_a_message(data: str | bytes, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        parse_snapshot(data)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 2_000


#: Inputs too big to build at collection time: built by the test.
OVERSIZED: list[tuple[str, Callable[[], str | bytes], str]] = [
    ("bytes", lambda: b" " * (MAX_SNAPSHOT_BYTES + 1), "larger than the limit of 64 MiB"),
    ("text", lambda: " " * (MAX_SNAPSHOT_BYTES + 1), "larger than the limit of 64 MiB"),
    ("multi-byte-text", lambda: "\u00e9" * (MAX_SNAPSHOT_BYTES // 2 + 1), "larger than the limit of 64 MiB"),
    ("servers", lambda: json.dumps({"servers": [{}] * (MAX_SERVERS + 1)}), "servers: 100,001 servers, more than"),
    ("jobs", lambda: json.dumps({"servers": [], "jobs": [{}] * (MAX_JOBS + 1)}), "jobs: 100,001 jobs, more than"),
]


@pytest.mark.parametrize(("build", "message"), [(b, m) for _, b, m in OVERSIZED], ids=[i for i, _, _ in OVERSIZED])
def test_oversized_input_is_refused_with_a_message(build: Callable[[], str | bytes], message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        parse_snapshot(build())


def test_a_document_at_the_size_limit_is_read() -> None:
    document = json.dumps({"servers": []}).encode()
    assert parse_snapshot(document + b" " * (MAX_SNAPSHOT_BYTES - len(document))).servers == ()


def test_a_utf_8_byte_order_mark_is_accepted() -> None:
    assert parse_snapshot(b'\xef\xbb\xbf{"servers": []}').jobs == ()


def _outcome(data: str | bytes) -> str:
    """ "parsed", or the message of the :class:`SnapshotError`; any other exception fails the test."""
    try:
        parse_snapshot(data)
    except SnapshotError as error:
        return str(error)
    return "parsed"


_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)

_BASE: dict[str, Any] = {
    "gpuCatalog": {"T4": {"speed": 0.4, "memoryGiB": 16}},
    "servers": [
        {"name": "t0", "pool": "training", "gpuType": "A100", "gpus": 8},
        {"name": "i0", "pool": "inference", "gpuType": "T4", "gpus": 8, "state": "loaned"},
    ],
    "jobs": [
        {
            "name": "j",
            "gpusPerWorker": 2,
            "minWorkers": 1,
            "maxWorkers": 4,
            "remainingWork": 100,
            "gpuTypes": ["T4"],
            "speeds": {"T4": 0.5},
            "workers": {"i0": 2},
        }
    ],
}
_PATHS = [
    ("gpuCatalog", "T4", "speed"),
    ("gpuCatalog", "T4", "memoryGiB"),
    ("gpuCatalog", "T4"),
    ("gpuCatalog",),
    ("servers", 0, "gpus"),
    ("servers", 1, "state"),
    ("servers", 0, "state"),
    ("servers", 1, "gpuType"),
    ("servers",),
    ("jobs", 0, "gpusPerWorker"),
    ("jobs", 0, "minWorkers"),
    ("jobs", 0, "maxWorkers"),
    ("jobs", 0, "remainingWork"),
    ("jobs", 0, "gpuTypes"),
    ("jobs", 0, "gpuMemoryGiB"),
    ("jobs", 0, "speeds"),
    ("jobs", 0, "mixGpuTypes"),
    ("jobs", 0, "scalingOverhead"),
    ("jobs", 0, "workers"),
    ("jobs", 0, "workers", "i0"),
    ("jobs", 0),
    ("jobs",),
]


@FUZZ
@given(path=st.sampled_from(_PATHS), value=_JSON)
def test_any_value_anywhere_gives_a_snapshot_or_a_snapshot_error(path: tuple[str | int, ...], value: Any) -> None:
    document = json.loads(json.dumps(_BASE))
    node: Any = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    assert _outcome(json.dumps(document))


@FUZZ
@given(data=st.binary(max_size=200))
def test_any_bytes_give_a_snapshot_or_a_snapshot_error(data: bytes) -> None:
    assert _outcome(data)
