"""Scheduling throughput of the real kube-scheduler on the local control plane, with and without Lyra's extender.

``uv run python -m bench.scheduling_bench`` (part of ``make bench``; needs the cached binaries, ``make binaries``)
starts a local control plane with 500 KWOK GPU nodes (200 training A100 x 8, 300 inference T4 x 8, 100 of them
labelled loaned), creates 1,000 GPU pods (inference replicas, base and flexible workers of 100 jobs, one or two GPUs
each), and times from the first create until every pod is bound. Twice: once with the extender (nodeCacheCapable,
as ``lyra cluster up`` configures it) and once without; prints both rates and their ratio (target >= 0.8x).
Pods are created from 16 threads so that creation outpaces scheduling.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.extender_bench import wait_until_ready
from lyra.localcluster import populate
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.profile import parse_profile
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import wait_for

NODES_TRAINING, NODES_INFERENCE, NODES_LOANED = 200, 300, 100
PODS = 1_000
TARGET_RATIO = 0.8
T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"


def profile() -> Any:
    group = {"count": 0, "cpu": "96", "memory": "512Gi", "pods": 110}
    return parse_profile(
        {
            "name": "bench-500",
            "nodeGroups": [
                group
                | {"name": "training-a100", "pool": "training", "count": NODES_TRAINING,
                   "gpu": {"product": A100, "count": 8, "memoryMiB": 81920}},
                group
                | {"name": "inference-t4", "pool": "inference", "count": NODES_INFERENCE,
                   "gpu": {"product": T4, "count": 8, "memoryMiB": 15360}},
            ],
        },
        "bench",
    )  # fmt: skip


def pods() -> list[dict[str, Any]]:
    made = []
    for index in range(PODS):
        kind = index % 4
        labels: dict[str, str]
        selector: dict[str, str] = {}
        if kind == 0:
            labels = {"lyra.dev/role": "inference"}
        else:
            job = f"job-{index % 100}"
            flexible = kind == 3
            labels = {"lyra.dev/role": "flexible" if flexible else "base", "lyra.dev/job": job}
            selector = {"nvidia.com/gpu.product": T4 if flexible else A100}
        gpus = str(1 + index % 2)
        made.append(
            {
                "metadata": {"name": f"pod-{index:04d}", "labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": selector,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/app:1",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                },
            }
        )
    return made


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def extender(kubeconfig: Path, port: int) -> Iterator[None]:
    """``lyra extender`` as its own process, as it runs in a cluster."""
    profile_to = os.environ.get("LYRA_BENCH_PROFILE")  # a path: write the extender's cProfile there
    command = [sys.executable, *(["-m", "cProfile", "-o", profile_to] if profile_to else []), "-m", "lyra"]
    server = subprocess.Popen(
        [*command, "extender", "--kubeconfig", str(kubeconfig), "--port", str(port)], stdout=subprocess.DEVNULL
    )

    try:
        wait_until_ready(port, server)
        before = _cpu_seconds(server.pid)
        yield
        print(f"  the extender used {_cpu_seconds(server.pid) - before:.1f} s of CPU while the pods were scheduled")
    finally:
        server.send_signal(signal.SIGINT)  # uvicorn stops cleanly on SIGINT (and cProfile writes its file)
        server.wait(timeout=30)


def run(with_extender: bool, state: Path) -> float:
    """Pods bound per second."""
    port = allocate_ports(1)[0]
    url = f"http://127.0.0.1:{port}" if with_extender else None
    with (
        session_control_plane(state, profile=profile(), extender_url=url) as control_plane,
        populate.admin_api(control_plane.kubeconfig) as api,
        temporary_namespace(api, "scheduling-bench") as namespace,
    ):
        core = client.CoreV1Api(api)
        for index in range(NODES_LOANED):
            core.patch_node(f"inference-t4-{index}", {"metadata": {"labels": {"lyra.dev/state": "loaned"}}})
        with extender(control_plane.kubeconfig, port) if with_extender else nullcontext():
            bodies = pods()
            started = time.perf_counter()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))

            def all_bound() -> bool:
                listed = core.list_namespaced_pod(namespace, field_selector="spec.nodeName=")
                return not listed.items

            wait_for(all_bound, 600, "every pod to be bound", interval=0.2)
            elapsed = time.perf_counter() - started
    rate = PODS / elapsed
    print(f"{'with' if with_extender else 'without'} the extender: {PODS} pods bound in {elapsed:.1f} s ({rate:.1f}/s)")
    return rate


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="lyra-scheduling-bench-") as directory:
        without = run(False, Path(directory) / "without")
        with_ = run(True, Path(directory) / "with")
    ratio = with_ / without
    status = "pass" if ratio >= TARGET_RATIO else "MISS"
    print(f"| scheduling throughput with / without the extender | {ratio:.2f}x | >= {TARGET_RATIO}x | {status} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
