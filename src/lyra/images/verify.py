"""``lyra image verify``: the archives imported into a containerd of our own and run as real containers.

containerd and runc come from Debian's packages through the binary cache (:data:`binaries.CONTAINER_RUNTIME`);
containerd runs with its own root, state, sockets and config in a temporary directory (its CRI plugin off: ``ctr``
is the client), images are imported with ``ctr image import --base-name`` into the ``k8s.io`` namespace as a node
would hold them, and each image runs once:

- lyra: ``lyra --version`` and ``lyra --help`` as uid 65532, and no plotting library importable;
- kube-scheduler: ``kube-scheduler --version``; pause: started, then stopped by SIGTERM with exit status 0;
- the training worker: trains until it has checkpointed, gets SIGTERM, writes its checkpoint and exits 0; a second
  container resumes from that checkpoint and finishes;
- the inference replica: on the host's network, on 127.0.0.1 and a port the kernel picks, answers /healthz and
  /predict, then stops on SIGTERM.

Everything started is stopped at the end, on success or failure: tasks killed and removed, containerd and the shims
it started (found by their ``-address`` argument, our socket) ended by pid, mounts under the directory unmounted,
the directory removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lyra.child_processes import run_to_end
from lyra.imagespec import oci, recipe
from lyra.localcluster import binaries
from lyra.localcluster.binaries import BinariesError, BinaryCache
from lyra.localcluster.waiting import WaitTimeoutError, wait_for

Reporter = Callable[[str], None]
NAMESPACE = "k8s.io"


class VerifyError(RuntimeError):
    """An image did not import or run as expected; the message says which and what it printed."""


@dataclass
class Containerd:
    directory: Path
    process: subprocess.Popen[bytes]
    ctr_path: Path
    log: Path

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    def ctr(self, *arguments: str, timeout: float = 120, check: bool = True) -> str:
        command = [str(self.ctr_path), "--address", str(self.socket), "--namespace", NAMESPACE, *arguments]
        try:
            completed = run_to_end(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as error:
            raise VerifyError(f"`ctr {' '.join(arguments)}` did not finish in {timeout:g} s") from error
        if check and completed.returncode != 0:
            raise VerifyError(
                f"`ctr {' '.join(arguments)}` exited with {completed.returncode}: "
                f"{(completed.stderr or completed.stdout).strip()[-800:]}"
            )
        return completed.stdout + completed.stderr

    def start(self, image: str, container: str, *arguments: str, options: tuple[str, ...] = ()) -> Running:
        """``ctr run --rm`` in the background, its output read line by line into a queue."""
        command = [
            str(self.ctr_path), "--address", str(self.socket), "--namespace", NAMESPACE,
            "run", "--rm", *options, image, container, *arguments,
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        running = Running(process=process, lines=queue.Queue(), seen=[])
        threading.Thread(target=running.pump, daemon=True).start()
        return running


@dataclass
class Running:
    """A ``ctr run`` in the background: its process and its output so far."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str | None]
    seen: list[str]

    def pump(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def output(self) -> str:
        return " | ".join(self.seen)[-800:]

    def wait_for_line(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise VerifyError(f"the container ended before printing {text!r}: {self.output()}")
            self.seen.append(line)
            if text in line:
                return line
        raise VerifyError(f"expected {text!r} from the container within {timeout:g} s; it printed: {self.output()}")

    def finish(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as error:
            self.process.kill()
            self.process.wait(timeout=30)
            raise VerifyError(f"the container did not exit within {timeout:g} s: {self.output()}") from error
        while (line := self.lines.get(timeout=timeout)) is not None:
            self.seen.append(line)
        return code


def _config(directory: Path) -> str:
    return "\n".join(
        [
            "version = 2",
            f'root = "{directory / "root"}"',
            f'state = "{directory / "state"}"',
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
            "[grpc]",
            f'  address = "{directory / "containerd.sock"}"',
            "[ttrpc]",
            f'  address = "{directory / "containerd-ttrpc.sock"}"',
            "[debug]",
            f'  address = "{directory / "debug.sock"}"',
            "",
        ]
    )


@contextlib.contextmanager
def running_containerd(report: Reporter, cache: BinaryCache | None = None) -> Iterator[Containerd]:
    """A containerd of our own in a temporary directory; everything it started is stopped on exit."""
    cache = cache if cache is not None else BinaryCache()
    try:
        for component in binaries.CONTAINER_RUNTIME:
            if not cache.is_cached(component):
                cache.install(component, report)
        containerd = cache.tool(binaries.CONTAINERD, "containerd")
        runc = cache.tool(binaries.RUNC, "runc")
    except BinariesError as error:
        raise VerifyError(str(error)) from error
    if os.geteuid() != 0:
        raise VerifyError("running containers needs root (containerd and runc)")
    directory = Path(tempfile.mkdtemp(prefix="lyra-verify-"))
    (directory / "config.toml").write_text(_config(directory), encoding="utf-8")
    log = directory / "containerd.log"
    path = os.pathsep.join([str(containerd.parent), str(runc.parent), recipe.SYSTEM_PATH])
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(containerd), "--config", str(directory / "config.toml")],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={"PATH": path, "TMPDIR": str(directory)},
            start_new_session=True,
        )
    daemon = Containerd(directory=directory, process=process, ctr_path=containerd.parent / "ctr", log=log)
    try:

        def answering() -> bool:
            if process.poll() is not None:
                raise VerifyError(f"containerd exited: {log.read_text(errors='replace')[-800:]}")
            return "Server:" in daemon.ctr("version", check=False)

        try:
            wait_for(answering, 30, "containerd to answer on its socket")
        except WaitTimeoutError as error:
            raise VerifyError(f"{error}: {log.read_text(errors='replace')[-800:]}") from error
        report(f"containerd {binaries.CONTAINERD_VERSION} running (pid {process.pid}) in {directory}")
        yield daemon
    finally:
        _stop(daemon, report)


def _stop(daemon: Containerd, report: Reporter) -> None:
    if daemon.process.poll() is None:
        for line in daemon.ctr("task", "ls", "-q", check=False).splitlines():
            if line.strip() and not line.startswith("ctr:"):
                daemon.ctr("task", "kill", "-s", "SIGKILL", line.strip(), check=False)
                daemon.ctr("task", "rm", "-f", line.strip(), check=False)
        for line in daemon.ctr("container", "ls", "-q", check=False).splitlines():
            if line.strip() and not line.startswith("ctr:"):
                daemon.ctr("container", "rm", line.strip(), check=False)
        for line in daemon.ctr("image", "ls", "-q", check=False).splitlines():
            if line.strip() and not line.startswith("ctr:"):
                daemon.ctr("image", "rm", line.strip(), check=False)
        daemon.process.terminate()
        try:
            daemon.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait(timeout=10)
    for pid in _shims(daemon.socket):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for mount in _mounts_under(daemon.directory):
        run_to_end(["umount", "-l", mount], capture_output=True, check=False)
    shutil.rmtree(daemon.directory, ignore_errors=True)
    left = _shims(daemon.socket) + _mounts_under(daemon.directory)
    if left:
        raise VerifyError(f"left behind after stopping containerd: {left}")
    report("containerd stopped; its directory, mounts and shims are gone")


def _shims(socket: Path) -> list[int]:
    """Pids of the shims our containerd started (their command line names our socket)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                arguments = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if arguments and arguments[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in arguments:
                found.append(int(entry.name))
    return found


def _mounts_under(directory: Path) -> list[str]:
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if len(line.split()) > 1]
    return sorted((p for p in points if p.startswith(f"{directory}/")), key=len, reverse=True)


def verify_archives(directory: Path, report: Reporter) -> None:
    archives = {}
    for path in sorted(directory.glob("*.oci.tar")):
        index, _manifest, _config_blob = oci.read_archive(path)
        annotations = index["manifests"][0].get("annotations", {})
        archives[path] = (str(annotations.get(oci.CONTAINERD_NAME, "")), str(annotations.get(oci.REF_NAME, "")))
    if not archives:
        raise VerifyError(f"no *.oci.tar in {directory}: run `make image` first")
    with running_containerd(report) as daemon:
        references = {}
        for path, (reference, _tag) in archives.items():
            started = time.monotonic()
            base = reference.rpartition(":")[0]
            daemon.ctr("image", "import", "--base-name", base, str(path), timeout=300)
            listed = daemon.ctr("image", "ls", "-q")
            if reference not in listed.split():
                raise VerifyError(f"{path.name} imported, but containerd lists no {reference}: {listed}")
            references[reference.rpartition("/")[2].rpartition(":")[0]] = reference
            report(f"imported {path.name} as {reference} ({time.monotonic() - started:.1f}s)")
        for name, check in (
            ("lyra", _check_lyra),
            ("kube-scheduler", _check_scheduler),
            ("pause", _check_pause),
            (recipe.TRAINING_WORKER.image, _check_training_worker),
            (recipe.INFERENCE_REPLICA.image, _check_inference_replica),
        ):
            if name in references:
                check(daemon, references[name], report)
            else:
                report(f"{name}: no archive in {directory}; not run")


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    try:
        wait_for(predicate, timeout, what)
    except WaitTimeoutError as error:
        raise VerifyError(str(error)) from error


def _run_once(daemon: Containerd, image: str, container: str, *arguments: str) -> str:
    run = daemon.start(image, container, *arguments)
    code = run.finish(120)
    if code != 0:
        raise VerifyError(f"{image} {' '.join(arguments)} exited with {code}: {run.output()}")
    return "\n".join(run.seen)


def _check_lyra(daemon: Containerd, image: str, report: Reporter) -> None:
    version = _run_once(daemon, image, "lyra-version", "lyra", "--version").strip()
    usage = _run_once(daemon, image, "lyra-help")  # the image's own entrypoint and command: lyra --help
    if "usage: lyra" not in usage:
        raise VerifyError(f"{image}: `lyra --help` printed no usage: {usage[:400]}")
    probe = (
        "import importlib.util, os, sys; "
        "print(os.getuid(), sys.version.split()[0], sys.executable, importlib.util.find_spec('matplotlib') is None)"
    )
    uid, python, executable, no_plots = _run_once(daemon, image, "lyra-probe", "python", "-c", probe).split()
    if uid != recipe.USER.split(":")[0] or not python.startswith("3.11") or no_plots != "True":
        raise VerifyError(f"{image}: uid {uid}, Python {python}, matplotlib absent: {no_plots}")
    report(f"lyra: ran `{version}` and `lyra --help` as uid {uid}, Python {python} ({executable}); no matplotlib")


def _check_scheduler(daemon: Containerd, image: str, report: Reporter) -> None:
    version = _run_once(daemon, image, "scheduler-version", "/usr/local/bin/kube-scheduler", "--version").strip()
    if binaries.KUBERNETES_VERSION not in version:
        raise VerifyError(f"{image}: kube-scheduler --version printed {version!r}")
    report(f"kube-scheduler: ran `{version}`")


def _check_pause(daemon: Containerd, image: str, report: Reporter) -> None:
    run = daemon.start(image, "pause")

    def running() -> bool:
        if run.process.poll() is not None:
            raise VerifyError(f"{image}: the pause task exited with {run.process.returncode}")
        return any(
            line.split()[:1] == ["pause"] and "RUNNING" in line for line in daemon.ctr("task", "ls").splitlines()
        )

    _wait(running, "the pause task to run")

    def stopped() -> bool:
        # RUNNING comes before pause has set its handlers, and pid 1 ignores a signal it has no handler for (as
        # the kubelet does, send it again until it goes)
        if run.process.poll() is not None:
            return True
        daemon.ctr("task", "kill", "-s", "SIGTERM", "pause", check=False)
        return False

    _wait(stopped, "pause to exit on SIGTERM", timeout=30)
    code = run.finish(30)
    if code != 0:
        raise VerifyError(f"{image}: pause exited with {code} on SIGTERM")
    report("pause: ran, and exited 0 on SIGTERM")


def _check_training_worker(daemon: Containerd, image: str, report: Reporter) -> None:
    shared = daemon.directory / "checkpoints"
    shared.mkdir()
    os.chown(shared, *(int(part) for part in recipe.USER.split(":")))
    checkpoint = shared / "state.json"
    mount = ("--mount", f"type=bind,src={shared},dst=/checkpoints,options=rbind:rw")
    env = ("--env", "LYRA_CHECKPOINT_PATH=/checkpoints/state.json", "--env", "LYRA_STEP_SECONDS=0.02")
    run = daemon.start(image, "trainer", options=(*mount, *env, "--env", "LYRA_CHECKPOINT_EVERY=10"))
    run.wait_for_line("starting at step 0", 60)

    def checkpointed() -> bool:
        if run.process.poll() is not None:
            raise VerifyError(f"{image}: the worker exited with {run.process.returncode}: {run.output()}")
        return checkpoint.is_file()

    _wait(checkpointed, "the worker's first periodic checkpoint")
    signalled = time.monotonic()
    daemon.ctr("task", "kill", "-s", "SIGTERM", "trainer")
    code = run.finish(30)
    took = time.monotonic() - signalled
    state = json.loads(checkpoint.read_text(encoding="utf-8"))
    if code != 0 or state.get("reason") != "sigterm":
        raise VerifyError(f"{image}: after SIGTERM exit {code}, checkpoint {state}: {run.output()}")
    step = int(state["step"])
    report(f"training worker: SIGTERM at step {step} -> checkpoint written, exit 0 in {took:.2f}s")
    target = step + 20
    run = daemon.start(image, "trainer-resumed", options=(*mount, *env, "--env", f"LYRA_STEPS={target}"))
    run.wait_for_line(f"at step {step}", 60)
    code = run.finish(60)
    state = json.loads(checkpoint.read_text(encoding="utf-8"))
    if code != 0 or state.get("reason") != "done" or int(state["step"]) != target:
        raise VerifyError(f"{image}: the resumed worker exited {code}, checkpoint {state}: {run.output()}")
    report(f"training worker: resumed at step {step}, finished at step {target}")


def _check_inference_replica(daemon: Containerd, image: str, report: Reporter) -> None:
    options = ("--net-host", "--env", "LYRA_LISTEN_HOST=127.0.0.1", "--env", "LYRA_PORT=0")
    run = daemon.start(image, "replica", options=(*options, "--env", "LYRA_WARMUP_SECONDS=1"))
    line = run.wait_for_line("listening on", 60)
    port = int(line.split("listening on ", 1)[1].split(";")[0].rpartition(":")[2])
    started = time.monotonic()
    statuses: list[int] = []

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                statuses.append(response.status)
        except urllib.error.HTTPError as error:
            statuses.append(error.code)
        except OSError as error:
            raise VerifyError(f"{image}: /healthz on port {port} did not answer: {error}") from error
        return statuses[-1] == 200

    _wait(ready, "/healthz to answer 200")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/predict?x=2", timeout=2) as response:
        answer = json.loads(response.read())
    daemon.ctr("task", "kill", "-s", "SIGTERM", "replica")
    code = run.finish(30)
    if answer.get("y") != 7.0 or code != 0:
        raise VerifyError(f"{image}: /predict answered {answer}, exit {code}: {run.output()}")
    first = statuses[0]
    report(
        f"inference replica: /healthz {first} while warming up, 200 after {time.monotonic() - started:.1f}s; "
        f"/predict?x=2 -> y={answer['y']}; exit 0 on SIGTERM"
    )
