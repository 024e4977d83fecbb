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
``podAntiAffinity`` are kept, their terms without ``namespaces`` and ``namespaceSelector``: they select pods of the
pod's own namespace only), and of the template's metadata only labels and annotations are kept, without Lyra's
keys.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
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


# The rendezvous (docs/user-guide.md, "Elastic training with torchrun"). torchrun's agents meet in a c10d TCP store
# that one base worker's agent hosts: a base worker is never scaled in, only preempted with its whole job, so the
# store lives as long as the gang. Every worker reaches it by a stable DNS name through the job's headless Service.
#
# A scale-in stops a flexible worker (SIGTERM, grace period). The survivors' collective fails, so each of their agents
# spends one restart (``PET_MAX_RESTARTS``) and joins a new round, which waits until the leaver is found dead (no
# keep-alive for ``keep_alive_interval`` x ``keep_alive_max_attempt`` seconds, as a stopped agent does not leave the
# rendezvous) and then for latecomers (``last_call_timeout``) unless ``maxWorkers`` agents are back. A scale-out
# costs no restart: the agents see a node waiting and restart their workers into a larger round.
#: Store hosting is set on each pod (``is_host``), never guessed from host names: an agent that guesses it hosts the
#: store (every agent on one machine does) and is then scaled in takes the store with it.
RDZV_JOIN_TIMEOUT_S = 900  # a gang's pods may start minutes apart (image pulls)
RDZV_LAST_CALL_TIMEOUT_S = 5  # once minWorkers are in, latecomers join the next round (a free restart)
RDZV_KEEP_ALIVE_INTERVAL_S = 2
RDZV_KEEP_ALIVE_MAX_ATTEMPT = 3  # a stopped agent is found dead after 6 s (torch: 15 s)
RDZV_READ_TIMEOUT_S = 600  # how long a worker waits for the store's host to come up
MONITOR_INTERVAL_S = 1
#: Restarts for failures of the program itself, and one more per scale-in a gang may live through (each costs every
#: surviving agent one restart); an inelastic job is never scaled in.
RESTARTS_FOR_FAILURES = 3
RESTARTS_FOR_SCALE_INS = 100

_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_SERVICE_NAME_MAX = 50  # leaves room for "-w<index>" in a 63-character host name


def rendezvous_service_name(job: str) -> str:
    """The headless Service of a job's workers: the job's name when it is a DNS label a Service may have, else a
    stable name derived from it."""
    if len(job) <= _SERVICE_NAME_MAX and _DNS_1035_LABEL.fullmatch(job):
        return job
    return f"lyra-rdzv-{hashlib.sha256(job.encode()).hexdigest()[:12]}"


def worker_hostname(job: str, index: int) -> str:
    """A worker's host name, its DNS label under the job's Service (the pod's name for names that fit)."""
    return f"{rendezvous_service_name(job)}-w{index}"


def rendezvous_endpoint(namespace: str, job: str, host_index: int) -> str:
    """``host:port`` of the job's c10d store: the hosting worker's stable DNS name through the headless Service."""
    service = rendezvous_service_name(job)
    return f"{worker_hostname(job, host_index)}.{service}.{namespace}.svc:{names.TORCHRUN_RDZV_PORT}"


def rendezvous_conf(*, is_host: bool) -> str:
    """torchrun's ``--rdzv-conf`` for one worker (``key=value`` pairs, comma-separated)."""
    settings = {
        "is_host": "true" if is_host else "false",
        "join_timeout": RDZV_JOIN_TIMEOUT_S,
        "last_call_timeout": RDZV_LAST_CALL_TIMEOUT_S,
        "keep_alive_interval": RDZV_KEEP_ALIVE_INTERVAL_S,
        "keep_alive_max_attempt": RDZV_KEEP_ALIVE_MAX_ATTEMPT,
        "read_timeout": RDZV_READ_TIMEOUT_S,
    }
    return ",".join(f"{key}={value}" for key, value in settings.items())


