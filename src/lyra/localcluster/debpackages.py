"""Executables taken from a Debian package without installing it: ``apt-get download`` the package, then
``dpkg-deb -x`` it into a temporary directory and copy the executables out. Nothing is installed on the machine, so
the cache (not the system) holds them, and CI gets them from the project's own ``make binaries``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from lyra.child_processes import run_to_end


class DebianPackageError(RuntimeError):
    """The package could not be downloaded or unpacked; the message says why and what to do."""


def extract_executables(
    package: str, version_prefix: str, executables: Mapping[str, str], output: Path, log_path: Path
) -> str:
    """Download ``package`` (the candidate apt knows), check its version starts with ``version_prefix``, and copy
    ``executables`` (path inside the package -> name in ``output``). Returns the package's full version."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise DebianPackageError(
                f"{tool} is not available: {package} comes from Debian's package archive (Debian or Ubuntu needed)"
            )
    with tempfile.TemporaryDirectory(prefix=f".{package}.download.", dir=output.parent) as download:
        directory = Path(download)
        try:
            _run(["apt-get", "download", package], directory, log_path)
        except DebianPackageError:
            if os.geteuid() != 0:
                raise DebianPackageError(
                    f"apt-get download {package} failed (see {log_path}); if apt does not know the package yet, "
                    "run `sudo apt-get update` and try again"
                ) from None
            _run(["apt-get", "update"], directory, log_path)  # a fresh machine whose package lists are empty
            _run(["apt-get", "download", package], directory, log_path)
        debs = sorted(directory.glob(f"{package}_*.deb"))
        if not debs:
            raise DebianPackageError(f"apt-get download {package} produced no .deb; see {log_path}")
        version = _run(["dpkg-deb", "-f", str(debs[0]), "Version"], directory, log_path).strip()
        if not version.startswith(version_prefix):
            raise DebianPackageError(
                f"apt offers {package} {version}; Lyra's tests expect {version_prefix} (Debian 12, bookworm)"
            )
        unpacked = directory / "unpacked"
        _run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], directory, log_path)
        for inside, name in executables.items():
            source = unpacked / inside
            if not source.is_file():
                raise DebianPackageError(f"{package} {version} has no {inside}")
            shutil.copy2(source, output / name)
            (output / name).chmod(0o755)
    return version


def _run(command: list[str], cwd: Path, log_path: Path) -> str:
    with log_path.open("a") as log:
        log.write(f"$ {' '.join(command)}\n")
        completed = run_to_end(command, cwd=cwd, capture_output=True, text=True, check=False, timeout=600)
        log.write(completed.stdout + completed.stderr)
    if completed.returncode != 0:
        raise DebianPackageError(
            f"`{' '.join(command)}` exited with {completed.returncode}: {completed.stderr.strip()[-300:]}"
        )
    return completed.stdout
