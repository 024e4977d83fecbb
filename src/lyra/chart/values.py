"""The Helm chart's values as a typed model: ``values.yaml`` (the defaults, with each field's description as a
comment), ``values.schema.json`` (what ``helm install`` validates, so a bad value is refused before anything is
rendered) and the values reference in docs/operations.md are all generated from it.

Every model forbids unknown keys: a misspelt key (``operator.replica``) is refused, not silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lyra.api.resources import MAX_PRIORITY
from lyra.core.model import MAX_GPUS_PER_SERVER, MAX_WORKERS
from lyra.settings import DEFAULT_INFERENCE_GPU_CAP, DEFAULT_MAX_PRIORITY, ExtenderSettings
from lyra.snapshot.document import MAX_GPU_TYPES, GpuTypeDocument, Name

#: The upstream kube-scheduler the chart bundles: the same minor version the project builds and tests against.
KUBE_SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler"
KUBE_SCHEDULER_TAG = "v1.34.4"
BUNDLED_SCHEDULER_NAME = "lyra-scheduler"
NON_ROOT_UID = 65532  # the image's user (Dockerfile); kube-scheduler's distroless image has the same "nonroot"

_QUANTITY = r"^([0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?)$"
_DNS_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
_DURATION = r"^[0-9]+(ms|s|m|h)$"

_DIGEST = r"^sha256:[0-9a-f]{64}$"

#: A Kubernetes quantity, as a string (100m, 256Mi) or a number (``--set operator.resources.limits.cpu=2``).
Quantity = Annotated[
    Annotated[str, Field(pattern=_QUANTITY)] | Annotated[float, Field(ge=0)],
    Field(description="a Kubernetes quantity such as 100m, 256Mi or 1 (a string or a number)"),
]
Port = Annotated[int, Field(ge=1, le=65535)]
#: A namespace, or ``*`` for every namespace not named (lyra.operator.sizing.InferenceGpuCaps).
CappedNamespace = Annotated[str, Field(pattern=r"^(\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$")]
#: The largest inference GPU cap: every replica a service may have, at the largest size (as the operator checks it).
MAX_CAP_GPUS = MAX_WORKERS * MAX_GPUS_PER_SERVER


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Image(Strict):
    repository: str = Field(
        "lyra", min_length=1, description="image repository (build it: `make image`, or the Dockerfile)"
    )
    tag: str = Field("", description="image tag; empty: the chart's appVersion")
    digest: str = Field(
        "", pattern=r"^(|sha256:[0-9a-f]{64})$", description="image digest (sha256:...); set, it wins over the tag"
    )
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", alias="pullPolicy", description="imagePullPolicy"
    )


class SchedulerImage(Strict):
    repository: str = Field(
        KUBE_SCHEDULER_IMAGE, min_length=1, description="kube-scheduler image (upstream, or `make image`'s own build)"
    )
    tag: str = Field(
        KUBE_SCHEDULER_TAG,
        pattern=r"^v1\.(3[4-9]|[4-9][0-9])\.[0-9]+([-+][0-9A-Za-z.-]+)?$",
        description="kube-scheduler v1.34 or later, a vendor build's tag included (v1.35.1-gke.100)",
    )
    digest: str = Field(
        "", pattern=r"^(|sha256:[0-9a-f]{64})$", description="image digest (sha256:...); set, it wins over the tag"
    )
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", alias="pullPolicy", description="imagePullPolicy"
    )


class ResourceAmounts(Strict):
    cpu: Quantity | None = Field(None, description="CPU, e.g. 100m (unset: none)")
    memory: Quantity | None = Field(None, description="memory, e.g. 256Mi (unset: none)")


class Resources(Strict):
    requests: ResourceAmounts = Field(default_factory=ResourceAmounts)
    limits: ResourceAmounts = Field(default_factory=ResourceAmounts)


def _resources(cpu: str, memory: str, memory_limit: str) -> Resources:
    return Resources(requests=ResourceAmounts(cpu=cpu, memory=memory), limits=ResourceAmounts(memory=memory_limit))


class ServiceMetadata(Strict):
    annotations: dict[str, str] = Field(default_factory=dict, description="the Service's annotations")
    labels: dict[str, str] = Field(default_factory=dict, description="the Service's labels (beside the chart's)")


class Pods(Strict):
    """What every component's pods take, as the anchors' charts name it: where they run (never on GPU nodes unless
    you say so), their priority, metadata, extra arguments and environment, and security contexts (merged over the
    chart's non-root defaults)."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, alias="nodeSelector", description="the pods' nodeSelector"
    )
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="the pods' tolerations")
    affinity: dict[str, Any] = Field(default_factory=dict, description="the pods' affinity")
    topology_spread_constraints: list[dict[str, Any]] = Field(
        default_factory=list, alias="topologySpreadConstraints", description="the pods' topologySpreadConstraints"
    )
    priority_class_name: str = Field(
        "",
        alias="priorityClassName",
        pattern=r"^(|[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)$",
        description="the pods' PriorityClass (e.g. system-cluster-critical); empty: none",
    )
    pod_annotations: dict[str, str] = Field(
        default_factory=dict, alias="podAnnotations", description="annotations on the pods"
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict, alias="podLabels", description="labels on the pods (beside the chart's)"
    )
    extra_args: list[str] = Field(
        default_factory=list, alias="extraArgs", description="arguments appended to the container's"
    )
    extra_env: list[dict[str, Any]] = Field(
        default_factory=list, alias="extraEnv", description="environment variables added to the container (EnvVar)"
    )
    pod_security_context: dict[str, Any] = Field(
        default_factory=dict,
        alias="podSecurityContext",
        description="merged over the chart's pod securityContext (non-root 65532, RuntimeDefault seccomp)",
    )
    security_context: dict[str, Any] = Field(
        default_factory=dict,
        alias="securityContext",
        description="merged over the chart's container securityContext (read-only root, no privilege, no capabilities)",
    )


