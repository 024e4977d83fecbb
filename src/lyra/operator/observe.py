"""Observe: the objects the operator lists, read into one frozen :class:`World` it decides on.

Nothing here calls the API: :mod:`lyra.operator.commit` lists the objects and hands them over as JSON dicts, so the
same reading serves the live operator, ``lyra plan --from-cluster`` and the unit tests (which write the objects as
data). An object that cannot be read does not stop the others: it is reported in :attr:`World.unreadable` with the
reason, and the decision goes on without it.

Health is read here too (docs/reliability.md, "Node and pod health"): a node is unhealthy while its Ready condition
is not True, while it carries the node-lifecycle controller's ``unreachable`` or ``not-ready`` taint, or while its
allocatable GPUs are below its capacity (a device plugin restarting), and while its reading is malformed: no whole
number of GPUs above 0 (``0`` allocatable and capacity after a kubelet reset, ``8Gi``, ``1k``) or an empty GPU product
label. Such a node is held with its last good reading (:class:`HealthMemory`): unhealthy, so it takes no new work and
is not lent, and lost only past the grace like any other; one this operator never read well is held out of every plan
but known (:class:`MisreadNode`), so its workers are not taken for gone either. Kubernetes records since when for the
first two (the condition's transition time, the NoExecute taint's ``timeAdded``); what has no time of its own (a dip
in allocatable GPUs, a malformed reading) is dated by :class:`HealthMemory`, from when a running operator first saw
it.

Ownership is by UID, never by the labels a tenant may edit on its own pods (docs/security.md, "Pods are Lyra's by
their owner"): a pod is a worker of a TrainingJob when its controller reference is that TrainingJob, UID included,
whatever its ``lyra.dev/role`` and ``lyra.dev/job`` labels say (a worker stripped of them is still one, and its labels
are written back); one whose controller is a TrainingJob of that name with another UID (an earlier run, deleted and
re-created) is nobody's worker, listed in :attr:`World.stale`. A pod is an inference replica when its controller is a
ReplicaSet of the InferenceService's Deployment (named after it) and it carries the replica labels the Deployment
selects on (a pod stripped of them is released by its ReplicaSet). Every other pod (one labelled as a worker by a
tenant, a worker orphaned by a deletion that kept its dependants, another team's GPU pod) is ``UNMANAGED``: it
occupies its GPUs, and nothing else.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lyra.api import names
from lyra.api.convert import (
    gpus_requested,
    node_capacity_gpus,
    node_gpu_memory_mib,
    node_gpus,
    pod_role,
    training_job,
)
from lyra.api.objects import Condition, Deployment, ObjectMeta, ObservedNode, ObservedPod, Taint
from lyra.api.resources import (
    InferenceServiceSpec,
    InferenceServiceStatus,
    TrainingJobSpec,
    TrainingJobStatus,
    name_problem,
)
from lyra.core.errors import InvalidClusterError
from lyra.core.model import MAX_GPUS_PER_SERVER, LoanState, Pool, TrainingJob
from lyra.core.placement import PodRole
from lyra.operator.templates import template_problem

_FINISHED = frozenset({"Succeeded", "Failed"})
_Read = TypeVar("_Read")
_WORKER_NAME = re.compile(r"-w(\d+)$")
_WORKER_ROLES = (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE)
#: Controller references as :func:`_read_pod` spells them (``<kind>.<API group>``; the core group is "").
_TRAINING_JOB_CONTROLLER = f"{names.TRAINING_JOB_KIND}.{names.GROUP}"
_REPLICA_SET_CONTROLLER = "ReplicaSet.apps"


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 time (as the API server writes it) in seconds since the epoch, or ``None``."""
    if not text:
        return None
    # A pass reads the same few times many times (statuses, pods): each text is parsed once.
    return _parse_rfc3339(text) if isinstance(text, str) else _parse_rfc3339.__wrapped__(text)


