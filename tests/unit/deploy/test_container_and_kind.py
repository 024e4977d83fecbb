"""What can be checked of the image and of kind without a container engine: the Dockerfile's shape (pinned bases,
a non-root user that is the chart's, the `lyra` entrypoint), kind-config.yaml's pools, and hack/kind-up.sh (bash
syntax, and fake GPU pools matching the nodes' labels)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from lyra.api import names
from lyra.chart.values import NON_ROOT_UID

REPOSITORY = Path(__file__).resolve().parents[3]
DOCKERFILE = REPOSITORY / "Dockerfile"
KIND_CONFIG = REPOSITORY / "kind-config.yaml"
KIND_UP = REPOSITORY / "hack" / "kind-up.sh"
HELPERS = REPOSITORY / "helm" / "lyra" / "templates" / "_helpers.tpl"
FAKE_POOL_LABEL = "run.ai/simulated-gpu-node-pool"
A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each Dockerfile line, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_dockerfile_is_multi_stage_on_a_pinned_slim_python_311() -> None:
    bases = [args.split()[0] for word, args in instructions(DOCKERFILE) if word == "FROM"]
    assert len(bases) >= 2
    for base in bases:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base), base
    copied = [args for word, args in instructions(DOCKERFILE) if word == "COPY" and "--from=" in args]
    external = [args.split()[0].removeprefix("--from=") for args in copied if ":" in args.split()[0]]
    assert external
    assert all(not image.endswith(":latest") for image in external), external


def test_the_dockerfile_installs_the_locked_dependencies_with_uv() -> None:
    runs = [args for word, args in instructions(DOCKERFILE) if word == "RUN"]
    assert any("uv sync --locked --no-dev" in run for run in runs), runs


def test_the_image_runs_lyra_as_the_charts_non_root_user() -> None:
    steps = instructions(DOCKERFILE)
    user = [args for word, args in steps if word == "USER"][-1]
    assert user.split(":")[0] == str(NON_ROOT_UID) != "0"
    assert f"runAsUser: {NON_ROOT_UID}" in HELPERS.read_text()
    entrypoint = [args for word, args in steps if word == "ENTRYPOINT"][-1]
    assert json.loads(entrypoint) == ["lyra"]
    last_stage = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    assert ("USER", user) in last_stage


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
