"""The GPU catalogue on the local control plane: an operator started with ``--gpu-catalog`` decides with it, over
the ``nvidia.com/gpu.memory`` labels the local cluster's nodes carry (81920 MiB on its A100s, 15360 on its T4s), and
so does ``lyra plan --from-cluster --gpu-catalog``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from lyra.localcluster.controlplane import ControlPlane
from tests.operator_support import A100, T4, Operator, create_job, dry_run_once

pytestmark = pytest.mark.integration


def started(operator: Operator, namespace: str) -> list[str]:
    """The jobs of ``namespace`` a dry-run pass of ``operator`` would start (its Started Events)."""
    actions: list[str] = json.loads(dry_run_once(operator))["actions"]
    prefix = f"Emit TrainingJob {namespace}/"
    return sorted(
        line.removeprefix(prefix).split()[0] for line in actions if line.startswith(prefix) and " Started " in line
    )


def test_a_job_needing_more_memory_than_the_catalogue_gives_a_type_is_not_started_on_it(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    create_job(
        kube_api, namespace, "needs-40", gpusPerWorker=1, minWorkers=1, maxWorkers=1, gpuTypes=[A100], gpuMemoryGiB=40
    )
    assert started(Operator(local_cluster.kubeconfig, tmp_path / "labels.log"), namespace) == ["needs-40"]
    catalog = tmp_path / "gpus.yaml"
    catalog.write_text(f"gpuCatalog:\n  {A100}: {{speed: 1.0, memoryGiB: 16}}\n")  # the nodes say 80: the file wins
    described = Operator(local_cluster.kubeconfig, tmp_path / "catalog.log", options=("--gpu-catalog", str(catalog)))
    assert started(described, namespace) == []


def test_the_live_planner_sees_the_catalogue_over_the_labels_and_the_labels_over_the_defaults(
    local_cluster: ControlPlane, tmp_path: Path
) -> None:
    catalog = tmp_path / "gpus.yaml"
    catalog.write_text(f"gpuCatalog:\n  {A100}: {{speed: 0.9, memoryGiB: 16}}\n")
    saved = tmp_path / "live.json"
    command = [sys.executable, "-m", "lyra", "plan", "allocate", "--from-cluster", "--kubeconfig"]
    command += [str(local_cluster.kubeconfig), "--gpu-catalog", str(catalog), "--save-snapshot", str(saved)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(saved.read_text())["gpuCatalog"] == {
        A100: {"speed": 0.9, "memoryGiB": 16.0},  # the catalogue, though the nodes report 80 GiB
        T4: {"speed": 0.4, "memoryGiB": 15.0},  # the nodes' 15360 MiB, not the family's 16
    }
