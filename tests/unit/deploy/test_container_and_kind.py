"""What can be checked of kind without a container engine: kind-config.yaml's pools, and hack/kind-up.sh (bash
syntax, and fake GPU pools matching the nodes' labels). The Dockerfile is held to the image builder's recipe in
test_image_recipes.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from lyra.api import names

REPOSITORY = Path(__file__).resolve().parents[3]
KIND_CONFIG = REPOSITORY / "kind-config.yaml"
KIND_UP = REPOSITORY / "hack" / "kind-up.sh"
FAKE_POOL_LABEL = "run.ai/simulated-gpu-node-pool"
A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"


def kind_nodes() -> list[dict[str, Any]]:
    config = yaml.safe_load(KIND_CONFIG.read_text())
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    nodes: list[dict[str, Any]] = config["nodes"]
    return nodes


def test_kind_has_a_control_plane_training_and_inference_workers() -> None:
    nodes = kind_nodes()
    assert [n["role"] for n in nodes].count("control-plane") == 1
    workers = [n for n in nodes if n["role"] == "worker"]
    pools = {n["labels"][names.POOL_LABEL] for n in workers}
    assert pools == set(names.POOLS)
    for node in nodes:
        assert re.fullmatch(r"kindest/node:v1\.34\.\d+", node["image"]), node


def test_each_kind_pool_gets_fake_gpus_of_its_type() -> None:
    script = KIND_UP.read_text()
    products = dict(re.findall(r"topology\.nodePools\.(\w+)\.gpuProduct=([\w.-]+)", script))
    fake_pools = {n["labels"][FAKE_POOL_LABEL]: n["labels"][names.POOL_LABEL] for n in kind_nodes() if "labels" in n}
    assert set(products) == set(fake_pools), (products, fake_pools)
    assert {fake_pools[pool]: product for pool, product in products.items()} == {
        names.POOL_TRAINING: A100,
        names.POOL_INFERENCE: T4,
    }
    assert f"topology.nodePoolLabelKey={FAKE_POOL_LABEL}" in script


def test_kind_up_is_valid_bash_that_stops_at_the_first_error() -> None:
    result = subprocess.run(["bash", "-n", str(KIND_UP)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    script = KIND_UP.read_text()
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script
    for step in (
        "kind create cluster",
        "--config kind-config.yaml",
        "kind load docker-image",
        "helm upgrade --install lyra helm/lyra",
    ):
        assert step in script, step
