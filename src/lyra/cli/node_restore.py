"""What `lyra nodes restore` changes on each node: the plan, worked out from the nodes and pods as listed (raw JSON),
before anything is written.

Lyra's operator writes four things on inference nodes (docs/operations.md, "What Lyra changes on a node"): the loan
state label ``lyra.dev/state``, the taint of the same key, and the annotations ``lyra.dev/reclaim-started`` and
``lyra.dev/idle-since``. The admin writes the pool label ``lyra.dev/pool`` before installing; it is removed only
when asked (``--pool-labels``). Nothing else on a node is touched: other labels, taints and annotations stay as they
are, in their order.

A node lent to training still runs training workers once its state taint is gone; inference pods would then be
scheduled beside them. So a node whose state is ``loaned`` or ``reclaiming`` and that holds pods of a TrainingJob
(by the pod's controller owner, whatever its labels) blocks the restore unless the caller drains them first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lyra.api import names

#: The node keys the operator writes (labels, taints and annotations), and the admin's pool label.
OPERATOR_LABELS = (names.STATE_LABEL,)
OPERATOR_TAINTS = (names.STATE_TAINT,)
OPERATOR_ANNOTATIONS = (names.RECLAIM_STARTED_ANNOTATION, names.IDLE_SINCE_ANNOTATION)
ADMIN_LABELS = (names.POOL_LABEL,)
#: Loan states in which training runs on an inference server.
LENT_STATES = frozenset({"loaned", "reclaiming"})


@dataclass(frozen=True, slots=True)
class NodeRestore:
    """What the restore removes from one node, and the JSON patch that does it (with a test of the node's
    resourceVersion, so a node changed since it was read is read again, never overwritten)."""

    node: str
    labels: tuple[str, ...]
    annotations: tuple[str, ...]
    taints: tuple[str, ...]
    patch: tuple[Mapping[str, Any], ...]

    def describe(self) -> str:
        removed = [f"label {key}" for key in self.labels]
        removed += [f"taint {key}" for key in self.taints]
        removed += [f"annotation {key}" for key in self.annotations]
        return f"{self.node}: remove " + ", ".join(removed)


@dataclass(frozen=True, slots=True)
class TrainingPod:
    """A pod of a TrainingJob on a lent server: it blocks the restore, or is drained first."""

    namespace: str
    name: str
    uid: str
    node: str
    job: str


@dataclass(frozen=True, slots=True)
class RestorePlan:
    nodes: tuple[NodeRestore, ...]
    blockers: tuple[TrainingPod, ...]


def _pointer(key: str) -> str:
    """A JSON pointer's escape of one key (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def restore_node(node: Mapping[str, Any], *, pool_labels: bool) -> NodeRestore | None:
    """The restore of one node, or None when it carries none of the keys."""
    metadata = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    taints: Sequence[Mapping[str, Any]] = (node.get("spec") or {}).get("taints") or []
    label_keys = OPERATOR_LABELS + (ADMIN_LABELS if pool_labels else ())
    drop_labels = tuple(key for key in label_keys if key in labels)
    drop_annotations = tuple(key for key in OPERATOR_ANNOTATIONS if key in annotations)
    kept_taints = [taint for taint in taints if taint.get("key") not in OPERATOR_TAINTS]
    drop_taints = tuple(sorted({str(t.get("key")) for t in taints if t.get("key") in OPERATOR_TAINTS}))
    if not (drop_labels or drop_annotations or drop_taints):
        return None
    patch: list[Mapping[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": metadata.get("resourceVersion", "")}
    ]
    patch += [{"op": "remove", "path": f"/metadata/labels/{_pointer(key)}"} for key in drop_labels]
    patch += [{"op": "remove", "path": f"/metadata/annotations/{_pointer(key)}"} for key in drop_annotations]
    if drop_taints:
        patch.append({"op": "replace", "path": "/spec/taints", "value": kept_taints})
    return NodeRestore(str(metadata.get("name", "")), drop_labels, drop_annotations, drop_taints, tuple(patch))


def training_owner(pod: Mapping[str, Any]) -> str | None:
    """The TrainingJob that controls ``pod`` (by its owner reference, not its labels), as ``namespace/name``."""
    metadata = pod.get("metadata") or {}
    for owner in metadata.get("ownerReferences") or []:
        if (
            owner.get("controller")
            and owner.get("kind") == names.TRAINING_JOB_KIND
            and str(owner.get("apiVersion", "")).startswith(f"{names.GROUP}/")
        ):
            return f"{metadata.get('namespace', '')}/{owner.get('name', '')}"
    return None


def plan_restore(
    nodes: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], *, pool_labels: bool
) -> RestorePlan:
    """Every node's restore, in name order, and the training pods that run on lent servers (node, then pod name)."""
    lent = {
        str((node.get("metadata") or {}).get("name"))
        for node in nodes
        if ((node.get("metadata") or {}).get("labels") or {}).get(names.STATE_LABEL) in LENT_STATES
    }
    restores = [r for node in nodes if (r := restore_node(node, pool_labels=pool_labels)) is not None]
    blockers: list[TrainingPod] = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        job = training_owner(pod)
        phase = (pod.get("status") or {}).get("phase")
        if node in lent and job is not None and phase not in names.FINISHED_POD_PHASES:
            blockers.append(
                TrainingPod(
                    str(metadata.get("namespace")), str(metadata.get("name")), str(metadata.get("uid")), node, job
                )
            )
    return RestorePlan(
        tuple(sorted(restores, key=lambda r: r.node)),
        tuple(sorted(blockers, key=lambda p: (p.node, p.namespace, p.name))),
    )
