"""Generated files (`lyra api crds`, `lyra chart generate|manifests`): the drift check compares bytes, so a file that
is not UTF-8, a directory in a file's place or a missing file is named as differing, never a traceback; a place that
cannot be written is refused before the work (exit 2), and a write that fails after it is one line (exit 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lyra.cli.generated_files import differing, write_all
from lyra.cli.output_paths import OutputError
from tests.unit.cli.running import exit_code

ROOT = Path(__file__).resolve().parents[3]
CHECKED_IN_CRDS = ROOT / "manifests" / "crds"
#: A directory the kernel refuses to create, even for root.
UNCREATABLE = "/proc/lyra-test/out"


def test_only_files_byte_for_byte_their_text_are_up_to_date(tmp_path: Path) -> None:
    same, edited, binary, missing, directory = (tmp_path / name for name in ("same", "edited", "bin", "gone", "dir"))
    same.write_bytes("é\n".encode())
    edited.write_text("é \n", encoding="utf-8")
    binary.write_bytes(b"\xff\xfe")
    directory.mkdir()
    wanted = {same: "é\n", edited: "é\n", binary: "x", missing: "x", directory: "x"}
    assert differing(wanted) == [edited, binary, missing, directory]


def test_files_are_written_with_their_directories(tmp_path: Path) -> None:
    wanted = {tmp_path / "a" / "b.yaml": "b: 1\n", tmp_path / "c.yaml": "é\n"}
    write_all(wanted)
    assert differing(wanted) == []


def test_a_write_that_fails_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "taken.yaml").mkdir()
    with pytest.raises(OutputError, match=rf"^cannot write the generated file {tmp_path}/taken.yaml: the write failed"):
        write_all({tmp_path / "first.yaml": "x", tmp_path / "taken.yaml": "x"})
    assert (tmp_path / "first.yaml").read_text() == "x"


def test_crds_that_are_not_utf8_are_out_of_date_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(CHECKED_IN_CRDS, crds)
    assert exit_code(["api", "crds", "--check", "--out-dir", str(crds)]) == 0
    damaged = sorted(crds.iterdir())[0]
    damaged.write_bytes(b"\xff\xfe")
    capsys.readouterr()
    assert exit_code(["api", "crds", "--check", "--out-dir", str(crds)]) == 1
    assert capsys.readouterr().err == f"lyra api crds: out of date in {crds}: {damaged.name}; run `make crds`\n"
    assert exit_code(["api", "crds", "--out-dir", str(crds)]) == 0
    assert exit_code(["api", "crds", "--check", "--out-dir", str(crds)]) == 0


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["api", "crds", "--out-dir", UNCREATABLE], f"lyra api crds: --out-dir {UNCREATABLE} is not writable"),
        (
            ["chart", "manifests", "--out-dir", UNCREATABLE],
            f"lyra chart manifests: --out-dir {UNCREATABLE} is not writable",
        ),
        (
            ["chart", "generate", "--chart-dir", str(ROOT / "helm" / "lyra"), "--dashboards-dir", UNCREATABLE],
            f"lyra chart generate: --dashboards-dir {UNCREATABLE} is not writable",
        ),
    ],
)
def test_a_place_that_cannot_be_written_is_refused_before_the_work(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_code(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(said), error
    assert "Traceback" not in error


def test_crds_written_into_a_directory_in_a_files_place_fail_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(CHECKED_IN_CRDS, crds)
    taken = sorted(crds.iterdir())[-1]
    taken.unlink()
    taken.mkdir()
    assert exit_code(["api", "crds", "--out-dir", str(crds)]) == 1
    error = capsys.readouterr().err
    assert error == f"lyra api crds: cannot write the generated file {taken}: the write failed (Is a directory)\n"