@functools.lru_cache(maxsize=4096)
def _parse_rfc3339(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@functools.lru_cache(maxsize=256)  # a pass writes its own clock's time many times
def format_time(seconds: float) -> str:
    """Seconds since the epoch as RFC 3339 in UTC, to the second (the API server's precision)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time_ms(seconds: float) -> str:
    """Seconds since the epoch as RFC 3339 in UTC, to the millisecond (for durations Lyra measures itself)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Enough of an object to name it in a message, patch it or attach an Event to it."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    #: ``namespace/name`` (the name alone for a cluster-scoped object): how a pass indexes objects, worked out once.
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}" if self.namespace else self.name)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A GPU node in one of Lyra's pools. ``state`` is the loan state label as read (``None`` on training nodes
    and on inference nodes that have none yet); ``taint`` the value of Lyra's one state taint (``None``: absent,
    duplicated or of another effect, which the operator puts right); ``other_taints`` everyone else's."""

    name: str
    pool: Pool
    gpu_type: str
    gpus: int
    state: LoanState | None
    taint: str | None
    other_taints: tuple[Taint, ...]
    resource_version: str
    reclaim_started: float | None
    idle_since: float | None
    unschedulable: bool
    #: When the node stopped being healthy (``None``: healthy; ``0.0``: unhealthy since a time nobody recorded) and
    #: why, in words (``""`` when healthy).
    unhealthy_since: float | None = None
    health: str = ""
    #: The memory of each GPU in MiB as the node reports it (``nvidia.com/gpu.memory``; ``None``: not reported).
    gpu_memory_mib: int | None = None

    @property
    def healthy(self) -> bool:
        return self.unhealthy_since is None

    def lost(self, now: float, grace_s: float) -> bool:
        """Unhealthy for at least ``grace_s``: out of every plan, and its workers are gone (hysteresis: a shorter
        blip only stops new work from landing on it)."""
        return self.unhealthy_since is not None and now - self.unhealthy_since >= grace_s


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A pod that holds or will hold GPUs: Lyra's workers and replicas, and any other GPU pod (``UNMANAGED``)."""

    ref: ObjectRef
    role: PodRole
    owner: str | None  # the job's or service's key (namespace/name)
    index: int | None  # a worker's index (:func:`worker_index`)
    node: str  # "" while unbound
    phase: str
    gpus: int
    terminating: bool
    created: float | None
    #: The UID of the pod's controller (its TrainingJob for a worker; ``""``: none).
    owner_uid: str = ""
    #: Why the pod was disrupted (the ``DisruptionTarget`` condition's reason, or the kubelet's ``Evicted`` or node
    #: shutdown reason), ``""`` if it was not: a disrupted worker is a preemption of its job, not a failure.
    disruption: str = ""
    #: The waiting reason of a container that will not start by itself (``ImagePullBackOff`` ...), ``""`` if none.
    stuck: str = ""
    #: The pod's controller reference as read (kind with its API group, name): what its ownership is judged on.
    controller_kind: str = ""
    controller_name: str = ""
    #: Whether the pod's Lyra labels say what its owner does (for a worker: a base or flexible role and its job's
    #: name); a worker whose labels were edited has them written back.
    labelled: bool = True

    @property
    def is_finished(self) -> bool:
        return self.phase in _FINISHED

    @property
    def started(self) -> bool:
        """Running, with no container stuck waiting (a pod in ``ImagePullBackOff`` is not running, however long)."""
        return self.phase == "Running" and not self.stuck

    @property
    def holds_gpus(self) -> bool:
        """Bound and not finished: the GPUs are taken (a terminating pod holds them until it is gone)."""
        return bool(self.node) and not self.is_finished

    @property
    def is_live(self) -> bool:
        """Counts as a worker of its job: not terminating, not finished."""
        return not self.terminating and not self.is_finished


