"""Each value an admin sets, per component, rendered by helm and checked in what it renders (the same values file
is also linted, validated against Kubernetes' schemas and dry-run on the API server by test_chart.py, which takes
every file in data/chart-values); bad ones refused with the key named."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lyra.chart.rendering import helm_template
from lyra.localcluster.binaries import BinaryCache, BinarySet

pytestmark = pytest.mark.integration

REPOSITORY = Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "helm" / "lyra"
VALUES = Path(__file__).parent / "data" / "chart-values" / "admin-values.yaml"
DIGEST = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def binaries() -> BinarySet:
    return BinaryCache().binary_set()


@pytest.fixture(scope="module")
def rendered(binaries: BinarySet) -> dict[tuple[str, str], dict[str, Any]]:
    text = helm_template(binaries.helm, CHART, values_files=[VALUES])
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def pod(rendered: dict[tuple[str, str], dict[str, Any]], component: str) -> dict[str, Any]:
    template: dict[str, Any] = rendered[("Deployment", f"lyra-{component}")]["spec"]["template"]
    return template


def container(rendered: dict[tuple[str, str], dict[str, Any]], component: str) -> dict[str, Any]:
    first: dict[str, Any] = pod(rendered, component)["spec"]["containers"][0]
    return first


def test_images_by_digest_and_a_vendor_scheduler_tag(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert container(rendered, "operator")["image"] == f"registry.example.com/lyra@{DIGEST}"
    assert container(rendered, "extender")["image"] == f"registry.example.com/lyra@{DIGEST}"
    assert container(rendered, "scheduler")["image"] == "registry.k8s.io/kube-scheduler:v1.35.1-gke.100"


def test_resources_given_as_numbers(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    resources = container(rendered, "operator")["resources"]
    assert resources == {"requests": {"cpu": 0.5, "memory": "512Mi"}, "limits": {"cpu": 2, "memory": "2Gi"}}
    assert container(rendered, "extender")["resources"]["limits"] == {"cpu": 1, "memory": "1Gi"}  # merged by helm


def test_where_pods_run_and_their_priority(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    spec = pod(rendered, "operator")["spec"]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert spec["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    assert "podAntiAffinity" in spec["affinity"]
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    for component in ("operator", "extender", "scheduler"):
        assert pod(rendered, component)["spec"]["priorityClassName"] == "system-cluster-critical"
    assert "nodeSelector" not in pod(rendered, "extender")["spec"]


def test_pod_and_service_metadata(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    operator = pod(rendered, "operator")["metadata"]
    assert operator["annotations"] == {"example.com/owner": "platform"}
    assert operator["labels"]["team"] == "platform"
    assert operator["labels"]["app.kubernetes.io/component"] == "operator"  # the chart's own labels stay
    assert pod(rendered, "extender")["metadata"]["annotations"] == {"example.com/owner": "platform"}
    scheduler = pod(rendered, "scheduler")["metadata"]
    assert scheduler["labels"]["team"] == "platform"
    assert "checksum/config" in scheduler["annotations"]
    service = rendered[("Service", "lyra-operator")]["metadata"]
    assert service["annotations"] == {"example.com/scrape": "true"}
    assert service["labels"]["tier"] == "control"
    assert rendered[("Service", "lyra-extender")]["metadata"]["annotations"] == {"example.com/lb": "internal"}


def test_extra_arguments_and_environment_come_last(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    operator = container(rendered, "operator")
    assert operator["args"][-1] == "--resync=5"
    assert operator["args"][0] == "operator"
    assert {"name": "PYTHONFAULTHANDLER", "value": "1"} in operator["env"]
    assert any(env["name"] == "POD_NAMESPACE" for env in operator["env"])
    assert container(rendered, "extender")["args"][-1] == "--client-timeout=5"
    assert container(rendered, "extender")["env"] == [{"name": "PYTHONFAULTHANDLER", "value": "1"}]
    assert container(rendered, "scheduler")["command"][-1] == "--v=2"


def test_security_contexts_merge_over_the_charts_defaults(rendered: dict[tuple[str, str], dict[str, Any]]) -> None:
    spec = pod(rendered, "operator")["spec"]
    assert spec["securityContext"]["fsGroup"] == 2000
    assert spec["securityContext"]["runAsNonRoot"] is True
    context = container(rendered, "operator")["securityContext"]
    assert context["runAsUser"] == 65533
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert container(rendered, "extender")["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("operator.priorityClassName=Not_A_Name", "at '/operator/priorityClassName'"),
        ("image.digest=sha256:xyz", "at '/image/digest'"),
        ("operator.resources.limits.cpu=-1", "at '/operator/resources/limits/cpu'"),
        ("extender.resources.requests.memory=lots", "at '/extender/resources/requests/memory'"),
        ("scheduler.image.tag=latest", "at '/scheduler/image/tag'"),
        ("operator.podLabels=x", "at '/operator/podLabels'"),
        ("scheduler.extraArgs=--v=2", "at '/scheduler/extraArgs'"),
        ("extender.service.port=80", "additional properties 'port' not allowed"),
    ],
)
def test_bad_values_are_refused_naming_the_key(binaries: BinarySet, setting: str, message: str) -> None:
    command = [str(binaries.helm), "template", "lyra", str(CHART), "--set", setting]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_helm_show_readme_prints_the_values_reference(binaries: BinarySet) -> None:
    command = [str(binaries.helm), "show", "readme", str(CHART)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "| `operator.priorityClassName` | string |" in result.stdout
    assert "lyra nodes restore" in result.stdout
