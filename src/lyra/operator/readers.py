"""Readers: the objects the operator lists, read into one frozen :class:`~lyra.operator.world.World` it decides on.

Nothing here calls the API: :mod:`lyra.operator.commit` lists the objects and hands them over as JSON dicts, so the
same reading serves the live operator, ``lyra plan --from-cluster`` and the unit tests (which write the objects as
data). An object that cannot be read does not stop the others: it is reported in :attr:`World.unreadable` with the
reason, and the decision goes on without it.

A node's health is judged as it is read (:mod:`lyra.operator.node_health`); a pod's owner is told by UID, never by
labels (:mod:`lyra.operator.world`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lyra.api import names
from lyra.api.convert import gpus_requested, node_capacity_gpus, node_gpu_memory_mib, node_gpus, pod_role
from lyra.api.objects import Deployment, DisruptionBudget, ObjectMeta, ObservedNode, ObservedPod
from lyra.api.resources import InferenceServiceSpec, InferenceServiceStatus, TrainingJobSpec, TrainingJobStatus
from lyra.core.model import MAX_GPUS_PER_SERVER, LoanState, Pool
from lyra.core.placement import WORKER_ROLES, PodRole
from lyra.operator.manifests import replica_labels
from lyra.operator.node_health import HealthMemory, NodeReading, OccupiedNodes, node_ref, with_health
from lyra.operator.timestamps import parse_time
from lyra.operator.world import (
    FoundBudget,
    JobRecord,
    MisreadNode,
    NodeRecord,
    ObjectRef,
    PodRecord,
    ServiceRecord,
    Unreadable,
    World,
)

_Read = TypeVar("_Read")
_WORKER_NAME = re.compile(r"-w(\d+)$")
#: Controller references as :func:`_read_pod` spells them (``<kind>.<API group>``; the core group is "").
_TRAINING_JOB_CONTROLLER = f"{names.TRAINING_JOB_KIND}.{names.GROUP}"
_REPLICA_SET_CONTROLLER = "ReplicaSet.apps"


class _Resource(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _TrainingJobObject(_Resource):
    metadata: ObjectMeta
    spec: TrainingJobSpec
    status: TrainingJobStatus = Field(default_factory=TrainingJobStatus)


class _InferenceServiceObject(_Resource):
    metadata: ObjectMeta
    spec: InferenceServiceSpec
    status: InferenceServiceStatus = Field(default_factory=InferenceServiceStatus)


class ObjectReadings(Generic[_Read]):
    """What each object of one kind read into last pass, kept by the running operator so a pass reads only the
    objects that changed: the reading depends on the object alone, and the watch caches never change an object they
    hold (an event replaces it with a new one), so an object seen before, the very same one, reads the same. Entries
    are kept by the object's identity, holding the object itself (so its identity cannot be reused while it is
    here), and only for the objects the last pass read (a deleted object is forgotten at the next pass)."""

    def __init__(self) -> None:
        self._read: dict[int, tuple[Mapping[str, Any], _Read | None, Unreadable | None]] = {}
        self.hits = 0

    def read(
        self,
        objects: Iterable[Mapping[str, Any]],
        reader: Callable[[Mapping[str, Any]], tuple[_Read | None, Unreadable | None]],
        unreadable: list[Unreadable],
    ) -> list[_Read]:
        """What ``reader`` makes of each object (those it leaves out and those it cannot read not among them; the
        latter added to ``unreadable``), each object read only if it was not read last time."""
        read: dict[int, tuple[Mapping[str, Any], _Read | None, Unreadable | None]] = {}
        results: list[_Read] = []
        hits = 0
        for raw in objects:
            known = self._read.get(id(raw))
            if known is not None and known[0] is raw:
                entry = known
                hits += 1
            else:
                entry = (raw, *reader(raw))
            read[id(raw)] = entry
            if entry[2] is not None:
                unreadable.append(entry[2])
            if entry[1] is not None:
                results.append(entry[1])
        self._read = read
        self.hits = hits
        return results


class Readings:
    """The readings of the last pass, per kind read object by object (:class:`ObjectReadings`): nodes (all but their
    health, which depends on the time and :class:`HealthMemory`), GPU pods and TrainingJobs. InferenceServices are
    read afresh (a handful, and each reads its Deployment and PodDisruptionBudget too)."""

    def __init__(self) -> None:
        self.nodes: ObjectReadings[NodeReading] = ObjectReadings()
        self.pods: ObjectReadings[PodRecord] = ObjectReadings()
        self.jobs: ObjectReadings[JobRecord] = ObjectReadings()


def read_world(
    now: float,
    *,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    services: Iterable[Mapping[str, Any]],
    deployments: Iterable[Mapping[str, Any]] = (),
    budgets: Iterable[Mapping[str, Any]] = (),
    memory: HealthMemory | None = None,
    readings: Readings | None = None,
) -> World:
    """Read listed objects (JSON dicts as the API server returns them) into a :class:`World`. ``memory``: when each
    node's GPU dip was first seen, kept by the running operator across passes (without it a dip begins ``now``).
    ``readings``: the objects read by the last pass, kept by the running operator (:class:`Readings`): only those
    that changed since are read again."""
    unreadable: list[Unreadable] = []
    services = list(services)
    memory = memory if memory is not None else HealthMemory()
    readings = readings if readings is not None else Readings()
    node_readings = readings.nodes.read(nodes, _read_node, unreadable)
    pod_records = readings.pods.read(pods, _read_pod, unreadable)
    node_records: list[NodeRecord] = []
    misread: list[MisreadNode] = []
    occupied = OccupiedNodes(pod_records)
    for reading in node_readings:
        record, held = with_health(reading, now, memory, occupied)
        if record is not None:
            node_records.append(record)
        if held is not None:
            misread.append(held)
        elif record is None and reading.misread and reading.record.gpus > 0:
            unreadable.append(Unreadable(node_ref(reading), reading.misread))  # a new node, not labelled yet
    memory.forget_all_but(
        {n.name for n in node_records if n.unhealthy_since is not None} | {m.ref.name for m in misread},
        {r.record.name for r in node_readings},
    )
    job_records = readings.jobs.read(jobs, _read_job, unreadable)
    service_uids = {}
    for raw in services:
        ref = _meta_ref(names.INFERENCE_SERVICE_KIND, raw)
        service_uids[ref.key] = ref.uid
    by_deployment: dict[str, Deployment] = {}
    for raw in deployments:
        try:
            deployment = Deployment.model_validate(raw)
        except ValidationError:
            continue  # not ours to judge: Lyra only reads the Deployments it made
        owner = deployment.metadata.labels.get(names.SERVICE_LABEL)
        if not owner:
            continue
        key = f"{deployment.metadata.namespace}/{owner}"
        controller = deployment.metadata.controller
        if controller is not None and service_uids.get(key) and controller.uid != service_uids[key]:
            continue  # an earlier service's of the same name, which the garbage collector removes
        by_deployment[key] = deployment
    by_budget: dict[str, DisruptionBudget] = {}
    for raw in budgets:
        try:
            found = DisruptionBudget.model_validate(raw)
        except ValidationError:
            continue  # a budget the operator cannot read is not one it wrote: the pass applies its own over it
        by_budget[f"{found.metadata.namespace}/{found.metadata.name}"] = found
    service_records = [
        r for r in (_read_service(raw, by_deployment, by_budget, unreadable) for raw in services) if r is not None
    ]
    return World(
        now=now,
        nodes=tuple(sorted(node_records, key=lambda n: n.name)),
        pods=tuple(sorted(pod_records, key=lambda p: p.ref.key)),
        jobs=tuple(sorted(job_records, key=lambda j: j.ref.key)),
        services=tuple(sorted(service_records, key=lambda s: s.ref.key)),
        unreadable=tuple(sorted(unreadable, key=lambda u: (u.ref.kind, u.ref.key))),
        misread=tuple(sorted(misread, key=lambda m: m.ref.name)),
    )


def _read_node(raw: Mapping[str, Any]) -> tuple[NodeReading | None, Unreadable | None]:
    """A node of one of Lyra's pools, as its object reads (``None`` for any other node), or why it cannot be read."""
    try:
        node = ObservedNode.model_validate(raw)
    except ValidationError as error:
        return None, Unreadable(_meta_ref("Node", raw), _first_error(error))
    labels = node.metadata.labels
    pool_label = labels.get(names.POOL_LABEL)
    if pool_label not in names.POOLS:
        return None, None
    allocatable = node_gpus(node)
    gpus = max(allocatable, node_capacity_gpus(node))
    product = labels.get(names.GPU_PRODUCT_LABEL, "")
    ref = ObjectRef("Node", "", node.metadata.name, node.metadata.uid)
    if gpus > MAX_GPUS_PER_SERVER:
        why = (
            f"reports {gpus} allocatable {names.GPU_RESOURCE}, more than the {MAX_GPUS_PER_SERVER} one server may "
            "have (time-slicing replicas?); left out of every plan"
        )
        return None, Unreadable(ref, why)
    misread = []
    if gpus <= 0:
        shown = [_shown_quantity(node.status.allocatable), _shown_quantity(node.status.capacity)]
        misread.append(
            f"reads {names.GPU_RESOURCE} allocatable {shown[0]} and capacity {shown[1]}: no whole number of GPUs"
        )
    if not product:
        has = "an empty" if names.GPU_PRODUCT_LABEL in labels else "no"
        misread.append(f"has {has} {names.GPU_PRODUCT_LABEL} label (GPU feature discovery sets it)")
    pool = Pool.TRAINING if pool_label == names.POOL_TRAINING else Pool.INFERENCE
    state: LoanState | None = None
    raw_state = labels.get(names.STATE_LABEL)
    if pool is Pool.INFERENCE and raw_state is not None:
        try:
            state = LoanState(raw_state)
        except ValueError:
            state = None  # an unknown value is put right by the operator
    state_taints = [t for t in node.spec.taints if t.key == names.STATE_TAINT]
    taint = state_taints[0].value if len(state_taints) == 1 and state_taints[0].effect == names.TAINT_EFFECT else None
    annotations = node.metadata.annotations
    record = NodeRecord(
        name=node.metadata.name,
        pool=pool,
        gpu_type=product,
        gpus=gpus,
        state=state,
        taint=taint,
        other_taints=tuple(t for t in node.spec.taints if t.key != names.STATE_TAINT),
        resource_version=node.metadata.resource_version,
        reclaim_started=parse_time(annotations.get(names.RECLAIM_STARTED_ANNOTATION)),
        idle_since=parse_time(annotations.get(names.IDLE_SINCE_ANNOTATION)),
        unschedulable=node.spec.unschedulable,
        gpu_memory_mib=node_gpu_memory_mib(node),
    )
    ready = next((c for c in node.status.conditions if c.type == names.NODE_READY_CONDITION), None)
    tainted = tuple(t for t in node.spec.taints if t.key in names.HEALTH_TAINTS)
    return NodeReading(record, ready, tainted, allocatable, gpus, "; ".join(misread), ref), None


