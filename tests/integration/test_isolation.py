"""Isolation per object, for real: the operator (``lyra operator`` as its ServiceAccount) on a local control plane
with a poison tenant beside a good one.

* A TrainingJob whose template is not a pod template (``containers: "x"``) is refused by the API server, with the
  field named: the CRD's template is a typed subset of PodTemplateSpec.
* One the schema accepts but the operator cannot build (GPUs asked for on a sidecar container) fails alone, with an
  ``InvalidSpec`` condition naming the field.
* A valid job in a namespace whose ResourceQuota allows 0 ``requests.nvidia.com/gpu``: the API refuses its pods
  (403); the job carries ``Applied=False`` with the quota's message and an ``ApplyFailed`` Event, and is retried
  with backoff.
* A good job started beside them runs, and ``lyra status`` lists both bad jobs with their reasons.
* Meanwhile an InferenceService is scaled up so that it needs every T4 server lent to an elastic T4 job: the
  servers are reclaimed and every replica runs within ``RECLAIM_BOUND_S`` of the scale-up, while the bad jobs keep
  failing beside it.
* The test ends with ``lyra check`` clean: nothing lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    A100,
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_job,
    create_service,
    inference_service,
    job,
    node_states,
    running,
    running_replicas,
    scale_service,
    service_account_kubeconfig,
    workers,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

GPU_QUOTA = f"requests.{names.GPU_RESOURCE}"
#: Inference gets its servers back, and its replicas run, within this long of a scale-up.
RECLAIM_BOUND_S = 60.0
#: The local control plane's T4 inference servers: 2 serve the service's 2 replicas, 6 are lent to training.
T4_SERVERS = 8


def condition(api: client.ApiClient, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    conditions = job(api, namespace, name).get("status", {}).get("conditions", [])
    found: dict[str, Any] | None = next((c for c in conditions if c["type"] == kind), None)
    return found


def quota_ready(api: client.ApiClient, namespace: str) -> bool:
    """The quota controller has computed the quota (before that, admission refuses with 'status unknown')."""
    quota = client.CoreV1Api(api).read_namespaced_resource_quota("gpus", namespace)
    return GPU_QUOTA in (quota.status.hard or {}) if quota.status else False


def test_a_poison_tenant_stops_only_itself(cluster: ControlPlane, api: client.ApiClient, tmp_path: Path) -> None:
    operator = Operator(service_account_kubeconfig(cluster, api, tmp_path), tmp_path / "operator.log")
    with (
        temporary_namespace(api, "isolation-good") as tenant,
        temporary_namespace(api, "isolation-quota") as quota_namespace,
    ):
        try:
            _poison_tenant(api, cluster, operator, tenant, quota_namespace)
        except BaseException:
            print("--- operator ---\n" + operator.tail(120))
            raise
        finally:
            operator.stop()


def _poison_tenant(
    api: client.ApiClient, cluster: ControlPlane, operator: Operator, tenant: str, quota_namespace: str
) -> None:
    small = {"minWorkers": 1, "maxWorkers": 1, "gpusPerWorker": 1, "gpuTypes": [A100]}
    # 1. Refused by the API server, the field named.
    with pytest.raises(ApiException) as refused:
        create_job(api, tenant, "not-a-template", template={"spec": {"containers": "x"}}, **small)
    assert refused.value.status == 422
    assert "spec.template.spec.containers" in json.loads(refused.value.body)["message"]

    # 2. Accepted by the schema, refused by the operator.
    sidecar = {"name": "proxy", "image": "registry.invalid/proxy:1", "resources": {"limits": {names.GPU_RESOURCE: 1}}}
    main = {"name": "trainer", "image": "registry.invalid/trainer:1"}
    create_job(api, tenant, "gpus-on-a-sidecar", template={"spec": {"containers": [main, sidecar]}}, **small)

    # 3. A valid job in a namespace whose quota allows no GPU.
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {GPU_QUOTA: "0"}}}
    client.CoreV1Api(api).create_namespaced_resource_quota(quota_namespace, cast(Any, quota))
    wait_for(lambda: quota_ready(api, quota_namespace), DEADLINE_S, "the quota to be computed")
    create_job(api, quota_namespace, "over-quota", **small)

    # 4. A good job.
    create_job(api, tenant, "good", minWorkers=2, maxWorkers=2, gpusPerWorker=8, gpuTypes=[A100])

    # 5. Inference, and a job growing onto the servers it does not use.
    create_service(api, tenant, inference_service("chat", replicas=2, gpus=8, max_replicas=T4_SERVERS))
    create_job(api, tenant, "borrower", minWorkers=2, maxWorkers=40, gpusPerWorker=1, gpuTypes=[T4])
    operator.start()

    wait_for(lambda: running(api, tenant, "good", 2), DEADLINE_S, "the good job running")

    def invalid() -> dict[str, Any] | None:
        found = condition(api, tenant, "gpus-on-a-sidecar", "Running")
        return found if found is not None and found["reason"] == "InvalidSpec" else None

    refusal = wait_for(invalid, DEADLINE_S, "the sidecar job refused")
    assert "spec.template.spec.containers[1].resources.limits: nvidia.com/gpu is set by Lyra" in refusal["message"]
    assert job(api, tenant, "gpus-on-a-sidecar")["status"]["phase"] == "Failed"
    assert (
        not client.CoreV1Api(api)
        .list_namespaced_pod(tenant, label_selector=f"{names.JOB_LABEL}=gpus-on-a-sidecar")
        .items
    )

    def over_quota() -> dict[str, Any] | None:
        found = condition(api, quota_namespace, "over-quota", "Applied")
        return found if found is not None and found["status"] == "False" else None

    applied = wait_for(over_quota, DEADLINE_S, "the over-quota job to say its pods are refused")
    assert applied["reason"] == "Forbidden"
    assert "creating pod" in applied["message"]
    assert "exceeded quota: gpus" in applied["message"]
    assert "retrying in" in applied["message"]
    events = client.CoreV1Api(api).list_namespaced_event(quota_namespace).items
    failed = [e for e in events if e.reason == "ApplyFailed" and e.involved_object.name == "over-quota"]
    assert failed, "an Event on the job"
    assert failed[0].involved_object.uid == job(api, quota_namespace, "over-quota")["metadata"]["uid"]
    assert not client.CoreV1Api(api).list_namespaced_pod(quota_namespace).items
    assert running(api, tenant, "good", 2), "the good job still runs"

    _inference_scales_up_beside_them(api, tenant)
    assert condition(api, tenant, "gpus-on-a-sidecar", "Running") == refusal, "the refusal still stands"
    assert over_quota() is not None, "the quota still refuses the job's pods"

    status = subprocess.run(
        [sys.executable, "-m", "lyra", "status", "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    problems = status.stdout.split("PROBLEM")[1]
    assert f"{tenant}/gpus-on-a-sidecar" in problems
    assert "InvalidSpec" in problems
    assert f"{quota_namespace}/over-quota" in problems
    assert "Forbidden" in problems
    log = operator.log.read_text()
    assert f"TrainingJob {quota_namespace}/over-quota: creating pod" in log, "the refusal is logged"
    assert "failed: 403 Forbidden" in log
    assert_check_clean(cluster.kubeconfig)


def _inference_scales_up_beside_them(api: client.ApiClient, tenant: str) -> None:
    """Scale the service up so that it needs every server lent to the borrower: each replica runs within
    ``RECLAIM_BOUND_S`` although the poison jobs keep failing in every pass, and the good job runs on."""
    lent = T4_SERVERS - 2
    wait_for(lambda: list(node_states(api).values()).count("loaned") == lent, DEADLINE_S, "six servers lent")
    wait_for(lambda: len(workers(api, tenant, "borrower")) >= 17, DEADLINE_S, "the borrower grown onto them")
    scale_service(api, tenant, "chat", T4_SERVERS)
    scaled_at = time.monotonic()
    wait_for(
        lambda: running_replicas(api, tenant, "chat") == T4_SERVERS,
        RECLAIM_BOUND_S,
        f"every one of the {T4_SERVERS} replicas running",
        max_interval=0.2,
    )
    served_s = time.monotonic() - scaled_at
    print(f"poison tenant: {T4_SERVERS} replicas running {served_s:.1f} s after the scale-up ({lent} servers back)")
    assert set(node_states(api).values()) == {"serving"}, node_states(api)
    assert running(api, tenant, "good", 2), "the good job still runs"
    assert job(api, tenant, "borrower")["status"]["phase"] != "Failed", "the borrower is re-queued, not failed"
