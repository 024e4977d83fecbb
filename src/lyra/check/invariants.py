"""The invariants of a cluster run by Lyra, checked over plain JSON objects (as the API server lists them).

Pure: no API call, no clock (``now`` is given), no Kubernetes library. Each object is read defensively: a field of
the wrong type counts as absent, so a malformed object is reported, never a crash. The invariants, each named by a
stable identifier (:class:`Invariant`):

``node-state``
    Every inference node (``lyra.dev/pool=inference``) carries a loan state label ``lyra.dev/state`` and exactly one
    taint with that key, the same value and effect NoSchedule. A node with no GPUs and neither label nor taint is not
    yet a Lyra server and is left out.
``inference-placement``
    An inference replica holds only a serving or idle inference node (never a loaned or reclaiming one).
``training-placement``
    A training worker holds only a training node or a loaned or reclaiming inference node (never a serving or idle
    one, never a node outside the pools), whatever its labels say.
``partial-gang``
    No job has some but fewer than ``minWorkers`` running base workers once its run (``status.startedAt``, else its
    creation) is older than the gang timeout. A job whose workers are completing (one has Succeeded) is not partial.
``workers-over-limit``
    A job never has more live workers (not terminating, not finished) than its ``status.workers.target`` or its
    ``spec.maxWorkers``.
``job-accounted``
    Every TrainingJob has a ``status.phase``; every worker's controller, a TrainingJob, exists with the worker's
    owner UID (not an earlier run of that name, not a deleted job).
``worker-labels``
    A live worker carries the labels its owner gives it: ``lyra.dev/role`` base or flexible and ``lyra.dev/job`` its
    job's name (a worker stripped of them, or relabelled, by its namespace: the operator writes them back).
``reclaim-deadline``
    No node is ``reclaiming`` longer than the reclaim deadline since ``lyra.dev/reclaim-started`` (nor without it).
``disruption-budget``
    An InferenceService with ``spec.disruptionBudget.maxUnavailable`` has a PodDisruptionBudget of its name, not
    being deleted, owned by it (its UID), with that ``maxUnavailable``, no ``minAvailable``, and a selector of
    exactly its replicas' two labels (``lyra.dev/service`` its name, ``lyra.dev/role`` inference); a service without
    the field owns no budget. A service being deleted is not judged; a budget being deleted is reported with the
    finalizers that hold it.

Pods are judged by their owner, never by the labels a tenant may edit on its own pods: a *worker* is a pod whose
controller reference is a TrainingJob (``lyra.dev``), labelled or not; an *inference replica* is a pod labelled
``lyra.dev/role=inference`` whose controller is a ReplicaSet (its InferenceService's Deployment's). Any other pod,
labelled as a worker or not (a tenant's own, another team's GPU pod), is not Lyra's and is not judged.

A pod *holds* a node when it is bound there and not finished (a terminating pod holds it until it is gone). The
operator restores these invariants within one pass after anything disturbs them (a lost worker, a status written
before its pods change), so a violation seen once, right after a fault, may be transient; one seen twice a pass
apart is not.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lyra.api import names
from lyra.core.model import LoanState

#: The operator's own defaults (``lyra operator --gang-timeout``, ``--reclaim-deadline``).
DEFAULT_GANG_TIMEOUT_S = 120.0
DEFAULT_RECLAIM_DEADLINE_S = 300.0

# Kubernetes' pod phases.
_RUNNING = "Running"
_FINISHED = frozenset({"Succeeded", "Failed"})
_SUCCEEDED = "Succeeded"

_TRAINING_ROLES = frozenset({names.ROLE_BASE, names.ROLE_FLEXIBLE})
_INFERENCE_STATES = frozenset({LoanState.SERVING, LoanState.IDLE})
_TRAINING_STATES = frozenset({LoanState.LOANED, LoanState.RECLAIMING})


class Invariant(enum.StrEnum):
    NODE_STATE = "node-state"
    INFERENCE_PLACEMENT = "inference-placement"
    TRAINING_PLACEMENT = "training-placement"
    PARTIAL_GANG = "partial-gang"
    WORKERS_OVER_LIMIT = "workers-over-limit"
    JOB_ACCOUNTED = "job-accounted"
    WORKER_LABELS = "worker-labels"
    RECLAIM_DEADLINE = "reclaim-deadline"
    DISRUPTION_BUDGET = "disruption-budget"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant on one object (``namespace`` is empty for nodes)."""

    invariant: Invariant
    kind: str
    namespace: str
    name: str
    message: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Limits:
    """How long the operator may take: pass its own ``--gang-timeout`` and ``--reclaim-deadline``."""

    gang_timeout_s: float = DEFAULT_GANG_TIMEOUT_S
    reclaim_deadline_s: float = DEFAULT_RECLAIM_DEADLINE_S

    def __post_init__(self) -> None:
        for name, value in (("gang timeout", self.gang_timeout_s), ("reclaim deadline", self.reclaim_deadline_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"the {name} must be a finite number of seconds >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class Report:
    """What was checked and every violation found, in a deterministic order (invariant, kind, key, message)."""

    nodes: int
    pods: int
    jobs: int
    violations: tuple[Violation, ...]
    services: int = 0

    @property
    def clean(self) -> bool:
        return not self.violations


# -- reading raw objects ---------------------------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # what JSON gives: checked first, as the ABC check costs ~10x more
        return value
    return value if isinstance(value, Mapping) else {}


def _sequence(value: object) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(obj.get("metadata")).get("labels"))


def _meta(obj: Mapping[str, Any], field: str) -> str:
    return _text(_mapping(obj.get("metadata")).get(field))


def parse_time(value: object) -> float | None:
    """An RFC 3339 time in seconds since the epoch, ``None`` when absent or not a time."""
    text = _text(value)
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _whole(value: object) -> int:
    """A count of GPUs as Kubernetes writes an extended resource (``"8"`` or ``8``); anything else is none."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    pool: str
    state: LoanState | None


@dataclass(frozen=True, slots=True)
class _Pod:
    namespace: str
    name: str
    role: str
    job: str
    node: str
    phase: str
    terminating: bool
    owners: tuple[Mapping[str, Any], ...]

    @property
    def controller(self) -> Mapping[str, Any]:
        """The owner reference marked ``controller`` (empty when there is none)."""
        return next((o for o in self.owners if o.get("controller") is True), {})

    @property
    def owner_job(self) -> str | None:
        """The name of the TrainingJob that is the pod's controller, ``None`` when its controller is none."""
        controller = self.controller
        if controller.get("kind") == names.TRAINING_JOB_KIND and _group(controller) == names.GROUP:
            return _text(controller.get("name"))
        return None

    @property
    def is_worker(self) -> bool:
        return self.owner_job is not None

    @property
    def is_replica(self) -> bool:
        controller = self.controller
        return (
            self.role == names.ROLE_INFERENCE
            and controller.get("kind") == "ReplicaSet"
            and _group(controller) == "apps"
            and not self.is_worker
        )

    @property
    def holds_node(self) -> bool:
        return bool(self.node) and self.phase not in _FINISHED

    @property
    def live(self) -> bool:
        return not self.terminating and self.phase not in _FINISHED

    @property
    def running(self) -> bool:
        return self.live and bool(self.node) and self.phase == _RUNNING


def _group(reference: Mapping[str, Any]) -> str:
    """The API group of an owner reference (``""`` for the core group)."""
    version = _text(reference.get("apiVersion"))
    return version.split("/")[0] if "/" in version else ""


def _read_pod(raw: Mapping[str, Any]) -> _Pod:
    metadata = _mapping(raw.get("metadata"))
    labels = _labels(raw)
    return _Pod(
        namespace=_text(metadata.get("namespace")),
        name=_text(metadata.get("name")),
        role=_text(labels.get(names.ROLE_LABEL)),
        job=_text(labels.get(names.JOB_LABEL)),
        node=_text(_mapping(raw.get("spec")).get("nodeName")),
        phase=_text(_mapping(raw.get("status")).get("phase")),
        terminating=metadata.get("deletionTimestamp") is not None,
        owners=tuple(_mapping(o) for o in _sequence(metadata.get("ownerReferences"))),
    )


# -- the invariants --------------------------------------------------------------------------------------------------


def check(
    *,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    now: float,
    limits: Limits | None = None,
    services: Iterable[Mapping[str, Any]] = (),
    budgets: Iterable[Mapping[str, Any]] = (),
) -> Report:
    """Check every invariant (module docstring) over listed nodes, Lyra's pods, TrainingJobs, InferenceServices and
    PodDisruptionBudgets at time ``now``."""
    limits = limits if limits is not None else Limits()
    raw_nodes = [_mapping(n) for n in nodes]
    raw_pods = [_mapping(p) for p in pods]
    raw_jobs = [_mapping(j) for j in jobs]
    found: list[Violation] = []
    known: dict[str, _Node] = {}
    for raw in raw_nodes:
        node = _check_node(raw, now, limits, found)
        known[node.name] = node
    workers: dict[tuple[str, str], list[_Pod]] = {}
    read_pods = [pod for pod in (_read_pod(raw) for raw in raw_pods) if pod.is_worker or pod.is_replica]
    for pod in read_pods:
        _check_placement(pod, known, found)
        job = pod.owner_job
        if job is not None:
            workers.setdefault((pod.namespace, job), []).append(pod)
    job_keys: set[tuple[str, str]] = set()
    for raw in raw_jobs:
        key = (_meta(raw, "namespace"), _meta(raw, "name"))
        job_keys.add(key)
        _check_job(raw, workers.get(key, []), now, limits, found)
    for (namespace, job), pods_of_job in workers.items():
        if (namespace, job) in job_keys:
            for pod in pods_of_job:
                _check_labels(pod, job, found)
            continue
        for pod in pods_of_job:
            if pod.terminating:
                continue  # being removed (garbage collection of a deleted job's workers)
            why = f"is owned by TrainingJob {job!r}, which does not exist"
            found.append(_on_pod(Invariant.JOB_ACCOUNTED, pod, f"worker {why}"))
    raw_services = [_mapping(s) for s in services]
    _check_budgets(raw_services, [_mapping(b) for b in budgets], found)
    violations = sorted(set(found), key=lambda v: (v.invariant.value, v.kind, v.namespace, v.name, v.message))
    return Report(
        nodes=len(raw_nodes),
        pods=len(read_pods),
        jobs=len(raw_jobs),
        violations=tuple(violations),
        services=len(raw_services),
    )


def _check_budgets(
    services: Sequence[Mapping[str, Any]], budgets: Sequence[Mapping[str, Any]], found: list[Violation]
) -> None:
    """Each service's PodDisruptionBudget is the one its ``spec.disruptionBudget`` asks for, or it owns none."""
    by_key = {(_meta(b, "namespace"), _meta(b, "name")): b for b in budgets}
    for service in services:
        namespace, name, uid = _meta(service, "namespace"), _meta(service, "name"), _meta(service, "uid")
        if _mapping(service.get("metadata")).get("deletionTimestamp"):
            continue
        asked = _mapping(_mapping(service.get("spec")).get("disruptionBudget")).get("maxUnavailable")
        budget = by_key.get((namespace, name))
        deleting = budget is not None and bool(_mapping(budget.get("metadata")).get("deletionTimestamp"))
        holding = [_text(f) for f in _sequence(_mapping(budget.get("metadata") if budget else None).get("finalizers"))]
        if deleting:
            budget = None  # being deleted: as good as gone
        owners = _sequence(_mapping(budget.get("metadata") if budget else None).get("ownerReferences"))
        owned = any(
            _text(_mapping(o).get("kind")) == names.INFERENCE_SERVICE_KIND and _text(_mapping(o).get("uid")) == uid
            for o in owners
        )

        def violation(message: str, namespace: str = namespace, name: str = name) -> None:
            found.append(Violation(Invariant.DISRUPTION_BUDGET, names.INFERENCE_SERVICE_KIND, namespace, name, message))

        if isinstance(asked, bool) or not isinstance(asked, int):
            if budget is not None and owned:
                violation(f"asks for no disruption budget, yet PodDisruptionBudget {name}, which it owns, exists")
            continue
        if budget is None:
            violation(
                f"asks for maxUnavailable {asked}, and PodDisruptionBudget {name} is being deleted (finalizers: "
                f"{', '.join(holding) or 'none'}): the operator applies it once that one is gone"
                if deleting
                else f"asks for maxUnavailable {asked}, and there is no PodDisruptionBudget {name}"
            )
            continue
        spec = _mapping(budget.get("spec"))
        wrong = [] if owned else ["is not owned by it"]
        if spec.get("maxUnavailable") != asked or isinstance(spec.get("maxUnavailable"), bool):
            wrong.append(f"has maxUnavailable {spec.get('maxUnavailable')!r}")
        if "minAvailable" in spec:
            wrong.append(f"has minAvailable {spec.get('minAvailable')!r}")
        replicas = {names.SERVICE_LABEL: name, names.ROLE_LABEL: names.ROLE_INFERENCE}
        if _mapping(spec.get("selector")) != {"matchLabels": replicas}:
            wrong.append(f"selects {dict(_mapping(spec.get('selector')))}, not exactly the replicas' labels")
        if wrong:
            violation(f"asks for maxUnavailable {asked}, and PodDisruptionBudget {name} {'; '.join(wrong)}")


def _check_labels(pod: _Pod, job: str, found: list[Violation]) -> None:
    """A live worker's labels say what its owner does: a role and its job's name."""
    if not pod.live:
        return
    wrong = []
    if pod.role not in _TRAINING_ROLES:
        wrong.append(f"{names.ROLE_LABEL}={_shown(pod.role or None)} (not base or flexible)")
    if pod.job != job:
        wrong.append(f"{names.JOB_LABEL}={_shown(pod.job or None)} (not {job!r})")
    if wrong:
        found.append(
            _on_pod(Invariant.WORKER_LABELS, pod, f"worker of TrainingJob {job!r} labelled {', '.join(wrong)}")
        )


def _on_pod(invariant: Invariant, pod: _Pod, message: str) -> Violation:
    return Violation(invariant, "Pod", pod.namespace, pod.name, message)


def _check_node(raw: Mapping[str, Any], now: float, limits: Limits, found: list[Violation]) -> _Node:
    name = _meta(raw, "name")
    labels = _labels(raw)
    pool = _text(labels.get(names.POOL_LABEL))
    label = labels.get(names.STATE_LABEL)
    state = _loan_state(label)
    node = _Node(name, pool, state)
    if pool != names.POOL_INFERENCE:
        return node
    taints = [_mapping(t) for t in _sequence(_mapping(raw.get("spec")).get("taints"))]
    ours = [t for t in taints if t.get("key") == names.STATE_TAINT]
    status = _mapping(raw.get("status"))
    resource = names.GPU_RESOURCE
    gpus = _whole(_mapping(status.get("allocatable")).get(resource, _mapping(status.get("capacity")).get(resource)))
    if label is None and not ours and gpus == 0:
        return node  # not yet a Lyra server: no GPUs reported and nothing of Lyra's written

    def problem(message: str) -> None:
        found.append(Violation(Invariant.NODE_STATE, "Node", "", name, message))

    if label is None and not ours:
        problem(f"inference node with GPUs and neither a {names.STATE_LABEL} label nor its taint")
        return node
    if label is None:
        problem(f"inference node without a {names.STATE_LABEL} label")
    elif state is None:
        problem(f"{names.STATE_LABEL}={_shown(label)} is not a loan state ({', '.join(s.value for s in LoanState)})")
    if not ours:
        problem(f"no {names.STATE_TAINT} taint (the label says {_shown(label)})")
    elif len(ours) > 1:
        problem(f"{len(ours)} {names.STATE_TAINT} taints, not one")
    else:
        taint = ours[0]
        if taint.get("value") != label:
            problem(f"{names.STATE_TAINT} taint value {_shown(taint.get('value'))} differs from the label's "
                    f"{_shown(label)}")  # fmt: skip
        if taint.get("effect") != names.TAINT_EFFECT:
            problem(f"{names.STATE_TAINT} taint effect {_shown(taint.get('effect'))}, not {names.TAINT_EFFECT}")
    if state is LoanState.RECLAIMING:
        annotation = _mapping(_mapping(raw.get("metadata")).get("annotations")).get(names.RECLAIM_STARTED_ANNOTATION)
        started = parse_time(annotation)
        if started is None:
            found.append(
                Violation(
                    Invariant.RECLAIM_DEADLINE,
                    "Node",
                    "",
                    name,
                    f"reclaiming without a readable {names.RECLAIM_STARTED_ANNOTATION} annotation "
                    f"({_shown(annotation)}): its deadline cannot run",
                )
            )
        elif now - started > limits.reclaim_deadline_s:
            found.append(
                Violation(
                    Invariant.RECLAIM_DEADLINE,
                    "Node",
                    "",
                    name,
                    f"reclaiming for {now - started:.0f} s, past the {limits.reclaim_deadline_s:g} s deadline",
                )
            )
    return node


def _loan_state(label: object) -> LoanState | None:
    try:
        return LoanState(label) if isinstance(label, str) else None
    except ValueError:
        return None


def _shown(value: object) -> str:
    return "none" if value is None else repr(value)[:80]


def _where(node: _Node | None, name: str) -> str:
    if node is None:
        return f"node {name}, which does not exist"
    if node.pool == names.POOL_INFERENCE:
        return f"inference node {name}, which is {node.state.value if node.state else 'in no loan state'}"
    if node.pool == names.POOL_TRAINING:
        return f"training node {name}"
    return f"node {name}, which is in no Lyra pool"


def _check_placement(pod: _Pod, known: Mapping[str, _Node], found: list[Violation]) -> None:
    if not pod.holds_node:
        return
    node = known.get(pod.node)
    if pod.is_replica:
        allowed = node is not None and node.pool == names.POOL_INFERENCE and node.state in _INFERENCE_STATES
        if not allowed:
            found.append(_on_pod(Invariant.INFERENCE_PLACEMENT, pod, f"inference replica on {_where(node, pod.node)}"))
    elif pod.is_worker:
        allowed = node is not None and (
            node.pool == names.POOL_TRAINING or (node.pool == names.POOL_INFERENCE and node.state in _TRAINING_STATES)
        )
        if not allowed:
            role = pod.role if pod.role in _TRAINING_ROLES else "unlabelled"
            found.append(_on_pod(Invariant.TRAINING_PLACEMENT, pod, f"{role} worker on {_where(node, pod.node)}"))


def _check_job(
    raw: Mapping[str, Any], pods: Sequence[_Pod], now: float, limits: Limits, found: list[Violation]
) -> None:
    metadata = _mapping(raw.get("metadata"))
    namespace, name, uid = _meta(raw, "namespace"), _meta(raw, "name"), _meta(raw, "uid")
    spec = _mapping(raw.get("spec"))
    status = _mapping(raw.get("status"))

    def problem(invariant: Invariant, message: str) -> None:
        found.append(Violation(invariant, names.TRAINING_JOB_KIND, namespace, name, message))

    if not _text(status.get("phase")):
        problem(Invariant.JOB_ACCOUNTED, "has no status.phase: the operator has not accounted for it")
    for pod in pods:
        controllers = [o for o in pod.owners if o.get("controller") is True]
        owned = any(
            o.get("kind") == names.TRAINING_JOB_KIND
            and _text(o.get("apiVersion")).split("/")[0] == names.GROUP
            and o.get("name") == name
            and o.get("uid") == uid
            for o in controllers
        )
        if not owned and not pod.terminating:
            owner = ", ".join(f"{o.get('kind')}/{o.get('name')} uid {o.get('uid')}" for o in controllers) or "none"
            found.append(
                _on_pod(
                    Invariant.JOB_ACCOUNTED,
                    pod,
                    f"worker of TrainingJob {name!r} (uid {uid}) is not owned by it (controller: {owner})",
                )
            )
    pods = [p for p in pods if p.controller.get("uid") == uid]  # this run's: an earlier run's is reported above
    live = [p for p in pods if p.live]
    target = _whole(_mapping(status.get("workers")).get("target"))
    maximum = _whole(spec.get("maxWorkers"))
    if len(live) > target:
        problem(Invariant.WORKERS_OVER_LIMIT, f"{len(live)} live workers, more than its target of {target}")
    if maximum and len(live) > maximum:
        problem(Invariant.WORKERS_OVER_LIMIT, f"{len(live)} live workers, more than maxWorkers {maximum}")
    minimum = _whole(spec.get("minWorkers"))
    running_base = sum(1 for p in pods if p.role == names.ROLE_BASE and p.running)
    if 0 < running_base < minimum and not any(p.phase == _SUCCEEDED for p in pods):
        started = parse_time(status.get("startedAt"))
        if started is None:
            started = parse_time(metadata.get("creationTimestamp"))
        age = now - started if started is not None else math.inf
        if age > limits.gang_timeout_s:
            problem(
                Invariant.PARTIAL_GANG,
                f"{running_base} of {minimum} base workers running, {age:.0f} s into its run "
                f"(gang timeout {limits.gang_timeout_s:g} s)",
            )
