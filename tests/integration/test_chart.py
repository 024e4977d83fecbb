"""The Helm chart (helm/lyra) on the real local control plane.

Rendered with several values files, every object is valid Kubernetes 1.34 (kubernetes-validate's schemas) and is
accepted by the API server (``kubectl apply --dry-run=server``); bad values are refused by helm with the value's
path. Installed for real (release ``lyra-it``), the objects exist; each ServiceAccount may do what its component
needs and nothing more (SubjectAccessReviews: no Secrets, no wildcards); the operator, the extender and the bundled
kube-scheduler (the cached binary with the chart's KubeSchedulerConfiguration), run as local processes with the
chart's rendered arguments and TokenRequest credentials of the chart's ServiceAccounts, lend and reclaim, the
scheduler binding every pod and calling the extender; an upgrade changes the operator's arguments; uninstalling
keeps the CRDs and users' TrainingJobs.
Pods do not run images here (KWOK fakes their containers), so objects are checked, not containers.
"""

from __future__ import annotations

import base64
import functools
import shutil
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from lyra.api import names
from lyra.chart.rendering import by_template, helm_template
from lyra.chart.sources import runbook_anchor
from lyra.chart.values import BUNDLED_SCHEDULER_NAME
from lyra.cli import main
from lyra.core.gpus import GpuType
from lyra.extender.app import REQUESTS_METRIC
from lyra.localcluster.binaries import BinaryCache, BinarySet
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.credentials import Credentials
from lyra.localcluster.kubeconfig import write_kubeconfig
from lyra.localcluster.populate import ProbeError, http_get
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from lyra.operator.sizing import InferenceGpuCaps
from lyra.snapshot import parse_gpu_catalog
from tests.operator_support import (
    DEADLINE_S,
    T4,
    create_job,
    create_service,
    custom,
    inference_service,
    lyra_node_fields,
    node_states,
    workers,
)
from tests.prometheus_support import promtool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPOSITORY = Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "helm" / "lyra"
DOCS = REPOSITORY / "docs" / "operations.md"
VALUES = Path(__file__).parent / "data" / "chart-values"
VALUE_FILES = sorted(VALUES.glob("*.yaml"))
KUBERNETES_VERSION = "1.34.0"
#: Prometheus Operator kinds: no schema in kubernetes-validate and no CRD on the local control plane.
MONITORING_API = "monitoring.coreos.com/v1"
RELEASE = "lyra-it"


@pytest.fixture(scope="module")
def binaries() -> BinarySet:
    return BinaryCache().binary_set()


