from __future__ import annotations

from pathlib import Path

import pytest

from lyra.sim.traces import TraceError, TraceFormat, read_trace
from tests.unit.sim.builders import write


def test_philly_rows_are_sorted_by_submit_time_and_read_as_utc(tmp_path: Path) -> None:
    path = write(
        tmp_path / "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,a\n"
        "2017-10-09 06:13:03,2951.0,4,11804.0,b\n",
    )
    trace = read_trace(path)
    assert trace.format is TraceFormat.PHILLY
    assert [j.name for j in trace.jobs] == ["philly-000003", "philly-000002"]
    assert trace.jobs[0].submit_s == 1507529583.0  # 2017-10-09 06:13:03 UTC
    assert (trace.jobs[0].duration_s, trace.jobs[0].num_gpus) == (2951.0, 4)


def test_generic_trace(tmp_path: Path) -> None:
    path = write(tmp_path / "jobs.csv", "submit_time,duration,num_gpus\n10,5,2\n0,7,1\n")
    trace = read_trace(path)
    assert trace.format is TraceFormat.GENERIC
    assert [(j.submit_s, j.duration_s, j.num_gpus) for j in trace.jobs] == [(0, 7, 1), (10, 5, 2)]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0,abc,1", "duration must be a number, got 'abc'"),
        ("0,-5,1", "duration must be > 0 seconds"),
        ("0,5,0", "num_gpus must be a whole number >= 1"),
        ("0,5,1.5", "num_gpus must be a whole number >= 1"),
        ("0,5", "missing column 'num_gpus'"),
        ("nan,5,1", "submit_time must be finite"),
    ],
)
def test_a_bad_row_names_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path / "jobs.csv", f"submit_time,duration,num_gpus\n0,1,1\n{row}\n")
    with pytest.raises(TraceError) as error:
        read_trace(path)
    assert str(error.value).startswith(f"{path}:3: ")
    assert message in str(error.value)


def test_a_bad_philly_timestamp_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\nyesterday,1,1,1,a\n")
    with pytest.raises(TraceError, match=r"p\.csv:2: timestamp must look like"):
        read_trace(path)


def test_unknown_header_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"x\.csv:1: unknown trace header"):
        read_trace(write(tmp_path / "x.csv", "a,b\n1,2\n"))
    with pytest.raises(TraceError, match=r"e\.csv:1: the trace is empty"):
        read_trace(write(tmp_path / "e.csv", ""))
    with pytest.raises(TraceError, match="cannot open"):
        read_trace(tmp_path / "missing.csv")


def test_openb_keeps_scheduled_best_effort_gpu_pods_and_counts_the_rest(tmp_path: Path) -> None:
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
    )
    rows = [
        "p0,1,1,1,500,,BE,Succeeded,100,400,150",  # kept: duration 400 - 150, fractional GPU counts as 1
        "p1,1,1,0,0,,BE,Running,0,10,0",  # no GPU
        "p2,1,1,1,1000,,LS,Running,0,10,0",  # serving
        "p3,1,1,2,1000,,BE,Pending,0,10,",  # never scheduled
        "p4,1,1,1,1000,,BE,Running,0,,5",  # still running at the end of the trace
        "p5,1,1,4,1000,,BE,Failed,50,60,60",  # deleted as it was scheduled
        "p6,1,1,4,1000,,BE,Failed,20,90,30",  # kept
    ]
    trace = read_trace(write(tmp_path / "pods.csv", header + "\n".join(rows) + "\n"))
    assert trace.format is TraceFormat.OPENB
    assert [(j.name, j.submit_s, j.duration_s, j.num_gpus) for j in trace.jobs] == [
        ("p6", 20.0, 60.0, 4),
        ("p0", 100.0, 250.0, 1),
    ]
    assert dict(trace.skipped) == {
        "deleted before it ran": 1,
        "never scheduled": 1,
        "no GPU": 1,
        "no deletion time": 1,
        "qos LS (not training-like)": 1,
    }


def test_a_trace_that_is_not_utf8_is_named_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_bytes(b"submit_time,duration,num_gpus\n0,1,1\n5,\xff,1\n")
    with pytest.raises(TraceError) as error:
        read_trace(path)
    assert str(error.value) == f"{path}:3: not UTF-8: byte 0xff at column 3; save the file as UTF-8"


def test_a_byte_order_mark_before_the_header_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_bytes(b"\xef\xbb\xbfsubmit_time,duration,num_gpus\r\n0,7,1\r\n")  # a spreadsheet's "CSV UTF-8"
    trace = read_trace(path)
    assert trace.format is TraceFormat.GENERIC
    assert [(j.submit_s, j.duration_s, j.num_gpus) for j in trace.jobs] == [(0, 7, 1)]
