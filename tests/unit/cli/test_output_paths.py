"""Output paths are refused before a command's work when they cannot be written, by trying rather than asking the
permission bits (root passes them all), and a write that fails after the work is an :class:`OutputError`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lyra.cli.output_paths import PROBE_PREFIX, OutputError, check_directory, check_file, write_text, writing_into

#: A directory the kernel refuses to create, even for root.
UNCREATABLE = Path("/proc/lyra-test/out")


def _entries(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_an_existing_directory_and_one_to_be_created_pass_and_leave_nothing(tmp_path: Path) -> None:
    (tmp_path / "kept").write_text("x")
    check_directory(tmp_path, "--out-dir")
    check_directory(tmp_path / "a" / "b", "--out-dir")
    assert _entries(tmp_path) == ["kept"]  # neither a/ nor the probe is left
    assert not any(name.startswith(PROBE_PREFIX) for name in _entries(tmp_path))


def test_a_file_on_the_way_is_named(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    with pytest.raises(
        OutputError, match=rf"^--out-dir {file}/sub is not writable: {file} is a file, not a directory$"
    ):
        check_directory(file / "sub", "--out-dir")


def test_a_place_the_kernel_refuses_is_found_by_trying() -> None:
    assert os.access("/proc", os.W_OK) or os.geteuid() != 0  # what asking would have said, as root
    with pytest.raises(OutputError, match=r"^--out-dir /proc/lyra-test/out is not writable: /proc takes no new"):
        check_directory(UNCREATABLE, "--out-dir")


def test_a_relative_directory_is_checked_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    check_directory(Path("out/simulate"), "--out-dir")
    assert _entries(tmp_path) == []


def test_a_file_target_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match=rf"^--json {tmp_path} is a directory; give a file name"):
        check_file(tmp_path, "--json")


def test_an_existing_file_target_is_left_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("before")
    stamp = target.stat().st_mtime_ns
    check_file(target, "--json")
    assert target.read_text() == "before"
    assert target.stat().st_mtime_ns == stamp


def test_a_file_target_in_a_place_that_takes_nothing_is_refused() -> None:
    with pytest.raises(OutputError, match=r"^--json /proc/lyra-test/out/r.json: its directory /proc/lyra-test/out"):
        check_file(UNCREATABLE / "r.json", "--json")


def test_an_existing_file_that_cannot_be_opened_for_writing_is_refused() -> None:
    # /proc/version exists and refuses writing, even to root
    with pytest.raises(OutputError, match=r"^--json /proc/version exists and is not writable: "):
        check_file(Path("/proc/version"), "--json")


def test_write_text_creates_the_directories(tmp_path: Path) -> None:
    write_text(tmp_path / "a" / "r.json", "{}\n", "--json")
    assert (tmp_path / "a" / "r.json").read_text() == "{}\n"


def test_a_failed_write_is_an_output_error() -> None:
    with pytest.raises(OutputError, match=r"^cannot write --json /proc/lyra-test/out/r.json: the write failed \("):
        write_text(UNCREATABLE / "r.json", "{}", "--json")


def test_writing_into_turns_a_failure_of_the_block_into_an_output_error(tmp_path: Path) -> None:
    full = rf"^cannot write into --out-dir {tmp_path}: no space left on the device of {tmp_path}$"
    with pytest.raises(OutputError, match=full), writing_into(tmp_path, "--out-dir"):
        raise OSError(28, "No space left on device")


def test_writing_into_a_directory_that_cannot_be_made_is_an_output_error() -> None:
    refused = r"^cannot write into --out-dir /proc/lyra-test/out: the write failed \(No such file or directory\)$"
    with pytest.raises(OutputError, match=refused), writing_into(UNCREATABLE, "--out-dir"):
        pass
