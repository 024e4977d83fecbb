"""The image builder's cache and inputs (lyra.images.build), without root: what its keys follow, the pause image
built and then found unchanged, bad requests refused with a message."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lyra.images import build
from lyra.imagespec import oci, recipe
from lyra.localcluster.binaries import BinaryCache

REPOSITORY = Path(__file__).resolve().parents[3]


def project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copyfile(REPOSITORY / name, root / name)
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text("A = 1\n")
    return root


def builder(repository: Path, tmp_path: Path, lines: list[str] | None = None) -> build.ImageBuilder:
    said = lines if lines is not None else []
    return build.ImageBuilder(repository, tmp_path / "out", said.append, cache=BinaryCache(tmp_path / "cache"))


def test_the_source_tree_hash_follows_content_and_modes_not_caches(tmp_path: Path) -> None:
    root = project(tmp_path)
    first = build.tree_hash(root / "src")
    (root / "src" / "pkg" / "__pycache__").mkdir()
    (root / "src" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert build.tree_hash(root / "src") == first
    (root / "src" / "pkg" / "a.py").chmod(0o755)
    assert build.tree_hash(root / "src") != first
    (root / "src" / "pkg" / "a.py").chmod(0o644)
    assert build.tree_hash(root / "src") == first
    (root / "src" / "pkg" / "a.py").write_text("A = 2\n")
    assert build.tree_hash(root / "src") != first


def test_the_environment_layers_key_follows_the_lock_the_sources_and_the_base(tmp_path: Path) -> None:
    root = project(tmp_path / "repo")
    images = builder(root, tmp_path)
    base = oci.Layer(path=tmp_path / "base.tar.gz", digest="sha256:" + "a" * 64, diff_id="sha256:" + "b" * 64, size=1)
    other_base = oci.Layer(path=base.path, digest="sha256:" + "c" * 64, diff_id=base.diff_id, size=1)
    first = images.venv_key(base)
    assert images.venv_key(base) == first
    assert images.venv_key(other_base) != first
    (root / "src" / "pkg" / "a.py").write_text("A = 2\n")
    second = images.venv_key(base)
    assert second != first
    with (root / "uv.lock").open("a") as lock:
        lock.write("\n")
    assert images.venv_key(base) != second


def test_elf_static_or_dynamic_is_read_from_the_program_headers(tmp_path: Path) -> None:
    assert not build.elf_is_static(Path("/bin/sh").resolve())
    (tmp_path / "script").write_text("#!/bin/sh\n")
    with pytest.raises(build.ImageBuildError, match="not a 64-bit ELF"):
        build.elf_is_static(tmp_path / "script")


def test_the_pause_image_is_static_built_once_and_then_found_unchanged(tmp_path: Path) -> None:
    lines: list[str] = []
    first_builder = builder(REPOSITORY, tmp_path, lines)
    [first] = first_builder.build(["pause"])
    assert first.written
    assert first.reference == f"{recipe.PAUSE_REPOSITORY}:{recipe.PAUSE_TAG}"
    assert first.archive == tmp_path / "out" / "pause-3.10.oci.tar"
    binary = first_builder.pause_binary()
    assert build.elf_is_static(binary)
    _index, manifest, config = oci.read_archive(first.archive)
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["config"]["User"] == recipe.PAUSE_USER
    git = ["git", "-C", str(REPOSITORY), "rev-parse", "HEAD"]
    head = subprocess.run(git, capture_output=True, text=True, check=True).stdout
    assert config["config"]["Labels"][build.LABEL_REVISION] == head.strip()
    assert len(manifest["layers"]) == 1
    [second] = builder(REPOSITORY, tmp_path, lines).build(["pause"])
    assert (second.written, second.digest) == (False, first.digest)
    assert any("is up to date" in line for line in lines)
    labelled = build.ImageBuilder(
        REPOSITORY,
        tmp_path / "out",
        lines.append,
        cache=BinaryCache(tmp_path / "cache"),
        source="https://example.org/lyra",
    )
    [third] = labelled.build(["pause"])
    assert third.written
    assert third.digest != first.digest
    assert oci.read_archive(third.archive)[2]["config"]["Labels"][build.LABEL_SOURCE] == "https://example.org/lyra"


def test_an_unknown_image_is_refused_with_the_list(tmp_path: Path) -> None:
    with pytest.raises(build.ImageBuildError, match=r"unknown image\(s\) nginx; the images are lyra, kube-scheduler"):
        builder(REPOSITORY, tmp_path).build(["nginx"])


def test_a_directory_that_is_not_a_git_checkout_has_no_revision_to_label(tmp_path: Path) -> None:
    root = project(tmp_path / "repo")
    with pytest.raises(build.ImageBuildError, match="not a git checkout"):
        builder(root, tmp_path).build(["pause"])


def test_a_directory_that_is_not_lyras_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(build.ImageBuildError, match=r"is not Lyra's repository: it has no pyproject\.toml"):
        builder(tmp_path, tmp_path).build(["pause"])


def test_uv_that_is_a_script_is_refused_by_name_and_the_running_uv_is_preferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pyenv shim on PATH is a shell script: copied into the image's filesystem it cannot run there (it did not,
    on this project's machine, when `lyra image build` ran outside `uv run`). The uv running the command (``$UV``,
    which `uv run` sets) comes first."""
    images = builder(project(tmp_path / "repo"), tmp_path)
    shim = tmp_path / "bin" / "uv"
    shim.parent.mkdir()
    shim.write_text('#!/usr/bin/env bash\nexec pyenv exec uv "$@"\n')
    shim.chmod(0o755)
    running = os.environ.get("UV") or shutil.which("uv")
    assert running is not None
    monkeypatch.setenv("PATH", str(shim.parent))
    monkeypatch.setenv("UV", str(shim))
    with pytest.raises(build.ImageBuildError, match=rf"^{shim} is a script, not uv's executable"):
        images._uv()
    monkeypatch.delenv("UV")
    with pytest.raises(build.ImageBuildError, match=rf"^{shim} is a script"):
        images._uv()  # PATH's first uv
    monkeypatch.setenv("UV", running)
    if Path(running).read_bytes()[:4] == b"\x7fELF":  # the uv running the tests is the executable itself
        assert images._uv() == running


def test_archives_that_cannot_be_written_are_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    lines: list[str] = []
    images = build.ImageBuilder(
        project(tmp_path / "repo"), tmp_path / "file" / "out", lines.append, cache=BinaryCache(tmp_path / "cache")
    )
    with pytest.raises(build.ImageBuildError, match=r"cannot create .*/file/out for the archives \(Not a directory\)"):
        images.build(("pause",))
    assert not (tmp_path / "cache" / "images").exists()
