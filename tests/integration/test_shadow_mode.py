"""Shadow mode as the chart installs it (``operator.mode=shadow``): the operator runs with the chart's arguments and
the chart's read-only RBAC, on its own local control plane, beside a service and a job it would act on. It plans
every pass and writes nothing: the API server's audit log holds no write by its ServiceAccount, no node carries a
loan state and no pod is created; `lyra status --shadow` shows what it would have done."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.chart.rendering import by_template, helm_template
from lyra.localcluster.binaries import BinaryCache
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.populate import ProbeError, http_get
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.integration.test_split_brain import audited_writes
from tests.operator_support import (
    DEADLINE_S,
    T4,
    create_job,
    create_service,
    inference_service,
    lyra_node_fields,
    token_kubeconfig,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPOSITORY = Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "helm" / "lyra"
RELEASE, NAMESPACE = "lyra", "lyra-shadow"


def shadow_chart() -> dict[str, list[dict[str, Any]]]:
    rendered = helm_template(
        BinaryCache().binary_set().helm, CHART, release=RELEASE, namespace=NAMESPACE, settings=["operator.mode=shadow"]
    )
    return {path: [yaml.safe_load(doc) for doc in docs] for path, docs in by_template(rendered).items()}


def install_rbac(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    except ApiException as error:
        if error.status != 409:
            raise
    for document in objects:
        utils.create_from_dict(api, document, namespace=NAMESPACE)


def test_shadow_mode_plans_every_pass_and_writes_nothing(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    chart = shadow_chart()
    install_rbac(api, chart["operator/rbac.yaml"])
    deployment = next(d for d in chart["operator/deployment.yaml"] if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert "--dry-run" in container["args"]
    kubeconfig = token_kubeconfig(cluster, api, account, NAMESPACE, tmp_path / "kubeconfig")
    (port,) = allocate_ports(1)
    args = [
        arg.replace("$(POD_NAMESPACE)", NAMESPACE) if not arg.startswith("--http-port") else f"--http-port={port}"
        for arg in container["args"]
    ]
    log = tmp_path / "shadow.log"
    nodes_before = lyra_node_fields(api)
    with temporary_namespace(api, "shadow") as namespace, log.open("wb") as out:
        create_service(api, namespace, inference_service("chat", replicas=2, gpus=2, min_replicas=1))
        create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=4, gpusPerWorker=8, gpuTypes=[T4])
        shadow = subprocess.Popen(
            [sys.executable, "-m", "lyra", *args, "--kubeconfig", str(kubeconfig)], stdout=out, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{port}"
        try:

            def planned() -> str | None:
                try:
                    answer = http_get(f"{url}/plan", timeout=2)
                except (ProbeError, OSError):
                    return None
                return answer if "ApplyDeployment" in answer else None

            try:
                wait_for(planned, DEADLINE_S, "the shadow operator's first plan")
            except BaseException:
                print("--- shadow operator ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-60:]))
                raise
            status = subprocess.run(
                [sys.executable, "-m", "lyra", "status", "--shadow", url],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert status.returncode == 0, status.stderr
            assert "shadow mode: pass" in status.stdout
            assert "would apply" in status.stdout
            assert f"ApplyDeployment InferenceService {namespace}/chat create" in status.stdout
        finally:
            shadow.terminate()
            shadow.wait(timeout=30)
        text = log.read_text(errors="replace")
        assert "forbidden" not in text.lower(), text[-3000:]
        assert "dry run: would apply" in text
        user = f"system:serviceaccount:{NAMESPACE}:{account}"
        writes = [e for e in audited_writes(cluster) if e.get("user", {}).get("username") == user]
        assert writes == [], writes[:3]
        assert lyra_node_fields(api) == nodes_before
        assert client.CoreV1Api(api).list_namespaced_pod(namespace).items == []
        assert client.AppsV1Api(api).list_namespaced_deployment(namespace).items == []


def test_the_shadow_cluster_role_only_reads() -> None:
    rules = next(d for d in shadow_chart()["operator/rbac.yaml"] if d["kind"] == "ClusterRole")["rules"]
    verbs = {verb for rule in rules for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    resources = {resource for rule in rules for resource in rule["resources"]}
    read = {"nodes", "pods", names.TRAINING_JOB_PLURAL, names.INFERENCE_SERVICE_PLURAL, "deployments"}
    assert read | {"poddisruptionbudgets"} <= resources