def documents(rendered: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def render(binaries: BinarySet, values_file: Path, namespace: str = "lyra-system", *settings: str) -> str:
    return helm_template(binaries.helm, CHART, namespace=namespace, values_files=[values_file], settings=settings)


@pytest.mark.parametrize("values_file", VALUE_FILES, ids=lambda p: p.stem)
def test_helm_lint_strict_passes(binaries: BinarySet, values_file: Path) -> None:
    command = [str(binaries.helm), "lint", "--strict", str(CHART), "--values", str(values_file)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_manifests_are_the_chart_rendered_with_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["chart", "manifests", "--check", "--chart-dir", str(CHART), "--out-dir", str(REPOSITORY / "manifests")]
    )
    assert code == 0, capsys.readouterr().err


def test_the_charts_crds_are_the_generated_ones(binaries: BinarySet) -> None:
    rendered = by_template(render(binaries, VALUES / "defaults.yaml"))
    for path in sorted((REPOSITORY / "manifests" / "crds").glob("*.yaml")):
        [document] = rendered[f"crds/{path.name}"]
        assert yaml.safe_load(document) == yaml.safe_load(path.read_text()), path.name
        assert yaml.safe_load(document)["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


@pytest.mark.parametrize("values_file", VALUE_FILES, ids=lambda p: p.stem)
def test_rendered_objects_are_valid_kubernetes_and_locked_down(binaries: BinarySet, values_file: Path) -> None:
    objects = documents(render(binaries, values_file))
    assert objects
    for document in objects:
        where = f"{document['kind']} {document['metadata']['name']}"
        if document["apiVersion"] != MONITORING_API:
            try:
                kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{values_file.name}: {where}: {error.message}")
        if document["kind"] in ("ClusterRole", "Role"):
            for rule in document["rules"]:
                for field in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule.get(field, []), f"{where}: a wildcard in {field}"
                assert "secrets" not in rule["resources"], f"{where}: Secrets"
        if document["kind"] == "Deployment":
            assert_locked_down(document, where)


def assert_locked_down(deployment: dict[str, Any], where: str) -> None:
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True, where
    assert pod["securityContext"]["runAsUser"] != 0, where
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, where
        assert security["readOnlyRootFilesystem"] is True, where
        assert security["capabilities"]["drop"] == ["ALL"], where
        assert container["resources"]["requests"]["cpu"], where
        assert container["resources"]["limits"]["memory"], where
        assert container["livenessProbe"], where
        assert container["readinessProbe"], where


def test_the_operator_names_the_bundled_scheduler_and_serves_its_probes_on_the_metrics_port(
    binaries: BinarySet,
) -> None:
    objects = documents(render(binaries, VALUES / "defaults.yaml"))
    operator = next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-operator")
    [container] = operator["spec"]["template"]["spec"]["containers"]
    assert "--scheduler-name=lyra-scheduler" in container["args"]
    assert "--http-port=8080" in container["args"]
    assert operator["spec"]["replicas"] == 2
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    without = documents(render(binaries, VALUES / "default-scheduler.yaml"))
    operator = next(d for d in without if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-operator")
    assert not any(
        a.startswith("--scheduler-name") for a in operator["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert not any(d["metadata"]["name"] == "lyra-scheduler" for d in without)


def test_the_admins_inference_caps_reach_the_operator_as_flags_it_accepts(binaries: BinarySet) -> None:
    objects = documents(render(binaries, VALUES / "inference-caps.yaml"))
    operator = next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-operator")
    flag = "--inference-gpu-cap="
    caps = [a.removeprefix(flag) for a in operator["spec"]["template"]["spec"]["containers"][0]["args"] if flag in a]
    assert caps == ["*=8", "serving=64"]
    parsed = InferenceGpuCaps.parse(caps)
    assert (parsed.cap_of("serving"), parsed.cap_of("ml")) == (64, 8)


def test_the_admins_gpu_catalogue_reaches_the_operator_as_a_file_it_reads(binaries: BinarySet) -> None:
    objects = documents(render(binaries, VALUES / "gpu-catalog.yaml"))
    operator = next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-operator")
    pod = operator["spec"]["template"]["spec"]
    [flag] = [a for a in pod["containers"][0]["args"] if a.startswith("--gpu-catalog=")]
    path = Path(flag.removeprefix("--gpu-catalog="))
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == str(path.parent)]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    [configmap] = [
        d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]
    ]
    catalog = parse_gpu_catalog(configmap["data"][path.name])
    assert catalog["Tesla-T4"] == GpuType("Tesla-T4", 0.35, 16.0)
    assert catalog.types["NVIDIA-A100-SXM4-80GB"] == GpuType("NVIDIA-A100-SXM4-80GB", 1.0, None)
    assert "checksum/gpu-catalog" in operator["spec"]["template"]["metadata"]["annotations"]
    without = documents(render(binaries, VALUES / "defaults.yaml"))
    operator = next(d for d in without if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-operator")
    assert not any(a.startswith("--gpu-catalog") for a in operator["spec"]["template"]["spec"]["containers"][0]["args"])


def mounted_from(pod: dict[str, Any], path: str) -> tuple[str, str]:
    """The (Secret or ConfigMap name, key) the file ``path`` of the pod's first container comes from."""
    folder, _, file = path.rpartition("/")
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == folder]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    source = volume.get("secret") or volume["configMap"]
    [key] = [item["key"] for item in source["items"] if item["path"] == file]
    return source.get("secretName") or source["name"], key


def test_extender_tls_mounts_the_certificates_sets_the_flags_and_the_schedulers_https_stanza(
    binaries: BinarySet,
) -> None:
    tls = yaml.safe_load((VALUES / "extender-tls.yaml").read_text())["extender"]["tls"]
    objects = documents(render(binaries, VALUES / "extender-tls.yaml"))
    extender = next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-extender")
    pod = extender["spec"]["template"]["spec"]
    [container] = pod["containers"]
    flags = dict(arg.split("=", 1) for arg in container["args"] if arg.startswith("--") and "=" in arg)
    assert mounted_from(pod, flags["--tls-cert-file"]) == (tls["secretName"], "tls.crt")
    assert mounted_from(pod, flags["--tls-key-file"]) == (tls["secretName"], "tls.key")
    assert mounted_from(pod, flags["--client-ca-file"]) == (tls["clientCaConfigMap"], "ca.crt")
    assert container["ports"][0]["name"] == "https"
    # the kubelet presents no client certificate: with a client CA the probes only open the port
    assert container["livenessProbe"]["tcpSocket"] == {"port": "https"}
    assert container["readinessProbe"]["tcpSocket"] == {"port": "https"}
    [service] = [d for d in objects if d["kind"] == "Service" and d["metadata"]["name"] == "lyra-extender"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["https"]

    [configmap] = [d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "lyra-scheduler"]
    [stanza] = yaml.safe_load(configmap["data"]["config.yaml"])["extenders"]
    assert stanza["urlPrefix"] == "https://lyra-extender.lyra-system.svc:8888"
    assert stanza["enableHTTPS"] is True
    scheduler = next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-scheduler")
    scheduler_pod = scheduler["spec"]["template"]["spec"]
    files = {key: mounted_from(scheduler_pod, stanza["tlsConfig"][key]) for key in ("caFile", "certFile", "keyFile")}
    secret = tls["clientSecretName"]
    assert files == {"caFile": (secret, "ca.crt"), "certFile": (secret, "tls.crt"), "keyFile": (secret, "tls.key")}

    [monitor] = [d for d in objects if d["kind"] == "ServiceMonitor"]
    [https] = [e for e in monitor["spec"]["endpoints"] if e["port"] == "https"]
    assert https["scheme"] == "https"
    assert https["tlsConfig"]["serverName"] == "lyra-extender.lyra-system.svc"
    assert https["tlsConfig"]["keySecret"] == {"name": secret, "key": "tls.key"}

    # without a client CA: no client check, and the probes ask /healthz and /readyz over HTTPS
    objects = documents(
        render(binaries, VALUES / "extender-tls.yaml", "lyra-system", "extender.tls.clientCaConfigMap=")
    )
    extender = next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "lyra-extender")
    [container] = extender["spec"]["template"]["spec"]["containers"]
    assert not [arg for arg in container["args"] if arg.startswith("--client-ca-file")]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}


def test_the_default_install_serves_https_with_a_generated_certificate_the_scheduler_trusts(
    binaries: BinarySet, tmp_path: Path
) -> None:
    """HTTPS by default: the chart generates a CA and a certificate for the extender's Service into a Secret, the
    extender serves it on every interface, the bundled scheduler trusts the CA (no client certificate) and the
    probes ask over HTTPS. Plain HTTP only when asked for."""
    objects = documents(render(binaries, VALUES / "defaults.yaml"))
    [secret] = [d for d in objects if d["kind"] == "Secret"]
    assert (secret["metadata"]["name"], secret["type"]) == ("lyra-extender-tls", "kubernetes.io/tls")
    pem = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    ca = x509.load_pem_x509_certificate(pem["ca.crt"])
    certificate = x509.load_pem_x509_certificate(pem["tls.crt"])
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName("lyra-extender.lyra-system.svc"))
    verifier.verify(certificate, [])  # raises unless the CA signed it for the Service's name
    for key, value in pem.items():
        (tmp_path / key).write_bytes(value)
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")  # a pair

    extender = deployment_named(objects, "lyra-extender")
    pod = extender["spec"]["template"]["spec"]
    [container] = pod["containers"]
    flags = dict(arg.split("=", 1) for arg in container["args"] if arg.startswith("--") and "=" in arg)
    assert flags["--host"] == "0.0.0.0"
    assert mounted_from(pod, flags["--tls-cert-file"]) == ("lyra-extender-tls", "tls.crt")
    assert mounted_from(pod, flags["--tls-key-file"]) == ("lyra-extender-tls", "tls.key")
    assert "--client-ca-file" not in flags
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    [configmap] = [d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "lyra-scheduler"]
    [stanza] = yaml.safe_load(configmap["data"]["config.yaml"])["extenders"]
    assert stanza["urlPrefix"] == "https://lyra-extender.lyra-system.svc:8888"
    assert stanza["enableHTTPS"] is True
    assert list(stanza["tlsConfig"]) == ["caFile"]
    scheduler_pod = deployment_named(objects, "lyra-scheduler")["spec"]["template"]["spec"]
    assert mounted_from(scheduler_pod, stanza["tlsConfig"]["caFile"]) == ("lyra-extender-tls", "ca.crt")

    plain = documents(render(binaries, VALUES / "defaults.yaml", "lyra-system", "extender.tls.enabled=false"))
    assert not [d for d in plain if d["kind"] == "Secret"]
    [configmap] = [d for d in plain if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "lyra-scheduler"]
    [stanza] = yaml.safe_load(configmap["data"]["config.yaml"])["extenders"]
    assert stanza["urlPrefix"] == "http://lyra-extender.lyra-system.svc:8888"
    assert "tlsConfig" not in stanza


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions with In) selects ``labels``."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