def _shown_quantity(resources: Mapping[str, object]) -> str:
    """How a node's ``nvidia.com/gpu`` quantity reads, for a message (``"8Gi"``, ``0``, ``absent``)."""
    if names.GPU_RESOURCE not in resources:
        return "absent"
    value = resources[names.GPU_RESOURCE]
    return repr(value[:20]) if isinstance(value, str) else repr(value)


def _read_pod(raw: Mapping[str, Any]) -> tuple[PodRecord | None, Unreadable | None]:
    """A GPU pod or one of Lyra's (``None`` for any other pod), or why it cannot be read."""
    try:
        pod = ObservedPod.model_validate(raw)
    except ValidationError as error:
        return None, Unreadable(_meta_ref("Pod", raw), _first_error(error))
    role = pod_role(pod)
    gpus = gpus_requested(pod)
    if role is PodRole.UNMANAGED and gpus == 0:
        return None, None
    labels = pod.metadata.labels
    controller = pod.metadata.controller
    kind = f"{controller.kind}.{controller.api_version.partition('/')[0]}" if controller is not None else ""
    controller_name = controller.name if controller is not None else ""
    owner: str | None = None
    index: int | None = None
    labelled = True
    if kind == _TRAINING_JOB_CONTROLLER:  # a worker, or an earlier run's (told apart by UID in :class:`World`)
        owner = f"{pod.metadata.namespace}/{controller_name}"
        labelled = role in WORKER_ROLES and labels.get(names.JOB_LABEL) == controller_name
        role = role if role in WORKER_ROLES else PodRole.TRAINING_FLEXIBLE
        index = worker_index(pod.metadata.name, labels)
    elif role is PodRole.INFERENCE and kind == _REPLICA_SET_CONTROLLER:
        service = labels.get(names.SERVICE_LABEL, "")
        if service and controller_name.startswith(f"{service}-"):  # the Deployment is named after its service
            owner = f"{pod.metadata.namespace}/{service}"
    if owner is None:
        role = PodRole.UNMANAGED  # whatever its labels say: Lyra made no such pod
    if role is PodRole.UNMANAGED and gpus == 0:
        return None, None
    record = PodRecord(
        ref=ObjectRef("Pod", pod.metadata.namespace, pod.metadata.name, pod.metadata.uid),
        role=role,
        owner=owner,
        index=index,
        node=pod.spec.node_name,
        phase=pod.status.phase,
        gpus=gpus,
        terminating=pod.metadata.deletion_timestamp is not None,
        created=parse_time(pod.metadata.creation_timestamp),
        owner_uid=controller.uid if controller is not None else "",
        disruption=_disruption(pod),
        stuck=next(
            (
                c.state.waiting.reason
                for c in (*pod.status.init_container_statuses, *pod.status.container_statuses)
                if c.state.waiting is not None and c.state.waiting.reason in names.STUCK_WAITING_REASONS
            ),
            "",
        ),
        controller_kind=kind,
        controller_name=controller_name,
        labelled=labelled,
        deletion_cost=pod.metadata.annotations.get(names.POD_DELETION_COST_ANNOTATION),
        nominated="" if pod.spec.node_name else pod.status.nominated_node_name,
    )
    return record, None