class Crds(Strict):
    enabled: bool = Field(
        True,
        description="install and upgrade the TrainingJob and InferenceService CRDs with the release; they carry "
        "helm.sh/resource-policy: keep, so `helm uninstall` never deletes them (nor users' objects)",
    )


class Operator(Pods):
    mode: Literal["active", "shadow"] = Field(
        "active",
        description="active: the operator lends, reclaims and runs jobs; shadow: it decides every pass and writes "
        "nothing (--dry-run, read-only RBAC), its plan readable with `lyra status --shadow` (docs/operations.md, "
        "'A safe rollout')",
    )
    replicas: int = Field(
        2, ge=1, le=5, description="operator replicas; one leads through the Lease, the others stand by"
    )
    min_available: int = Field(
        1,
        ge=0,
        alias="minAvailable",
        description="PodDisruptionBudget minAvailable (the budget exists with more than one replica)",
    )
    headroom: int = Field(0, ge=0, description="spare inference servers kept per GPU type (--headroom)")
    lend_delay_seconds: int = Field(
        60,
        ge=0,
        alias="lendDelaySeconds",
        description="an idle inference server is lent after this long (--lend-delay)",
    )
    reclaim_deadline_seconds: int = Field(
        300,
        ge=1,
        alias="reclaimDeadlineSeconds",
        description="training pods still on a reclaimed server after this long are deleted without grace",
    )
    gang_timeout_seconds: int = Field(
        120, ge=1, alias="gangTimeoutSeconds", description="a base gang not placed whole by then is re-queued"
    )
    node_grace_seconds: int = Field(
        60,
        ge=0,
        alias="nodeGraceSeconds",
        description="a node NotReady, unreachable or short of GPUs takes no new work at once, and is dropped with "
        "its workers after this long (--node-grace)",
    )
    start_timeout_seconds: int = Field(
        300,
        ge=1,
        alias="startTimeoutSeconds",
        description="a started job whose base workers are not all running by then is re-queued (--start-timeout)",
    )
    resync_seconds: int = Field(10, ge=1, le=60, alias="resyncSeconds", description="a pass at least this often")
    lease_duration_seconds: int = Field(
        15,
        ge=1,
        alias="leaseDurationSeconds",
        description="a candidate takes the Lease over once it has seen it unrenewed this long (--lease-duration; "
        "the leader stops writing after 2/3 of it without a renewal)",
    )
    http_port: Port = Field(8080, alias="httpPort", description="/metrics, /healthz and /readyz")
    inference_gpu_caps: dict[CappedNamespace, Annotated[int, Field(ge=0, le=MAX_CAP_GPUS)]] = Field(
        default_factory=lambda: {"*": DEFAULT_INFERENCE_GPU_CAP},
        alias="inferenceGpuCaps",
        description="the GPUs each namespace's InferenceServices may claim together, e.g. {serving: 256, '*': 8} "
        "(--inference-gpu-cap; '*': every namespace not named, 64 unless set; docs/security.md)",
        json_schema_extra={"additionalProperties": False},  # a key that is no namespace is refused, not ignored
    )
    max_priorities: dict[CappedNamespace, Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]] = Field(
        default_factory=lambda: {"*": DEFAULT_MAX_PRIORITY},
        alias="maxPriorities",
        description="the highest spec.priority each namespace's TrainingJobs are queued at, e.g. {research: 100, "
        "'*': 0} (--max-priority; '*': every namespace not named, 0 unless set; docs/security.md)",
        json_schema_extra={"additionalProperties": False},
    )
    gpu_catalog: Annotated[dict[Name, GpuTypeDocument], Field(max_length=MAX_GPU_TYPES)] = Field(
        default_factory=dict,
        alias="gpuCatalog",
        description="how fast each GPU type trains relative to a reference GPU and its memory, e.g. {Tesla-T4: "
        "{speed: 0.4, memoryGiB: 16}}: a ConfigMap mounted as --gpu-catalog; it wins over nodes' "
        "nvidia.com/gpu.memory labels, which win over the family defaults (empty: labels and defaults only)",
    )
    resources: Resources = Field(
        default_factory=lambda: _resources("100m", "256Mi", "1Gi"), description="the container's requests and limits"
    )
    service: ServiceMetadata = Field(default_factory=ServiceMetadata, description="its Service's metadata")


