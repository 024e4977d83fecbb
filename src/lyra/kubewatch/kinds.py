"""The kinds Lyra watches: which objects of each it keeps, with which selector, and what of them.

A kind's ``slim`` keeps only the fields the operator (:mod:`lyra.operator.readers`) and the shared readers
(:mod:`lyra.api.convert`) read, so a cache of 50,000 kubelet-shaped pods does not hold their volumes, environment,
managed fields and images. What is kept, per kind:

* every object: ``metadata`` name, namespace, uid, resourceVersion, generation, creation and deletion timestamps,
  labels, owner references, and the annotations under Lyra's prefix (``lyra.dev/``) with the pod deletion cost the
  operator writes on inference replicas (``controller.kubernetes.io/pod-deletion-cost``), never ``managedFields``;
* nodes (only those with the pool label, selected by the server): ``spec`` taints and unschedulable; ``status``
  capacity, allocatable and conditions (without ``lastHeartbeatTime``: the kubelet rewrites it on every status
  report, and a heartbeat that changes nothing else must not look like a change);
* pods (all of them are needed for GPU accounting, so no server-side label selector): only pods that ask for GPUs or
  carry one of Lyra's labels are kept; ``spec`` node name, node selector, scheduler name, containers' and init
  containers' names and resources; ``status`` phase, reason, message, start time, conditions (without
  ``lastProbeTime``), the node kube-scheduler nominated it to after preempting others there, and container statuses
  (without image digests and container IDs). The extender's kind (:data:`BOUND_PODS`) also has the server leave out
  pods bound to no node (a field selector): they hold nothing;
* Lyra's Deployments (server-side selector on the service label): ``spec.replicas`` and the replica counts and
  conditions of ``status`` (not the pod template: the operator compares the template hash annotation it wrote,
  ``lyra.dev/template-hash``, kept with Lyra's annotations);
* the PodDisruptionBudgets Lyra keeps for InferenceServices (server-side selector on the service label): their
  ``metadata.finalizers`` (what holds one being deleted), ``spec`` maxUnavailable, minAvailable and selector (not
  ``status``: its counts change with every replica's readiness, and the operator does not read them);
* TrainingJobs and InferenceServices: everything but managed fields (they are Lyra's own, and small).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from lyra.api import names

JsonObject = dict[str, Any]

_LYRA_PREFIX = f"{names.GROUP}/"
_META_KEPT = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "ownerReferences",
)
_POD_LABELS = (names.ROLE_LABEL, names.JOB_LABEL, names.SERVICE_LABEL)
_CONTAINER_STATUS_KEPT = ("name", "ready", "started", "restartCount", "state", "lastState")
_CONDITION_KEPT = ("type", "status", "reason", "message", "lastTransitionTime")


def _metadata(raw: Mapping[str, Any]) -> JsonObject:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return {}
    kept: JsonObject = {key: meta[key] for key in _META_KEPT if key in meta}
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        ours = {k: v for k, v in annotations.items() if isinstance(k, str) and _kept_annotation(k)}
        if ours:
            kept["annotations"] = ours
    return kept


def _kept_annotation(key: str) -> bool:
    return key.startswith(_LYRA_PREFIX) or key == names.POD_DELETION_COST_ANNOTATION


def section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The mapping at ``raw[name]``, or an empty one when it is missing or not a mapping."""
    part = raw.get(name)
    return part if isinstance(part, Mapping) else {}


def _picked(part: Mapping[str, Any], keys: tuple[str, ...]) -> JsonObject:
    return {key: part[key] for key in keys if key in part}


def slim_metadata_only(raw: Mapping[str, Any]) -> JsonObject:
    """Everything but ``metadata.managedFields`` (and annotations not Lyra's): for Lyra's own resources."""
    slim = {key: value for key, value in raw.items() if key != "metadata"}
    slim["metadata"] = _metadata(raw)
    return slim


def slim_node(raw: Mapping[str, Any]) -> JsonObject:
    return {
        "metadata": _metadata(raw),
        "spec": _picked(section(raw, "spec"), ("taints", "unschedulable")),
        "status": _slim_conditions(_picked(section(raw, "status"), ("capacity", "allocatable", "conditions"))),
    }


def _slim_conditions(status: JsonObject) -> JsonObject:
    """A status whose conditions keep what they say and since when, not when they were last reported."""
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        status["conditions"] = [_picked(c, _CONDITION_KEPT) for c in conditions if isinstance(c, Mapping)]
    return status


def _containers(items: Any) -> list[JsonObject]:
    if not isinstance(items, list):
        return []
    return [_picked(c, ("name", "resources")) for c in items if isinstance(c, Mapping)]


