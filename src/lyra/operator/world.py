"""The world: everything one decision reads, frozen (:class:`World`), and the records it is made of.

:mod:`lyra.operator.readers` reads the listed objects into it; :mod:`lyra.operator.node_health` judges each node's
health on the way. An object that cannot be read does not stop the others: it is reported in :attr:`World.unreadable`
with the reason, and the decision goes on without it.

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

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lyra.api import names
from lyra.api.convert import training_job
from lyra.api.objects import Taint
from lyra.api.resources import (
    InferenceServiceSpec,
    InferenceServiceStatus,
    TrainingJobSpec,
    TrainingJobStatus,
    name_problem,
)
from lyra.core.errors import InvalidClusterError
from lyra.core.model import LoanState, Pool, TrainingJob
from lyra.core.placement import PodRole
from lyra.operator.templates import template_problem


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
    #: The pod deletion cost annotation as read (``controller.kubernetes.io/pod-deletion-cost``; ``None``: absent).
    deletion_cost: str | None = None
    #: Of a pod not yet bound, the node kube-scheduler preempted pods on for it (``status.nominatedNodeName``; ``""``:
    #: none): it binds there once they are gone, and no pod of a lower priority is placed on the GPUs it waits for.
    nominated: str = ""

    #: Worked out once from the fields above, so that a pass reads them as data, never calls back in for them:
    #: finished (``Succeeded`` or ``Failed``); started (running, with no container stuck waiting: a pod in
    #: ``ImagePullBackOff`` is not running, however long); holding GPUs (bound and not finished: a terminating pod
    #: holds them until it is gone); live (counts as a worker of its job: not terminating, not finished); completed
    #: (exited 0 by itself: ``Succeeded``, neither being deleted nor disrupted; a worker that exits 0 on the SIGTERM of
    #: its deletion, an eviction or a preemption has not completed anything).
    is_finished: bool = field(init=False, repr=False, compare=False)
    started: bool = field(init=False, repr=False, compare=False)
    holds_gpus: bool = field(init=False, repr=False, compare=False)
    is_live: bool = field(init=False, repr=False, compare=False)
    completed: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        finished = self.phase in names.FINISHED_POD_PHASES
        object.__setattr__(self, "is_finished", finished)
        object.__setattr__(self, "started", self.phase == names.POD_RUNNING and not self.stuck)
        object.__setattr__(self, "holds_gpus", bool(self.node) and not finished)
        object.__setattr__(self, "is_live", not self.terminating and not finished)
        completed = self.phase == names.POD_SUCCEEDED and not self.terminating and not self.disruption
        object.__setattr__(self, "completed", completed)


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
    #: template. Worked out once per object read (:class:`~lyra.operator.readers.Readings`), not once per pass.
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
    #: The PodDisruptionBudget named after the service, carrying the service label (the budgets the operator keeps
    #: are read by that label), as the cluster has it; ``None``: there is none.
    budget: FoundBudget | None = None


@dataclass(frozen=True, slots=True)
class FoundBudget:
    """A service's PodDisruptionBudget as read. ``kept``: its ``maxUnavailable`` when the budget is exactly what the
    operator writes for that value (owned by the service, selecting the service's replicas by their labels alone, no
    ``minAvailable``), else ""; ``owned``: the service owns it (the operator deletes no other); ``shown``: what it
    says, for Events (``maxUnavailable 2``, or how it differs from what the operator writes); ``deleting``: it is
    being deleted (``deletionTimestamp``: the garbage collector removes it once nothing it owns is left), and an
    apply would only change the object on its way out; ``finalizers``: the ones it carries (what holds it, while it
    is being deleted)."""

    kept: str
    owned: bool
    shown: str
    deleting: bool = False
    finalizers: tuple[str, ...] = ()


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