@pytest.mark.parametrize("values_file", ["monitoring.yaml", "extender-tls.yaml"])
def test_the_service_monitor_selects_the_operator_and_extender_services_by_their_labels_and_port_names(
    binaries: BinarySet, values_file: str
) -> None:
    objects = documents(render(binaries, VALUES / values_file))
    [monitor] = [d for d in objects if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["lyra-system"]}
    services = [d for d in objects if d["kind"] == "Service"]
    selected = {
        s["metadata"]["name"] for s in services if selects(monitor["spec"]["selector"], s["metadata"]["labels"])
    }
    assert selected == {"lyra-operator", "lyra-extender"}
    scraped = {e["port"] for e in monitor["spec"]["endpoints"]}
    for service in services:
        ports = {port["name"] for port in service["spec"]["ports"]}
        assert ports & scraped, f"{service['metadata']['name']}: no port named as an endpoint ({ports} vs {scraped})"
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["path"] == "/metrics"
        assert any(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in services), endpoint


def prometheus_rule(binaries: BinarySet) -> dict[str, Any]:
    objects = documents(render(binaries, VALUES / "monitoring.yaml"))
    [rule] = [d for d in objects if d["kind"] == "PrometheusRule"]
    return rule


def test_promtool_accepts_the_alerts(binaries: BinarySet, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus_rule(binaries)["spec"]))
    result = subprocess.run(
        [str(promtool()), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout, result.stdout


def test_the_alerts_fire_on_what_they_describe_and_not_otherwise(binaries: BinarySet, tmp_path: Path) -> None:
    """promtool's rule unit tests: a forced reclaim, failing passes, no leader, the extender down or slow and the
    bundled scheduler gone fire their alerts; a healthy stretch (one leader, passes succeeding, reclaims drained, the
    extender fast, the scheduler available, only routine API errors) fires none; 403s on the operator's patches fire
    LyraApiErrors. Every alert links its runbook section in the docs."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus_rule(binaries)["spec"]))
    scope = 'job="lyra-operator", namespace="lyra-system"'
    extender = 'job="lyra-extender", namespace="lyra-system"'
    series = [
        # minute by minute, for 30 minutes: a healthy stretch, then each problem starts at minute 11
        {"series": f'lyra_leader{{{scope}, pod="a"}}', "values": "1x10 0x20"},
        {"series": f'lyra_leader{{{scope}, pod="b"}}', "values": "0x30"},
        {"series": f'lyra_reconcile_passes_total{{{scope}, result="failed"}}', "values": "0x10 0+6x20"},
        {"series": f'lyra_reconcile_passes_total{{{scope}, result="succeeded"}}', "values": "0+60x30"},
        {"series": f'lyra_reclaims_total{{{scope}, gpu_type="Tesla-T4", outcome="drained"}}', "values": "0+1x30"},
        {"series": f'lyra_reclaims_total{{{scope}, gpu_type="Tesla-T4", outcome="forced"}}', "values": "0x10 1x20"},
        # the extender: its scrapes stop; its answers slow from under 0.25 s to up to 1 s
        {"series": f'up{{{extender}, pod="e1"}}', "values": "1x10 0x20"},
        {"series": f'lyra_extender_request_seconds_bucket{{{extender}, verb="prioritize", le="0.25"}}',
         "values": "0+100x10 1000x20"},
        {"series": f'lyra_extender_request_seconds_bucket{{{extender}, verb="prioritize", le="1.0"}}',
         "values": "0+100x30"},
        {"series": f'lyra_extender_request_seconds_bucket{{{extender}, verb="prioritize", le="+Inf"}}',
         "values": "0+100x30"},
        # the API server: 404s and 409s all along (routine); 403s on patches from minute 11
        {"series": f'lyra_api_errors_total{{{scope}, verb="delete", code="404"}}', "values": "0+5x30"},
        {"series": f'lyra_api_errors_total{{{scope}, verb="patch", code="409"}}', "values": "0+5x30"},
        {"series": f'lyra_api_errors_total{{{scope}, verb="patch", code="403"}}', "values": "0x10 0+3x20"},
        # the bundled scheduler (kube-state-metrics): its one replica goes
        {"series": 'kube_deployment_status_replicas_available{deployment="lyra-scheduler", namespace="lyra-system"}',
         "values": "1x10 0x20"},
    ]  # fmt: skip
    defined = {rule["alert"]: rule for rule in prometheus_rule(binaries)["spec"]["groups"][0]["rules"]}

    def fired(name: str, at: str, **labels: str) -> dict[str, Any]:
        annotations = {
            key: functools.reduce(
                lambda done, label: done.replace(f"{{{{ $labels.{label} }}}}", labels[label]), labels, text
            )
            for key, text in defined[name]["annotations"].items()
        }
        expected = {"exp_labels": defined[name]["labels"] | labels, "exp_annotations": annotations}
        return {"eval_time": at, "alertname": name, "exp_alerts": [expected]}

    documented = {
        line.removeprefix("### Runbook: ") for line in DOCS.read_text().splitlines() if line.startswith("### Runbook: ")
    }
    assert documented == set(defined)
    for name, rule in defined.items():
        assert rule["annotations"]["runbook_url"] == f"docs/operations.md#{runbook_anchor(name)}"
    alerts = [{"eval_time": "9m", "alertname": name, "exp_alerts": []} for name in defined] + [
        fired("LyraNoLeader", "17m"),
        fired("LyraReconcileFailing", "25m"),
        fired("LyraReclaimPastDeadline", "12m", gpu_type="Tesla-T4"),
        fired("LyraExtenderDown", "17m"),
        fired("LyraExtenderSlow", "25m"),
        fired("LyraSchedulerDown", "17m"),
        fired("LyraApiErrors", "25m", verb="patch", code="403"),
    ]
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": alerts}],
    }
    test_file = tmp_path / "tests.yaml"
    test_file.write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        [str(promtool()), "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("operator.replicas=0", "at '/operator/replicas': minimum: got 0, want 1"),
        ("operator.replica=2", "additional properties 'replica' not allowed"),
        ("scheduler.image.tag=v1.29.0", "at '/scheduler/image/tag': 'v1.29.0' does not match pattern"),
        ("extender.port=0", "at '/extender/port': minimum: got 0, want 1"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("extender.tls.enabled=yes", "at '/extender/tls/enabled': got string, want boolean"),
        (
            "extender.tls.clientCaConfigMap=lyra-extender-client-ca",
            "extender.tls.clientSecretName: with extender.tls.clientCaConfigMap the extender serves only clients with",
        ),
    ],
)
def test_helm_refuses_bad_values_naming_them(binaries: BinarySet, setting: str, message: str) -> None:
    command = [str(binaries.helm), "template", RELEASE, str(CHART), "--set", setting]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_the_chart_renders_as_a_dependency_of_an_umbrella_chart_that_sets_global_values(
    binaries: BinarySet, tmp_path: Path
) -> None:
    """An umbrella chart passes its ``global`` values to every dependency; the values schema takes them (it refused
    them once: "additional properties 'global' not allowed")."""
    umbrella = tmp_path / "platform"
    (umbrella / "charts").mkdir(parents=True)
    shutil.copytree(CHART, umbrella / "charts" / "lyra")
    chart = {
        "apiVersion": "v2",
        "name": "platform",
        "version": "0.1.0",
        "dependencies": [{"name": "lyra", "version": ">=0"}],
    }
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump(chart), encoding="utf-8")
    (umbrella / "values.yaml").write_text(
        yaml.safe_dump({"global": {"imageRegistry": "registry.example.com"}, "lyra": {"operator": {"replicas": 3}}}),
        encoding="utf-8",
    )
    command = [
        str(binaries.helm),
        "template",
        "platform",
        str(umbrella),
        "--namespace",
        "platform",
        "--set",
        "global.team=ml",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    operator = next(
        d for d in documents(result.stdout) if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
    )
    assert operator["spec"]["replicas"] == 3


@pytest.mark.parametrize("values_file", VALUE_FILES, ids=lambda p: p.stem)
def test_the_api_server_accepts_the_rendered_objects(
    binaries: BinarySet, local_cluster: ControlPlane, namespace: str, values_file: Path
) -> None:
    objects = [d for d in documents(render(binaries, values_file, namespace)) if d["apiVersion"] != MONITORING_API]
    command = [
        str(binaries.kubectl), "--kubeconfig", str(local_cluster.kubeconfig),
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-",
    ]  # fmt: skip
    result = subprocess.run(
        command, input=yaml.safe_dump_all(objects), capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(objects), result.stdout


# -- installed for real --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    cluster: ControlPlane
    helm: Path

    def helm_command(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.helm), *argv, "--namespace", self.namespace, "--kubeconfig", str(self.cluster.kubeconfig)]
        return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)

    def account(self, component: str) -> str:
        return f"{self.name}-{component}"


@pytest.fixture(scope="module")
def release(local_cluster: ControlPlane, kube_api: client.ApiClient, binaries: BinarySet) -> Iterator[Release]:
    """The chart installed from scenario.yaml; the session's CRDs (applied by kubectl) are taken over by the release."""
    with temporary_namespace(kube_api, "chart-release") as namespace:
        installed = Release(RELEASE, namespace, local_cluster, binaries.helm)
        values = VALUES / "scenario.yaml"
        result = installed.helm_command("install", RELEASE, str(CHART), "--values", str(values), "--take-ownership")
        assert result.returncode == 0, result.stderr
        try:
            yield installed
        finally:
            installed.helm_command("uninstall", RELEASE)  # already gone after the last test


def test_install_creates_every_object(release: Release, kube_api: client.ApiClient) -> None:
    apps = client.AppsV1Api(kube_api)
    replicas = {d.metadata.name: d.spec.replicas for d in apps.list_namespaced_deployment(release.namespace).items}
    assert replicas == {release.account("operator"): 2, release.account("extender"): 2, release.account("scheduler"): 2}
    core = client.CoreV1Api(kube_api)
    services = {s.metadata.name for s in core.list_namespaced_service(release.namespace).items}
    assert services == {release.account("operator"), release.account("extender")}
    config = core.read_namespaced_config_map(release.account("scheduler"), release.namespace)
    scheduler = yaml.safe_load(config.data["config.yaml"])
    assert scheduler["profiles"] == [{"schedulerName": BUNDLED_SCHEDULER_NAME}]
    assert scheduler["extenders"][0]["urlPrefix"] == f"https://{release.name}-extender.{release.namespace}.svc:8888"
    tls = core.read_namespaced_secret(release.account("extender-tls"), release.namespace)
    assert sorted(tls.data) == ["ca.crt", "tls.crt", "tls.key"]
    for component in ("operator", "extender", "scheduler"):  # no single point: each keeps a replica through drains
        budget = client.PolicyV1Api(kube_api).read_namespaced_pod_disruption_budget(
            release.account(component), release.namespace
        )
        assert budget.spec.min_available == 1, component
    extensions = client.ApiextensionsV1Api(kube_api)
    for plural in (names.TRAINING_JOB_PLURAL, names.INFERENCE_SERVICE_PLURAL):
        crd = extensions.read_custom_resource_definition(f"{plural}.{names.GROUP}")
        assert crd.metadata.annotations["meta.helm.sh/release-name"] == RELEASE
        assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"


#: (component, verb, API group, resource, subresource, cluster-wide?, allowed?): what each may and may not do.
ACCESS = [
    ("operator", "patch", "", "nodes", "", True, True),
    ("operator", "create", "", "pods", "", True, True),
    ("operator", "delete", "", "pods", "", True, True),
    ("operator", "create", "", "events", "", True, True),
    ("operator", "watch", names.GROUP, names.TRAINING_JOB_PLURAL, "", True, True),
    ("operator", "patch", names.GROUP, names.TRAINING_JOB_PLURAL, "status", True, True),
    ("operator", "create", "apps", "deployments", "", True, True),
    ("operator", "create", "", "services", "", True, True),
    ("operator", "delete", "", "services", "", True, False),
    ("operator", "create", "policy", "poddisruptionbudgets", "", True, True),
    ("operator", "delete", "policy", "poddisruptionbudgets", "", True, True),
    ("operator", "list", "policy", "poddisruptionbudgets", "", True, True),
    ("operator", "watch", "policy", "poddisruptionbudgets", "", True, True),
    ("operator", "get", "policy", "poddisruptionbudgets", "", True, False),
    ("operator", "update", "policy", "poddisruptionbudgets", "", True, False),
    ("operator", "patch", "coordination.k8s.io", "leases", "", False, True),
    ("operator", "update", "coordination.k8s.io", "leases", "", False, False),
    ("operator", "get", "", "secrets", "", True, False),
    ("operator", "list", "", "secrets", "", False, False),
    ("operator", "delete", "", "nodes", "", True, False),
    ("operator", "update", names.GROUP, names.TRAINING_JOB_PLURAL, "", True, False),
    ("operator", "delete", "apps", "deployments", "", True, False),
    ("operator", "update", "coordination.k8s.io", "leases", "", True, False),
    ("operator", "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", True, False),
    ("extender", "list", "", "nodes", "", True, True),
    ("extender", "watch", "", "pods", "", True, True),
    ("extender", "get", "", "secrets", "", False, False),
    ("extender", "patch", "", "nodes", "", True, False),
    ("extender", "create", "", "pods", "", True, False),
    ("extender", "delete", "", "pods", "", True, False),
    ("extender", "list", names.GROUP, names.TRAINING_JOB_PLURAL, "", True, False),
    ("scheduler", "create", "", "pods", "binding", True, True),
    ("scheduler", "update", "coordination.k8s.io", "leases", "", False, True),
    ("scheduler", "get", "", "secrets", "", True, False),
    ("scheduler", "delete", "", "nodes", "", True, False),
    ("scheduler", "create", "apps", "deployments", "", True, False),
]


def test_each_service_account_may_do_what_it_needs_and_nothing_more(
    release: Release, kube_api: client.ApiClient
) -> None:
    authorization = client.AuthorizationV1Api(kube_api)
    wrong = []
    for component, verb, group, resource, subresource, cluster_wide, allowed in ACCESS:
        account = release.account(component)
        user = f"system:serviceaccount:{release.namespace}:{account}"
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{release.namespace}", "system:authenticated"]
        attributes = client.V1ResourceAttributes(
            verb=verb,
            group=group,
            resource=resource,
            subresource=subresource or None,
            namespace=None if cluster_wide else release.namespace,
        )
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(user=user, groups=groups, resource_attributes=attributes)
        )
        answer = authorization.create_subject_access_review(review).status.allowed
        if bool(answer) != allowed:
            scope = "cluster-wide" if cluster_wide else f"in {release.namespace}"
            wrong.append(f"{account} {verb} {group or 'core'}/{resource}/{subresource} {scope}: {answer}")
    assert wrong == []


def impersonating(cluster: ControlPlane, user: str) -> client.ApiClient:
    """An admin client that acts as ``user`` (authenticated, in no group of its own): what RBAC grants that user."""
    api_client: client.ApiClient = kube_config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    api_client.set_default_header("Impersonate-User", user)
    return api_client


def test_users_with_the_built_in_edit_role_run_training_jobs_and_view_reads_them(
    release: Release, kube_api: client.ApiClient
) -> None:
    """The chart aggregates Lyra's resources into admin, edit and view (kube-controller-manager's ClusterRole
    aggregation): an ML engineer bound to `edit` in a namespace creates a TrainingJob there; one bound to `view`
    reads it and cannot change it; neither writes a status, which is the operator's."""
    rbac = client.RbacAuthorizationV1Api(kube_api)
    with temporary_namespace(kube_api, "team") as namespace:
        for user, role in (("ml-engineer", "edit"), ("ml-viewer", "view")):
            binding = client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=user),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
                subjects=[client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")],
            )
            rbac.create_namespaced_role_binding(namespace, binding)

        def may(user: str, verb: str, resource: str, subresource: str = "") -> bool:
            attributes = client.V1ResourceAttributes(
                verb=verb, group=names.GROUP, resource=resource, subresource=subresource or None, namespace=namespace
            )
            spec = client.V1SubjectAccessReviewSpec(
                user=user, groups=["system:authenticated"], resource_attributes=attributes
            )
            review = client.AuthorizationV1Api(kube_api).create_subject_access_review(
                client.V1SubjectAccessReview(spec=spec)
            )
            return bool(review.status.allowed)

        wait_for(
            lambda: (
                may("ml-engineer", "create", names.TRAINING_JOB_PLURAL)
                and may("ml-viewer", "list", names.TRAINING_JOB_PLURAL)
            ),
            DEADLINE_S,
            "the aggregated roles to reach edit and view",
        )
        expected = {
            ("ml-engineer", "create", names.INFERENCE_SERVICE_PLURAL, ""): True,
            ("ml-engineer", "delete", names.TRAINING_JOB_PLURAL, ""): True,
            ("ml-engineer", "patch", names.TRAINING_JOB_PLURAL, "status"): False,
            ("ml-viewer", "get", names.INFERENCE_SERVICE_PLURAL, "status"): True,
            ("ml-viewer", "create", names.TRAINING_JOB_PLURAL, ""): False,
            ("ml-viewer", "delete", names.INFERENCE_SERVICE_PLURAL, ""): False,
        }
        assert {case: may(*case) for case in expected} == expected

        engineer = impersonating(release.cluster, "ml-engineer")
        viewer = impersonating(release.cluster, "ml-viewer")
        try:
            create_job(engineer, namespace, "resnet", gpuTypes=[T4], minWorkers=1, maxWorkers=1, gpusPerWorker=1)
            listed = custom(viewer).list_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL
            )
            assert [item["metadata"]["name"] for item in listed["items"]] == ["resnet"]
            with pytest.raises(ApiException) as refused:
                create_job(viewer, namespace, "sneaky", gpuTypes=[T4], minWorkers=1, maxWorkers=1, gpusPerWorker=1)
            assert refused.value.status == 403
        finally:
            engineer.close()  # type: ignore[no-untyped-call]
            viewer.close()  # type: ignore[no-untyped-call]


