from __future__ import annotations

from pathlib import Path

import pytest

from lyra.sim.load import LoadError, LoadSeries, read_load
from tests.unit.sim.builders import write


def test_servegen_gaps_are_interpolated_per_model_and_counted(tmp_path: Path) -> None:
    path = write(
        tmp_path / "sg.csv",
        "t_sec,m_a_req_per_s,m_b_req_per_s,total_req_per_s\n0,10,1,11\n600,0,2,2\n1200,30,3,33\n1800,40,0,40\n",
    )
    load = read_load(path)
    assert load.step_s == 600
    assert load.gaps_filled == 2
    # m_a at 600 s: halfway between 10 and 30; m_b at 1800 s: the last known value, 3.
    assert load.rates == (11.0, 22.0, 33.0, 43.0)


def test_generic_zeros_are_real(tmp_path: Path) -> None:
    load = read_load(write(tmp_path / "g.csv", "t_sec,req_per_s\n0,0\n3600,5\n"))
    assert load.rates == (0.0, 5.0)
    assert load.gaps_filled == 0


def test_a_series_shorter_than_the_window_repeats_by_time_of_day() -> None:
    two_days = LoadSeries("<t>", 3600.0, (*(float(h) for h in range(48)), 99.0))
    assert two_days.period_s == 2 * 86_400  # the extra hour after whole days is not repeated
    assert two_days.rate_at(3 * 3600) == 3.0
    assert two_days.rate_at(2 * 86_400 + 3 * 3600) == 3.0  # day 3 = day 1
    assert two_days.rate_at(3 * 86_400 + 5 * 3600) == 29.0  # day 4 = day 2
    half_day = LoadSeries("<t>", 3600.0, tuple(float(h) for h in range(12)))
    assert half_day.period_s == 12 * 3600
    assert half_day.rate_at(13 * 3600) == 1.0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("0,1\n600,x\n", ":3: req_per_s must be a number, got 'x'"),
        ("0,1\n600,-1\n", ":3: req_per_s must be >= 0"),
        ("0,1\n600,1\n900,1\n", ":4: t_sec steps must be constant"),
        ("0,1\n0,1\n", ":3: t_sec must increase"),
        ("60,1\n120,1\n", ":2: t_sec must start at 0"),
    ],
)
def test_a_bad_row_names_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path / "g.csv", "t_sec,req_per_s\n" + body)
    with pytest.raises(LoadError) as error:
        read_load(path)
    assert str(error.value).startswith(str(path))
    assert message in str(error.value)


def test_a_series_that_is_not_utf8_is_named_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "g.csv"
    path.write_bytes(b"t_sec,req_per_s\n0,1\n600,\xfe\n")
    with pytest.raises(LoadError) as error:
        read_load(path)
    assert str(error.value) == f"{path}:3: not UTF-8: byte 0xfe at column 5; save the file as UTF-8"
