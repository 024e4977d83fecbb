"""OCI image layouts written directly: a layer is a gzipped tar, an image is a config and a manifest naming the
layers, and an archive is the layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) in one tar, the format
``ctr image import`` and ``skopeo copy oci-archive:...`` read.

Everything is deterministic (sorted members, fixed times, gzip without a timestamp), so an unchanged input gives
the same digests and a rebuild can tell that nothing changed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
#: containerd's own annotation for the full image name; ``org.opencontainers.image.ref.name`` carries the tag.
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"
CHUNK = 1 << 20


class OciError(RuntimeError):
    """A layer or an archive could not be written or read back; the message says which and why."""


@dataclass(frozen=True)
class Layer:
    """A gzipped layer tar in a cache: ``digest`` of the gzip (the blob), ``diff_id`` of the tar inside."""

    path: Path
    digest: str
    diff_id: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "diff_id": self.diff_id, "size": self.size}

    @classmethod
    def at(cls, path: Path, meta: Mapping[str, Any]) -> Layer:
        return cls(path=path, digest=str(meta["digest"]), diff_id=str(meta["diff_id"]), size=int(meta["size"]))


@dataclass(frozen=True)
class FileEntry:
    """One member of a layer made from files: ``source`` None makes a directory."""

    name: str  # path inside the image, without a leading slash
    source: Path | None
    mode: int
    uid: int = 0
    gid: int = 0


class _Sink(Protocol):
    def write(self, data: Any, /) -> int: ...


class _HashingWriter(io.RawIOBase):
    """Passes what is written on to ``target``, counting and hashing it."""

    def __init__(self, target: _Sink) -> None:
        self.target = target
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.target.write(view)
        self.size += len(view)
        return len(view)


def write_layer(path: Path, fill: Callable[[tarfile.TarFile], None], *, compresslevel: int = 6) -> Layer:
    """Write ``path`` (gzip of a tar that ``fill`` writes), hashing the tar and the gzip on the way."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("wb") as raw:
            blob = _HashingWriter(raw)
            with gzip.GzipFile(fileobj=blob, mode="wb", compresslevel=compresslevel, mtime=0) as zipped:
                diff = _HashingWriter(zipped)
                with tarfile.open(fileobj=diff, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    fill(tar)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return Layer(
        path=path, digest=f"sha256:{blob.sha.hexdigest()}", diff_id=f"sha256:{diff.sha.hexdigest()}", size=blob.size
    )


def layer_from_files(path: Path, entries: Iterable[FileEntry], *, mtime: int = 0) -> Layer:
    """A layer of the given files and directories (sorted by name, fixed owner and time)."""

    def fill(tar: tarfile.TarFile) -> None:
        for entry in sorted(entries, key=lambda e: e.name):
            info = tarfile.TarInfo(entry.name.strip("/"))
            info.mode, info.uid, info.gid, info.mtime = entry.mode, entry.uid, entry.gid, mtime
            if entry.source is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = entry.source.stat().st_size
                with entry.source.open("rb") as handle:
                    tar.addfile(info, handle)

    return write_layer(path, fill)


def layer_from_tree(path: Path, root: Path, inside: str, *, mtime: int = 0) -> Layer:
    """A layer holding the directory ``root`` as ``inside`` (e.g. ``opt/lyra``) with its parents, owned by root,
    times fixed, members sorted; symbolic links kept as links."""
    parts = inside.strip("/").split("/")

    def fill(tar: tarfile.TarFile) -> None:
        for depth in range(1, len(parts)):
            info = tarfile.TarInfo("/".join(parts[:depth]))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
            tar.addfile(info)
        for source in [root, *sorted(root.rglob("*"))]:
            name = "/".join([*parts, *source.relative_to(root).parts])
            info = tar.gettarinfo(str(source), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            if info.isreg():
                with source.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)

    return write_layer(path, fill)


def layer_from_tar(path: Path, source: Path, *, keep: Callable[[tarfile.TarInfo], bool]) -> Layer:
    """A layer of the members of the tar ``source`` that ``keep`` accepts, in their order."""

    def fill(tar: tarfile.TarFile) -> None:
        with tarfile.open(source, mode="r|") as reading:
            for member in reading:
                if not keep(member):
                    continue
                if member.isreg():
                    tar.addfile(member, reading.extractfile(member))
                else:
                    tar.addfile(member)

    return write_layer(path, fill)


def _blob(data: bytes) -> tuple[str, bytes]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", data


def _canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Image:
    """An image ready to be written: its layers and config."""

    name: str  # repository, e.g. docker.io/library/lyra or registry.k8s.io/pause
    tag: str
    layers: Sequence[Layer]
    config: Mapping[str, Any]  # the OCI config's "config" (Entrypoint, Cmd, User, Env, Labels, WorkingDir)
    created: str  # RFC 3339, fixed (the source commit's time) so the digest depends on the content only

    def documents(self) -> tuple[tuple[str, bytes], tuple[str, bytes]]:
        """(digest, bytes) of the config and of the manifest."""
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": self.created,
            "config": dict(self.config),
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in self.layers]},
            "history": [{"created": self.created, "created_by": "lyra image build"} for _ in self.layers],
        }
        config_digest, config_bytes = _blob(_canonical(config))
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config_bytes)},
            "layers": [{"mediaType": MEDIA_LAYER, "digest": layer.digest, "size": layer.size} for layer in self.layers],
            "annotations": dict(self.config.get("Labels", {}).items()),
        }
        return (config_digest, config_bytes), _blob(_canonical(manifest))

    @property
    def reference(self) -> str:
        return f"{self.name}:{self.tag}"

    def manifest_digest(self) -> str:
        return self.documents()[1][0]


