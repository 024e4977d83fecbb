"""The real launcher: torchrun agents started with exactly the environment the operator puts on a job's worker pods,
running the user guide's example program (examples/torchrun/train.py), survive a scale-in and a scale-out.

Each agent is a process on this machine standing in for one worker pod: its environment is the container's env
from :func:`lyra.operator.manifests.worker_pod` (plus this machine's PATH and HOME), its command the container's
command. One thing differs, and only because there is no cluster DNS here: the rendezvous endpoint's host (the
hosting worker's name through the job's headless Service) is replaced by 127.0.0.1, and its port by a free one, so
that two runs never share a store. Which agent hosts the store is not guessed from the host name (every agent on
one machine would match 127.0.0.1): it is the pod's own ``is_host`` in ``PET_RDZV_CONF``, as on a cluster.

A scale-in is done as the kubelet does it: SIGTERM to the container's main process (the agent), the pod's
``terminationGracePeriodSeconds``, then SIGKILL to everything left. A scale-out starts a new agent for the lowest
free worker index, as the operator names its pod. The new agent starts while the survivors re-rendezvous, and reaches
the store through a :class:`Gate` that opens once they train again: loading torch takes seconds (as pulling and
starting a pod does on a cluster), and this way the survivors train for about the same number of steps in every run
however long that takes. One job goes through ``RUNS`` scale-ins, each followed by a
scale-out: a hand trial with the launcher's defaults survived the scale-in in only 2 of 4 runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from lyra.api import names
from lyra.localcluster.ports import LOOPBACK, allocate_ports
from lyra.localcluster.processes import launch, tail
from lyra.localcluster.waiting import WaitTimeoutError, wait_for
from lyra.operator import manifests

torch = pytest.importorskip("torch", reason="needs the torchrun dependency group (make test-launcher)")

pytestmark = pytest.mark.launcher

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLE = REPOSITORY / "examples" / "torchrun" / "train.py"
RUNS = 10
MIN_WORKERS, MAX_WORKERS = 2, 3
GRACE_S = 15
#: Enough steps to outlast every run's restarts: each run trains a few seconds between the survivors' first step and
#: the new worker's arrival, and a few steps before the next scale-in.
STEPS, BATCH, LR = 600, 24, 0.05
STEP_S = 0.05  # the example's stand-in for compute, so each scale-in lands mid-training
#: Seconds to wait for a re-rendezvous: the leaver found dead (keep-alive), the last call, workers started again.
REJOIN_S = 90.0
#: torchrun's exit barrier: an agent whose workers are done waits up to this long for the others before it exits
#: (and exits 0 if they never come). CI once saw the job's agents still running 240 s after its last step; the wait
#: for the end covers a barrier that runs out, and the agents' INFO log says which one it was.
EXIT_BARRIER_S = 300
FINISH_S = EXIT_BARRIER_S + 90.0


def closed_form(steps: int, batch: int, lr: float) -> float:
    """The example's ``w`` after ``steps`` steps from 0, whatever the world sizes: each step moves ``w`` a fraction
    ``lr`` of the way to its batch's mean ``m_t``, so ``w_T = lr * sum_t (1 - lr)^(T - 1 - t) * m_t``."""
    means = [sum(i % 13 for i in range(t * batch, (t + 1) * batch)) / batch for t in range(steps)]
    return lr * math.fsum((1 - lr) ** (steps - 1 - t) * m for t, m in enumerate(means))