#: Where the bundled scheduler finds the extender's client credentials (``extender.tls.clientSecretName``): the
#: Secret's keys as files, named in the scheduler's extender ``tlsConfig``.
SCHEDULER_EXTENDER_CLIENT_DIR = "/etc/lyra-scheduler/extender-client"


class ExtenderTls(Strict):
    """HTTPS between kube-scheduler and the extender (docs/operations.md, "Extender TLS")."""

    enabled: bool = Field(
        True,
        description="serve HTTPS (--tls-cert-file, --tls-key-file); the bundled scheduler then calls it with "
        "enableHTTPS and a tlsConfig. false: plain HTTP, which anything reaching the Service can read and send",
    )
    secret_name: str = Field(
        "",
        alias="secretName",
        description="Secret (type kubernetes.io/tls: tls.crt, tls.key and, unless clientSecretName is set, ca.crt) "
        "with the extender's serving certificate, valid for <release>-extender.<namespace>.svc. Empty: the chart "
        "generates a CA and a certificate (10 years) into the Secret <release>-extender-tls at install and keeps "
        "them across upgrades",
    )
    client_ca_config_map: str = Field(
        "",
        alias="clientCaConfigMap",
        description="ConfigMap whose ca.crt signs the clients the extender serves (--client-ca-file): any other "
        "client is refused during the handshake, and the probes become TCP checks (the kubelet presents no "
        "certificate). Empty: no client check",
    )
    client_secret_name: str = Field(
        "",
        alias="clientSecretName",
        description="Secret with ca.crt (the CA of the extender's certificate) and tls.crt, tls.key (a client "
        "certificate the client CA signed), as cert-manager writes it: mounted into the bundled scheduler for its "
        "tlsConfig and named in the ServiceMonitor's; required with clientCaConfigMap and the bundled scheduler or "
        "the ServiceMonitor. Empty: they trust the ca.crt of the serving certificate's Secret and present none",
    )


