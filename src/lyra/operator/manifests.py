"""The objects the operator writes: worker pods, inference Deployments, the state taint of inference nodes.

Placement is correct from these alone, under any scheduler (the extender only makes it better):

* a worker requires a node of its job's GPU type that is a training node or a loaned inference node, tolerates the
  ``loaned`` state taint, and prefers the node the allocation planned for it;
* an inference replica requires a serving or idle inference node of its GPU type, prefers a serving one (so idle
  servers stay free to lend), and tolerates those two taints;
* nothing tolerates ``reclaiming``.

The scheduling fields of a pod are the operator's (:mod:`lyra.api.tenancy`): the API server and the operator refuse
templates that set them, and whatever a template still carries is overridden here: ``nodeName``, ``schedulerName``,
``priority`` and ``priorityClassName`` are dropped, tolerations without a key or of Lyra's taint are dropped,
``nodeSelector`` keys of Lyra's are dropped, ``affinity.nodeAffinity`` is Lyra's (``podAffinity`` and
``podAntiAffinity`` are kept), and of the template's metadata only labels and annotations are kept, without Lyra's
keys.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from lyra.api import names, tenancy
from lyra.api.objects import Taint
from lyra.core.model import LoanState

#: Annotation on a worker pod: the node the allocation planned for it (the pod prefers it).
PLANNED_NODE_ANNOTATION = f"{names.GROUP}/planned-node"


def state_taints(others: tuple[Taint, ...], state: LoanState) -> tuple[Taint, ...]:
    """A node's taints with Lyra's state taint set to ``state`` (everyone else's kept, in their order)."""
    return (*others, Taint(key=names.STATE_TAINT, value=state.value, effect=names.TAINT_EFFECT))


def _toleration(state: LoanState) -> dict[str, str]:
    return {"key": names.STATE_TAINT, "operator": "Equal", "value": state.value, "effect": names.TAINT_EFFECT}


def worker_name(job: str, index: int) -> str:
    return f"{job}-w{index}"


def worker_pod(
    *,
    namespace: str,
    job: str,
    job_uid: str,
    index: int,
    role: str,
    template: Mapping[str, Any],
    gpus_per_worker: int,
    gpu_type: str,
    planned_node: str | None,
    grace_seconds: int,
    min_workers: int,
    max_workers: int,
) -> dict[str, Any]:
    """One worker pod of a TrainingJob, from the job's template."""
    labels, annotations, spec = _tenant_part(template)
    labels.update({names.ROLE_LABEL: role, names.JOB_LABEL: job})
    if planned_node:
        annotations[PLANNED_NODE_ANNOTATION] = planned_node
    containers = [dict(c) for c in spec.get("containers") or []]
    env = {
        names.ENV_JOB: job,
        names.ENV_WORKER: str(index),
        names.ENV_MIN_WORKERS: str(min_workers),
        names.ENV_MAX_WORKERS: str(max_workers),
        names.ENV_TORCHRUN_NNODES: f"{min_workers}:{max_workers}",
        names.ENV_TORCHRUN_NPROC: str(gpus_per_worker),
        names.ENV_TORCHRUN_RDZV_ID: job_uid or job,
    }
    for position, container in enumerate(containers):
        given = [dict(e) for e in container.get("env") or []]
        present = {e.get("name") for e in given}
        container["env"] = given + [{"name": k, "value": v} for k, v in env.items() if k not in present]
        if position == 0:  # the GPUs go to the first container
            container["resources"] = _with_gpus(container, gpus_per_worker)
    training_terms = [
        {"matchExpressions": [_is(names.POOL_LABEL, names.POOL_TRAINING), _is(names.GPU_PRODUCT_LABEL, gpu_type)]},
        {
            "matchExpressions": [
                _is(names.POOL_LABEL, names.POOL_INFERENCE),
                _is(names.STATE_LABEL, LoanState.LOANED.value),
                _is(names.GPU_PRODUCT_LABEL, gpu_type),
            ]
        },
    ]
    affinity: dict[str, Any] = {
        **dict(spec.get("affinity") or {}),
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": training_terms}},
    }
    if planned_node:
        affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 100, "preference": {"matchExpressions": [_is(names.HOSTNAME_LABEL, planned_node)]}}
        ]
    spec.update(
        containers=containers,
        affinity=affinity,
        tolerations=[*list(spec.get("tolerations") or []), _toleration(LoanState.LOANED)],
        restartPolicy="Never",
        terminationGracePeriodSeconds=grace_seconds,
    )
    metadata = {
        "name": worker_name(job, index),
        "namespace": namespace,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [_owner(names.TRAINING_JOB_KIND, job, job_uid)],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def deployment(
    *,
    namespace: str,
    service: str,
    service_uid: str,
    replicas: int,
    template: Mapping[str, Any],
    gpus_per_replica: int,
    gpu_type: str,
) -> dict[str, Any]:
    """The Deployment that runs an InferenceService's replicas."""
    labels, annotations, spec = _tenant_part(template)
    selector = {names.SERVICE_LABEL: service, names.ROLE_LABEL: names.ROLE_INFERENCE}
    labels |= selector
    containers = [dict(c) for c in spec.get("containers") or []]
    if containers:
        containers[0]["resources"] = _with_gpus(containers[0], gpus_per_replica)
    terms = [
        {
            "matchExpressions": [
                _is(names.POOL_LABEL, names.POOL_INFERENCE),
                {
                    "key": names.STATE_LABEL,
                    "operator": "In",
                    "values": [LoanState.SERVING.value, LoanState.IDLE.value],
                },
                _is(names.GPU_PRODUCT_LABEL, gpu_type),
            ]
        }
    ]
    spec.update(
        containers=containers,
        affinity={
            **dict(spec.get("affinity") or {}),
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
                # Pack onto servers already serving, so idle ones stay idle and can be lent.
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {"matchExpressions": [_is(names.STATE_LABEL, LoanState.SERVING.value)]},
                    }
                ],
            },
        },
        tolerations=[
            *list(spec.get("tolerations") or []),
            _toleration(LoanState.SERVING),
            _toleration(LoanState.IDLE),
        ],
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": service,
            "namespace": namespace,
            "labels": selector,
            "ownerReferences": [_owner(names.INFERENCE_SERVICE_KIND, service, service_uid)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels, **({"annotations": annotations} if annotations else {})},
                "spec": spec,
            },
        },
    }