def _disruption(pod: ObservedPod) -> str:
    """Why the pod was disrupted: the ``DisruptionTarget`` condition (True), or a failed pod's kubelet reason."""
    for condition in pod.status.conditions:
        if condition.type == names.DISRUPTION_TARGET_CONDITION and condition.status == names.CONDITION_TRUE:
            return condition.reason or names.DISRUPTION_TARGET_CONDITION
    if pod.status.phase == names.POD_FAILED and pod.status.reason in names.DISRUPTED_POD_REASONS:
        return pod.status.reason
    return ""


def _read_job(raw: Mapping[str, Any]) -> tuple[JobRecord | None, Unreadable | None]:
    """A TrainingJob, or why it cannot be read (with the status it has now)."""
    try:
        job = _TrainingJobObject.model_validate(raw)
    except ValidationError as error:
        return None, Unreadable(_meta_ref(names.TRAINING_JOB_KIND, raw), _first_error(error), _status_of(raw))
    meta = job.metadata
    record = JobRecord(
        ref=ObjectRef(names.TRAINING_JOB_KIND, meta.namespace, meta.name, meta.uid),
        spec=job.spec,
        status=job.status,
        generation=meta.generation,
        created=parse_time(meta.creation_timestamp) or 0.0,
        resource_version=meta.resource_version,
        deleting=meta.deletion_timestamp is not None,
    )
    return record, None


