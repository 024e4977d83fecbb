"""OCI layouts written by lyra.imagespec.oci: layers are deterministic (same input, same digests), an archive reads
back with every blob matching its digest, and its index names the image the way ctr and skopeo look for it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from lyra.imagespec import oci


def sample_tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "lib").mkdir()
    (root / "lib" / "data.txt").write_text("data\n")
    (root / "bin" / "link").symlink_to("tool")
    return root


def test_a_layer_from_a_tree_is_deterministic_and_its_digests_are_of_the_gzip_and_the_tar(tmp_path: Path) -> None:
    tree = sample_tree(tmp_path / "tree")
    first = oci.layer_from_tree(tmp_path / "a.tar.gz", tree, "opt/lyra")
    (tree / "lib" / "data.txt").touch()  # a newer mtime changes nothing: times are fixed
    second = oci.layer_from_tree(tmp_path / "b.tar.gz", tree, "opt/lyra")
    assert (first.digest, first.diff_id, first.size) == (second.digest, second.diff_id, second.size)
    blob = first.path.read_bytes()
    assert first.digest == f"sha256:{hashlib.sha256(blob).hexdigest()}"
    assert first.diff_id == f"sha256:{hashlib.sha256(gzip.decompress(blob)).hexdigest()}"
    with tarfile.open(first.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert list(members) == sorted(members)
    assert set(members) == {"opt", "opt/lyra", "opt/lyra/bin", "opt/lyra/bin/link", "opt/lyra/bin/tool",
                            "opt/lyra/lib", "opt/lyra/lib/data.txt"}  # fmt: skip
    assert members["opt/lyra/bin/link"].issym()
    assert members["opt/lyra/bin/link"].linkname == "tool"
    assert members["opt/lyra/bin/tool"].mode & 0o111
    assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, 0)}


def test_a_layer_from_a_tar_keeps_only_the_members_asked_for(tmp_path: Path) -> None:
    source = tmp_path / "rootfs.tar"
    with tarfile.open(source, "w") as tar:
        for name in ("./dev/", "./dev/null", "./usr/", "./usr/bin/python3"):
            info = tarfile.TarInfo(name)
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
            elif name.endswith("null"):
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            else:
                info.size = 3
            tar.addfile(info, io.BytesIO(b"elf") if info.size else None)
    layer = oci.layer_from_tar(tmp_path / "l.tar.gz", source, keep=lambda m: m.name != "./dev/null")
    with tarfile.open(layer.path) as tar:
        assert tar.getnames() == ["./dev", "./usr", "./usr/bin/python3"]
        member = tar.extractfile("./usr/bin/python3")
        assert member is not None
        assert member.read() == b"elf"


def test_an_archive_reads_back_with_its_names_labels_and_layers(tmp_path: Path) -> None:
    (tmp_path / "pause").write_bytes(b"\x7fELF")
    layer = oci.layer_from_files(tmp_path / "f.tar.gz", [oci.FileEntry("pause", tmp_path / "pause", 0o755)])
    image = oci.Image(
        name="registry.k8s.io/pause",
        tag="3.10",
        layers=(layer, layer),
        config={
            "Entrypoint": ["/pause"],
            "User": "65535:65535",
            "Labels": {"org.opencontainers.image.version": "3.10"},
        },
        created="2026-01-01T00:00:00Z",
    )
    archive = tmp_path / "out" / "pause-3.10.oci.tar"
    digest = oci.write_archive(image, archive)
    assert digest == image.manifest_digest()
    index, manifest, config = oci.read_archive(archive)
    [entry] = index["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"] == {oci.REF_NAME: "3.10", oci.CONTAINERD_NAME: "registry.k8s.io/pause:3.10"}
    assert [item["digest"] for item in manifest["layers"]] == [layer.digest, layer.digest]
    assert config["rootfs"]["diff_ids"] == [layer.diff_id, layer.diff_id]
    assert config["config"]["User"] == "65535:65535"
    assert manifest["annotations"] == {"org.opencontainers.image.version": "3.10"}
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names.count(f"blobs/sha256/{layer.digest.split(':')[1]}") == 1  # a repeated layer is stored once
    assert json.loads(tar_member(archive, "oci-layout")) == {"imageLayoutVersion": "1.0.0"}


def tar_member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read()


def test_a_changed_config_changes_the_digest_and_a_tampered_blob_is_caught(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    layer = oci.layer_from_files(tmp_path / "f.tar.gz", [oci.FileEntry("f", tmp_path / "f", 0o644)])
    one = oci.Image("docker.io/library/x", "1", (layer,), {"Labels": {"a": "1"}}, "2026-01-01T00:00:00Z")
    two = oci.Image("docker.io/library/x", "1", (layer,), {"Labels": {"a": "2"}}, "2026-01-01T00:00:00Z")
    assert one.manifest_digest() != two.manifest_digest()
    assert one.manifest_digest() == oci.Image(**one.__dict__).manifest_digest()
    archive = tmp_path / "x.oci.tar"
    oci.write_archive(one, archive)
    data = bytearray(archive.read_bytes())
    position = data.find(b'"a":"1"')
    data[position + 5] = ord("9")
    archive.write_bytes(bytes(data))
    with pytest.raises(oci.OciError, match="does not match its digest"):
        oci.read_archive(archive)


def test_a_missing_cached_layer_is_an_error_and_leaves_no_archive(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    layer = oci.layer_from_files(tmp_path / "f.tar.gz", [oci.FileEntry("f", tmp_path / "f", 0o644)])
    layer.path.unlink()
    image = oci.Image("docker.io/library/x", "1", (layer,), {}, "2026-01-01T00:00:00Z")
    with pytest.raises(oci.OciError, match="missing"):
        oci.write_archive(image, tmp_path / "x.oci.tar")
    assert list(tmp_path.glob("*.oci.tar*")) == []
