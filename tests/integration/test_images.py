"""Lyra's images built without a container engine and run as real containers (`make image`, `lyra image verify`).

The build fills the shared cache (the base filesystem by mmdebstrap, the uv-locked environment in a chroot) on its
first run; the archives go to a temporary directory. Then: the archives hold what the recipe says (and no plotting
library, no uv, no CA bundle, no sources), a second build with nothing changed writes nothing, and each image runs
in a containerd of the test's own, which is gone afterwards. Needs root (mmdebstrap, chroot, runc), apt and gcc.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from lyra.images import build, verify
from lyra.imagespec import oci, recipe
from lyra.localcluster import binaries

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.geteuid() != 0, reason="building and running images needs root (mmdebstrap, chroot, runc)"),
]

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[build.Built]]:
    out = tmp_path_factory.mktemp("images")
    try:
        images = build.ImageBuilder(REPOSITORY, out, print).build()
    except build.ImageBuildError as error:
        pytest.fail(str(error), pytrace=False)
    return out, images


def layer_members(path: Path) -> dict[str, tarfile.TarInfo]:
    with gzip.open(path) as unzipped, tarfile.open(fileobj=unzipped, mode="r|") as tar:
        return {member.name.removeprefix("./"): member for member in tar}


def test_every_image_is_an_oci_archive_named_and_labelled(built: tuple[Path, list[build.Built]]) -> None:
    out, images = built
    assert [image.image for image in images] == list(recipe.IMAGES)
    version = build.project_version(REPOSITORY)
    revision = build.provenance(REPOSITORY, None).revision
    expected = {
        "lyra": f"docker.io/library/lyra:{version}",
        "kube-scheduler": f"registry.k8s.io/kube-scheduler:{binaries.KUBERNETES_VERSION}",
        "pause": "registry.k8s.io/pause:3.10",
        "lyra-training-worker": f"docker.io/library/lyra-training-worker:{version}",
        "lyra-inference-replica": f"docker.io/library/lyra-inference-replica:{version}",
    }
    for image in images:
        assert image.reference == expected[image.image]
        index, manifest, config = oci.read_archive(image.archive)
        assert index["manifests"][0]["digest"] == image.digest
        assert index["manifests"][0]["annotations"][oci.CONTAINERD_NAME] == image.reference
        assert config["config"]["Labels"][build.LABEL_REVISION] == revision
        assert len(manifest["layers"]) == len(config["rootfs"]["diff_ids"])
    assert sorted(path.name for path in out.iterdir()) == sorted([*(i.archive.name for i in images), "images.json"])


def test_the_lyra_image_is_the_base_and_the_locked_environment_only(built: tuple[Path, list[build.Built]]) -> None:
    _out, images = built
    [lyra] = [image for image in images if image.image == "lyra"]
    _index, manifest, config = oci.read_archive(lyra.archive)
    assert config["config"]["Entrypoint"] == list(recipe.ENTRYPOINT)
    assert config["config"]["User"] == recipe.USER
    assert config["config"]["Labels"][build.LABEL_VERSION] == build.project_version(REPOSITORY)
    builder = build.ImageBuilder(REPOSITORY, lyra.archive.parent, print)
    base = builder.base_layer()
    venv = builder.venv_layer(base)
    assert [layer["digest"] for layer in manifest["layers"]] == [base.digest, venv.digest]
    base_members = layer_members(base.path)
    assert base_members["usr/bin/python3.11"].isreg()
    assert not [name for name in base_members if name.startswith("dev/")]  # no device nodes: the runtime makes /dev
    docs = [name for name, m in base_members.items() if name.startswith("usr/share/doc/") and m.isreg()]
    assert docs
    assert all(name.endswith("/copyright") for name in docs)  # as in Debian's slim images
    assert not [name for name, m in base_members.items() if name.startswith("usr/share/man/") and m.isreg()]
    venv_names = list(layer_members(venv.path))
    assert {name.split("/")[0] for name in venv_names} == {"opt"}
    assert "opt/lyra/bin/lyra" in venv_names
    site = "opt/lyra/lib/python3.11/site-packages/"
    packages = {name[len(site) :].split("/")[0].lower() for name in venv_names if name.startswith(site)}
    assert "lyra" in packages
    assert "kubernetes" in packages
    for absent in ("matplotlib", "pytest", "mypy", "ruff", "hypothesis"):  # no plotting extra, no dev groups
        assert not [p for p in packages if p.startswith(absent)], absent
    for name in venv_names:
        assert not name.endswith(("ca-certificates.crt", "/uv")), name


def test_a_rebuild_with_nothing_changed_writes_nothing_in_seconds(built: tuple[Path, list[build.Built]]) -> None:
    out, images = built
    said: list[str] = []
    started = time.monotonic()
    again = build.ImageBuilder(REPOSITORY, out, said.append).build()
    seconds = time.monotonic() - started
    print(f"cached rebuild of {len(again)} images: {seconds:.1f}s")
    assert [(image.digest, image.written) for image in again] == [(image.digest, False) for image in images]
    assert seconds < 60, said


def test_each_image_runs_in_a_containerd_of_its_own_which_is_gone_afterwards(
    built: tuple[Path, list[build.Built]],
) -> None:
    out, _images = built
    said: list[str] = []
    verify.verify_archives(out, said.append)
    print("\n".join(said))
    text = "\n".join(said)
    for expected in (
        "lyra: ran `lyra 0.1.0` and `lyra --help` as uid 65532, Python 3.11",
        "no matplotlib",
        f"kube-scheduler: ran `Kubernetes {binaries.KUBERNETES_VERSION}`",
        "pause: ran, and exited 0 on SIGTERM",
        "-> checkpoint written, exit 0",
        "training worker: resumed at step",
        "inference replica: /healthz 503 while warming up, 200 after",
        "containerd stopped; its directory, mounts and shims are gone",
    ):
        assert expected in text, expected
    directory = next(line for line in said if line.startswith("containerd ")).rsplit(" in ", 1)[1]
    assert not Path(directory).exists()
    assert directory not in Path("/proc/self/mounts").read_text()


def test_a_verify_stopped_by_sigterm_leaves_no_containerd(built: tuple[Path, list[build.Built]]) -> None:
    """`timeout 15 lyra image verify`: SIGTERM ended Python at once, and its containerd (in a session of its own, out
    of `timeout`'s reach) kept running with its state in /tmp. Stopped as by Ctrl-C now: containerd stopped, its
    directory removed, exit 143."""
    out, _images = built
    with subprocess.Popen(
        [sys.executable, "-m", "lyra", "image", "verify", "--dir", str(out)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=REPOSITORY,
    ) as run:  # fmt: skip
        try:
            assert run.stdout is not None
            assert run.stderr is not None
            started = ""
            for line in run.stdout:  # up to containerd answering
                if line.startswith("containerd ") and " running (pid " in line:
                    started = line.strip()
                    break
            assert started, run.stderr.read()
            containerd = int(started.split("(pid ", 1)[1].split(")", 1)[0])
            directory = started.rsplit(" in ", 1)[1]
            run.send_signal(signal.SIGTERM)
            code = run.wait(timeout=120)
            errors = run.stderr.read()
        finally:
            if run.poll() is None:
                run.kill()
    try:
        os.kill(containerd, signal.SIGKILL)  # a containerd left running is the failure: the test stops it
        left = True
    except ProcessLookupError:
        left = False
    assert not left, "containerd is still running"
    clients = [pid for pid in _naming(directory) if pid != os.getpid()]  # a ctr started as the SIGTERM came, say
    assert not clients, f"processes naming the stopped containerd's directory still run: {clients}"
    assert code == 128 + signal.SIGTERM, errors
    assert "lyra image verify: interrupted (SIGTERM); its containerd is stopped" in errors
    assert "Traceback" not in errors
    assert not Path(directory).exists()
    assert directory not in Path("/proc/self/mounts").read_text()


def _naming(text: str) -> list[int]:
    """The processes whose command line names ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
