"""Building the Kubernetes control-plane binaries and KWOK from Go modules.

No container images and no release downloads are reachable here, only the Go module proxy, so the binaries are
compiled from source. ``k8s.io/kubernetes`` cannot be ``go install``-ed (its go.mod points the staging modules
at v0.0.0 through replace directives), so a small wrapper module with one replace per staging module is written
into the cache and built there. The Go module and build caches live in Lyra's cache directory, so a second
build (or a second checkout) reuses all the work.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lyra.child_processes import run_to_end
from lyra.localcluster.processes import tail

Reporter = Callable[[str], None]

MINIMUM_GO = (1, 24)
STANDARD_GO_BIN = "/usr/local/go/bin"
HEARTBEAT_SECONDS = 30.0

# Every staging module of k8s.io/kubernetes 1.34 (staging/src/k8s.io in the kubernetes repository).
STAGING_MODULES = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
)


class BuildError(RuntimeError):
    """A build could not run or failed; the message carries the tail of the build log."""


@dataclass(frozen=True)
class GoEnvironment:
    go: Path
    version: str
    mod_cache: Path
    build_cache: Path

    def environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "GOMODCACHE": str(self.mod_cache),
                "GOCACHE": str(self.build_cache),
                # The wrapper module needs go.mod/go.sum updates while resolving; a user's go.work or a
                # toolchain switch (which would download another Go) must not interfere.
                "GOFLAGS": "-mod=mod",
                "GOWORK": "off",
                "GOTOOLCHAIN": "local",
                "GO111MODULE": "on",
            }
        )
        env.update(extra or {})
        return env


def find_go(cache_root: Path) -> GoEnvironment:
    """Locate a usable Go toolchain or explain how to get one."""
    # The official tarball installs to /usr/local/go, which non-login shells often lack on PATH.
    found = shutil.which("go") or shutil.which("go", path=STANDARD_GO_BIN)
    if found is None:
        raise BuildError(
            "Go is not installed (no `go` on PATH). Building kube-apiserver, kube-controller-manager, "
            f"kube-scheduler and kwok needs Go {MINIMUM_GO[0]}.{MINIMUM_GO[1]} or newer: install it from "
            "https://go.dev/dl/ and run `make binaries` again."
        )
    try:
        completed = run_to_end([found, "env", "GOVERSION"], capture_output=True, text=True, check=True, timeout=60)
    except (subprocess.SubprocessError, OSError) as error:
        raise BuildError(f"`{found} env GOVERSION` failed: {error}") from error
    version = completed.stdout.strip()
    match = re.match(r"go(\d+)\.(\d+)", version)
    if match is None or (int(match.group(1)), int(match.group(2))) < MINIMUM_GO:
        raise BuildError(
            f"{found} is {version or 'of unknown version'}; Kubernetes 1.34 needs Go "
            f"{MINIMUM_GO[0]}.{MINIMUM_GO[1]} or newer."
        )
    return GoEnvironment(
        go=Path(found),
        version=version,
        mod_cache=cache_root / "go" / "mod",
        build_cache=cache_root / "go" / "build",
    )


def wrapper_go_mod(kubernetes_version: str) -> str:
    """The go.mod of the wrapper module: require k8s.io/kubernetes and pin every staging module to it."""
    staging_version = "v0." + kubernetes_version.removeprefix("v").split(".", 1)[1]
    replaces = "\n".join(f"replace k8s.io/{module} => k8s.io/{module} {staging_version}" for module in STAGING_MODULES)
    return f"module lyra.dev/kubebuild\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes {kubernetes_version}\n\n{replaces}\n"


def build_kubernetes(
    go: GoEnvironment,
    *,
    version: str,
    commands: Sequence[str],
    work_dir: Path,
    output_dir: Path,
    log_path: Path,
    report: Reporter,
) -> None:
    """Build ``k8s.io/kubernetes/cmd/<command>`` for each command into ``output_dir``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    # go rewrites go.mod while resolving (it adds the indirect requirements), so the file we wrote is kept
    # beside it: when that template changes, the resolved go.mod and go.sum are thrown away.
    template = work_dir / "go.mod.template"
    wanted = wrapper_go_mod(version)
    if not template.exists() or template.read_text(encoding="utf-8") != wanted:
        (work_dir / "go.sum").unlink(missing_ok=True)
        (work_dir / "go.mod").write_text(wanted, encoding="utf-8")
        template.write_text(wanted, encoding="utf-8")
    packages = [f"k8s.io/kubernetes/cmd/{command}" for command in commands]
    major, minor = version.removeprefix("v").split(".")[:2]
    ldflags = " ".join(
        [
            "-s",
            "-w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            f"-X k8s.io/component-base/version.gitMajor={major}",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
        ]
    )
    report(f"resolving and downloading the Go modules of k8s.io/kubernetes {version}")
    package_list = work_dir / "packages.txt"
    _run_go(
        go,
        [str(go.go), "list", "-deps", "-f", "{{.ImportPath}}", *packages],
        work_dir,
        log_path,
        report,
        step="module download",
        stdout_path=package_list,
    )
    expected = sum(1 for line in package_list.read_text(encoding="utf-8").splitlines() if line.strip())
    report(f"compiling {', '.join(commands)} ({expected} packages, fewer when some are in the build cache)")
    _run_go(
        go,
        [str(go.go), "build", "-v", "-o", f"{output_dir}{os.sep}", "-ldflags", ldflags, *packages],
        work_dir,
        log_path,
        report,
        step="compile",
        expected_packages=expected,
    )