def token_kubeconfig(release: Release, kube_api: client.ApiClient, component: str, directory: Path) -> Path:
    """A kubeconfig with a TokenRequest token of the chart's ServiceAccount of ``component``."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = (
        client.CoreV1Api(kube_api)
        .create_namespaced_service_account_token(release.account(component), release.namespace, cast(Any, request))
        .status.token
    )
    return write_kubeconfig(
        directory / f"{component}.kubeconfig",
        cluster_name="pytest",
        server=release.cluster.state.api_server,
        ca_cert=release.cluster.credentials.ca_cert,
        user=release.account(component),
        token=token,
    )


def rendered_release(release: Release, binaries: BinarySet, values_files: list[Path]) -> list[dict[str, Any]]:
    """The objects the chart renders for this release (its name and namespace) with ``values_files``."""
    rendered = helm_template(
        binaries.helm, CHART, release=release.name, namespace=release.namespace, values_files=values_files
    )
    return documents(rendered)


def deployment_named(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == name)


def chart_arguments(objects: list[dict[str, Any]], name: str) -> list[str]:
    """The container arguments of the Deployment ``name`` among the rendered ``objects``."""
    args: list[str] = deployment_named(objects, name)["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def local_arguments(args: list[str], namespace: str, port: int) -> list[str]:
    """The chart's arguments for a local process: the pod's namespace filled in, loopback and a free port."""
    replaced = {"--http-port": f"--http-port={port}", "--port": f"--port={port}", "--host": "--host=127.0.0.1"}
    local = [replaced.get(arg.split("=", 1)[0], arg) for arg in args]
    return [arg.replace("$(POD_NAMESPACE)", namespace) for arg in local]


def local_mounts(deployment: dict[str, Any], files: dict[tuple[str, str], Path], directory: Path) -> dict[str, str]:
    """The Secret and ConfigMap volumes the Deployment's container mounts, made local: each mount path -> a directory
    holding the volume's items, copied from ``files`` ((Secret or ConfigMap name, key) -> a local file standing in
    for that key). A flag or a configuration naming a file the chart does not mount finds nothing there."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    local: dict[str, str] = {}
    for mount in pod["containers"][0]["volumeMounts"]:
        volume = volumes[mount["name"]]
        source = volume.get("secret") or volume.get("configMap")
        if source is None or "items" not in source:
            continue  # the scheduler's configuration: read from the rendered ConfigMap
        name = source.get("secretName") or source["name"]
        folder = directory / deployment["metadata"]["name"] / mount["name"]
        folder.mkdir(parents=True)
        for item in source["items"]:
            shutil.copy(files[(name, item["key"])], folder / item["path"])
        local[mount["mountPath"]] = str(folder)
    return local