@dataclass(frozen=True, slots=True)
class JobRecord:
    ref: ObjectRef
    spec: TrainingJobSpec
    status: TrainingJobStatus
    generation: int
    created: float
    resource_version: str = ""  # the status write is conditional on it
    #: Being deleted (``deletionTimestamp`` set; the garbage collector is removing or orphaning its pods).
    deleting: bool = False
    #: The job as the core models it (queued, no work left; ``None`` when the core cannot run the spec), and why the
    #: operator must refuse the job ("" if it need not): the core cannot run its spec, or no pod can be built from its
    #: template. Worked out once per object read (:class:`Readings`), not once per pass.
    model: TrainingJob | None = field(init=False, repr=False, compare=False)
    refusal: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        model: TrainingJob | None = None
        named = name_problem(self.ref.name)
        if named is not None:  # stored before the CRD's rule on names: its pods could never be labelled
            refusal = f"the worker pods cannot be made: {named}"
        else:
            try:
                model = training_job(self.ref.key, self.spec)
            except InvalidClusterError as error:  # the API server accepted it (an older CRD?); the core does not
                refusal = f"the spec cannot be run: {error}"
            except Exception as error:  # whatever else the core raises stops this job only
                refusal = f"the spec cannot be run: {type(error).__name__}: {error}"
            else:
                problem = template_problem(self.spec.template, "gpusPerWorker")
                refusal = f"the worker pods cannot be built: {problem}" if problem is not None else ""
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "refusal", refusal)


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    ref: ObjectRef
    spec: InferenceServiceSpec
    status: InferenceServiceStatus
    generation: int
    deployment_replicas: int | None  # None: no Deployment yet
    ready_replicas: int
    resource_version: str = ""  # the status write is conditional on it
    #: The template hash the Deployment records (``names.TEMPLATE_HASH_ANNOTATION``; "" when there is no Deployment
    #: or one made by an operator older than the hash), and the Deployment's resourceVersion (a template write is
    #: conditional on it).
    deployment_template_hash: str = ""
    deployment_version: str = ""


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An object that could not be read, why, and (for Lyra's own resources) the status it has now."""

    ref: ObjectRef
    reason: str
    status: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class MisreadNode:
    """A node of one of Lyra's pools whose reading is malformed (``why``), unhealthy since ``since``. ``held``: it is
    in :attr:`World.nodes` with the last reading this operator saw well; otherwise nothing says what it holds (the
    operator never read it well: it started meanwhile), and it is in no plan, while its workers are kept for the grace
    (:class:`lyra.operator.training_pass.TrainingPass`)."""

    ref: ObjectRef
    why: str
    since: float
    held: bool

    def lost(self, now: float, grace_s: float) -> bool:
        return now - self.since >= grace_s


@dataclass(frozen=True, slots=True)
class World:
    """Everything one decision reads, at one instant ``now`` (seconds since the epoch). Sorted by key."""

    now: float
    nodes: tuple[NodeRecord, ...]
    pods: tuple[PodRecord, ...]
    jobs: tuple[JobRecord, ...]
    services: tuple[ServiceRecord, ...]
    unreadable: tuple[Unreadable, ...] = ()
    #: Nodes whose reading is malformed, held as unhealthy (:class:`MisreadNode`). Sorted by name.
    misread: tuple[MisreadNode, ...] = ()
    #: Worker pods of an earlier run of a job: their job label names a TrainingJob that is not their controller.
    stale: tuple[PodRecord, ...] = field(default=(), init=False)
    _by_owner: Mapping[str, tuple[PodRecord, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _versions: Mapping[ObjectRef, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        versions = {job.ref: job.resource_version for job in self.jobs}
        versions.update({service.ref: service.resource_version for service in self.services})
        object.__setattr__(self, "_versions", versions)
        jobs = {job.ref.key: job for job in self.jobs}
        services = {service.ref.key for service in self.services}
        by_owner: dict[str, list[PodRecord]] = {}
        stale: list[PodRecord] = []
        pods: list[PodRecord] = []
        for read in self.pods:
            pod, earlier_run = _owned(read, jobs, services)
            pods.append(pod)
            if pod.owner is None:
                continue
            if earlier_run:
                stale.append(pod)  # an earlier run's: not this job's worker, whatever its name says
                continue
            by_owner.setdefault(pod.owner, []).append(pod)
        object.__setattr__(self, "pods", tuple(pods))
        object.__setattr__(self, "_by_owner", {owner: tuple(pods) for owner, pods in by_owner.items()})
        object.__setattr__(self, "stale", tuple(stale))

    def version_of(self, ref: ObjectRef) -> str:
        """The resourceVersion a TrainingJob or InferenceService was read at ("" for anything else)."""
        return self._versions.get(ref, "")

    def pods_of(self, owner: str) -> tuple[PodRecord, ...]:
        """The pods of a job or service (``namespace/name``), indexed once."""
        return self._by_owner.get(owner, ())


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
    read afresh (a handful, and each reads its Deployment too)."""

    def __init__(self) -> None:
        self.nodes: ObjectReadings[_NodeReading] = ObjectReadings()
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
    occupied = _Occupied(pod_records)
    for reading in node_readings:
        record, held = _with_health(reading, now, memory, occupied)
        if record is not None:
            node_records.append(record)
        if held is not None:
            misread.append(held)
        elif record is None and reading.misread and reading.record.gpus > 0:
            unreadable.append(Unreadable(_node_ref(reading), reading.misread))  # a new node, not labelled yet
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
    service_records = [r for r in (_read_service(raw, by_deployment, unreadable) for raw in services) if r is not None]
    return World(
        now=now,
        nodes=tuple(sorted(node_records, key=lambda n: n.name)),
        pods=tuple(sorted(pod_records, key=lambda p: p.ref.key)),
        jobs=tuple(sorted(job_records, key=lambda j: j.ref.key)),
        services=tuple(sorted(service_records, key=lambda s: s.ref.key)),
        unreadable=tuple(sorted(unreadable, key=lambda u: (u.ref.kind, u.ref.key))),
        misread=tuple(sorted(misread, key=lambda m: m.ref.name)),
    )


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


class HealthMemory:
    """When a running operator first saw each node unhealthy, for what the API dates nowhere (a dip in allocatable
    GPUs, a health taint without ``timeAdded`` on a node that reports Ready, a malformed reading), and each node's
    last good reading (GPU type and GPUs), which a node whose reading turns malformed is held with. Lost on restart: a
    new operator starts the clock again, which only delays dropping the node, and knows no good reading of a node that
    reads badly when it starts (:class:`MisreadNode`)."""

    def __init__(self) -> None:
        self._first_seen: dict[str, float] = {}
        self._good: dict[str, tuple[str, int]] = {}

    def first_seen(self, node: str, now: float) -> float:
        return self._first_seen.setdefault(node, now)

    def read_well(self, node: str, gpu_type: str, gpus: int) -> None:
        if self._good.get(node) != (gpu_type, gpus):
            self._good[node] = (gpu_type, gpus)

    def last_good(self, node: str) -> tuple[str, int] | None:
        """The GPU type and GPUs ``node`` last read well with, or ``None``."""
        return self._good.get(node)

    def forget_all_but(self, unhealthy: set[str], present: set[str] | None = None) -> None:
        """Keep the first sightings of the ``unhealthy`` nodes only, and the good readings of the ``present`` ones."""
        self._first_seen = {name: since for name, since in self._first_seen.items() if name in unhealthy}
        if present is not None and not self._good.keys() <= present:
            self._good = {name: good for name, good in self._good.items() if name in present}


@dataclass(frozen=True, slots=True)
class _NodeReading:
    """A node as its object alone reads: its record but for its health, and what its health is judged on (its Ready
    condition, its health taints, its allocatable and capacity GPUs), not the whole object."""

    record: NodeRecord
    ready: Condition | None
    tainted: tuple[Taint, ...]
    allocatable: int
    capacity: int
    #: Why the reading is malformed ("" when it is not): then ``record`` has 0 GPUs or no GPU type.
    misread: str = ""
    ref: ObjectRef | None = None


def _read_node(raw: Mapping[str, Any]) -> tuple[_NodeReading | None, Unreadable | None]:
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
    return _NodeReading(record, ready, tainted, allocatable, gpus, "; ".join(misread), ref), None


def _shown_quantity(resources: Mapping[str, object]) -> str:
    """How a node's ``nvidia.com/gpu`` quantity reads, for a message (``"8Gi"``, ``0``, ``absent``)."""
    if names.GPU_RESOURCE not in resources:
        return "absent"
    value = resources[names.GPU_RESOURCE]
    return repr(value[:20]) if isinstance(value, str) else repr(value)


class _Occupied:
    """The nodes where GPU pods run, worked out only if a pass asks (a node that never read well reads badly)."""

    def __init__(self, pods: list[PodRecord]) -> None:
        self._pods = pods
        self._nodes: set[str] | None = None

    def holds(self, node: str) -> bool:
        if self._nodes is None:
            self._nodes = {p.node for p in self._pods if p.holds_gpus}
        return node in self._nodes


def _node_ref(reading: _NodeReading) -> ObjectRef:
    return reading.ref if reading.ref is not None else ObjectRef("Node", "", reading.record.name)


def _with_health(
    reading: _NodeReading, now: float, memory: HealthMemory, occupied: _Occupied
) -> tuple[NodeRecord | None, MisreadNode | None]:
    """The node's record with its health at ``now`` (``None``: it is in no plan) and, when its reading is malformed,
    how it is held. A malformed reading is held with the node's last good one; a node never read well is held out
    of every plan while GPU pods run on it (``occupied``: the nodes where some do), and is no node of Lyra's
    otherwise (a node whose device plugin or feature discovery has not reported yet)."""
    record = reading.record
    if not reading.misread:
        memory.read_well(record.name, record.gpu_type, record.gpus)
    else:
        good = memory.last_good(record.name)
        if good is None:
            if not occupied.holds(record.name):
                return None, None
            since = memory.first_seen(record.name, now)
            return None, MisreadNode(_node_ref(reading), reading.misread, since, held=False)
        record = replace(record, gpu_type=good[0], gpus=good[1])
    unhealthy_since, health = _node_health(reading, now, memory)
    held = None
    if reading.misread:
        held = MisreadNode(_node_ref(reading), reading.misread, memory.first_seen(record.name, now), held=True)
    if unhealthy_since is None:
        return record, held
    return replace(record, unhealthy_since=unhealthy_since, health=health), held


def _node_health(reading: _NodeReading, now: float, memory: HealthMemory) -> tuple[float | None, str]:
    """Since when the node is unhealthy and why (``None, ""`` while healthy): the earliest of its problems, each dated
    by the API where it can be (the Ready condition's transition, a taint's ``timeAdded``), else by ``memory``."""
    problems: list[tuple[float, str]] = []
    ready, tainted, name = reading.ready, reading.tainted, reading.record.name
    not_ready_since: float | None = None
    if ready is not None and ready.status != names.CONDITION_TRUE:
        not_ready_since = parse_time(ready.last_transition_time)
        why = f"{names.NODE_READY_CONDITION}={ready.status or '?'}" + (f" ({ready.reason})" if ready.reason else "")
        problems.append((not_ready_since if not_ready_since is not None else 0.0, why))
    if tainted:
        added = [when for t in tainted if (when := parse_time(t.time_added)) is not None]
        since = min(added) if added else not_ready_since
        since = since if since is not None else memory.first_seen(name, now)
        problems.append((since, f"tainted {', '.join(sorted({t.key for t in tainted}))}"))
    if reading.misread:
        problems.append((memory.first_seen(name, now), reading.misread))
    if reading.allocatable < reading.capacity:
        problems.append(
            (
                memory.first_seen(name, now),
                f"{reading.allocatable} of {reading.capacity} {names.GPU_RESOURCE} allocatable",
            )
        )
    if not problems:
        return None, ""
    return min(since for since, _ in problems), "; ".join(why for _, why in problems)


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
        labelled = role in _WORKER_ROLES and labels.get(names.JOB_LABEL) == controller_name
        role = role if role in _WORKER_ROLES else PodRole.TRAINING_FLEXIBLE
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
    )
    return record, None


def _owned(pod: PodRecord, jobs: Mapping[str, JobRecord], services: set[str]) -> tuple[PodRecord, bool]:
    """The pod as its owner's UID says (module docstring), and whether it is a worker of an earlier run of a job."""
    if pod.role is PodRole.INFERENCE:
        if pod.owner in services:
            return pod, False
    elif pod.owner is not None:
        job = jobs.get(pod.owner)
        if job is None or job.deleting:
            return pod, False  # its job is gone or going: the garbage collector removes (or orphans) it
        return pod, pod.owner_uid != job.ref.uid
    else:
        return pod, False
    return replace(pod, role=PodRole.UNMANAGED, owner=None, index=None), False


def _disruption(pod: ObservedPod) -> str:
    """Why the pod was disrupted: the ``DisruptionTarget`` condition (True), or a failed pod's kubelet reason."""
    for condition in pod.status.conditions:
        if condition.type == names.DISRUPTION_TARGET_CONDITION and condition.status == names.CONDITION_TRUE:
            return condition.reason or names.DISRUPTION_TARGET_CONDITION
    if pod.status.phase == "Failed" and pod.status.reason in names.DISRUPTED_POD_REASONS:
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
    raw: Mapping[str, Any], deployments: Mapping[str, Deployment], unreadable: list[Unreadable]
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
    )
