"""``--scheduler-name`` (OperatorConfig.scheduler_name) reaches every pod the operator makes: worker pods and the
pod template of inference Deployments; empty leaves the cluster's default scheduler. A template's own
schedulerName never survives (lyra.api.tenancy)."""

from __future__ import annotations

from typing import Any

import pytest

from lyra.operator import manifests

TEMPLATE = {"spec": {"schedulerName": "tenant-scheduler", "containers": [{"name": "main", "image": "x"}]}}


def worker(scheduler_name: str) -> dict[str, Any]:
    return manifests.worker_pod(
        namespace="ns", job="job", job_uid="uid", index=0, role="base", template=TEMPLATE, gpus_per_worker=1,
        gpu_type="Tesla-T4", planned_node=None, grace_seconds=30, min_workers=1, max_workers=2,
        scheduler_name=scheduler_name,
    )  # fmt: skip


def replicas(scheduler_name: str) -> dict[str, Any]:
    deployment = manifests.deployment(
        namespace="ns", service="chat", service_uid="uid", replicas=1, template=TEMPLATE, gpus_per_replica=1,
        gpu_type="Tesla-T4", scheduler_name=scheduler_name,
    )  # fmt: skip
    pod: dict[str, Any] = deployment["spec"]["template"]
    return pod


@pytest.mark.parametrize("build", [worker, replicas])
def test_the_operators_scheduler_places_its_pods(build: Any) -> None:
    assert build("lyra-scheduler")["spec"]["schedulerName"] == "lyra-scheduler"


@pytest.mark.parametrize("build", [worker, replicas])
def test_without_a_scheduler_name_the_default_scheduler_places_them(build: Any) -> None:
    assert "schedulerName" not in build("")["spec"]
