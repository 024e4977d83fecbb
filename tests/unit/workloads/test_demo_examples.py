"""The demo examples run the project's own workload images, at the version `make image` builds now."""

from __future__ import annotations

from pathlib import Path

import yaml

from lyra.images import build
from lyra.imagespec import recipe

REPOSITORY = Path(__file__).resolve().parents[3]


def test_the_demo_examples_name_the_images_make_image_builds() -> None:
    version = build.project_version(REPOSITORY)
    for example, workload in (
        ("demo-worker-trainingjob.yaml", recipe.TRAINING_WORKER),
        ("demo-replica-inferenceservice.yaml", recipe.INFERENCE_REPLICA),
    ):
        body = yaml.safe_load((REPOSITORY / "examples" / "real-nodes" / example).read_text(encoding="utf-8"))
        [container] = body["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"docker.io/library/{workload.image}:{version}", example
        assert container["imagePullPolicy"] == "IfNotPresent", "images are imported onto the nodes, never pulled"
