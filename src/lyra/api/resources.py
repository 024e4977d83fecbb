"""The two custom resources, as pydantic models: the one source of their schemas (``lyra.api.crds`` generates the
CustomResourceDefinitions from them) and of the operator's reading of them.

Fields are camelCase on the wire and snake_case in Python. Bounds match the policy core's limits
(:data:`lyra.core.model.MAX_WORKERS`, :data:`lyra.core.model.MAX_GPUS_PER_SERVER`), so an object the API server
accepts is one the core accepts. Cross-field rules (``minWorkers <= maxWorkers`` ...) are CEL rules on the CRD, so
the API server refuses a bad object at ``kubectl apply`` with a message that says what to fix; the same rules are
checked here for objects read from elsewhere.

Every number has bounds that mean something (docs/api.md, "Validation"): no field takes NaN or an infinity, and
the ranges are those of the quantity (a second to a year of work, a thousandth of a request per second to a billion),
so no value the API server stores can overflow what the operator computes from it; an object stored before a bound
existed fails to be read and is refused on its own (``InvalidSpec``). An object's name is bounded too
(:data:`MAX_OBJECT_NAME`): Lyra labels its pods with it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from lyra.api import tenancy
from lyra.core.model import MAX_GPUS_PER_SERVER, MAX_WORKERS

MAX_NAME = 253
MAX_GPU_TYPES = 16
MAX_CONDITIONS = 16
MAX_PLACEMENTS = 4096
#: The longest expected duration accepted: a year.
MAX_DURATION_S = 366 * 24 * 3600
MAX_PRIORITY = 1_000_000
MAX_TOLERATIONS = 64
MAX_NODE_SELECTOR = 64
MAX_AFFINITY_TERMS = 32
MAX_NAMESPACES = 64
#: The longest TrainingJob or InferenceService name: the value of the label that names the owner on each of its pods
#: (``lyra.dev/job``, ``lyra.dev/service``) and of its Deployment's selector is the name, and a label value has at
#: most 63 characters. Every other name Lyra derives fits: a worker pod ``<job>-w<index>`` (at most 70 of a pod name's
#: 253), a headless Service and the workers' host names (a hash of the job's name when it is longer than 50,
#: :func:`lyra.operator.manifests.rendezvous_service_name`), a Deployment ``<service>``.
MAX_OBJECT_NAME = 63
#: The largest load of a service's built-in sizing, and what a replica must serve more than, in requests per second.
#: Fractional lower bounds are exclusive (``gt``): the API server compares a whole number (``0``) with a schema's
#: ``minimum`` truncated to a whole number, so ``minimum: 0.001`` let ``0`` through, while an exclusive one refuses it.
MAX_REQUESTS_PER_SECOND = 1e9
MIN_REQUESTS_PER_REPLICA = 1e-3
#: What a measured speed (relative to the reference GPU) and the GPU memory a worker needs (GiB) must be more than.
MIN_SPEED = 1e-3
MIN_GPU_MEMORY_GIB = 1 / 1024
#: The least expected duration: a second.
MIN_DURATION_S = 1
#: The largest integer a bound may name where no smaller one means anything (counters, generations, seconds of a
#: toleration): the API server holds a schema's bounds as float64, and 2**63 - 1 is not one (it reads as -2**63).
MAX_SAFE_INTEGER = 2**53 - 1
INT32_MAX = 2**31 - 1
#: The largest work done a status records (reference worker-seconds): above a year of 100,000 workers at speed 1,000.
MAX_WORK = 1e16


GpuTypeName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME)]
#: A measured speed relative to the reference GPU, within the core's bounds.
Speed = Annotated[float, Field(gt=MIN_SPEED, le=1000)]


def name_problem(name: str) -> str | None:
    """Why Lyra cannot run a TrainingJob or InferenceService of this name (the CRDs' root rule), or ``None``."""
    if len(name) <= MAX_OBJECT_NAME:
        return None
    return f"metadata.name: {NAME_MESSAGE} ({len(name)} characters)"


NAME_MESSAGE = (
    f"the name may have at most {MAX_OBJECT_NAME} characters: Lyra labels the pods it makes with it "
    f"(lyra.dev/job, lyra.dev/service) and a label value has at most {MAX_OBJECT_NAME}; choose a shorter name"
)
#: The CEL rule at each CRD's root that refuses a longer name at ``kubectl apply``. Checked on create only (a name
#: never changes): an object stored before the rule must still take the operator's status writes, which say why it
#: is refused, and at the root every write changes ``self``, so the API server's ratcheting would not spare it.
NAME_RULE: dict[str, Any] = {
    "rule": f"oldSelf.hasValue() || self.metadata.name.size() <= {MAX_OBJECT_NAME}",
    "optionalOldSelf": True,
    "message": NAME_MESSAGE,
}


class _Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, allow_inf_nan=False
    )