def localized(text: str, mounts: dict[str, str]) -> str:
    for mount_path, folder in mounts.items():
        text = text.replace(f"{mount_path}/", f"{folder}/")
    return text


def bundled_scheduler_command(
    objects: list[dict[str, Any]], name: str, kubeconfig: Path, *, extender_url: str, mounts: dict[str, str],
    directory: Path, server_name: str | None = None,
) -> list[str]:  # fmt: skip
    """The cached kube-scheduler with the chart's KubeSchedulerConfiguration (its ConfigMap ``name``, files it names
    under the Deployment's mounts made local), connecting as the chart's scheduler ServiceAccount (what the pod's
    in-cluster credentials would be: client, authentication and authorization delegation) and calling the extender
    at ``extender_url`` instead of its Service; with ``server_name``, checking the extender's certificate against
    that name (the Service's, which the chart's URL holds) rather than the local address."""
    configmap = next(d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name)
    config = yaml.safe_load(localized(configmap["data"]["config.yaml"], mounts))
    [extender] = config["extenders"]
    assert extender["urlPrefix"].partition("://")[0] == extender_url.partition("://")[0]
    if server_name is not None:
        assert extender["urlPrefix"].partition("://")[2].startswith(f"{server_name}:")
        extender["tlsConfig"]["serverName"] = server_name
    extender["urlPrefix"] = extender_url
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    path = directory / "scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config))
    [port] = allocate_ports(1)
    return [
        str(BinaryCache().binary_set().kube_scheduler),
        f"--config={path}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
    ]


