"""`lyra image` refuses bad input with exit 2 and one line saying what is wrong, before building or starting
anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from lyra.cli import main

REPOSITORY = Path(__file__).resolve().parents[3]


def test_an_unknown_image_is_a_usage_error_listing_the_images(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["image", "build", "--only", "nginx"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nginx'" in err
    assert "'lyra', 'kube-scheduler', 'pause', 'lyra-training-worker', 'lyra-inference-replica'" in err


def test_an_output_path_that_is_a_file_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "build", "--out-dir", str(REPOSITORY / "README.md")]) == 2
    assert capsys.readouterr().err == f"lyra image build: {REPOSITORY / 'README.md'} is not a directory\n"


def test_a_repository_without_pyproject_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "build", "--repository", str(tmp_path), "--out-dir", str(tmp_path / "out")]) == 2
    assert "has no pyproject.toml (--repository)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_verify_without_archives_says_to_build_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "verify", "--dir", str(tmp_path / "missing")]) == 2
    assert "is not a directory (run `make image` first)" in capsys.readouterr().err