class Gate:
    """A loopback port in front of ``target``: it accepts connections at once but forwards them only once opened, so
    a client that connects early (the new worker's agent, as soon as torch is loaded) waits, and goes on the moment
    the gate opens, with no connection retries' backoff in between."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port: int = self.listener.getsockname()[1]
        self.opened = threading.Event()
        self.clients = 0
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def open(self) -> None:
        self.opened.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.clients += 1
            self.sockets.append(client)
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        self.opened.wait()
        try:
            server = socket.create_connection((LOOPBACK, self.target))
        except OSError:
            client.close()
            return
        self.sockets.append(server)
        threading.Thread(target=self._pump, args=(server, client), daemon=True).start()
        self._pump(client, server)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        """Copy ``source`` to ``sink``. At its end, half-close ``sink`` as ``source`` was; on a reset (a peer that
        went away with data unread, as the store's host does when its agent exits) end both connections, so the
        other peer sees it too and does not wait on a store that is gone (CI once saw a gated agent wait past the
        test's deadline after the job's last step, its store's host gone)."""
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.opened.set()
        for sock in self.sockets:
            sock.close()


@dataclass
class Job:
    """One TrainingJob's workers as torchrun agents on this machine."""

    directory: Path
    port: int
    uid: str
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    gates: list[Gate] = field(default_factory=list)
    started: int = 0

    @property
    def progress(self) -> Path:
        return self.directory / "progress.jsonl"

    @property
    def checkpoint(self) -> Path:
        return self.directory / "checkpoint.pt"

    def pod(self, index: int) -> dict[str, Any]:
        template = {
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "image": "registry.example.com/train:1",
                        "command": ["torchrun", str(EXAMPLE)],
                        "args": [
                            f"--checkpoint={self.checkpoint}",
                            f"--progress={self.progress}",
                            f"--steps={STEPS}",
                            f"--batch={BATCH}",
                            f"--lr={LR}",
                            f"--step-seconds={STEP_S}",
                        ],
                    }
                ]
            }
        }
        role = names.ROLE_BASE if index < MIN_WORKERS else names.ROLE_FLEXIBLE
        return manifests.worker_pod(
            namespace="ml", job="elastic", job_uid=self.uid, index=index, role=role, template=template,
            gpus_per_worker=1, gpu_type="NVIDIA-A100-SXM4-80GB", planned_node=None, grace_seconds=GRACE_S,
            min_workers=MIN_WORKERS, max_workers=MAX_WORKERS,
        )  # fmt: skip

    def start(self, index: int, gate: Gate | None = None) -> None:
        """Start worker ``index`` as its pod would run; through ``gate`` to the store if given."""
        pod = self.pod(index)
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        host, _, port = env[names.ENV_TORCHRUN_RDZV_ENDPOINT].rpartition(":")
        hosting = self.pod(0)["spec"]  # worker 0, the lowest-indexed base worker, hosts the store
        assert host == f"{hosting['hostname']}.{hosting['subdomain']}.ml.svc"
        assert port == str(names.TORCHRUN_RDZV_PORT)
        port = self.port if gate is None else gate.port
        env[names.ENV_TORCHRUN_RDZV_ENDPOINT] = f"{LOOPBACK}:{port}"  # no cluster DNS here (module docstring)
        machine = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": os.environ.get("HOME", "/tmp"),
            "OMP_NUM_THREADS": "1",  # 2 cores for 3 agents and 3 workers
            "LOGLEVEL": "INFO",  # the agents' rendezvous rounds and exit barrier, for the report of a failure
        }
        name = pod["metadata"]["name"]
        self.started += 1
        self.logs[name] = self.directory / f"{name}.{self.started}.log"
        popen, _ = launch(
            name, [*container["command"], *container["args"]], self.logs[name], env=machine | env,
            die_with_parent=True,
        )  # fmt: skip
        self.agents[name] = popen

    def scale_in(self, name: str) -> int | None:
        """Stop one worker as the kubelet stops a deleted pod; its exit code, or None if it needed SIGKILL."""
        agent = self.agents[name]
        agent.send_signal(signal.SIGTERM)
        try:
            return agent.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait(timeout=GRACE_S)
            return None
        finally:
            del self.agents[name]

    def events(self) -> list[dict[str, Any]]:
        if not self.progress.exists():
            return []
        lines = self.progress.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def steps(self, world: int | None = None, after: int = 0) -> list[int]:
        """Steps done (by ``world`` ranks), among the events from position ``after`` on."""
        done = [e for e in self.events()[after:] if e["event"] == "step"]
        return [e["step"] for e in done if world is None or e["world"] == world]

    def logs_tail(self) -> str:
        """Each worker's state and the end of its last agent's log."""
        parts = []
        for name, path in self.logs.items():
            agent = self.agents.get(name)
            state = "scaled in" if agent is None else "running" if agent.poll() is None else f"exit {agent.returncode}"
            parts.append(f"--- {name} ({state})\n{tail(path, 40)}")
        return "\n".join(parts)

    def stop_all(self) -> None:
        for agent in self.agents.values():
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
            agent.wait(timeout=GRACE_S)
        self.agents.clear()
        for gate in self.gates:
            gate.close()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    (port,) = allocate_ports(1)
    job = Job(tmp_path, port, uid=f"uid-{tmp_path.name}")
    yield job
    job.stop_all()


