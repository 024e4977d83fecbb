"""A user's text file is UTF-8 with or without a byte-order mark; a byte that is not UTF-8 is said with its line and
column, read whole or line by line, never as the codec's position in a buffer."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from lyra.text_files import MAX_LINE_BYTES, TextFileError, decode_utf8, decoded_lines, read_text_file


def test_text_with_or_without_a_byte_order_mark_is_read() -> None:
    assert decode_utf8("é: 1\n".encode()) == "é: 1\n"
    assert decode_utf8(b"\xef\xbb\xbfa: 1\n") == "a: 1\n"
    assert decode_utf8(b"") == ""


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"\xff", "not UTF-8: byte 0xff at line 1, column 1; save the file as UTF-8"),
        (b'a: 1\nname: "\xe9t\xe9"\n', "not UTF-8: byte 0xe9 at line 2, column 8; save the file as UTF-8"),
        (b"\xef\xbb\xbf{\xfe}", "not UTF-8: byte 0xfe at line 1, column 2; save the file as UTF-8"),
        ("a: 1\nname: é".encode() + b"\xff", "not UTF-8: byte 0xff at line 2, column 8; save the file as UTF-8"),
        ("é\n".encode() + b"\n\xc3", "not UTF-8: byte 0xc3 at line 3, column 1; save the file as UTF-8"),
    ],
    ids=["first-byte", "latin-1", "after-a-byte-order-mark", "after-a-character-of-two-bytes", "cut-short"],
)
def test_a_byte_that_is_not_utf8_is_said_at_its_line_and_column(data: bytes, said: str) -> None:
    with pytest.raises(TextFileError) as raised:
        decode_utf8(data)
    assert str(raised.value) == said


def test_a_file_is_named_in_every_fault(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_text_file(tmp_path / "good.yaml", "scenario") == "a: 1\n"
    (tmp_path / "bad.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(TextFileError, match=rf"^{tmp_path}/bad.yaml: not UTF-8: byte 0xff at line 1, column 4;"):
        read_text_file(tmp_path / "bad.yaml", "scenario")
    with pytest.raises(TextFileError, match=rf"^{tmp_path}: cannot read the scenario: Is a directory$"):
        read_text_file(tmp_path, "scenario")
    with pytest.raises(TextFileError, match=rf"^{tmp_path}/gone.yaml: cannot read the profile: No such file"):
        read_text_file(tmp_path / "gone.yaml", "profile")


def test_lines_are_decoded_one_by_one_and_a_bad_one_is_named() -> None:
    lines = io.BytesIO(b"\xef\xbb\xbfa,b\r\n" + "é,1\n".encode() + "é,".encode() + b"\xff\nnever read\n")
    read = decoded_lines(lines, "t.csv")
    assert [next(read), next(read)] == ["a,b\r\n", "é,1\n"]
    with pytest.raises(TextFileError) as raised:
        next(read)
    assert str(raised.value) == "t.csv:3: not UTF-8: byte 0xff at column 3; save the file as UTF-8"


def test_a_file_given_by_mistake_is_refused_at_the_limit_not_read_to_its_end(tmp_path: Path) -> None:
    """``/dev/zero`` never ends and has no line end: read whole or line by line, it would fill the memory."""
    with pytest.raises(TextFileError, match=r"^/dev/zero: larger than 1 MiB, not a scenario$"):
        read_text_file(Path("/dev/zero"), "scenario", max_bytes=1024 * 1024)
    with Path("/dev/zero").open("rb") as zeros, pytest.raises(TextFileError) as raised:
        next(decoded_lines(zeros, "/dev/zero"))
    assert str(raised.value) == "/dev/zero:1: a line longer than 1 MiB; is it a text file?"
    (tmp_path / "long.csv").write_bytes(b"a\n" + b"x" * MAX_LINE_BYTES + b"\n")
    with (tmp_path / "long.csv").open("rb") as long_line:
        read = decoded_lines(long_line, "long.csv")
        assert next(read) == "a\n"
        assert next(read) == "x" * MAX_LINE_BYTES + "\n"  # at the limit, its end not counted
