"""The parts of Kubernetes Pods and Nodes that Lyra reads, as pydantic models (camelCase keys, unknown keys
ignored). Shared by the scheduler extender and the operator; :mod:`lyra.api.convert` turns them into the policy
core's values.

Maps (labels, annotations, resources, node selectors) and taints take any number of entries, as the API server
does: a node labelled by NFD and GPU feature discovery carries hundreds of labels, and refusing it would drop it
from Lyra's view. What a hostile body costs is bounded by the size of the body (the extender's request limit, the
API server's object limit), and lists of whole objects by ``MAX_NODES`` and ``MAX_CONTAINERS``.

The operator reads more of a pod and a node than the extender (their health and owner): :class:`ObservedPod` and
:class:`ObservedNode` extend the shared models, so the extender does not parse what it does not use.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

#: Bounds on lists of objects in one body, so a hostile body costs bounded work.
MAX_NODES = 15_000
MAX_CONTAINERS = 64

Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
LabelValue = Annotated[str, StringConstraints(max_length=63 * 4 + 253)]
Quantity = Annotated[str | int | float, Field(union_mode="left_to_right")]


class _Kube(BaseModel):
    """A part of a Kubernetes object: camelCase keys, unknown keys ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ObjectMeta(_Kube):
    name: Name
    namespace: str = ""
    uid: str = ""
    labels: dict[str, LabelValue] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int = 0
    resource_version: str = Field(default="", alias="resourceVersion")
    creation_timestamp: str = Field(default="", alias="creationTimestamp")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")


class OwnerReference(_Kube):
    api_version: str = Field(default="", alias="apiVersion")
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class OwnedMeta(ObjectMeta):
    """Object metadata with its owner references (the operator's pods and Deployments belong to their TrainingJob or
    InferenceService by the controller reference's UID)."""

    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")

    @property
    def controller(self) -> OwnerReference | None:
        """The owner reference marked ``controller`` (at most one, the API server enforces it), or ``None``."""
        return next((ref for ref in self.owner_references if ref.controller), None)


class Resources(_Kube):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class Container(_Kube):
    name: str = ""
    resources: Resources = Field(default_factory=Resources)


class PodSpec(_Kube):
    containers: list[Container] = Field(default_factory=list, max_length=MAX_CONTAINERS)
    init_containers: list[Container] = Field(default_factory=list, alias="initContainers", max_length=MAX_CONTAINERS)
    node_name: str = Field(default="", alias="nodeName")
    node_selector: dict[str, LabelValue] = Field(default_factory=dict, alias="nodeSelector")
    scheduler_name: str = Field(default="", alias="schedulerName")


class PodStatus(_Kube):
    phase: str = ""
    start_time: str | None = Field(default=None, alias="startTime")


class Pod(_Kube):
    metadata: ObjectMeta
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class Condition(_Kube):
    """A pod's or a node's condition (``type``, ``status`` True/False/Unknown, why and since when)."""

    type: str = ""
    status: str = ""
    reason: str = ""
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")


class ContainerWaiting(_Kube):
    reason: str = ""


class ContainerState(_Kube):
    waiting: ContainerWaiting | None = None


class ContainerStatus(_Kube):
    name: str = ""
    state: ContainerState = Field(default_factory=ContainerState)


class ObservedPodStatus(PodStatus):
    reason: str = ""
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    container_statuses: list[ContainerStatus] = Field(default_factory=list, alias="containerStatuses")
    init_container_statuses: list[ContainerStatus] = Field(default_factory=list, alias="initContainerStatuses")
    #: The node kube-scheduler has preempted pods on for this pending pod ("": none): it binds there once they are gone.
    nominated_node_name: str = Field(default="", alias="nominatedNodeName")


class ObservedPod(Pod):
    """A pod as the operator reads it: with its owners, conditions and containers' states."""

    metadata: OwnedMeta
    status: ObservedPodStatus = Field(default_factory=ObservedPodStatus)


class Taint(_Kube):
    key: str
    value: str = ""
    effect: str = ""
    #: When a NoExecute taint was added (the API server sets it), kept when the operator rewrites a node's taints.
    time_added: str | None = Field(default=None, alias="timeAdded")


class NodeSpec(_Kube):
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False


class NodeStatus(_Kube):
    capacity: dict[str, Quantity] = Field(default_factory=dict)
    allocatable: dict[str, Quantity] = Field(default_factory=dict)


class Node(_Kube):
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


class ObservedNodeStatus(NodeStatus):
    conditions: list[Condition] = Field(default_factory=list)


class ObservedNode(Node):
    """A node as the operator reads it: with its conditions (Ready)."""

    status: ObservedNodeStatus = Field(default_factory=ObservedNodeStatus)


class NodeList(_Kube):
    items: list[Node] = Field(default_factory=list, max_length=MAX_NODES)


class DeploymentSpec(_Kube):
    replicas: int = 0


class DeploymentStatus(_Kube):
    replicas: int = 0
    ready_replicas: int = Field(default=0, alias="readyReplicas")


class Deployment(_Kube):
    metadata: OwnedMeta
    spec: DeploymentSpec = Field(default_factory=DeploymentSpec)
    status: DeploymentStatus = Field(default_factory=DeploymentStatus)


class LabelSelector(_Kube):
    match_labels: dict[str, LabelValue] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[dict[str, object]] = Field(default_factory=list, alias="matchExpressions")


class DisruptionBudgetSpec(_Kube):
    """What a PodDisruptionBudget allows (an int or a percentage each, as Kubernetes' IntOrString)."""

    max_unavailable: int | str | None = Field(default=None, alias="maxUnavailable")
    min_available: int | str | None = Field(default=None, alias="minAvailable")
    selector: LabelSelector = Field(default_factory=LabelSelector)


class BudgetMeta(OwnedMeta):
    """A PodDisruptionBudget's metadata with its finalizers (what holds one being deleted)."""

    finalizers: list[str] = Field(default_factory=list)


class DisruptionBudget(_Kube):
    """A PodDisruptionBudget, as the operator reads the ones it keeps for InferenceServices."""

    metadata: BudgetMeta
    spec: DisruptionBudgetSpec = Field(default_factory=DisruptionBudgetSpec)