def write_archive(image: Image, archive: Path) -> str:
    """Write the OCI layout of ``image`` as one tar at ``archive`` (atomically); returns the manifest's digest."""
    (config_digest, config_bytes), (manifest_digest, manifest_bytes) = image.documents()
    manifest_size = len(manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {REF_NAME: image.tag, CONTAINERD_NAME: image.reference},
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    archive.parent.mkdir(parents=True, exist_ok=True)
    temporary = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))

    def add_dir(tar: tarfile.TarFile, name: str) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)

    try:
        with tarfile.open(temporary, mode="w", format=tarfile.PAX_FORMAT) as tar:
            add_bytes(tar, "oci-layout", _canonical({"imageLayoutVersion": "1.0.0"}))
            add_bytes(tar, "index.json", _canonical(index))
            add_dir(tar, "blobs")
            add_dir(tar, "blobs/sha256")
            add_bytes(tar, f"blobs/sha256/{config_digest.split(':')[1]}", config_bytes)
            add_bytes(tar, f"blobs/sha256/{manifest_digest.split(':')[1]}", manifest_bytes)
            seen = set()
            for layer in image.layers:
                if layer.digest in seen:
                    continue
                seen.add(layer.digest)
                if not layer.path.is_file() or layer.path.stat().st_size != layer.size:
                    raise OciError(f"the cached layer {layer.path} is missing or not {layer.size} bytes")
                info = tarfile.TarInfo(f"blobs/sha256/{layer.digest.split(':')[1]}")
                info.size, info.mode = layer.size, 0o644
                with layer.path.open("rb") as handle:
                    tar.addfile(info, handle)
        os.replace(temporary, archive)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return manifest_digest


def read_archive(archive: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(index, manifest, config) of a single-image OCI archive, each blob checked against its digest."""
    try:
        with tarfile.open(archive, mode="r") as tar:

            def read(name: str) -> bytes:
                member = tar.extractfile(name)
                if member is None:
                    raise OciError(f"{archive}: {name} is not a file")
                return member.read()

            def blob(digest: str) -> bytes:
                data = read(f"blobs/sha256/{digest.split(':')[1]}")
                if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
                    raise OciError(f"{archive}: the blob {digest} does not match its digest")
                return data

            index = json.loads(read("index.json"))
            manifest = json.loads(blob(index["manifests"][0]["digest"]))
            config = json.loads(blob(manifest["config"]["digest"]))
            for layer in manifest["layers"]:
                blob(layer["digest"])
    except (OSError, KeyError, tarfile.TarError, json.JSONDecodeError) as error:
        raise OciError(f"{archive} is not a readable OCI archive: {error}") from error
    return index, manifest, config


def copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
