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

from pydantic import BaseModel, ConfigDict, Field

from lyra.api.objects import MAX_NODES, Name, NodeList, Pod

#: Highest and lowest score the extender returns; kube-scheduler multiplies it by the extender's weight.
MIN_SCORE = 0
MAX_SCORE = 10
#: Bounds on a request: a cluster of 15,000 nodes (the upstream scalability limit is 5,000) fits with room.
MAX_VICTIMS = 5_000


class _Go(BaseModel):
    """An extender API type: Go field names, unknown keys ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ExtenderArgs(_Go):
    """The body of ``prioritize``: full ``Nodes`` or, with ``nodeCacheCapable``, ``NodeNames``."""

    Pod: Pod
    Nodes: NodeList | None = None
    NodeNames: list[Name] | None = Field(default=None, max_length=MAX_NODES)


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