#: A resource quantity, as Kubernetes writes it: a whole number or a string (``"2"``, ``"500m"``, ``"16Gi"``).
Quantity = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)] | Annotated[str, StringConstraints(max_length=64)]


class _Open(BaseModel):
    """A part of a pod template: the fields the operator reads are typed; the rest is kept as written (the API
    server validates it when the pod or Deployment is created)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True, allow_inf_nan=False
    )


class TemplateMetadata(_Open):
    labels: dict[str, Annotated[str, StringConstraints(max_length=63)]] | None = None
    annotations: dict[str, str] | None = None


class EnvVar(_Open):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    value: str | None = None
    value_from: dict[str, Any] | None = Field(default=None, description="A source for the value (kept as written).")


class ResourceRequirements(_Open):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class ContainerPort(_Open):
    container_port: int = Field(ge=1, le=65535)
    name: str | None = Field(default=None, max_length=15)
    protocol: str | None = Field(default=None, max_length=16)


class VolumeMount(_Open):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    mount_path: str = Field(min_length=1, max_length=4096)
    read_only: bool | None = None
    sub_path: str | None = Field(default=None, max_length=4096)


class Container(_Open):
    name: str = Field(min_length=1, max_length=63)
    image: str | None = Field(default=None, max_length=4096)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    resources: ResourceRequirements | None = None
    ports: list[ContainerPort] | None = None
    volume_mounts: list[VolumeMount] | None = None


class Volume(_Open):
    """A volume: its name typed, its source (configMap, emptyDir, persistentVolumeClaim...) kept as written."""

    name: str = Field(min_length=1, max_length=63)


class Toleration(_Open):
    key: str | None = Field(default=None, max_length=316)
    operator: str | None = Field(default=None, max_length=16)
    value: str | None = Field(default=None, max_length=63)
    effect: str | None = Field(default=None, max_length=32)
    toleration_seconds: int | None = Field(default=None, ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)


class PodAffinityTerm(_Open):
    """A pod (anti-)affinity term. ``namespaces`` and ``namespaceSelector`` are typed so that the CRD's CEL rules
    refuse them (:mod:`lyra.api.tenancy`): a term selects pods of the object's own namespace only."""

    label_selector: dict[str, Any] | None = None
    namespaces: list[Annotated[str, StringConstraints(max_length=63)]] | None = Field(
        default=None, max_length=MAX_NAMESPACES, description="Refused: a term selects pods of its own namespace."
    )
    namespace_selector: dict[str, Any] | None = Field(
        default=None, description="Refused: a term selects pods of its own namespace."
    )
    topology_key: str = Field(min_length=1, max_length=316)