def fetch(url: str, context: ssl.SSLContext | None) -> str:
    """``url``'s body; over HTTPS with ``context`` (its CA and client certificate)."""
    if context is None:
        return http_get(url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    with opener.open(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def answers(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        fetch(url, context)
    except (ProbeError, OSError):
        return False
    return True


def prioritize_requests(metrics: str) -> float:
    """How many prioritize calls the extender answered, from its /metrics."""
    counted = 0.0
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == REQUESTS_METRIC and sample.labels.get("verb") == "prioritize":
                counted += sample.value
    return counted


def tls_stand_ins(pki: Credentials) -> dict[tuple[str, str], Path]:
    """The Secrets and ConfigMap extender-tls.yaml names, as files of the local control plane's PKI: the extender's
    serving certificate (for 127.0.0.1), the cluster's CA as client CA, and the scheduler's client certificate."""
    tls = yaml.safe_load((VALUES / "extender-tls.yaml").read_text())["extender"]["tls"]
    return {
        (tls["secretName"], "tls.crt"): pki.extender_cert,
        (tls["secretName"], "tls.key"): pki.extender_key,
        (tls["clientCaConfigMap"], "ca.crt"): pki.ca_cert,
        (tls["clientSecretName"], "ca.crt"): pki.ca_cert,
        (tls["clientSecretName"], "tls.crt"): pki.scheduler_client_cert,
        (tls["clientSecretName"], "tls.key"): pki.scheduler_client_key,
    }


def generated_stand_ins(release: Release, api: client.ApiClient, directory: Path) -> dict[tuple[str, str], Path]:
    """The Secret the chart generated at install (the extender's CA and certificate), as local files."""
    name = release.account("extender-tls")
    secret = client.CoreV1Api(api).read_namespaced_secret(name, release.namespace)
    assert secret.type == "kubernetes.io/tls"
    files = {}
    for key in ("ca.crt", "tls.crt", "tls.key"):
        path = directory / f"generated-{key}"
        path.write_bytes(base64.b64decode(secret.data[key]))
        files[(name, key)] = path
    return files


@pytest.mark.parametrize("tls", ["generated", "client-ca"])
def test_the_bundled_scheduler_extender_and_operator_lend_and_reclaim_as_the_charts_service_accounts(
    release: Release, kube_api: client.ApiClient, binaries: BinarySet, tmp_path: Path, tls: str
) -> None:
    """The three components, each with its chart arguments (the scheduler: its ConfigMap) and its ServiceAccount's
    token: the bundled scheduler binds every pod the operator makes, calling the extender; nothing is forbidden.
    By default (``generated``) the scheduler calls the extender over HTTPS, checking its certificate (the one the
    chart generated at install, read from the release's Secret) against the Service's name. With extender-tls.yaml
    (``client-ca``), it also presents the client certificate the chart mounts (the Secrets stood in for by the local
    PKI), and the extender refuses a client without one."""
    operator_port, extender_port = allocate_ports(2)
    values_files = [VALUES / "scenario.yaml", *([VALUES / "extender-tls.yaml"] if tls == "client-ca" else [])]
    objects = rendered_release(release, binaries, values_files)
    if tls == "client-ca":
        stand_ins = tls_stand_ins(release.cluster.credentials)
    else:
        stand_ins = generated_stand_ins(release, kube_api, tmp_path)
    extender_mounts = local_mounts(deployment_named(objects, release.account("extender")), stand_ins, tmp_path)
    scheduler_mounts = local_mounts(deployment_named(objects, release.account("scheduler")), stand_ins, tmp_path)
    operator_args = local_arguments(
        chart_arguments(objects, release.account("operator")), release.namespace, operator_port
    )
    extender_args = [
        localized(arg, extender_mounts)
        for arg in local_arguments(
            chart_arguments(objects, release.account("extender")), release.namespace, extender_port
        )
    ]
    assert f"--scheduler-name={BUNDLED_SCHEDULER_NAME}" in operator_args
    extender = f"https://127.0.0.1:{extender_port}"
    server_name = None
    if tls == "client-ca":
        pki = release.cluster.credentials
        trusted = ssl.create_default_context(cafile=str(pki.ca_cert))
        trusted.load_cert_chain(pki.scheduler_client_cert, pki.scheduler_client_key)
    else:
        server_name = f"{release.account('extender')}.{release.namespace}.svc"
        trusted = ssl.create_default_context(cafile=str(stand_ins[(release.account("extender-tls"), "ca.crt")]))
        trusted.check_hostname = False  # the test's own calls go to 127.0.0.1; the scheduler checks server_name
    kubeconfigs = {
        component: token_kubeconfig(release, kube_api, component, tmp_path)
        for component in ("extender", "scheduler", "operator")
    }
    scheduler = bundled_scheduler_command(
        objects,
        release.account("scheduler"),
        kubeconfigs["scheduler"],
        extender_url=extender,
        mounts=scheduler_mounts,
        directory=tmp_path,
        server_name=server_name,
    )
    commands = {
        "extender": [sys.executable, "-m", "lyra", *extender_args, "--kubeconfig", str(kubeconfigs["extender"])],
        "scheduler": scheduler,
        "operator": [sys.executable, "-m", "lyra", *operator_args, "--kubeconfig", str(kubeconfigs["operator"])],
    }
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    nodes_before = lyra_node_fields(kube_api)
    with (
        restored_nodes(kube_api),  # the session's cluster serves later tests: Lyra's node labels and taints go
        temporary_namespace(kube_api, "chart-scenario") as namespace,  # the processes stop before it goes
    ):
        for component, command in commands.items():
            log = tmp_path / f"{component}.log"
            with log.open("wb") as out:
                processes.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT), log))
        try:
            wait_for(lambda: answers(f"{extender}/readyz", trusted), DEADLINE_S, "the extender to be ready")
            if tls == "client-ca":
                anonymous = ssl.create_default_context(cafile=str(release.cluster.credentials.ca_cert))
                assert not answers(f"{extender}/readyz", anonymous), "the extender served a client without certificate"
            wait_for(
                lambda: answers(f"http://127.0.0.1:{operator_port}/readyz"), DEADLINE_S, "the operator to be ready"
            )
            _lend_and_reclaim(kube_api, namespace)
            assert_bound_by_the_bundled_scheduler(kube_api, namespace)
            called = prioritize_requests(fetch(f"{extender}/metrics", trusted))
            assert called > 0, "the scheduler never called the extender"
        except BaseException:
            for _, log in processes:
                print(f"--- {log.name} ---\n{log.read_text(errors='replace')[-6000:]}")
            raise
        finally:
            for process, _ in processes:
                process.terminate()
                process.wait(timeout=30)
    assert lyra_node_fields(kube_api) == nodes_before
    for _, log in processes:
        text = log.read_text(errors="replace")
        # The API server's RBAC refusal: '<resource> is forbidden: User "system:serviceaccount:..." cannot <verb>'.
        # Other 403s are not RBAC's: an earlier scenario's namespace still terminating refuses new content with
        # 'is forbidden: unable to create new content in namespace ... because it is being terminated'.
        assert 'is forbidden: user "system:serviceaccount:' not in text.lower(), (
            f"{log.name}: the chart's RBAC is not enough:\n{text[-4000:]}"
        )


