"""Commit: read what a pass decides on, and apply a decision's actions to the API, in order, idempotently, object by
object.

Creating what exists (409 AlreadyExists) and deleting what is gone (404) count as done, but for a pod whose namesake
belongs to an earlier run of its job (another controller UID): that pod is deleted, with its UID as precondition,
and the create waits for the next pass. An API error on one action
is confined to its object (:mod:`lyra.operator.isolation`): it is logged, posted as a Warning Event on the object,
the object's later actions in the pass are skipped (and pod actions that wait for it), it is held back with
exponential backoff, and every other object's actions still go through. A conflict on a node (its resourceVersion
moved since the pass read it) or an object gone (404) skips that object's dependants for this pass only; the next
pass reads afresh, which the action order makes safe (:mod:`lyra.operator.actions`). Errors that are not one
object's (401, 429, the API server unreachable) end the pass.

The running operator reads from its watch caches (:mod:`lyra.operator.caches`) and never lists in a pass; every
write tells the caches the resourceVersion the API answered, and the next pass reads only once they have seen it.
Without caches (one-shot commands) :meth:`Cluster.observe` lists each kind once, in pages.

A busy pass writes thousands of objects, each a round trip to the API server: the actions go in runs of one kind, in
the decision's order, each run done before the next begins; a long run has up to :data:`WRITERS` requests in flight,
one object's actions always in order and by one writer (so every order of :mod:`lyra.operator.actions` holds). The
writers take turns in the pass's own thread, each giving way while it waits for an answer
(:mod:`lyra.operator.interleaving`). The requests themselves are :mod:`lyra.operator.writes`'.

A node left out of a pass (:meth:`Cluster.report_left_out`) gets its Event at most once every :data:`EVENT_REPEAT_S`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import conditions, names
from lyra.operator.actions import (
    Action,
    ApplyDeployment,
    ApplyDisruptionBudget,
    CreatePod,
    CreateService,
    Decision,
    DeletePod,
    Emit,
    PatchStatus,
    SetDeletionCost,
    SetNodeState,
    SetPodRole,
)
from lyra.operator.caches import PassCaches, list_once
from lyra.operator.interleaving import Interleaving
from lyra.operator.isolation import TRANSIENT_STATUSES, Backoff, Failure, describe, key_of, needs_of, subject_of
from lyra.operator.leader import LeadershipLostError
from lyra.operator.node_health import HealthMemory
from lyra.operator.readers import Readings, read_world
from lyra.operator.timestamps import format_time
from lyra.operator.world import ObjectRef, World
from lyra.operator.writes import ApiWrites

log = logging.getLogger("lyra.operator")


#: Statuses that are not one object's fault: the pass ends (the runner retries it with backoff).
PASS_ERRORS = frozenset({401, 429})
EVENT_REPEAT_S = 600.0
#: Requests in flight at once within a run of actions of one kind (one object's actions always go one by one), and
#: the shortest run written in parallel: a busy pass writes thousands of objects, each a round trip to the API server.
WRITERS = 8
PARALLEL_FROM = 16

#: What became of each action (:attr:`Outcome.results`): applied; refused by the API; deferred to the next pass (its
#: object changed since it was read, or is gone); held back by the object's backoff; skipped (its object, node or
#: owner failed earlier in the pass).
APPLIED, REFUSED, DEFERRED, HELD, SKIPPED = "applied", "refused", "deferred", "held", "skipped"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a pass's commit did: actions applied, refused by the API, held back by an object's backoff, and skipped
    (their object, node or owner failed earlier in the pass); ``failures`` the refusals, one per object; ``results``
    what became of each of the decision's actions, in order (:data:`APPLIED` ...), from which the metrics count;
    ``settled`` the subjects whose backoff ended in this pass (their statuses stop reporting the failure: the next
    decision differs)."""

    applied: int
    failed: int = 0
    held: int = 0
    skipped: int = 0
    failures: tuple[Failure, ...] = ()
    results: tuple[str, ...] = ()
    settled: tuple[Failure, ...] = ()