class WeightedPodAffinityTerm(_Open):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(_Open):
    """Pod affinity or anti-affinity: its terms typed, so that those reaching other namespaces can be refused."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = Field(
        default=None, max_length=MAX_AFFINITY_TERMS
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = Field(
        default=None, max_length=MAX_AFFINITY_TERMS
    )


class Affinity(_Open):
    """Node affinity is Lyra's and refused (:mod:`lyra.api.tenancy`); pod affinity and anti-affinity are kept, with
    terms that select pods of the object's own namespace only."""

    node_affinity: dict[str, Any] | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class PodSpec(_Open):
    """The scheduling fields Lyra owns are typed so that the CRD's CEL rules (:func:`lyra.api.tenancy.cel_rules`)
    can refuse them, each naming its field; the operator checks the same rules on objects stored before them."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": cast(Any, tenancy.cel_rules())})

    containers: list[Container] = Field(min_length=1, description="At least one; the first one gets the GPUs.")
    init_containers: list[Container] | None = None
    volumes: list[Volume] | None = None
    tolerations: list[Toleration] | None = Field(default=None, max_length=MAX_TOLERATIONS)
    node_selector: dict[str, str] | None = Field(default=None, max_length=MAX_NODE_SELECTOR)
    affinity: Affinity | None = None
    node_name: str | None = Field(default=None, max_length=MAX_NAME, description="Refused: kube-scheduler binds.")
    scheduler_name: str | None = Field(default=None, max_length=MAX_NAME, description="Refused: Lyra's.")
    priority_class_name: str | None = Field(default=None, max_length=MAX_NAME, description="Refused: Lyra's.")
    priority: int | None = Field(default=None, ge=-INT32_MAX - 1, le=INT32_MAX, description="Refused: Lyra's.")


class PodTemplate(_Open):
    """A pod template (``metadata`` and ``spec``) as for a Deployment: a faithful subset of PodTemplateSpec. The
    operator fills in the GPUs, labels, affinity and tolerations it owns (:mod:`lyra.operator.manifests`)."""

    metadata: TemplateMetadata | None = None
    spec: PodSpec

    def body(self) -> dict[str, Any]:
        """The template as the user wrote it (no field the user left out), as JSON."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class Preemption(_Wire):
    grace_period_seconds: int = Field(
        default=60, ge=0, le=3600, description="Seconds a worker gets to checkpoint after SIGTERM when preempted."
    )


class TrainingJobSpec(_Wire):
    min_workers: int = Field(ge=1, le=MAX_WORKERS, description="Base demand: the gang that starts whole or not at all.")
    max_workers: int = Field(ge=1, le=MAX_WORKERS, description="Upper bound with flexible workers (elastic jobs).")
    gpus_per_worker: int = Field(ge=1, le=MAX_GPUS_PER_SERVER, description="GPUs of one worker, on one server.")
    expected_duration: float = Field(
        ge=MIN_DURATION_S,
        le=MAX_DURATION_S,
        description="Seconds the job takes at minWorkers on a training GPU (speed 1.0).",
    )
    template: PodTemplate = Field(description="The worker pod template.")
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY, description="Higher runs first.")
    gpu_types: list[GpuTypeName] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_GPU_TYPES,
        description="GPU products the job may use (as nodes name them in nvidia.com/gpu.product); "
        "default: every type whose memory fits gpuMemoryGiB.",
    )
    gpu_memory_gib: float | None = Field(
        default=None,
        alias="gpuMemoryGiB",
        gt=MIN_GPU_MEMORY_GIB,
        le=1024,
        description="Memory one worker needs per GPU, in GiB.",
    )
    speeds: dict[str, Speed] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="Measured throughput per GPU type relative to the reference (overrides the cluster's speeds).",
    )
    mix_gpu_types: bool = Field(
        default=False, description="Allow workers on several GPU types at once (the job runs at the slowest's pace)."
    )
    scaling_overhead: float = Field(
        default=0.0, ge=0, le=1, description="Sublinear scaling: efficiency 1 / (1 + o (w - 1)); 0 is linear."
    )
    preemption: Preemption = Field(default_factory=Preemption)

    @model_validator(mode="after")
    def _workers_in_order(self) -> TrainingJobSpec:
        if self.min_workers > self.max_workers:
            raise ValueError(f"minWorkers ({self.min_workers}) must be <= maxWorkers ({self.max_workers})")
        return self


class JobPhase(StrEnum):
    QUEUED = "Queued"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Wire):
    """metav1.Condition."""

    type: str = Field(max_length=316)
    status: ConditionStatus
    reason: str = Field(max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: str = Field(description="RFC 3339 time of the last status change.", max_length=64)
    observed_generation: int | None = Field(default=None, ge=0, le=MAX_SAFE_INTEGER)


class WorkerCounts(_Wire):
    current: int = Field(default=0, ge=0, le=MAX_WORKERS)
    target: int = Field(default=0, ge=0, le=MAX_WORKERS)
    base: int = Field(default=0, ge=0, le=MAX_WORKERS)
    flexible: int = Field(default=0, ge=0, le=MAX_WORKERS)


class TrainingJobStatus(_Wire):
    phase: JobPhase = JobPhase.QUEUED
    workers: WorkerCounts = Field(default_factory=WorkerCounts)
    gpu_type: str | None = Field(default=None, max_length=MAX_NAME, description="The GPU type the job runs on.")
    placements: dict[str, Annotated[int, Field(ge=0, le=MAX_WORKERS)]] = Field(
        default_factory=dict, max_length=MAX_PLACEMENTS, description="Workers per node."
    )
    queued_at: str | None = Field(default=None, max_length=64)
    started_at: str | None = Field(default=None, max_length=64)
    finished_at: str | None = Field(default=None, max_length=64)
    preemptions: int = Field(default=0, ge=0, le=MAX_SAFE_INTEGER)
    scale_ins: int = Field(default=0, ge=0, le=MAX_SAFE_INTEGER)
    work_done: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WORK,
        description="Reference worker-seconds done (checkpointed), as the operator estimates it.",
    )
    work_as_of: str | None = Field(
        default=None, max_length=64, description="When workDone was last brought up to date."
    )
    observed_generation: int | None = Field(default=None, ge=0, le=MAX_SAFE_INTEGER)
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)