def _container_statuses(items: Any) -> list[JsonObject]:
    if not isinstance(items, list):
        return []
    return [_picked(c, _CONTAINER_STATUS_KEPT) for c in items if isinstance(c, Mapping)]


def slim_pod(raw: Mapping[str, Any]) -> JsonObject:
    spec = section(raw, "spec")
    status = section(raw, "status")
    slim_spec = _picked(spec, ("nodeName", "nodeSelector", "schedulerName"))
    slim_spec["containers"] = _containers(spec.get("containers"))
    if "initContainers" in spec:
        slim_spec["initContainers"] = _containers(spec.get("initContainers"))
    slim_status = _slim_conditions(
        _picked(status, ("phase", "reason", "message", "startTime", "conditions", "nominatedNodeName"))
    )
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in status:
            slim_status[key] = _container_statuses(status.get(key))
    return {"metadata": _metadata(raw), "spec": slim_spec, "status": slim_status}


def _asks_for_gpus(containers: Any) -> bool:
    if not isinstance(containers, list):
        return False
    for container in containers:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        for amounts in (resources.get("requests"), resources.get("limits")):
            if isinstance(amounts, Mapping) and names.GPU_RESOURCE in amounts:
                return True
    return False


def keeps_pod(raw: Mapping[str, Any]) -> bool:
    """A pod that asks for GPUs (any container) or carries one of Lyra's labels; the others are never stored."""
    labels = section(section(raw, "metadata"), "labels")
    if any(label in labels for label in _POD_LABELS):
        return True
    spec = section(raw, "spec")
    return _asks_for_gpus(spec.get("containers")) or _asks_for_gpus(spec.get("initContainers"))


def slim_deployment(raw: Mapping[str, Any]) -> JsonObject:
    return {
        "metadata": _metadata(raw),
        "spec": _picked(section(raw, "spec"), ("replicas",)),
        "status": _picked(
            section(raw, "status"),
            ("observedGeneration", "replicas", "readyReplicas", "availableReplicas", "updatedReplicas", "conditions"),
        ),
    }


def slim_budget(raw: Mapping[str, Any]) -> JsonObject:
    metadata = _metadata(raw)
    finalizers = section(raw, "metadata").get("finalizers")
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "metadata": metadata,
        "spec": _picked(section(raw, "spec"), ("maxUnavailable", "minAvailable", "selector")),
    }


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of object to watch. ``list_function`` picks the client's list call for it (the same call lists,
    pages and watches), called with the server-side selectors; ``keep`` says whether an object belongs in the cache
    at all; ``slim`` what of it is kept."""

    name: str
    list_function: Callable[[client.ApiClient], Callable[..., Any]]
    label_selector: str = ""
    field_selector: str = ""
    keep: Callable[[Mapping[str, Any]], bool] = lambda _: True
    slim: Callable[[Mapping[str, Any]], JsonObject] = slim_metadata_only


def _custom(plural: str) -> Callable[[client.ApiClient], Callable[..., Any]]:
    def lister(api: client.ApiClient) -> Callable[..., Any]:
        custom = client.CustomObjectsApi(api)

        def call(**kwargs: Any) -> Any:
            return custom.list_cluster_custom_object(names.GROUP, names.VERSION, plural, **kwargs)

        return call

    return lister


NODES = Kind("nodes", lambda api: client.CoreV1Api(api).list_node, label_selector=names.POOL_LABEL, slim=slim_node)
PODS = Kind("pods", lambda api: client.CoreV1Api(api).list_pod_for_all_namespaces, keep=keeps_pod, slim=slim_pod)
#: Pods bound to a node, for the extender: it counts what each node holds. While pods land, an unbound pod's creation
#: is a third of the pod events, and the server drops it here (a pod is seen when it is bound, and leaves when it is
#: deleted).
BOUND_PODS = Kind(
    "pods",
    lambda api: client.CoreV1Api(api).list_pod_for_all_namespaces,
    field_selector=names.BOUND_POD_FIELD_SELECTOR,
    keep=keeps_pod,
    slim=slim_pod,
)
TRAINING_JOBS = Kind(names.TRAINING_JOB_PLURAL, _custom(names.TRAINING_JOB_PLURAL))
INFERENCE_SERVICES = Kind(names.INFERENCE_SERVICE_PLURAL, _custom(names.INFERENCE_SERVICE_PLURAL))
DEPLOYMENTS = Kind(
    "deployments",
    lambda api: client.AppsV1Api(api).list_deployment_for_all_namespaces,
    label_selector=names.SERVICE_LABEL,
    slim=slim_deployment,
)
DISRUPTION_BUDGETS = Kind(
    "poddisruptionbudgets",
    lambda api: client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces,
    label_selector=names.SERVICE_LABEL,
    slim=slim_budget,
)