class Extender(Pods):
    enabled: bool = Field(True, description="run the scheduler extender (scoring and preemption victims)")
    replicas: int = Field(2, ge=1, le=10, description="extender replicas behind one Service")
    port: Port = Field(
        ExtenderSettings().port,
        description="HTTP (or, with tls.enabled, HTTPS) port of prioritize, preempt, /metrics, /healthz and /readyz",
    )
    preempt_across_namespaces: bool = Field(
        False,
        alias="preemptAcrossNamespaces",
        description="let a pod's preemption evict Lyra's pods in other namespaces",
    )
    min_available: int = Field(1, ge=0, alias="minAvailable", description="PodDisruptionBudget minAvailable")
    tls: ExtenderTls = Field(default_factory=ExtenderTls)
    resources: Resources = Field(
        default_factory=lambda: _resources("100m", "256Mi", "1Gi"), description="the container's requests and limits"
    )
    service: ServiceMetadata = Field(default_factory=ServiceMetadata, description="its Service's metadata")


class Scheduler(Pods):
    enabled: bool = Field(
        True,
        description="bundle a second kube-scheduler that calls the extender; the operator sets its name as the "
        "schedulerName of every pod it makes. false: the cluster's default scheduler places them (docs/operations.md)",
    )
    name: str = Field(
        BUNDLED_SCHEDULER_NAME, pattern=_DNS_LABEL, description="schedulerName of the bundled scheduler's profile"
    )
    replicas: int = Field(
        2,
        ge=1,
        le=5,
        description="replicas, leader-elected through a Lease: a standby takes over when the leader's pod goes, so "
        "Lyra's pods (reclaimed servers' replicas among them) keep being placed",
    )
    min_available: int = Field(
        1,
        ge=0,
        alias="minAvailable",
        description="PodDisruptionBudget minAvailable (the budget exists with more than one replica)",
    )
    image: SchedulerImage = Field(default_factory=SchedulerImage)
    resources: Resources = Field(
        default_factory=lambda: _resources("100m", "128Mi", "512Mi"), description="the container's requests and limits"
    )


class ServiceMonitor(Strict):
    enabled: bool = Field(False, description="a ServiceMonitor (Prometheus Operator) for the operator and extender")
    interval: str = Field("30s", pattern=_DURATION, description="scrape interval")
    labels: dict[str, str] = Field(
        default_factory=lambda: {"release": "kube-prometheus-stack"},
        description="labels your Prometheus selects ServiceMonitors and rules by (kube-prometheus-stack: release)",
    )


class PrometheusRule(Strict):
    enabled: bool = Field(False, description="a PrometheusRule with Lyra's alerts")
    labels: dict[str, str] = Field(
        default_factory=lambda: {"release": "kube-prometheus-stack"}, description="labels your Prometheus selects by"
    )
    failed_passes_for: str = Field(
        "10m", pattern=_DURATION, alias="failedPassesFor", description="LyraReconcileFailing fires after this long"
    )
    no_leader_for: str = Field(
        "5m", pattern=_DURATION, alias="noLeaderFor", description="LyraNoLeader fires after this long"
    )
    component_down_for: str = Field(
        "5m",
        pattern=_DURATION,
        alias="componentDownFor",
        description="LyraExtenderDown and LyraSchedulerDown fire after this long",
    )
    api_errors_for: str = Field(
        "10m",
        pattern=_DURATION,
        alias="apiErrorsFor",
        description="LyraApiErrors fires after the API server refused the operator (401, 403, 429, 5xx) or did "
        "not answer for this long",
    )
    runbook_url: str = Field(
        "docs/operations.md",
        min_length=1,
        alias="runbookUrl",
        description="where your team reads docs/operations.md (its runbook sections are linked from each alert's "
        "runbook_url as <runbookUrl>#runbook-<alert>); e.g. the repository's URL of that file",
    )


class Dashboards(Strict):
    enabled: bool = Field(
        True,
        description="Lyra's Grafana dashboards (Loans, Training, Internals) as ConfigMaps, one per dashboard, for "
        "Grafana's dashboard sidecar",
    )
    labels: dict[str, str] = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="labels the sidecar selects dashboard ConfigMaps by (kube-prometheus-stack: grafana_dashboard)",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="annotations of the ConfigMaps, e.g. the sidecar's folder annotation (grafana_folder: Lyra)",
    )


