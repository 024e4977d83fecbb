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

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import kubernetes_validate
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from lyra.api import names
from lyra.chart.rendering import by_template, helm_template
from lyra.chart.values import BUNDLED_SCHEDULER_NAME
from lyra.cli import main
from lyra.core.gpus import GpuType
from lyra.extender.app import REQUESTS_METRIC
from lyra.localcluster.binaries import BinaryCache, BinarySet
from lyra.localcluster.controlplane import ControlPlane
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
    assert "SUCCESS: 3 rules found" in result.stdout, result.stdout


def test_the_alerts_fire_on_what_they_describe_and_not_otherwise(binaries: BinarySet, tmp_path: Path) -> None:
    """promtool's rule unit tests: a forced reclaim, failing passes and no leader fire their alerts; a healthy
    operator (one leader, passes succeeding, reclaims drained) fires none."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus_rule(binaries)["spec"]))
    scope = 'job="lyra-operator", namespace="lyra-system"'
    series = [
        # minute by minute, for 30 minutes: a healthy stretch, then each problem starts at minute 11
        {"series": f'lyra_leader{{{scope}, pod="a"}}', "values": "1x10 0x20"},
        {"series": f'lyra_leader{{{scope}, pod="b"}}', "values": "0x30"},
        {"series": f'lyra_reconcile_passes_total{{{scope}, result="failed"}}', "values": "0x10 0+6x20"},
        {"series": f'lyra_reconcile_passes_total{{{scope}, result="succeeded"}}', "values": "0+60x30"},
        {"series": f'lyra_reclaims_total{{{scope}, gpu_type="Tesla-T4", outcome="drained"}}', "values": "0+1x30"},
        {"series": f'lyra_reclaims_total{{{scope}, gpu_type="Tesla-T4", outcome="forced"}}', "values": "0x10 1x20"},
    ]
    defined = {rule["alert"]: rule for rule in prometheus_rule(binaries)["spec"]["groups"][0]["rules"]}

    def fired(name: str, at: str, **labels: str) -> dict[str, Any]:
        annotations = {
            key: text.replace("{{ $labels.gpu_type }}", labels.get("gpu_type", ""))
            for key, text in defined[name]["annotations"].items()
        }
        expected = {"exp_labels": defined[name]["labels"] | labels, "exp_annotations": annotations}
        return {"eval_time": at, "alertname": name, "exp_alerts": [expected]}

    alerts = [{"eval_time": "9m", "alertname": name, "exp_alerts": []} for name in defined] + [
        fired("LyraNoLeader", "17m"),
        fired("LyraReconcileFailing", "25m"),
        fired("LyraReclaimPastDeadline", "12m", gpu_type="Tesla-T4"),
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
    ],
)
def test_helm_refuses_bad_values_naming_them(binaries: BinarySet, setting: str, message: str) -> None:
    command = [str(binaries.helm), "template", RELEASE, str(CHART), "--set", setting]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


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
    assert replicas == {release.account("operator"): 2, release.account("extender"): 2, release.account("scheduler"): 1}
    core = client.CoreV1Api(kube_api)
    services = {s.metadata.name for s in core.list_namespaced_service(release.namespace).items}
    assert services == {release.account("operator"), release.account("extender")}
    config = core.read_namespaced_config_map(release.account("scheduler"), release.namespace)
    scheduler = yaml.safe_load(config.data["config.yaml"])
    assert scheduler["profiles"] == [{"schedulerName": BUNDLED_SCHEDULER_NAME}]
    assert scheduler["extenders"][0]["urlPrefix"] == f"http://{release.name}-extender.{release.namespace}.svc:8888"
    budget = client.PolicyV1Api(kube_api).read_namespaced_pod_disruption_budget(
        release.account("extender"), release.namespace
    )
    assert budget.spec.min_available == 1
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
    ("operator", "update", "coordination.k8s.io", "leases", "", False, True),
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


def rendered_release(release: Release, binaries: BinarySet) -> list[dict[str, Any]]:
    """The objects the chart renders for this release (scenario.yaml, the release's name and namespace)."""
    rendered = helm_template(
        binaries.helm, CHART, release=release.name, namespace=release.namespace, values_files=[VALUES / "scenario.yaml"]
    )
    return documents(rendered)


def chart_arguments(objects: list[dict[str, Any]], name: str) -> list[str]:
    """The container arguments of the Deployment ``name`` among the rendered ``objects``."""
    deployment = next(d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == name)
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def local_arguments(args: list[str], namespace: str, port: int) -> list[str]:
    """The chart's arguments for a local process: the pod's namespace filled in, loopback and a free port."""
    replaced = {"--http-port": f"--http-port={port}", "--port": f"--port={port}", "--host": "--host=127.0.0.1"}
    local = [replaced.get(arg.split("=", 1)[0], arg) for arg in args]
    return [arg.replace("$(POD_NAMESPACE)", namespace) for arg in local]


def bundled_scheduler_command(
    release: Release, objects: list[dict[str, Any]], kubeconfig: Path, *, extender_url: str, directory: Path
) -> list[str]:
    """The cached kube-scheduler with the chart's KubeSchedulerConfiguration (its ConfigMap), connecting as the
    chart's scheduler ServiceAccount (what the pod's in-cluster credentials would be: client, authentication and
    authorization delegation) and calling the extender at ``extender_url`` instead of its Service."""
    name = release.account("scheduler")
    configmap = next(d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name)
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    [extender] = config["extenders"]
    assert extender["urlPrefix"] == f"http://{name.removesuffix('-scheduler')}-extender.{release.namespace}.svc:8888"
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


def answers(url: str) -> bool:
    try:
        http_get(url)
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


def test_the_bundled_scheduler_extender_and_operator_lend_and_reclaim_as_the_charts_service_accounts(
    release: Release, kube_api: client.ApiClient, binaries: BinarySet, tmp_path: Path
) -> None:
    """The three components, each with its chart arguments (the scheduler: its ConfigMap) and its ServiceAccount's
    token: the bundled scheduler binds every pod the operator makes, calling the extender; nothing is forbidden."""
    operator_port, extender_port = allocate_ports(2)
    objects = rendered_release(release, binaries)
    operator_args = local_arguments(
        chart_arguments(objects, release.account("operator")), release.namespace, operator_port
    )
    extender_args = local_arguments(
        chart_arguments(objects, release.account("extender")), release.namespace, extender_port
    )
    assert f"--scheduler-name={BUNDLED_SCHEDULER_NAME}" in operator_args
    kubeconfigs = {
        component: token_kubeconfig(release, kube_api, component, tmp_path)
        for component in ("extender", "scheduler", "operator")
    }
    commands = {
        "extender": [sys.executable, "-m", "lyra", *extender_args, "--kubeconfig", str(kubeconfigs["extender"])],
        "scheduler": bundled_scheduler_command(
            release,
            objects,
            kubeconfigs["scheduler"],
            extender_url=f"http://127.0.0.1:{extender_port}",
            directory=tmp_path,
        ),
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
            extender = f"http://127.0.0.1:{extender_port}"
            wait_for(lambda: answers(f"{extender}/readyz"), DEADLINE_S, "the extender to be ready")
            wait_for(
                lambda: answers(f"http://127.0.0.1:{operator_port}/readyz"), DEADLINE_S, "the operator to be ready"
            )
            _lend_and_reclaim(kube_api, namespace)
            assert_bound_by_the_bundled_scheduler(kube_api, namespace)
            assert prioritize_requests(http_get(f"{extender}/metrics")) > 0, "the scheduler never called the extender"
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
        assert "forbidden" not in text.lower(), f"{log.name}: the chart's RBAC is not enough:\n{text[-4000:]}"


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
    result = release.helm_command(
        "upgrade", RELEASE, str(CHART), "--values", str(values), "--set", "operator.headroom=1"
    )
    assert result.returncode == 0, result.stderr
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
