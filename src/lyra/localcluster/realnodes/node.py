"""The runner of one real node: ``python -m lyra.localcluster.realnodes.node NODE.json``.

The cluster starts it inside the cluster's network namespace and a private mount namespace of its own
(``nsenter --net=... unshare --mount --propagation slave``). It then:

1. moves itself into the node's cgroup (so containerd, its shims, the kubelet and the plugin are found there);
2. bind-mounts the node's own directories over the paths the kubelet and containerd use whatever their flags say
   (``/var/lib`` for ``kubelet/device-plugins`` and ``cni``, ``/var/log`` for pod logs, ``/run`` for shim sockets)
   and files over the three ``/proc/sys`` entries the kubelet writes, so the machine's values stay untouched;
3. starts containerd, imports the locally built images (``ctr image import --base-name``), then starts the kubelet
   and, when the node has GPUs, Lyra's fake GPU device plugin;
4. supervises them: when one exits, it stops the others and exits non-zero; on SIGTERM it stops them and exits 0.

Mounts vanish with the mount namespace when the node's last process ends; ``lyra cluster down`` kills whatever
is left in the node's cgroups.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from lyra.child_processes import run_to_end
from lyra.localcluster.realnodes import cgroups, nodeconfig
from lyra.localcluster.realnodes.nodeconfig import NodeSpec

STOP_GRACE_SECONDS = 10.0
CONTAINERD_START_SECONDS = 60.0
IMPORT_TIMEOUT_SECONDS = 600.0


class NodeStartError(RuntimeError):
    pass


def _run(command: list[str], timeout: float = 60.0) -> str:
    completed = run_to_end(command, capture_output=True, text=True, check=False, timeout=timeout)
    if completed.returncode != 0:
        raise NodeStartError(f"`{' '.join(command)}` exited with {completed.returncode}: {completed.stderr.strip()}")
    return completed.stdout


def _bind(source: Path, target: Path) -> None:
    _run(["mount", "--bind", str(source), str(target)])


def prepare_mounts(node: NodeSpec) -> None:
    for directory in (node.var_lib, node.var_log, node.run):
        directory.mkdir(parents=True, exist_ok=True)
    for directory in (
        node.run / "containerd",
        node.var_lib / "kubelet" / "device-plugins",
        node.var_lib / "cni",
        node.var_log / "pods",
        node.var_log / "containers",
    ):
        directory.mkdir(parents=True, exist_ok=True)
    _bind(node.var_lib, Path("/var/lib"))
    _bind(node.var_log, Path("/var/log"))
    _bind(node.run, Path("/run"))
    sysctls = node.directory / "sysctl"
    sysctls.mkdir(exist_ok=True)
    for entry, value in nodeconfig.KUBELET_SYSCTLS.items():
        file = sysctls / entry.replace("/", ".")
        file.write_text(f"{value}\n", encoding="ascii")
        _bind(file, Path("/proc/sys") / entry)


class Supervisor:
    def __init__(self, node: NodeSpec) -> None:
        self.node = node
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self.stopping = False

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = self.node.log(name).open("ab")
        self._logs.append(log)
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.children[name] = popen
        print(f"started {name} (pid {popen.pid}), log {self.node.log(name)}", flush=True)
        return popen

    def check(self) -> None:
        for name, popen in self.children.items():
            code = popen.poll()
            if code is not None:
                raise NodeStartError(f"{name} exited with {code}; see {self.node.log(name)}")

    def stop(self) -> None:
        for name in ("device-plugin", "kubelet", "containerd"):
            popen = self.children.get(name)
            if popen is None or popen.poll() is not None:
                continue
            popen.terminate()
            try:
                popen.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        for log in self._logs:
            log.close()


def start_containerd(node: NodeSpec, supervisor: Supervisor) -> None:
    config = node.directory / "containerd.toml"
    config.write_text(nodeconfig.containerd_config(node), encoding="utf-8")
    cni_conf = node.directory / "cni-conf"
    cni_conf.mkdir(exist_ok=True)
    nodeconfig.write_json(cni_conf / "10-lyra.conflist", nodeconfig.cni_config(node))
    environment = dict(os.environ)
    # containerd finds the shim (containerd-shim-runc-v2) on PATH; runc is named in the config.
    environment["PATH"] = f"{node.containerd.parent}:{environment.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    log = node.log("containerd").open("ab")
    supervisor._logs.append(log)
    popen = subprocess.Popen(
        [str(node.containerd), "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment,
    )
    supervisor.children["containerd"] = popen
    deadline = time.monotonic() + CONTAINERD_START_SECONDS
    while time.monotonic() < deadline:
        supervisor.check()
        if node.containerd_socket.exists():
            completed = run_to_end(_ctr(node, "version"), capture_output=True, text=True, check=False, timeout=30)
            if completed.returncode == 0 and "Server:" in completed.stdout:
                return
        time.sleep(0.2)  # polled with a deadline
    raise NodeStartError(f"containerd did not answer within {CONTAINERD_START_SECONDS:g} s")


def _ctr(node: NodeSpec, *arguments: str) -> list[str]:
    return [str(node.ctr), "--address", str(node.containerd_socket), "--namespace", "k8s.io", *arguments]


def import_images(node: NodeSpec) -> None:
    for image in node.images:
        started = time.monotonic()
        _run(_ctr(node, "image", "import", "--base-name", image.base_name, str(image.path)), IMPORT_TIMEOUT_SECONDS)
        print(f"imported {image.path.name} as {image.base_name} ({time.monotonic() - started:.1f}s)", flush=True)


def run(node: NodeSpec) -> int:
    cgroups.join(f"{node.cgroup_parent}/runtime", os.getpid())
    prepare_mounts(node)
    supervisor = Supervisor(node)
    stop_requested = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        start_containerd(node, supervisor)
        import_images(node)
        kubelet_config = node.directory / "kubelet-config.json"
        kubeconfig = node.directory / "kubelet.kubeconfig"
        nodeconfig.write_json(kubelet_config, nodeconfig.kubelet_config(node))
        nodeconfig.write_json(kubeconfig, nodeconfig.kubeconfig(node))
        kubeconfig.chmod(0o600)
        supervisor.start("kubelet", nodeconfig.kubelet_command(node, kubelet_config, kubeconfig))
        if node.gpu_count > 0:
            supervisor.start(
                "device-plugin",
                [
                    str(node.device_plugin),
                    f"-count={node.gpu_count}",
                    f"-node={node.name}",
                    "-dir=/var/lib/kubelet/device-plugins",
                ],
            )
        print(f"node {node.name} started", flush=True)
        while not stop_requested:
            supervisor.check()
            time.sleep(0.5)  # a supervision loop, not a wait for a state
    except (NodeStartError, OSError, subprocess.SubprocessError) as error:
        print(f"node {node.name} failed: {error}", file=sys.stderr, flush=True)
        supervisor.stop()
        return 1
    supervisor.stop()
    print(f"node {node.name} stopped", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m lyra.localcluster.realnodes.node NODE.json", file=sys.stderr)
        return 2
    try:
        node = NodeSpec.from_json(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"cannot read the node configuration {argv[0]}: {error}", file=sys.stderr)
        return 2
    with contextlib.suppress(BrokenPipeError):
        return run(node)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