def poll(predicate: Callable[[], object], timeout: float, what: str) -> None:
    wait_for(predicate, timeout, what, max_interval=0.25)


@pytest.mark.timeout(1200)
def test_the_example_survives_scale_ins_and_scale_outs(job: Job) -> None:
    """One job, ``RUNS`` scale-ins each followed by a scale-out, then its natural end with the right model."""
    flexible = manifests.worker_name("elastic", MAX_WORKERS - 1)
    changes: list[tuple[int, int]] = []  # (event position of the scale-in, of the scale-out)
    try:
        for index in range(MAX_WORKERS):
            job.start(index)
        poll(lambda: len(job.steps(world=3)) >= 5, 180, "5 steps by 3 workers")
        for run in range(RUNS):
            # Scale in the flexible worker: it finishes its step and exits within the grace period.
            code = job.scale_in(flexible)
            assert code is not None, f"run {run}: the scaled-in worker ignored SIGTERM for its whole grace period"
            left_at = len(job.events())
            # Scale out: a new worker takes the free index (its agent starts now; the gate opens below).
            gate = Gate(job.port)
            job.gates.append(gate)
            job.start(MAX_WORKERS - 1, gate)
            poll(partial(job.steps, world=2, after=left_at), REJOIN_S, f"run {run}: 2 workers training again")
            poll(lambda gate=gate: gate.clients, REJOIN_S, f"run {run}: the new worker's agent to be up")
            joined_at = len(job.events())
            gate.open()  # the new worker reaches the store: the others restart into a round of 3
            poll(partial(job.steps, world=3, after=joined_at), REJOIN_S, f"run {run}: 3 workers training again")
            changes.append((left_at, joined_at))
        poll(lambda: all(a.poll() is not None for a in job.agents.values()), FINISH_S, "the job to finish")
    except WaitTimeoutError:
        pytest.fail(f"{sys.exc_info()[1]}\n{job.logs_tail()}")
    codes = {name: agent.returncode for name, agent in job.agents.items()}
    assert set(codes.values()) == {0}, f"{codes}\n{job.logs_tail()}"

    events = job.events()
    starts = [(position, e) for position, e in enumerate(events) if e["event"] == "start"]
    bounds = [position for change in changes for position in change] + [len(events)]
    for run, (left_at, joined_at) in enumerate(changes):
        after_scale_in = {e["world"] for p, e in starts if left_at <= p < joined_at}
        after_scale_out = {e["world"] for p, e in starts if joined_at <= p < bounds[bounds.index(joined_at) + 1]}
        assert after_scale_in == {2}, f"run {run}: one re-rendezvous of the 2 remaining workers"
        assert after_scale_out == {3}, f"run {run}: one re-rendezvous of 3 workers after the scale-out"
    for position, start in starts[1:]:
        last = [e["step"] for e in events[:position] if e["event"] == "step"][-1]
        assert start["step"] == last, "each re-rendezvous goes on from the last step (its checkpoint)"
    assert job.steps()[-1] == STEPS
    final = torch.load(job.checkpoint)
    assert final["step"] == STEPS
    assert final["w"].item() == pytest.approx(closed_form(STEPS, BATCH, LR), rel=1e-12)


def test_the_gate_passes_on_a_store_that_went_away_with_a_request_unanswered() -> None:
    """The store's host resets the connection (its agent exited with a request unread): the client behind the gate
    sees the connection end at once instead of waiting for an answer that cannot come."""
    store = socket.create_server((LOOPBACK, 0))
    gate = Gate(store.getsockname()[1])
    gate.open()
    try:
        with socket.create_connection((LOOPBACK, gate.port), timeout=10) as client:
            client.sendall(b"a request")
            host, _ = store.accept()
            with host:
                assert host.recv(64) == b"a request"
                # closed with a zero linger time: a reset, as from a process that exits with a request unread
                host.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                ended = client.recv(64) == b""
            except ConnectionResetError:
                ended = True
            except TimeoutError:
                ended = False
        assert ended, "the client behind the gate was left waiting on a store that reset its connection"
    finally:
        gate.close()
        store.close()