def max_restarts(min_workers: int, max_workers: int) -> int:
    """torchrun's ``--max-restarts`` for a job: failures, plus scale-ins if the job is elastic."""
    return RESTARTS_FOR_FAILURES + (RESTARTS_FOR_SCALE_INS if max_workers > min_workers else 0)


def rendezvous_service(*, namespace: str, job: str, job_uid: str) -> dict[str, Any]:
    """The headless Service that gives a job's workers stable DNS names (``<hostname>.<service>``), owned by the job.

    Not-ready addresses are published, so a worker's name resolves as soon as it has an IP: agents meet before any
    readiness probe could pass."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": rendezvous_service_name(job),
            "namespace": namespace,
            "labels": {names.JOB_LABEL: job},
            "ownerReferences": [_owner(names.TRAINING_JOB_KIND, job, job_uid)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {names.JOB_LABEL: job},
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": names.TORCHRUN_RDZV_PORT_NAME,
                    "port": names.TORCHRUN_RDZV_PORT,
                    "targetPort": names.TORCHRUN_RDZV_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


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
    rendezvous_host: int = 0,
    scheduler_name: str = "",
) -> dict[str, Any]:
    """One worker pod of a TrainingJob, from the job's template.

    ``rendezvous_host`` is the index of the base worker whose agent hosts the job's c10d store (the lowest-indexed
    base worker of the gang); every worker of a gang must be given the same one. Environment the template sets wins;
    Lyra's variables come first in each container's list, so the template's values may refer to them as ``$(NAME)``.
    ``scheduler_name`` is the operator's ``--scheduler-name`` (empty: the cluster's default scheduler).
    """
    workers = WorkerPodBuilder(
        namespace=namespace,
        job=job,
        job_uid=job_uid,
        template=template,
        gpus_per_worker=gpus_per_worker,
        gpu_type=gpu_type,
        grace_seconds=grace_seconds,
        min_workers=min_workers,
        max_workers=max_workers,
        rendezvous_host=rendezvous_host,
        scheduler_name=scheduler_name,
    )
    return workers.pod(index=index, role=role, planned_node=planned_node)


class WorkerPodBuilder:
    """The worker pods of one TrainingJob (:func:`worker_pod`, same arguments but each pod's own): what a gang's pods
    share is built once (the tenant part of the template, the environment, the node affinity), then :meth:`pod`
    builds each pod around it. The pods of one builder share those parts: every part a pod has of its own (its
    metadata, labels, annotations, spec, containers, environment lists, affinity) is a new object, while the
    template's nested objects (volumes, probes, resources...), the environment entries common to the gang and the
    affinity terms are the same objects in every pod. Nothing edits a manifest once built (the API client and the
    test clusters serialize or copy it), so they are never edited in place."""

    def __init__(
        self,
        *,
        namespace: str,
        job: str,
        job_uid: str,
        template: Mapping[str, Any],
        gpus_per_worker: int,
        gpu_type: str,
        grace_seconds: int,
        min_workers: int,
        max_workers: int,
        rendezvous_host: int = 0,
        scheduler_name: str = "",
    ) -> None:
        self.namespace = namespace
        self.job = job
        self.rendezvous_host = rendezvous_host
        self.grace_seconds = grace_seconds
        self.scheduler_name = scheduler_name
        self.labels, self.annotations, self.spec = _tenant_part(template)
        self.service = rendezvous_service_name(job)
        self.owner = _owner(names.TRAINING_JOB_KIND, job, job_uid)
        env = {
            names.ENV_JOB: job,
            names.ENV_WORKER: "",  # each pod's own (:meth:`_env_entry`)
            names.ENV_MIN_WORKERS: str(min_workers),
            names.ENV_MAX_WORKERS: str(max_workers),
            names.ENV_TORCHRUN_NNODES: f"{min_workers}:{max_workers}",
            names.ENV_TORCHRUN_NPROC: str(gpus_per_worker),
            names.ENV_TORCHRUN_RDZV_ID: job_uid or job,
            names.ENV_TORCHRUN_RDZV_BACKEND: names.TORCHRUN_RDZV_BACKEND,
            names.ENV_TORCHRUN_RDZV_ENDPOINT: rendezvous_endpoint(namespace, job, rendezvous_host),
            names.ENV_TORCHRUN_RDZV_CONF: "",  # each pod's own
            names.ENV_TORCHRUN_MAX_RESTARTS: str(max_restarts(min_workers, max_workers)),
            names.ENV_TORCHRUN_MONITOR_INTERVAL: str(MONITOR_INTERVAL_S),
            names.ENV_TORCH_DISABLE_SHARED_STORE: "1",
        }
        self.host_conf = rendezvous_conf(is_host=True)
        self.member_conf = rendezvous_conf(is_host=False)
        # Per container of the template: the container without its environment, the template's environment, and
        # Lyra's variables the template does not set (a shared entry, or the name of a pod's own), which go first.
        self.containers: list[tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, str] | str]]] = []
        for position, given in enumerate(self.spec.get("containers") or []):
            container = dict(given)
            own_env = [dict(e) for e in container.get("env") or []]
            present = {e.get("name") for e in own_env}
            lyra_env: list[dict[str, str] | str] = [
                k if k in _PER_POD_ENV else {"name": k, "value": v} for k, v in env.items() if k not in present
            ]
            container["env"] = own_env  # each pod's own list, in this place among the container's fields
            if position == 0:  # the GPUs go to the first container
                container["resources"] = _with_gpus(container, gpus_per_worker)
            self.containers.append((container, own_env, lyra_env))
        self.affinity = dict(self.spec.get("affinity") or {})
        self.required = {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        _is(names.POOL_LABEL, names.POOL_TRAINING),
                        _is(names.GPU_PRODUCT_LABEL, gpu_type),
                    ]
                },
                {
                    "matchExpressions": [
                        _is(names.POOL_LABEL, names.POOL_INFERENCE),
                        _is(names.STATE_LABEL, LoanState.LOANED.value),
                        _is(names.GPU_PRODUCT_LABEL, gpu_type),
                    ]
                },
            ]
        }
        self.tolerations = [*list(self.spec.get("tolerations") or []), _toleration(LoanState.LOANED)]

    def pod(self, *, index: int, role: str, planned_node: str | None) -> dict[str, Any]:
        """Worker ``index`` of the gang, in ``role``, preferring ``planned_node`` (``None``: no preference)."""
        job = self.job
        labels = {**self.labels, names.ROLE_LABEL: role, names.JOB_LABEL: job, names.WORKER_INDEX_LABEL: str(index)}
        annotations = dict(self.annotations)
        if planned_node:
            annotations[PLANNED_NODE_ANNOTATION] = planned_node
        own = {
            names.ENV_WORKER: str(index),
            names.ENV_TORCHRUN_RDZV_CONF: self.host_conf if index == self.rendezvous_host else self.member_conf,
        }
        containers = []
        for given, own_env, lyra_env in self.containers:
            container = dict(given)
            # Lyra's variables first: the kubelet expands ``$(NAME)`` only to variables earlier in the list, so a
            # template's own value may name them (``/checkpoints/$(LYRA_JOB)-w$(LYRA_WORKER).json``).
            container["env"] = [e if isinstance(e, dict) else {"name": e, "value": own[e]} for e in lyra_env] + own_env
            containers.append(container)
        node_affinity: dict[str, Any] = {"requiredDuringSchedulingIgnoredDuringExecution": self.required}
        if planned_node:
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": 100, "preference": {"matchExpressions": [_is(names.HOSTNAME_LABEL, planned_node)]}}
            ]
        spec = dict(self.spec)
        spec.update(
            containers=containers,
            affinity={**self.affinity, "nodeAffinity": node_affinity},
            tolerations=list(self.tolerations),
            restartPolicy="Never",
            terminationGracePeriodSeconds=self.grace_seconds,
            hostname=f"{self.service}-w{index}",
            subdomain=self.service,
        )
        if self.scheduler_name:
            spec["schedulerName"] = self.scheduler_name
        metadata = {
            "name": worker_name(job, index),
            "namespace": self.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [self.owner],
        }
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


#: The environment variables whose values differ between the pods of a gang.
_PER_POD_ENV = frozenset({names.ENV_WORKER, names.ENV_TORCHRUN_RDZV_CONF})


def deployment(
    *,
    namespace: str,
    service: str,
    service_uid: str,
    replicas: int,
    template: Mapping[str, Any],
    gpus_per_replica: int,
    gpu_type: str,
    scheduler_name: str = "",
) -> dict[str, Any]:
    """The Deployment that runs an InferenceService's replicas (``scheduler_name``: as for :func:`worker_pod`)."""
    labels, annotations, spec = _tenant_part(template)
    selector = replica_labels(service)
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
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    pod_template = {
        "metadata": {"labels": labels, **({"annotations": annotations} if annotations else {})},
        "spec": spec,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": service,
            "namespace": namespace,
            "labels": selector,
            "annotations": {names.TEMPLATE_HASH_ANNOTATION: template_hash(pod_template)},
            "ownerReferences": [_owner(names.INFERENCE_SERVICE_KIND, service, service_uid)],
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": selector}, "template": pod_template},
    }


def disruption_budget(*, namespace: str, service: str, service_uid: str, max_unavailable: int) -> dict[str, Any]:
    """The PodDisruptionBudget of an InferenceService's replicas (``spec.disruptionBudget``), named after the service
    and owned by it (the garbage collector deletes it with the service): it selects the replicas as the Deployment
    does, and lets at most ``max_unavailable`` of them be evicted at once."""
    selector = replica_labels(service)
    return {
        "apiVersion": "policy/v1",
        "kind": names.DISRUPTION_BUDGET_KIND,
        "metadata": {
            "name": service,
            "namespace": namespace,
            "labels": selector,
            "ownerReferences": [_owner(names.INFERENCE_SERVICE_KIND, service, service_uid)],
        },
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": selector}},
    }


def template_hash(pod_template: Mapping[str, Any]) -> str:
    """The hash a Deployment records of the pod template the operator rendered for it (SHA-256 of its canonical JSON,
    16 hex digits). The operator compares it with the hash of what it would render now, never with the live
    template, which the API server fills with defaults (``imagePullPolicy``, ``terminationMessagePath``...)."""
    canonical = json.dumps(pod_template, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def recorded_template_hash(manifest: Mapping[str, Any]) -> str:
    """The template hash a Deployment manifest (built by :func:`deployment`) carries."""
    return str(manifest["metadata"]["annotations"][names.TEMPLATE_HASH_ANNOTATION])


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
    affinity = dict(spec.get("affinity") or {})
    for part in ("podAffinity", "podAntiAffinity"):
        if isinstance(affinity.get(part), Mapping):
            affinity[part] = _own_namespace_terms(affinity[part])
    if affinity:
        spec["affinity"] = affinity
    return tenants("labels"), tenants("annotations"), spec


def _own_namespace_terms(affinity: Mapping[str, Any]) -> dict[str, Any]:
    """Pod (anti-)affinity whose terms select pods of the pod's own namespace only: ``namespaces`` and
    ``namespaceSelector`` removed from every term (:mod:`lyra.api.tenancy` refuses them; this is defence in depth)."""

    def own(term: object) -> object:
        if not isinstance(term, Mapping):
            return term
        return {k: v for k, v in term.items() if k not in ("namespaces", "namespaceSelector")}

    result = dict(affinity)
    required = result.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, list):
        result["requiredDuringSchedulingIgnoredDuringExecution"] = [own(t) for t in required]
    preferred = result.get("preferredDuringSchedulingIgnoredDuringExecution")
    if isinstance(preferred, list):
        result["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {**w, "podAffinityTerm": own(w.get("podAffinityTerm"))} if isinstance(w, Mapping) else w for w in preferred
        ]
    return result


def replica_labels(service: str) -> dict[str, str]:
    """The labels every replica of a service carries, and that its Deployment and budget select it by."""
    return {names.SERVICE_LABEL: service, names.ROLE_LABEL: names.ROLE_INFERENCE}


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
