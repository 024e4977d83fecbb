"""The whole system's parts for e2e tests: ``lyra`` commands as child processes, and the running system (a local
control plane whose kube-scheduler calls Lyra's extender, a restartable extender, the operator's kubeconfig)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from lyra.localcluster.controlplane import ControlPlane


class Child:
    """A ``lyra`` command as a child process, its output kept for a failing test's report."""

    def __init__(self, log: Path, *argv: str) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "lyra", *argv], stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


@dataclass
class System:
    cluster: ControlPlane
    api: client.ApiClient
    operator_kubeconfig: Path
    logs: Path
    extender_port: int
    extender: Child | None = None

    def start_extender(self) -> None:
        self.extender = Child(
            self.logs / "extender.log",
            "extender", "--kubeconfig", str(self.cluster.kubeconfig), "--port", str(self.extender_port),
        )  # fmt: skip

    def stop_extender(self) -> None:
        if self.extender is not None:
            self.extender.stop()
            self.extender = None

    def print_logs(self, lines: int = 60) -> None:
        for log in sorted(self.logs.iterdir()):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            print(f"--- {log.name} ---\n{tail}")