def _read_service(
    raw: Mapping[str, Any],
    deployments: Mapping[str, Deployment],
    budgets: Mapping[str, DisruptionBudget],
    unreadable: list[Unreadable],
) -> ServiceRecord | None:
    try:
        service = _InferenceServiceObject.model_validate(raw)
    except ValidationError as error:
        unreadable.append(
            Unreadable(_meta_ref(names.INFERENCE_SERVICE_KIND, raw), _first_error(error), _status_of(raw))
        )
        return None
    meta = service.metadata
    ref = ObjectRef(names.INFERENCE_SERVICE_KIND, meta.namespace, meta.name, meta.uid)
    deployment = deployments.get(ref.key)
    return ServiceRecord(
        ref=ref,
        spec=service.spec,
        status=service.status,
        generation=meta.generation,
        deployment_replicas=deployment.spec.replicas if deployment is not None else None,
        ready_replicas=deployment.status.ready_replicas if deployment is not None else 0,
        resource_version=meta.resource_version,
        deployment_template_hash=(
            deployment.metadata.annotations.get(names.TEMPLATE_HASH_ANNOTATION, "") if deployment is not None else ""
        ),
        deployment_version=deployment.metadata.resource_version if deployment is not None else "",
        budget=_found_budget(budgets.get(ref.key), ref),
    )


