"""The scheduler extender's wire format, exactly as kube-scheduler speaks it.

The extender API types (``k8s.io/kube-scheduler/extender/v1``) have no JSON tags, so their keys are the Go field
names (``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes`` ...), while the Pod and Node objects inside are ordinary
Kubernetes JSON (camelCase). Only the parts of a Pod and a Node that the extender reads are modelled; everything
else is accepted and ignored, so a newer kube-scheduler that sends more fields still works.

Every model refuses what it cannot use with a message (FastAPI turns it into a 422): a body that is not an object,
a node list that is not a list, a pod without a name. Sizes are bounded (``MAX_NODES`` nodes and node names per
request, ``MAX_CONTAINERS`` containers per pod) so a hostile body costs bounded work.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

#: Highest and lowest score the extender returns; kube-scheduler multiplies it by the extender's weight.
MIN_SCORE = 0
MAX_SCORE = 10
#: Bounds on a request: a cluster of 15,000 nodes (the upstream scalability limit is 5,000) fits with room.
MAX_NODES = 15_000
MAX_CONTAINERS = 64
MAX_LABELS = 256
MAX_VICTIMS = 5_000

Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
LabelValue = Annotated[str, StringConstraints(max_length=63 * 4 + 253)]
Quantity = Annotated[str | int | float, Field(union_mode="left_to_right")]


class _Kube(BaseModel):
    """A part of a Kubernetes object: camelCase keys, unknown keys ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _Go(BaseModel):
    """An extender API type: Go field names, unknown keys ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ObjectMeta(_Kube):
    name: Name
    namespace: str = ""
    uid: str = ""
    labels: dict[str, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)
    annotations: dict[str, str] = Field(default_factory=dict, max_length=MAX_LABELS)


class Resources(_Kube):
    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_LABELS)
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_LABELS)


class Container(_Kube):
    name: str = ""
    resources: Resources = Field(default_factory=Resources)


class PodSpec(_Kube):
    containers: list[Container] = Field(default_factory=list, max_length=MAX_CONTAINERS)
    init_containers: list[Container] = Field(default_factory=list, alias="initContainers", max_length=MAX_CONTAINERS)
    node_name: str = Field(default="", alias="nodeName")
    node_selector: dict[str, LabelValue] = Field(default_factory=dict, alias="nodeSelector", max_length=MAX_LABELS)
    scheduler_name: str = Field(default="", alias="schedulerName")


class PodStatus(_Kube):
    phase: str = ""


class Pod(_Kube):
    metadata: ObjectMeta
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class NodeStatus(_Kube):
    capacity: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_LABELS)
    allocatable: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_LABELS)


class Node(_Kube):
    metadata: ObjectMeta
    status: NodeStatus = Field(default_factory=NodeStatus)


class NodeList(_Kube):
    items: list[Node] = Field(default_factory=list, max_length=MAX_NODES)


class ExtenderArgs(_Go):
    """The body of ``filter`` and ``prioritize``: full ``Nodes`` or, with ``nodeCacheCapable``, ``NodeNames``."""

    Pod: Pod
    Nodes: NodeList | None = None
    NodeNames: list[Name] | None = Field(default=None, max_length=MAX_NODES)


class ExtenderFilterResult(_Go):
    """``Nodes`` or ``NodeNames`` (as asked) that passed; the others with a reason in ``FailedNodes`` (preemption may
    help) or ``FailedAndUnresolvableNodes`` (it cannot); ``Error`` fails the scheduling attempt."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Go):
    Host: str
    Score: int = Field(ge=MIN_SCORE, le=MAX_SCORE)


class MetaPod(_Go):
    UID: str


class MetaVictims(_Go):
    Pods: list[MetaPod] = Field(default_factory=list, max_length=MAX_VICTIMS)
    NumPDBViolations: int = 0


class Victims(_Go):
    Pods: list[Pod] = Field(default_factory=list, max_length=MAX_VICTIMS)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Go):
    """The body of ``preempt``: the victims kube-scheduler proposes per node, as full pods (``NodeNameToVictims``)
    or, with ``nodeCacheCapable``, as UIDs (``NodeNameToMetaVictims``)."""

    Pod: Pod
    NodeNameToVictims: dict[Name, Victims] | None = Field(default=None, max_length=MAX_NODES)
    NodeNameToMetaVictims: dict[Name, MetaVictims] | None = Field(default=None, max_length=MAX_NODES)


class ExtenderPreemptionResult(_Go):
    """The nodes where preemption may go ahead, with their victims; a node left out is vetoed."""

    NodeNameToMetaVictims: dict[str, MetaVictims] = Field(default_factory=dict)