@dataclass
class _Pass:
    """What one commit has done so far, shared by its writers (under ``lock``): subjects with an action refused,
    held or skipped (``blocked``), subjects refused (``failed``), the refusals by action index, and each action's
    result by index."""

    now: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    blocked: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    failures: list[tuple[int, Failure]] = field(default_factory=list)
    results: dict[int, str] = field(default_factory=dict)


def _runs(actions: tuple[Action, ...]) -> list[tuple[int, int]]:
    """The index ranges of the longest runs of actions of one kind, in order."""
    runs: list[tuple[int, int]] = []
    start = 0
    for index in range(1, len(actions) + 1):
        if index == len(actions) or type(actions[index]) is not type(actions[start]):
            runs.append((start, index))
            start = index
    return runs


class Cluster:
    """The operator's access to the API server."""

    def __init__(self, api: client.ApiClient, backoff: Backoff | None = None, caches: PassCaches | None = None) -> None:
        self.api = api
        self.caches = caches
        self.writers = WRITERS  # requests in flight at once (:meth:`apply`); 1 writes one by one
        self._fence: Callable[[], bool] | None = None
        self._read_at: World | None = None  # the World the decision being applied was made on
        # Every call of the commit step, as one lean request each (:mod:`lyra.operator.writes`), the fence asked
        # as it is sent; named by the API group whose call it makes, as the kubernetes client's are.
        self.writes = ApiWrites(api, lambda: self._fence)
        #: The API server's URL, as the client was given it (said with a failed call).
        self.server: str | None = api.configuration.host
        self.core: ApiWrites = self.writes
        self.apps: ApiWrites = self.writes
        self.policy: ApiWrites = self.writes
        self.custom: ApiWrites = self.writes
        self.backoff = backoff or Backoff()
        self._posted: dict[tuple[str, str], float] = {}  # node left out, why -> when its Event was posted
        self.health = HealthMemory()  # when each node's GPU dip was first seen, across passes
        self.readings = Readings()  # the objects read by the last pass: only changed ones are read again

    def reconnect(self) -> None:
        """Leave every connection kept open so far: the write connections idle in the pool are closed (the next
        writes open new ones) and the watches reopened from where they were. Called each time this operator begins to
        lead: while it did not, a partition between it and the API server may have left its connections open and
        silent, and a write on one would wait the writes' timeout (60 s), a watch on one its silence bound (70 s),
        while inference waits for the servers. Reopening costs a request per watch, and lists nothing."""
        self.writes.close()
        reopened = self.caches is not None and self.caches.reconnect()
        log.info("leading: new connections for the writes%s", ", the watches reopened" if reopened else "")

    def observe(self, now: float) -> World:
        """Nodes, GPU pods, jobs, services and Lyra's Deployments read into a World: from the watch caches once they
        have seen this operator's last writes, or (no caches) listed once."""
        if self.caches is None:
            objects = list_once(self.api)
        else:
            self.caches.catch_up()
            objects = self.caches.snapshot()
        return read_world(
            now,
            nodes=objects["nodes"],
            pods=objects["pods"],
            jobs=objects["jobs"],
            services=objects["services"],
            deployments=objects["deployments"],
            budgets=objects["budgets"],
            memory=self.health,
            readings=self.readings,
        )

    def apply(self, decision: Decision, now: float, world: World | None = None) -> Outcome:
        """Apply ``decision`` object by object (see the module docstring). With the ``world`` it was decided on,
        status writes are conditional on the resourceVersion each object was read at, as node writes always are.

        The actions go in runs of one kind, in order, each run finished before the next starts (so every order of
        :mod:`lyra.operator.actions` holds). Within a run of at least :data:`PARALLEL_FROM` actions, up to
        :attr:`writers` requests are in flight at once, one per object: each object's actions go in order, by one
        writer; an error that ends the pass stops every writer before its next request."""
        self._read_at = world
        state = _Pass(now)
        actions = decision.actions
        for start, end in _runs(actions):
            chains: dict[str, list[int]] = {}
            for index in range(start, end):
                chains.setdefault(key_of(subject_of(actions[index])), []).append(index)
            if self.writers > 1 and end - start >= PARALLEL_FROM and len(chains) > 1:
                self._in_parallel(actions, list(chains.values()), state)
            else:
                for index in range(start, end):
                    state.results[index] = self._one(index, actions[index], state)
        results = tuple(state.results[i] for i in range(len(actions)))
        failures = [failure for _, failure in sorted(state.failures, key=lambda item: item[0])]
        settled = self.backoff.settle(state.failed, now)
        for over in settled:
            log.info("%s %s: writes go through again", over.subject.kind, over.subject.key)
        return Outcome(
            results.count(APPLIED),
            len(failures),
            results.count(HELD),
            results.count(SKIPPED),
            tuple(failures),
            results,
            tuple(settled),
        )

    def _in_parallel(self, actions: tuple[Action, ...], chains: list[list[int]], state: _Pass) -> None:
        """Each chain (one object's actions, in order) by one of up to :attr:`writers` writers, interleaved in this
        thread (:mod:`lyra.operator.interleaving`: each gives way while it waits for an answer); the first error
        that ends the pass stops them all before their next action, and is raised."""
        pending = iter(chains)
        stop = threading.Event()
        errors: list[BaseException] = []

        def write() -> None:
            while not stop.is_set():
                with state.lock:
                    chain = next(pending, None)
                if chain is None:
                    return
                for index in chain:
                    if stop.is_set():
                        return
                    try:
                        state.results[index] = self._one(index, actions[index], state)
                    except BaseException as error:  # the pass ends: raised below, once every writer has stopped
                        with state.lock:
                            errors.append(error)
                        stop.set()
                        return

        Interleaving().run([write] * min(self.writers, len(chains)))
        if errors:
            raise errors[0]

    def _one(self, index: int, action: Action, state: _Pass) -> str:
        """One action, as the module docstring says; what became of it (:data:`APPLIED` ...)."""
        now = state.now
        subject = subject_of(action)
        key = key_of(subject)
        with state.lock:
            waits_for = any(k in state.blocked for k in needs_of(action))
            if key in state.failed or (not isinstance(action, Emit) and (key in state.blocked or waits_for)):
                state.blocked.add(key)  # an Event about an object whose writes failed would say what did not happen
                return SKIPPED
            if self.backoff.holds(action, now) is not None:
                state.blocked.add(key)
                return HELD
        try:
            version = self._apply(action, now)
        except ApiException as error:
            return self._refused(index, action, error, state)
        if self.caches is not None and version:
            self.caches.wrote(_written_kind(action), version)
        return APPLIED

    def _refused(self, index: int, action: Action, error: ApiException, state: _Pass) -> str:
        """What became of an action the API refused (see the module docstring); raises the errors that end a pass."""
        now = state.now
        subject = subject_of(action)
        key = key_of(subject)
        if error.status == 409 and isinstance(action, CreatePod) and self._removed_stale_namesake(action):
            with state.lock:
                state.blocked.add(key)
            return DEFERRED
        if error.status == 409 and _creates(action) and _already_exists(error):
            return APPLIED
        if error.status == 404 and isinstance(action, DeletePod | SetPodRole | SetDeletionCost):
            return APPLIED
        if error.status in PASS_ERRORS:
            raise error
        reason = _reason(error)
        if isinstance(action, Emit):  # a report that could not be posted: said in the log only
            log.warning("%s failed: %s", describe(action), reason)
            return REFUSED
        gone = error.status == 404 and (
            isinstance(action, PatchStatus | SetNodeState | ApplyDisruptionBudget)  # a budget's: its namespace
            or (isinstance(action, ApplyDeployment) and not action.create)
        )
        if gone or (
            error.status == 409 and isinstance(action, SetNodeState | PatchStatus | DeletePod | ApplyDeployment)
        ):
            # gone, or changed since the pass read it: the next pass reads it afresh
            with state.lock:
                state.blocked.add(key)
            log.info("%s: %s; its dependants wait for the next pass", describe(action), reason)
            return DEFERRED
        transient = error.status in TRANSIENT_STATUSES
        with state.lock:
            state.blocked.add(key)
            state.failed.add(key)
            failure = self.backoff.record(action, _status_reason(error), reason, now, transient=transient)
            state.failures.append((index, failure))
        log.warning("%s %s: %s", subject.kind, subject.key, failure.message)
        self._report(failure, now)
        return REFUSED

    def _removed_stale_namesake(self, action: CreatePod) -> bool:
        """After a 409 on creating a pod: whether the pod of that name is an earlier run's (its controller is not the
        action's owner UID), in which case it is deleted (UID precondition) and the create is not done. A failure to
        tell keeps the old reading: the create counts as done, and the next pass sees which pod it is."""
        owner_uid = action.owner.uid if action.owner is not None else ""
        if not owner_uid:
            return False
        try:
            response: Any = self.core.read_namespaced_pod(action.ref.name, action.ref.namespace, _preload_content=False)
            metadata = json.loads(response.data).get("metadata") or {}
            references = [r for r in metadata.get("ownerReferences") or [] if isinstance(r, dict)]
            controller = next((r for r in references if r.get("controller")), None)
            if controller is None or controller.get("uid") == owner_uid:
                return False
            self._fenced(action)
            self.core.delete_namespaced_pod(
                action.ref.name, action.ref.namespace, body={"preconditions": {"uid": str(metadata.get("uid", ""))}}
            )
        except ApiException as error:
            if error.status == 404:
                return True  # gone meanwhile: the next pass creates it
            log.info("pod %s exists; whose it is could not be read: %s", action.ref.key, _reason(error))
            return False
        log.info("pod %s of an earlier run (owner %s) deleted; created by the next pass", action.ref.key, controller)
        return True

    def _report(self, failure: Failure, now: float) -> None:
        """A Warning Event on the object whose write failed (its status says it too, from the next pass)."""
        event = Emit(failure.subject, "Warning", conditions.APPLY_FAILED, failure.message)
        try:
            self._event(event, now)
        except ApiException as error:
            log.warning("%s failed: %s", describe(event), _reason(error))

    def report_left_out(self, world: World, now: float) -> None:
        """Log every object the pass could not read and every node held for a malformed reading, and post an Event
        on each such node (nodes have no status of Lyra's to say it in)."""
        for item in world.unreadable:
            log.warning("skipped %s %s: %s", item.ref.kind, item.ref.key, item.reason)
            if item.ref.kind == "Node":
                self._post_on_node(item.ref, conditions.LEFT_OUT, f"node {item.ref.name} {item.reason}", now)
        for misread in world.misread:
            how = "with its last good reading" if misread.held else "out of every plan, its workers kept"
            message = (
                f"node {misread.ref.name} {misread.why}; held as unhealthy since {format_time(misread.since)}, {how}, "
                "until it reads well or --node-grace has passed (then it is lost)"
            )
            log.warning("%s", message)
            self._post_on_node(misread.ref, conditions.MISREAD, message, now, key=misread.why)

    def _post_on_node(self, ref: ObjectRef, reason: str, message: str, now: float, *, key: str | None = None) -> None:
        """A Warning Event on a node, at most once every :data:`EVENT_REPEAT_S` for the same node and cause."""
        said = (ref.key, key if key is not None else message)
        if now - self._posted.get(said, -EVENT_REPEAT_S) < EVENT_REPEAT_S:
            return
        self._posted = {k: t for k, t in self._posted.items() if now - t < EVENT_REPEAT_S}
        self._posted[said] = now
        try:
            self._event(Emit(ref, "Warning", reason, message), now)
        except ApiException as error:
            log.warning("posting Event %s on node %s failed: %s", reason, ref.name, _reason(error))

    @property
    def fence(self) -> Callable[[], bool] | None:
        """Asked before every write (the leader Lease's fence, :meth:`lyra.operator.leader.LeaderLease.may_write`):
        when it says no, :class:`~lyra.operator.leader.LeadershipLostError` ends the pass before the write. It is
        asked twice: before an action is built into a request, and by the client's connection pool as the request
        is about to be sent (:class:`FencedPool`), so a pause between the question and the write is as short as
        Python allows; the writes that carry preconditions (node states) are refused by the API server as well."""
        return self._fence

    @fence.setter
    def fence(self, fence: Callable[[], bool] | None) -> None:
        self._fence = fence
        rest = getattr(self.api, "rest_client", None)
        if rest is not None:
            pool = rest.pool_manager
            rest.pool_manager = (
                FencedPool(pool.pool, fence) if isinstance(pool, FencedPool) else FencedPool(pool, fence)
            )

    def _fenced(self, action: Action) -> None:
        if self._fence is not None and not self._fence():
            raise LeadershipLostError(f"lost the lease: stopped before {describe(action)}")

    def _apply(self, action: Action, now: float) -> str:
        """Apply one action; the resourceVersion the API answered the write with ("" if none is cached)."""
        self._fenced(action)
        raw: dict[str, Any] = {"_preload_content": False}  # the written object's version, without the client's models
        response: Any
        if isinstance(action, SetNodeState):
            annotations = dict(action.annotations)
            body = {
                "metadata": {
                    "resourceVersion": action.resource_version or None,
                    "labels": {names.STATE_LABEL: action.state.value},
                    "annotations": annotations,
                },
                "spec": {"taints": [t.model_dump(by_alias=True, exclude_none=True) for t in action.taints]},
            }
            response = self.core.patch_node(action.node, body, **raw)
            log.info("node %s -> %s (%s)", action.node, action.state.value, action.reason)
            return _version_in(response)
        if isinstance(action, PatchStatus):
            plural = (
                names.TRAINING_JOB_PLURAL
                if action.ref.kind == names.TRAINING_JOB_KIND
                else names.INFERENCE_SERVICE_PLURAL
            )
            # The whole status, as a JSON patch: a merge patch would keep map keys the new status no longer has
            # (a node a job left would stay in its placements).
            whole: list[dict[str, Any]] = [{"op": "add", "path": "/status", "value": dict(action.status)}]
            read_at = self._read_at.version_of(action.ref) if self._read_at is not None else ""
            if read_at:  # written over what the pass read, or refused (409) if the object changed since
                whole.insert(0, {"op": "replace", "path": "/metadata/resourceVersion", "value": read_at})
            response = self.custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                action.ref.namespace,
                plural,
                action.ref.name,
                whole,
                _content_type=names.JSON_PATCH,
                **raw,
            )
            return _version_in(response)
        if isinstance(action, DeletePod):
            # Only the pod the pass read (not a new one of the same name): a UID precondition (409 otherwise).
            options: dict[str, Any] = {"gracePeriodSeconds": action.grace_seconds}
            if action.ref.uid:
                options["preconditions"] = {"uid": action.ref.uid}
            response = self.core.delete_namespaced_pod(
                action.ref.name, action.ref.namespace, grace_period_seconds=action.grace_seconds, body=options, **raw
            )
            log.info("pod %s deleted (%s, grace %d s)", action.ref.key, action.reason, action.grace_seconds)
            return _version_in(response)
        if isinstance(action, SetPodRole):
            labels = {names.ROLE_LABEL: action.role}
            if action.owner is not None and action.owner.kind == names.TRAINING_JOB_KIND:
                labels[names.JOB_LABEL] = action.owner.name  # written back if a tenant removed or changed it
            response = self.core.patch_namespaced_pod(
                action.ref.name, action.ref.namespace, {"metadata": {"labels": labels}}, **raw
            )
            return _version_in(response)
        if isinstance(action, SetDeletionCost):
            cost = {names.POD_DELETION_COST_ANNOTATION: str(action.cost)}
            response = self.core.patch_namespaced_pod(
                action.ref.name, action.ref.namespace, {"metadata": {"annotations": cost}}, **raw
            )
            return _version_in(response)
        if isinstance(action, CreateService):
            self.core.create_namespaced_service(action.ref.namespace, action.manifest)
        elif isinstance(action, CreatePod):
            response = self.core.create_namespaced_pod(action.ref.namespace, action.manifest, **raw)
            log.info("pod %s created", action.ref.key)
            return _version_in(response)
        elif isinstance(action, ApplyDeployment):
            if action.create:
                response = self.apps.create_namespaced_deployment(action.ref.namespace, action.manifest, **raw)
            else:
                response = self.apps.patch_namespaced_deployment(
                    action.ref.name, action.ref.namespace, deployment_patch(action), **raw
                )
                if action.roll:
                    log.info("Deployment %s: pod template written (it rolls the replicas)", action.ref.key)
            return _version_in(response)
        elif isinstance(action, ApplyDisruptionBudget):
            return self._disruption_budget(action, raw)
        elif isinstance(action, Emit):
            self._event(action, now)
        return ""

    def _disruption_budget(self, action: ApplyDisruptionBudget, raw: dict[str, Any]) -> str:
        """Apply or delete the budget (one that is gone already is deleted); the version its write was answered with.

        The deletion is a foreground one: the API server answers a plain deletion of a budget with a Status that
        carries no resourceVersion, so the next pass could not wait for its watch to deliver it, and might read the
        budget again and delete it twice. A foreground deletion marks the budget (``deletionTimestamp``, the
        garbage collector's finalizer) and answers with it, at the version the watch brings; the reader takes a
        budget being deleted for none, and the garbage collector, finding nothing it owns, removes it."""
        ref = action.ref
        log.info("PodDisruptionBudget %s: maxUnavailable %s", ref.key, action.max_unavailable or "none (deleted)")
        if action.manifest is not None:
            return _version_in(
                self.policy.apply_namespaced_pod_disruption_budget(ref.name, ref.namespace, action.manifest, **raw)
            )
        try:
            answer = self.policy.delete_namespaced_pod_disruption_budget(
                ref.name, ref.namespace, body={"propagationPolicy": "Foreground"}, **raw
            )
        except ApiException as error:
            if error.status != 404:
                raise
            return ""
        return _version_in(answer)

    def _event(self, action: Emit, now: float) -> None:
        self._fenced(action)
        ref = action.ref
        namespace = ref.namespace or "default"
        api_version = _EVENT_API_VERSIONS.get(ref.kind, names.API_VERSION)
        stamp = format_time(now)
        body = {
            "metadata": {"generateName": f"{ref.name[:200]}.", "namespace": namespace},
            "involvedObject": {
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace or None,
                "uid": ref.uid or None,
                "apiVersion": api_version,
            },
            "reason": action.reason,
            "message": action.message[:1024],
            "type": action.type,
            "source": {"component": names.OPERATOR_NAME},
            "reportingComponent": names.OPERATOR_NAME,
            "reportingInstance": names.OPERATOR_NAME,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.core.create_namespaced_event(namespace, body)


class FencedPool:
    """The API client's connection pool, sending a write (anything but GET, HEAD, OPTIONS) only while the fence says
    yes (no fence: always)."""

    READS = frozenset({"GET", "HEAD", "OPTIONS"})

    def __init__(self, pool: Any, fence: Callable[[], bool] | None) -> None:
        self.pool = pool
        self.fence = fence

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in self.READS and self.fence is not None and not self.fence():
            raise LeadershipLostError(f"lost the lease: {method} {url} not sent")
        return self.pool.request(method, url, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


def deployment_patch(action: ApplyDeployment) -> dict[str, Any]:
    """The strategic merge patch that brings an existing Deployment to ``action.manifest``: its replicas; with
    ``roll``, its pod template too, replaced whole (``$patch: replace``: a container, variable or volume the template
    no longer has is gone, not merged back by name), and its template hash, written over the resourceVersion the
    pass read (a Deployment changed since is refused, 409, and read afresh by the next pass)."""
    spec = action.manifest["spec"]
    if not action.roll:
        return {"spec": {"replicas": spec["replicas"]}}
    hashed = action.manifest["metadata"]["annotations"][names.TEMPLATE_HASH_ANNOTATION]
    return {
        "metadata": {
            "resourceVersion": action.resource_version or None,
            "annotations": {names.TEMPLATE_HASH_ANNOTATION: hashed},
        },
        "spec": {"replicas": spec["replicas"], "template": {**spec["template"], "$patch": "replace"}},
    }


#: The API version of the objects Events are posted on, by kind (Lyra's own resources otherwise).
_EVENT_API_VERSIONS = {"Node": "v1", "Pod": "v1", names.DISRUPTION_BUDGET_KIND: "policy/v1"}


def _written_kind(action: Action) -> str:
    """The kind of the object an action writes (what :meth:`ClusterCaches.wrote` files its version under)."""
    if isinstance(action, SetNodeState):
        return "Node"
    if isinstance(action, CreatePod | DeletePod | SetPodRole | SetDeletionCost):
        return "Pod"
    if isinstance(action, ApplyDeployment):
        return "Deployment"
    if isinstance(action, ApplyDisruptionBudget):
        return names.DISRUPTION_BUDGET_KIND
    return action.ref.kind if isinstance(action, PatchStatus) else ""


#: The front of kube-apiserver's answer to a write that asks for the object's metadata alone, up to the object's
#: resourceVersion: Go writes the type's fields and then the metadata's in their declared order, so only the name,
#: generateName, namespace, selfLink and uid come before it (strings without a quote or an escape, as names are).
#: ``tests/integration/test_write_answers.py`` checks that every kind of write's answer on the real server has it.
_VERSION_UP_FRONT = re.compile(
    rb'\{"kind":"PartialObjectMetadata","apiVersion":"meta\.k8s\.io/v1","metadata":\{'
    rb'(?:"(?:name|generateName|namespace|selfLink|uid)":"[^"\\]*",)*"resourceVersion":"([^"\\]*)"'
)


def _version_in(response: Any) -> str:
    """The resourceVersion of the object a write's response (raw, not preloaded) carries ("" if none): read off the
    answer's front when it is kube-apiserver's metadata alone (:data:`_VERSION_UP_FRONT`, a match in about a tenth of
    parsing the answer), else parsed by orjson (a pod's or node's answer in under half of ``json.loads``' CPU)."""
    data: Any = getattr(response, "data", None)
    if isinstance(data, bytes):
        front = _VERSION_UP_FRONT.match(data)
        if front is not None:
            return front.group(1).decode()
    try:
        body = orjson.loads(data)
    except (TypeError, ValueError):
        return ""
    meta = body.get("metadata") if isinstance(body, dict) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def _creates(action: Action) -> bool:
    """Whether an action creates its object (a 409 AlreadyExists then means done)."""
    return isinstance(action, CreatePod | CreateService) or (isinstance(action, ApplyDeployment) and action.create)


def _already_exists(error: ApiException) -> bool:
    return "AlreadyExists" in str(error.body or "") or error.status == 409


def _reason(error: ApiException) -> str:
    try:
        message = json.loads(error.body or "{}").get("message", "")
    except ValueError:
        message = ""
    return f"{error.status} {error.reason}: {message}".strip(": ")


def _status_reason(error: ApiException) -> str:
    """The API's machine-readable reason (Forbidden, Invalid, InternalError ...), for a condition's reason."""
    try:
        reason = json.loads(error.body or "{}").get("reason", "")
    except ValueError:
        reason = ""
    return str(reason or error.reason or "ApiError").replace(" ", "") or "ApiError"
