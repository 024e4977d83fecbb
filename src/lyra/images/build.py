"""The image builder behind ``make image`` / ``lyra image build``: OCI archives in dist/images/, no container engine.

Steps, each cached under ``<cache>/images`` (the binary cache's root, :mod:`lyra.localcluster.binaries`) by a key
of its inputs, so a rebuild with nothing changed only checks keys and finds the archives already written:

1. the base filesystem: ``mmdebstrap --variant=minbase`` of Debian bookworm with Python 3.11 (key: suite, variant,
   packages, dpkg excludes, apt sources, mmdebstrap's version), kept as one gzipped layer without device nodes;
2. Lyra's environment: the base unpacked in a work directory, the project's files (pyproject.toml, uv.lock,
   README.md, src/) and uv copied in, and ``uv sync --locked --no-dev --no-editable`` run in a chroot (in a private
   mount namespace, so its bind mounts of /dev, /proc and uv's cache vanish with it); the layer is /opt/lyra only,
   so uv, the CA bundle it needs for the package index (SSL_CERT_FILE) and the project's sources never reach the
   image (key: the base's key, uv.lock, pyproject.toml, README.md, the hash of src/, uv's version);
3. the kube-scheduler binary of the binary cache (``make binaries``), the pause program (pause.c, ``gcc -static``)
   and the demo workloads (src/lyra/workloads), one small layer each;
4. per image, a config (entrypoint, user, environment, OCI labels: version, revision = git HEAD, source = the git
   remote ``origin`` or ``--source``) and the archive, rewritten only when its manifest digest changes.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyra.child_processes import run_to_end
from lyra.imagespec import oci, recipe
from lyra.localcluster import binaries
from lyra.localcluster.binaries import BinariesError, BinaryCache

Reporter = Callable[[str], None]

#: Bumped when the builder's own steps change what a cached layer holds.
RECIPE_REVISION = "1"
LABEL_VERSION = "org.opencontainers.image.version"
LABEL_REVISION = "org.opencontainers.image.revision"
LABEL_SOURCE = "org.opencontainers.image.source"
LABEL_TITLE = "org.opencontainers.image.title"
WORKLOADS_SOURCE = Path("src/lyra/workloads")
PAUSE_SOURCE = Path(__file__).with_name("pause.c")


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which step failed, why, and where its log is."""


@dataclass(frozen=True)
class Built:
    """One archive in the output directory."""

    image: str
    reference: str
    archive: Path
    digest: str
    size: int
    written: bool  # False: the archive was already there with this digest


@dataclass(frozen=True)
class Provenance:
    version: str
    revision: str
    created: str
    source: str | None


def sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(oci.CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_hash(root: Path) -> str:
    """A hash of the files under ``root`` (relative path, mode's executable bit, content), caches left out."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if "__pycache__" in relative.parts or path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        executable = os.access(path, os.X_OK)
        digest.update(f"{relative.as_posix()}\0{int(executable)}\0{sha256_of_file(path)}\n".encode())
    return digest.hexdigest()


def key_of(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def project_version(repository: Path) -> str:
    try:
        data = tomllib.loads((repository / "pyproject.toml").read_text(encoding="utf-8"))
        return str(data["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as error:
        raise ImageBuildError(
            f"cannot read the project's version from {repository / 'pyproject.toml'}: {error}"
        ) from error


def provenance(repository: Path, source: str | None) -> Provenance:
    """Version (pyproject.toml), revision and commit time (git HEAD), source (``source`` or git's origin URL)."""

    def git(*arguments: str) -> str:
        try:
            completed = run_to_end(
                ["git", "-C", str(repository), *arguments], capture_output=True, text=True, check=False, timeout=30
            )
        except OSError as error:
            raise ImageBuildError(f"git is needed for the images' revision label: {error}") from error
        return completed.stdout.strip() if completed.returncode == 0 else ""

    revision = git("rev-parse", "HEAD")
    if not revision:
        raise ImageBuildError(f"{repository} is not a git checkout: the images' revision label is its HEAD commit")
    committed = int(git("show", "-s", "--format=%ct", "HEAD") or "0")
    created = datetime.datetime.fromtimestamp(committed, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Provenance(
        version=project_version(repository),
        revision=revision,
        created=created,
        source=source or git("remote", "get-url", "origin") or None,
    )


def elf_is_static(path: Path) -> bool:
    """True when the ELF executable ``path`` has no program interpreter (PT_INTERP), i.e. needs no libc."""
    with path.open("rb") as handle:
        header = handle.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            raise ImageBuildError(f"{path} is not a 64-bit ELF executable")
        phoff = int.from_bytes(header[32:40], "little")
        phentsize = int.from_bytes(header[54:56], "little")
        phnum = int.from_bytes(header[56:58], "little")
        handle.seek(phoff)
        table = handle.read(phentsize * phnum)
    return all(int.from_bytes(table[i * phentsize : i * phentsize + 4], "little") != 3 for i in range(phnum))


class ImageBuilder:
    def __init__(
        self,
        repository: Path,
        out_dir: Path,
        report: Reporter,
        *,
        cache: BinaryCache | None = None,
        source: str | None = None,
    ) -> None:
        self.repository = repository.resolve()
        self.out_dir = out_dir
        self.report = report
        self.cache = cache if cache is not None else BinaryCache()
        self.images_dir = self.cache.root / "images"
        self.layers_dir = self.images_dir / "layers"
        self.log_path = self.cache.log_dir / "images.log"
        self.source = source

    # -- the whole build ---------------------------------------------------------------------------------------

    def build(self, only: Sequence[str] = recipe.IMAGES) -> list[Built]:
        unknown = sorted(set(only) - set(recipe.IMAGES))
        if unknown:
            raise ImageBuildError(f"unknown image(s) {', '.join(unknown)}; the images are {', '.join(recipe.IMAGES)}")
        for name in recipe.PROJECT_FILES:
            if not (self.repository / name).exists():
                raise ImageBuildError(f"{self.repository} is not Lyra's repository: it has no {name}")
        try:  # before minutes of work: where the archives go must be writable
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            why = error.strerror or error
            raise ImageBuildError(f"cannot create {self.out_dir} for the archives ({why})") from None
        if not os.access(self.out_dir, os.W_OK):
            raise ImageBuildError(f"cannot write the archives into {self.out_dir} (no permission)")
        facts = provenance(self.repository, self.source)
        if facts.source is None:
            self.report(
                "note: no git remote `origin` and no --source: the images get no org.opencontainers.image.source"
            )
        self.layers_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        built = []
        with self._lock():
            for name in recipe.IMAGES:
                if name in only:
                    started = time.monotonic()
                    image = self._image(name, facts)
                    built.append(self._write(name, image))
                    self.report(f"{name}: {image.reference} ready ({time.monotonic() - started:.1f}s)")
        self._write_summary(built)
        return built

    def _image(self, name: str, facts: Provenance) -> oci.Image:
        labels = {LABEL_VERSION: facts.version, LABEL_REVISION: facts.revision, LABEL_TITLE: name}
        if facts.source:
            labels[LABEL_SOURCE] = facts.source
        if name == "lyra":
            base = self.base_layer()
            return oci.Image(
                name=recipe.LYRA_REPOSITORY,
                tag=facts.version,
                layers=(base, self.venv_layer(base)),
                config=_config(
                    entrypoint=recipe.ENTRYPOINT,
                    cmd=recipe.CMD,
                    user=recipe.USER,
                    env=recipe.LYRA_ENV,
                    labels=labels,
                    ports=recipe.PORTS,
                ),
                created=facts.created,
            )
        if name == "kube-scheduler":
            version = binaries.KUBERNETES_VERSION
            scheduler = self._scheduler_binary()
            layer = self.file_layer("kube-scheduler", {"usr/local/bin/kube-scheduler": (scheduler, 0o755)})
            layers = (layer,) if elf_is_static(scheduler) else (self.base_layer(), layer)
            return oci.Image(
                name=recipe.SCHEDULER_REPOSITORY,
                tag=version,
                layers=layers,
                config=_config(
                    entrypoint=("/usr/local/bin/kube-scheduler",),
                    cmd=(),
                    user=recipe.USER,
                    env={"PATH": recipe.SYSTEM_PATH},
                    labels={**labels, LABEL_VERSION: version, LABEL_TITLE: "kube-scheduler (Lyra's build)"},
                ),
                created=facts.created,
            )
        if name == "pause":
            layer = self.file_layer("pause", {"pause": (self.pause_binary(), 0o755)})
            return oci.Image(
                name=recipe.PAUSE_REPOSITORY,
                tag=recipe.PAUSE_TAG,
                layers=(layer,),
                config=_config(
                    entrypoint=("/pause",),
                    cmd=(),
                    user=recipe.PAUSE_USER,
                    env={},
                    labels={**labels, LABEL_VERSION: recipe.PAUSE_TAG, LABEL_TITLE: "pause (Lyra's build)"},
                ),
                created=facts.created,
            )
        workload = next(w for w in recipe.WORKLOADS if w.image == name)
        program = self.repository / WORKLOADS_SOURCE / workload.module
        inside = f"{recipe.WORKLOADS_DIR}/{workload.module}"
        layer = self.file_layer(workload.image, {inside.lstrip("/"): (program, 0o644)})
        return oci.Image(
            name=f"docker.io/library/{workload.image}",
            tag=facts.version,
            layers=(self.base_layer(), layer),
            config=_config(
                entrypoint=("python3", inside),
                cmd=(),
                user=recipe.USER,
                env={"PATH": recipe.SYSTEM_PATH, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
                labels=labels,
                ports=workload.ports,
            ),
            created=facts.created,
        )

    def _write(self, name: str, image: oci.Image) -> Built:
        archive = self.out_dir / f"{name}-{image.tag}.oci.tar"
        digest = image.manifest_digest()
        written = _archive_digest(archive) != digest
        if written:
            oci.write_archive(image, archive)
        else:
            self.report(f"{name}: {archive} is up to date")
        return Built(
            image=name, reference=image.reference, archive=archive, digest=digest, size=archive.stat().st_size,
            written=written,
        )  # fmt: skip

    def _write_summary(self, built: Sequence[Built]) -> None:
        summary_path = self.out_dir / "images.json"
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            summary = {}
        for item in built:
            summary[item.image] = {
                "reference": item.reference,
                "archive": item.archive.name,
                "digest": item.digest,
                "bytes": item.size,
            }
        summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    # -- cached layers -----------------------------------------------------------------------------------------

    def _cached(self, stem: str, key: str) -> oci.Layer | None:
        meta = self.layers_dir / f"{stem}-{key}.json"
        path = self.layers_dir / f"{stem}-{key}.tar.gz"
        if not (meta.is_file() and path.is_file()):
            return None
        try:
            layer = oci.Layer.at(path, json.loads(meta.read_text(encoding="utf-8")))
        except (ValueError, KeyError, json.JSONDecodeError):
            return None
        return layer if path.stat().st_size == layer.size else None

    def _store(self, stem: str, key: str, make: Callable[[Path], oci.Layer]) -> oci.Layer:
        for stale in self.layers_dir.glob(f"{stem}-*"):  # a layer of other inputs is never used again
            if not stale.name.startswith(f"{stem}-{key}."):
                stale.unlink(missing_ok=True)
        layer = make(self.layers_dir / f"{stem}-{key}.tar.gz")
        meta = self.layers_dir / f"{stem}-{key}.json"
        meta.write_text(json.dumps(layer.to_json(), indent=2) + "\n", encoding="utf-8")
        return layer

    def base_key(self) -> str:
        return key_of(
            {
                "revision": RECIPE_REVISION,
                "suite": recipe.SUITE,
                "variant": recipe.VARIANT,
                "packages": [recipe.PYTHON_PACKAGE],
                "dpkg": list(recipe.DPKG_EXCLUDES),
                "sources": list(recipe.SOURCES),
                "mmdebstrap": binaries.MMDEBSTRAP_VERSION,
            }
        )

    def base_layer(self) -> oci.Layer:
        key = self.base_key()
        cached = self._cached("base", key)
        if cached is not None:
            return cached
        if os.geteuid() != 0:
            raise ImageBuildError(
                "the base filesystem is not cached and building it needs root (mmdebstrap --mode=root); run as root"
            )
        mmdebstrap = self._tool(binaries.MMDEBSTRAP, "mmdebstrap")
        self.report(
            f"base: Debian {recipe.SUITE} {recipe.VARIANT} with {recipe.PYTHON_PACKAGE} by mmdebstrap (about a minute)"
        )
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".base.", dir=self.images_dir) as work:
            rootfs_tar = Path(work) / "rootfs.tar"
            command = [
                str(mmdebstrap),
                f"--variant={recipe.VARIANT}",
                f"--include={recipe.PYTHON_PACKAGE}",
                *(f"--dpkgopt={option}" for option in recipe.DPKG_EXCLUDES),
                "--mode=root",
                recipe.SUITE,
                str(rootfs_tar),
                *recipe.SOURCES,
            ]
            # mmdebstrap runs its mmtarfilter (the dpkg excludes) from PATH
            path = f"{mmdebstrap.parent}{os.pathsep}{os.environ.get('PATH', recipe.SYSTEM_PATH)}"
            self._run(command, "mmdebstrap", timeout=1800, env={**os.environ, "PATH": path})
            self.report(f"base: filesystem ready ({time.monotonic() - started:.1f}s); compressing the layer")

            def keep(member: tarfile.TarInfo) -> bool:  # no device nodes: the runtime gives the container its /dev
                name = member.name.removeprefix("./")
                return not (name.startswith("dev/") and name != "dev/")

            layer = self._store("base", key, lambda path: oci.layer_from_tar(path, rootfs_tar, keep=keep))
            shutil.copyfile(rootfs_tar, self.images_dir / "base-rootfs.tar.tmp")
            os.replace(self.images_dir / "base-rootfs.tar.tmp", self.images_dir / f"base-rootfs-{key}.tar")
            for stale in self.images_dir.glob("base-rootfs-*.tar"):
                if stale.name != f"base-rootfs-{key}.tar":
                    stale.unlink()
        self.report(f"base: layer {layer.size / 1e6:.0f} MB ({time.monotonic() - started:.1f}s in all)")
        return layer

    def venv_key(self, base: oci.Layer) -> str:
        files = {name: sha256_of_file(self.repository / name) for name in recipe.PROJECT_FILES if name != "src"}
        return key_of(
            {
                "revision": RECIPE_REVISION,
                "base": base.digest,
                "files": files,
                "src": tree_hash(self.repository / "src"),
                "uv": self._uv_version(),
                "sync": list(recipe.UV_SYNC),
                "env": recipe.UV_ENV,
            }
        )

    def venv_layer(self, base: oci.Layer) -> oci.Layer:
        key = self.venv_key(base)
        cached = self._cached("venv", key)
        if cached is not None:
            return cached
        rootfs_tar = self.images_dir / f"base-rootfs-{self.base_key()}.tar"
        if not rootfs_tar.is_file():  # the base layer came from an older cache: unpack it from the layer
            rootfs_tar = base.path
        self.report(f"lyra: installing the locked environment into {recipe.VENV} (uv sync in a chroot)")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".venv.", dir=self.images_dir) as work:
            rootfs = Path(work) / "rootfs"
            rootfs.mkdir()
            self._run(
                ["tar", "--numeric-owner", "--exclude=./dev/*", "-xpf", str(rootfs_tar), "-C", str(rootfs)],
                "unpack the base",
            )
            self._stage_project(rootfs)
            self._sync(rootfs)
            self._check_environment(rootfs)
            venv = rootfs / recipe.VENV.lstrip("/")
            layer = self._store("venv", key, lambda path: oci.layer_from_tree(path, venv, recipe.VENV))
        self.report(f"lyra: environment layer {layer.size / 1e6:.0f} MB ({time.monotonic() - started:.1f}s)")
        return layer

    def file_layer(self, stem: str, files: Mapping[str, tuple[Path, int]]) -> oci.Layer:
        """A layer of single files (path inside -> (source, mode)) and their parent directories."""
        entries: dict[str, oci.FileEntry] = {}
        for inside, (source, mode) in files.items():
            if not source.is_file():
                raise ImageBuildError(f"{stem}: {source} does not exist")
            entries[inside] = oci.FileEntry(name=inside, source=source, mode=mode)
            parts = inside.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                directory = "/".join(parts[:depth])
                entries.setdefault(directory, oci.FileEntry(name=directory, source=None, mode=0o755))
        key = key_of(
            {
                "revision": RECIPE_REVISION,
                "files": {
                    name: [entry.mode, sha256_of_file(entry.source) if entry.source else None]
                    for name, entry in entries.items()
                },
            }
        )
        cached = self._cached(stem, key)
        if cached is not None:
            return cached
        return self._store(stem, key, lambda path: oci.layer_from_files(path, entries.values()))

    # -- inputs ------------------------------------------------------------------------------------------------

    def _tool(self, component: binaries.Component, name: str) -> Path:
        try:
            if not self.cache.is_cached(component):
                self.cache.install(component, self.report)
            return self.cache.tool(component, name)
        except BinariesError as error:
            raise ImageBuildError(str(error)) from error

    def _scheduler_binary(self) -> Path:
        try:
            return self.cache.tool(binaries.KUBERNETES, "kube-scheduler")
        except BinariesError as error:
            raise ImageBuildError(f"the kube-scheduler image packs the project's own build: {error}") from error

    def pause_binary(self) -> Path:
        """pause.c built with ``gcc -static``, cached by the source's and gcc's hash."""
        gcc = shutil.which("gcc")
        if gcc is None:
            raise ImageBuildError("gcc is needed to build the pause image (Debian: apt-get install gcc libc6-dev)")
        gcc_version = self._run([gcc, "--version"], "gcc --version").splitlines()[0]
        key = key_of({"source": sha256_of_file(PAUSE_SOURCE), "gcc": gcc_version})
        output = self.images_dir / f"pause-{key}"
        if output.is_file():
            return output
        temporary = output.with_name(f".{output.name}.{os.getpid()}")
        try:
            self._run([gcc, "-static", "-Os", "-s", "-o", str(temporary), str(PAUSE_SOURCE)], "gcc -static pause.c")
        except ImageBuildError as error:
            raise ImageBuildError(
                f"{error}; a static build needs the C library's archive (Debian: apt-get install libc6-dev)"
            ) from error
        if not elf_is_static(temporary):
            temporary.unlink()
            raise ImageBuildError("gcc -static produced a dynamically linked pause; see " + str(self.log_path))
        os.replace(temporary, output)
        return output

    def _uv_version(self) -> str:
        return self._run([self._uv(), "--version"], "uv --version").strip()

    def _uv(self) -> str:
        """uv's executable, copied into the image's filesystem to install the environment: the one running this
        command (``uv run`` names itself in ``$UV``), else the first on ``PATH``. A script there (a pyenv shim, say)
        would not run inside the image, so it is refused by name."""
        uv = os.environ.get("UV") or shutil.which("uv")
        if uv is None:
            raise ImageBuildError("uv is not on PATH: the image installs the locked environment with uv (make install)")
        try:
            with open(uv, "rb") as file:
                magic = file.read(4)
        except OSError as error:
            raise ImageBuildError(f"cannot read uv at {uv} ({error.strerror or error})") from None
        if magic != b"\x7fELF":
            raise ImageBuildError(
                f"{uv} is a script, not uv's executable (a pyenv shim?): the image needs the executable; "
                "build with `make images` or `uv run lyra image build`, or set UV to uv's executable"
            )
        return uv

    # -- the chroot install ------------------------------------------------------------------------------------

    def _stage_project(self, rootfs: Path) -> None:
        project = rootfs / "tmp" / "lyra-src"
        for name in recipe.PROJECT_FILES:
            source = self.repository / name
            if source.is_dir():
                shutil.copytree(source, project / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                oci.copy_file(source, project / name)
        shutil.copy2(self._uv(), rootfs / "tmp" / "uv")
        bundle = os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
        if Path(bundle).is_file():
            shutil.copyfile(bundle, rootfs / "tmp" / "ca-certificates.crt")
        resolv = Path("/etc/resolv.conf")
        (rootfs / "etc" / "resolv.conf").unlink(missing_ok=True)
        if resolv.is_file():
            shutil.copyfile(resolv, rootfs / "etc" / "resolv.conf")
        (rootfs / "tmp" / "uv-cache").mkdir()

    def _sync(self, rootfs: Path) -> None:
        if os.geteuid() != 0:
            raise ImageBuildError("installing the environment needs root (a chroot into the image's filesystem)")
        for tool in ("unshare", "chroot", "mount", "tar"):
            if shutil.which(tool) is None:
                raise ImageBuildError(f"{tool} is needed to install the environment (Debian: util-linux, coreutils)")
        host_cache = self._run([self._uv(), "cache", "dir"], "uv cache dir").strip()
        Path(host_cache).mkdir(parents=True, exist_ok=True)
        environment = {
            **recipe.UV_ENV,
            "UV_CACHE_DIR": "/tmp/uv-cache",
            "SSL_CERT_FILE": "/tmp/ca-certificates.crt",
            "HOME": "/tmp",
            "PATH": recipe.SYSTEM_PATH,
        }
        exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(environment.items()))
        sync = " ".join(shlex.quote(word) for word in ("/tmp/uv", *recipe.UV_SYNC[1:]))
        root = shlex.quote(str(rootfs))
        script = (
            f"mount --rbind /dev {root}/dev && mount -t proc proc {root}/proc && "
            f"mount --bind {shlex.quote(host_cache)} {root}/tmp/uv-cache && "
            f"exec chroot {root} /usr/bin/env -i {exports} /bin/sh -c 'cd /tmp/lyra-src && exec {sync}'"
        )
        self._run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], "uv sync (chroot)")

    def _check_environment(self, rootfs: Path) -> None:
        """The environment runs with the image's Python and holds no plotting library and no CA bundle."""
        venv = rootfs / recipe.VENV.lstrip("/")
        site = venv / "lib" / "python3.11" / "site-packages"
        if not site.is_dir():
            raise ImageBuildError(f"uv sync left no {site.relative_to(rootfs)}: is the image's Python not 3.11?")
        plotting = sorted(p.name for p in site.iterdir() if p.name.lower().startswith(("matplotlib", "pyplot")))
        if plotting:
            raise ImageBuildError(f"the runtime environment holds plotting libraries: {', '.join(plotting)}")
        script = f"exec chroot {shlex.quote(str(rootfs))} /usr/bin/env -i PATH={recipe.VENV}/bin lyra --version"
        output = self._run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], "lyra --version")
        self.report(f"lyra: the environment runs: {output.strip()}")

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _run(self, command: list[str], step: str, *, timeout: float = 900, env: Mapping[str, str] | None = None) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(command)}\n")
            log.flush()
            try:
                completed = run_to_end(
                    command,
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=timeout,
                    stdin=subprocess.DEVNULL,
                    env=None if env is None else dict(env),
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                raise ImageBuildError(f"{step}: {error}; see {self.log_path}") from error
            log.write(completed.stdout + completed.stderr)
        if completed.returncode != 0:
            tail = (completed.stderr or completed.stdout).strip()[-600:]
            raise ImageBuildError(f"{step} exited with {completed.returncode}: {tail} (log: {self.log_path})")
        return completed.stdout

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        with (self.images_dir / ".lock").open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.report("another image build is running; waiting for it to finish")
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                for leftover in [*self.images_dir.glob(".*.*"), *self.layers_dir.glob(".*")]:  # from a build that died
                    if leftover.is_dir():
                        shutil.rmtree(leftover, ignore_errors=True)
                    elif leftover.name != ".lock":
                        leftover.unlink(missing_ok=True)
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _config(
    *,
    entrypoint: Sequence[str],
    cmd: Sequence[str],
    user: str,
    env: Mapping[str, str],
    labels: Mapping[str, str],
    ports: Sequence[str] = (),
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "Entrypoint": list(entrypoint),
        "User": user,
        "Env": [f"{name}={value}" for name, value in env.items()],
        "Labels": dict(labels),
        "WorkingDir": "/",
    }
    if cmd:
        config["Cmd"] = list(cmd)
    if ports:
        config["ExposedPorts"] = {port: {} for port in ports}
    return config


def _archive_digest(archive: Path) -> str | None:
    """The manifest digest an existing archive's index names, or None (no archive, or not readable)."""
    try:
        with tarfile.open(archive, mode="r") as tar:
            member = tar.extractfile("index.json")
            if member is None:
                return None
            return str(json.loads(member.read())["manifests"][0]["digest"])
    except (OSError, KeyError, IndexError, tarfile.TarError, json.JSONDecodeError):
        return None