def build_kwok(
    go: GoEnvironment, *, version: str, work_dir: Path, output_dir: Path, log_path: Path, report: Reporter
) -> None:
    """``go install sigs.k8s.io/kwok/cmd/kwok@<version>`` into ``output_dir``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    report(f"compiling kwok {version} (go install sigs.k8s.io/kwok/cmd/kwok@{version})")
    _run_go(
        go,
        [str(go.go), "install", "-v", f"sigs.k8s.io/kwok/cmd/kwok@{version}"],
        work_dir,
        log_path,
        report,
        step="compile",
        extra_env={"GOBIN": str(output_dir), "GOFLAGS": ""},
    )


def _run_go(
    go: GoEnvironment,
    argv: list[str],
    cwd: Path,
    log_path: Path,
    report: Reporter,
    *,
    step: str,
    stdout_path: Path | None = None,
    expected_packages: int | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> None:
    """Run one go command with its output in the build log, reporting progress every half minute."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("ab") as log:
        log.write(f"\n$ {' '.join(argv)}\n".encode())
        log.flush()
        offset = log.tell()
        with contextlib.ExitStack() as stack:
            stdout = stack.enter_context(stdout_path.open("wb")) if stdout_path is not None else log
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=go.environ(extra_env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=log,
                start_new_session=True,  # its compiler and linker processes form one group we can stop
            )
            try:
                while True:
                    try:
                        code = popen.wait(timeout=HEARTBEAT_SECONDS)
                        break
                    except subprocess.TimeoutExpired:
                        report(_progress_line(step, started, log_path, offset, expected_packages))
            finally:
                # Interrupted (Ctrl-C): do not leave a compiler running in the background.
                if popen.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(popen.pid, signal.SIGKILL)
                    popen.wait()
    if code != 0:
        raise BuildError(
            f"`{' '.join(argv[:3])} ...` failed with exit code {code} during the {step} step. "
            f"Last lines of {log_path}:\n{tail(log_path, 40)}"
        )


def _progress_line(step: str, started: float, log_path: Path, offset: int, expected: int | None) -> str:
    elapsed = int(time.monotonic() - started)
    minutes, seconds = divmod(elapsed, 60)
    text = f"  ... {step}: {minutes}m{seconds:02d}s elapsed"
    compiled = _compiled_packages(log_path, offset)
    if expected:
        text += f", {compiled} of at most {expected} packages compiled"
    elif compiled:
        text += f", {compiled} packages compiled"
    return text + f" (log: {log_path})"


def _compiled_packages(log_path: Path, offset: int) -> int:
    # `go build -v` prints one import path per compiled package; everything else starts with "go: " or "#".
    try:
        with log_path.open("rb") as log:
            log.seek(offset)
            lines = log.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if line and not line.startswith(("go: ", "#", "$", " ")))


def build_local_module(
    go: GoEnvironment, *, sources: Sequence[Path], work_dir: Path, output: Path, log_path: Path, report: Reporter
) -> None:
    """Build a small Go module of the project (``sources``: its go.mod, go.sum and .go files) into ``output``.

    Every module it needs is one the kubernetes build already put in the module cache, so the build runs offline.
    The executable is written beside ``output`` under another name and renamed once whole: a build cut short
    leaves no file at ``output`` that looks built.
    """
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    for source in sources:
        shutil.copy2(source, work_dir / source.name)
    report(f"compiling {output.name} from {sources[0].parent}")
    partial = output.with_name(f"{output.name}.partial")
    _run_go(
        go,
        [str(go.go), "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
        work_dir,
        log_path,
        report,
        step="compile",
        extra_env={"GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"},
    )
    partial.replace(output)