class LoadSizing(_Wire):
    """Built-in sizing for clusters without an autoscaler: replicas = ceil(requestsPerSecond / perReplica)."""

    requests_per_second: float = Field(
        ge=0, le=MAX_REQUESTS_PER_SECOND, description="Current load, written by whatever measures it."
    )
    requests_per_second_per_replica: float = Field(
        gt=MIN_REQUESTS_PER_REPLICA,
        le=MAX_REQUESTS_PER_SECOND,
        description="What one replica serves at its target latency.",
    )


class DisruptionBudget(_Wire):
    """A PodDisruptionBudget the operator keeps for the service's replicas: how many may be evicted at once."""

    max_unavailable: int = Field(
        ge=1,
        le=MAX_WORKERS,
        description="Replicas that may be unavailable at once during voluntary disruptions (kubectl drain, the "
        "cluster autoscaler): evictions past it are refused until replacements are ready. At least 1, so that no "
        "service can hold a node's maintenance back for good.",
    )


class InferenceServiceSpec(_Wire):
    replicas: int = Field(ge=0, le=MAX_WORKERS, description="Desired replicas (the scale subresource sets it).")
    gpus_per_replica: int = Field(ge=1, le=MAX_GPUS_PER_SERVER)
    min_replicas: int = Field(default=0, ge=0, le=MAX_WORKERS)
    max_replicas: int = Field(ge=1, le=MAX_WORKERS)
    gpu_type: str | None = Field(default=None, max_length=MAX_NAME, description="GPU product the replicas need.")
    template: PodTemplate
    sizing: LoadSizing | None = None
    disruption_budget: DisruptionBudget | None = Field(
        default=None,
        description="A PodDisruptionBudget for the replicas, kept by the operator (named after the service); "
        "without it, none (a drain may evict every replica of a server at once).",
    )

    @model_validator(mode="after")
    def _replicas_in_range(self) -> InferenceServiceSpec:
        if not self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError(
                f"replicas ({self.replicas}) must be within minReplicas ({self.min_replicas}) and "
                f"maxReplicas ({self.max_replicas})"
            )
        return self


class ReclaimWait(_Wire):
    """A reclaim under way for a service's replicas: since when (the first pass that found its replicas waiting for
    servers being reclaimed from training), so the time until they all run is measured and reported."""

    started_at: str = Field(max_length=64, description="RFC 3339 time, to the millisecond, the reclaim began.")
    gpu_type: str = Field(max_length=MAX_NAME, description="The GPU type of the servers being reclaimed.")


class InferenceServiceStatus(_Wire):
    replicas: int = Field(default=0, ge=0, le=MAX_WORKERS)
    ready_replicas: int = Field(default=0, ge=0, le=INT32_MAX)
    servers_needed: int = Field(default=0, ge=0, le=MAX_WORKERS)
    selector: str = Field(default="", max_length=4096, description="Label selector of the replicas (for scaling).")
    gpu_type: str | None = Field(default=None, max_length=MAX_NAME, description="The GPU type the replicas run on.")
    observed_generation: int | None = Field(default=None, ge=0, le=MAX_SAFE_INTEGER)
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)
    reclaim: ReclaimWait | None = Field(
        default=None, description="Set while replicas wait for servers being reclaimed from training."
    )


def wire(model: BaseModel) -> dict[str, Any]:
    """A model as the API server stores it (camelCase, defaults included, nothing null)."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")