def _found_budget(budget: DisruptionBudget | None, service: ObjectRef) -> FoundBudget | None:
    """The service's budget as the pass compares it with the one it wants (:class:`FoundBudget`)."""
    if budget is None:
        return None
    spec = budget.spec
    owned = bool(service.uid) and any(
        o.kind == names.INFERENCE_SERVICE_KIND and o.uid == service.uid for o in budget.metadata.owner_references
    )
    if budget.metadata.deletion_timestamp is not None:
        return FoundBudget(
            kept="", owned=owned, shown="being deleted", deleting=True, finalizers=tuple(budget.metadata.finalizers)
        )
    differs = []
    if not owned:
        differs.append("not owned by the service")
    if spec.selector.match_labels != replica_labels(service.name) or spec.selector.match_expressions:
        differs.append("another selector")
    if spec.min_available is not None:
        differs.append(f"minAvailable {spec.min_available}")
    shown = f"maxUnavailable {spec.max_unavailable if spec.max_unavailable is not None else 'none'}"
    if differs:
        return FoundBudget(kept="", owned=owned, shown=f"{shown} ({', '.join(differs)})")
    kept = str(spec.max_unavailable) if isinstance(spec.max_unavailable, int) else ""  # a percentage is not ours
    return FoundBudget(kept=kept, owned=owned, shown=shown)


def worker_index(name: str, labels: Mapping[str, str]) -> int | None:
    """A worker's index: its ``lyra.dev/worker-index`` label or, for a worker made by an operator older than that
    label, the ``-w<index>`` its name ends with; ``None`` when neither says."""
    value = labels.get(names.WORKER_INDEX_LABEL, "")
    if value.isdecimal():
        return int(value)
    match = _WORKER_NAME.search(name)
    return int(match.group(1)) if match else None


def _meta_ref(kind: str, raw: Mapping[str, Any]) -> ObjectRef:
    metadata = raw.get("metadata") if isinstance(raw, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    return ObjectRef(
        kind, str(metadata.get("namespace", "")), str(metadata.get("name", "?")), str(metadata.get("uid", ""))
    )


def _status_of(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    status = raw.get("status") if isinstance(raw, Mapping) else None
    return status if isinstance(status, Mapping) else {}


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