class Monitoring(Strict):
    service_monitor: ServiceMonitor = Field(default_factory=ServiceMonitor, alias="serviceMonitor")
    prometheus_rule: PrometheusRule = Field(default_factory=PrometheusRule, alias="prometheusRule")
    dashboards: Dashboards = Field(default_factory=Dashboards)


class UserRoles(Strict):
    """What the cluster's built-in user roles may do with Lyra's custom resources."""

    aggregate: bool = Field(
        True,
        description="add TrainingJobs and InferenceServices to the built-in ClusterRoles: admin and edit create, "
        "change and delete them, view reads them (statuses included); nobody but the operator writes a status",
    )


class Cleanup(Pods):
    """A Helm post-delete hook that runs `lyra nodes restore` once the release's objects are gone
    (docs/operations.md, "Returning nodes to how they were")."""

    restore_nodes_on_uninstall: bool = Field(
        False,
        alias="restoreNodesOnUninstall",
        description="`helm uninstall` runs a Job (the chart's image, its own ServiceAccount allowed only what the "
        "restore needs) that removes every label, taint and annotation the operator wrote on nodes, after the "
        "operator is gone; it refuses, failing the uninstall's hook, while training runs on lent servers unless "
        "drain is set",
    )
    drain: bool = Field(
        False,
        description="delete the training pods on lent servers first, each with its grace period (--drain; the "
        "ServiceAccount may then get and delete pods)",
    )
    pool_labels: bool = Field(
        False, alias="poolLabels", description="also remove the admin's lyra.dev/pool labels (--pool-labels)"
    )
    timeout_seconds: int = Field(
        600,
        ge=1,
        alias="timeoutSeconds",
        description="how long --drain waits for the training pods to go (--timeout); give `helm uninstall` a "
        "--timeout longer than this",
    )
    backoff_limit: int = Field(
        4,
        ge=0,
        le=10,
        alias="backoffLimit",
        description="the Job's retries (10 s, 20 s, 40 s... apart): the restore refuses while a terminating "
        "operator still holds its Lease",
    )
    resources: Resources = Field(
        default_factory=lambda: _resources("50m", "128Mi", "256Mi"), description="the container's requests and limits"
    )


class Values(Strict):
    """Lyra's Helm chart."""

    global_: dict[str, Any] = Field(
        default_factory=dict,
        alias="global",
        description="values shared with the other charts of an umbrella chart (Lyra reads none of them)",
    )
    image: Image = Field(default_factory=Image)
    image_pull_secrets: list[str] = Field(
        default_factory=list, alias="imagePullSecrets", description="names of Secrets to pull the images with"
    )
    crds: Crds = Field(default_factory=Crds)
    operator: Operator = Field(default_factory=Operator)
    extender: Extender = Field(default_factory=Extender)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    user_roles: UserRoles = Field(default_factory=UserRoles, alias="userRoles")
    cleanup: Cleanup = Field(default_factory=Cleanup)


def defaults() -> dict[str, Any]:
    """The values with every default, as the chart reads them (``values.yaml``)."""
    return Values().model_dump(by_alias=True, mode="json", exclude_none=True)


def json_schema() -> dict[str, Any]:
    """``values.schema.json``: pydantic's schema made self-contained (references inlined) and closed."""
    schema = Values.model_json_schema(by_alias=True, mode="validation")
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            return inline({**target, **{k: v for k, v in node.items() if k != "$ref"}})
        node = {k: inline(v) for k, v in node.items() if k != "title"}
        if "anyOf" in node:  # `X | None`: null means "not set" (helm drops nulls from values)
            options = [option for option in node["anyOf"] if option.get("type") != "null"]
            if len(options) == 1:
                node = {**{k: v for k, v in node.items() if k not in {"anyOf", "default"}}, **options[0]}
        return node

    return {
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "Values of Lyra's Helm chart (generated from lyra.chart.values; do not edit)",
        **inline(schema),
    }