def assert_bound_by_the_bundled_scheduler(api: client.ApiClient, namespace: str) -> None:
    """Every pod of the scenario names the bundled scheduler, and its Scheduled Event was reported by it."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    assert pods
    assert {pod.spec.scheduler_name for pod in pods} == {BUNDLED_SCHEDULER_NAME}
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    reporters = {event.reporting_component for event in events if event.reason == "Scheduled"}
    assert reporters == {BUNDLED_SCHEDULER_NAME}, reporters


@contextmanager
def restored_nodes(api: client.ApiClient) -> Iterator[None]:
    """Give every node back the labels, annotations and taints it had (what an operator wrote goes)."""
    core = client.CoreV1Api(api)
    before = {
        node.metadata.name: (node.metadata.labels or {}, node.metadata.annotations or {}, node.spec.taints or [])
        for node in core.list_node().items
    }
    try:
        yield
    finally:
        for node in core.list_node().items:
            if node.metadata.name not in before:
                continue
            labels, annotations, taints = before[node.metadata.name]
            lyra = f"{names.GROUP}/"
            patch = {
                "metadata": {
                    "labels": {k: None for k in node.metadata.labels or {} if k.startswith(lyra) and k not in labels},
                    "annotations": {
                        k: None for k in node.metadata.annotations or {} if k.startswith(lyra) and k not in annotations
                    },
                },
                "spec": {"taints": [api.sanitize_for_serialization(t) for t in taints]},
            }
            core.patch_node(node.metadata.name, patch)


def _lend_and_reclaim(api: client.ApiClient, namespace: str) -> None:
    t4_servers = len(node_states(api))
    create_service(api, namespace, inference_service("chat", replicas=2, gpus=4, min_replicas=1, max_replicas=64))
    create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=8, gpusPerWorker=8, gpuTypes=[T4])

    def lent_and_used() -> list[str] | None:
        loaned = [node for node, state in node_states(api).items() if state == "loaned"]
        pods = workers(api, namespace, "elastic")
        on_loan = [p for p in pods if p.spec.node_name in loaned and p.status.phase == "Running"]
        return loaned if len(on_loan) >= 2 else None

    lent = wait_for(lent_and_used, DEADLINE_S, "idle T4 servers lent and the elastic job running on them")
    for pod in workers(api, namespace, "elastic"):
        assert pod.spec.scheduler_name == BUNDLED_SCHEDULER_NAME  # the chart's scheduler.name, via --scheduler-name

    # Inference needs every T4 server: the lent ones are reclaimed and the replicas run there.
    replicas = 2 * t4_servers
    patch = {"spec": {"replicas": replicas}}
    custom(api).patch_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, "chat", patch
    )

    def reclaimed() -> bool:
        states = node_states(api)
        try:
            deployment = client.AppsV1Api(api).read_namespaced_deployment("chat", namespace)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        ready = int(deployment.status.ready_replicas or 0)
        return all(states[node] == "serving" for node in lent) and ready == replicas

    wait_for(reclaimed, 2 * DEADLINE_S, f"the lent servers {lent} reclaimed and {replicas} replicas ready")
    deployment = client.AppsV1Api(api).read_namespaced_deployment("chat", namespace)
    assert deployment.spec.template.spec.scheduler_name == BUNDLED_SCHEDULER_NAME


def test_upgrade_changes_the_operator_and_uninstall_keeps_training_jobs(
    release: Release, kube_api: client.ApiClient
) -> None:
    values = VALUES / "scenario.yaml"
    core = client.CoreV1Api(kube_api)
    generated = core.read_namespaced_secret(release.account("extender-tls"), release.namespace).data
    result = release.helm_command(
        "upgrade", RELEASE, str(CHART), "--values", str(values), "--set", "operator.headroom=1"
    )
    assert result.returncode == 0, result.stderr
    # the extender's generated certificate is kept: the running scheduler still trusts it
    assert core.read_namespaced_secret(release.account("extender-tls"), release.namespace).data == generated
    apps = client.AppsV1Api(kube_api)
    operator = apps.read_namespaced_deployment(release.account("operator"), release.namespace)
    assert "--headroom=1" in operator.spec.template.spec.containers[0].args
    create_job(kube_api, release.namespace, "kept", minWorkers=1, maxWorkers=1, gpusPerWorker=1, gpuTypes=[T4])

    result = release.helm_command("uninstall", RELEASE)
    assert result.returncode == 0, result.stderr

    def gone() -> bool:
        try:
            apps.read_namespaced_deployment(release.account("operator"), release.namespace)
        except ApiException as error:
            if error.status == 404:
                return True
            raise
        return False

    wait_for(gone, DEADLINE_S, "the release's Deployments to be deleted")
    rbac = client.RbacAuthorizationV1Api(kube_api)
    assert not [r for r in rbac.list_cluster_role().items if r.metadata.name.startswith(f"{RELEASE}-")]
    kept = custom(kube_api).get_namespaced_custom_object(
        names.GROUP, names.VERSION, release.namespace, names.TRAINING_JOB_PLURAL, "kept"
    )
    assert kept["metadata"]["name"] == "kept"
    extensions = client.ApiextensionsV1Api(kube_api)
    for plural in (names.TRAINING_JOB_PLURAL, names.INFERENCE_SERVICE_PLURAL):
        assert extensions.read_custom_resource_definition(f"{plural}.{names.GROUP}").metadata.name