def _tenant_part(template: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """A template's labels, annotations and pod spec without anything Lyra owns (module docstring)."""
    body = copy.deepcopy(dict(template))
    metadata = dict(body.get("metadata") or {})

    def tenants(part: str) -> dict[str, str]:
        given = dict(metadata.get(part) or {})
        return {str(k): str(v) for k, v in given.items() if not str(k).startswith(tenancy.OWNED_PREFIX)}

    spec = {k: v for k, v in dict(body.get("spec") or {}).items() if k not in tenancy.OWNED_FIELDS}
    tolerations = [dict(t) for t in spec.get("tolerations") or []]
    spec["tolerations"] = [t for t in tolerations if t.get("key") and t.get("key") != names.STATE_TAINT]
    selector = {
        k: v
        for k, v in dict(spec.pop("nodeSelector", None) or {}).items()
        if not (str(k).startswith(tenancy.OWNED_PREFIX) or k in tenancy.OWNED_NODE_LABELS)
    }
    if selector:
        spec["nodeSelector"] = selector
    return tenants("labels"), tenants("annotations"), spec


def selector_of(service: str) -> str:
    """The label selector of a service's replicas, as the scale subresource reports it."""
    return f"{names.ROLE_LABEL}={names.ROLE_INFERENCE},{names.SERVICE_LABEL}={service}"


def _with_gpus(container: Mapping[str, Any], gpus: int) -> dict[str, Any]:
    """A container's resources with ``gpus`` GPUs requested and limited (extended resources need both equal)."""
    resources = dict(container.get("resources") or {})
    for part in ("requests", "limits"):
        resources[part] = dict(resources.get(part) or {}) | {names.GPU_RESOURCE: str(gpus)}
    return resources


def _is(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": [value]}


def _owner(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
