"""The inference side of a pass: each InferenceService's replicas (from its spec or its load), its Deployment, its
status, and the servers of each GPU type inference needs (:mod:`lyra.operator.sizing`).

Each pass renders the Deployment a service wants (:func:`lyra.operator.manifests.deployment`: the service's template
with the GPUs, the GPU-type node affinity, the tolerations and the scheduler name the operator derives) and compares
the hash of its pod template with the one the live Deployment records (``lyra.dev/template-hash``). A Deployment whose
replicas differ is scaled; one whose hash differs, or that records none (made by an older operator), gets the
rendered template and hash written with its replicas, conditional on the resourceVersion the pass read, and an Event
``TemplateChanged``; the Deployment controller then rolls the replicas. Edits made to the Deployment by hand are not
undone until the service's rendering changes.

A service whose replicas wait while servers of their GPU type are reclaimed from training carries
``status.reclaim`` (since when); once all its replicas run, an Event ``ReclaimServed`` says how long they waited, the
pass's report lists it under ``reclaim_waits`` (for metrics), and the record is cleared. The start is read from
the nodes' ``reclaim-started`` annotations or set by the pass that begins the reclaim, so a restart loses nothing.

Where an admin capped a namespace's inference GPUs (:class:`~lyra.operator.sizing.InferenceGpuCaps`), its services
take their replicas in name order until the cap is spent: a service cut short gets fewer replicas (Deployment,
``status.replicas``, servers needed) and ``Capped=True`` saying how many replicas and GPUs are over the cap, with a
Warning Event when it becomes capped; a service within the cap carries ``Capped=False``, and a namespace without a cap
no such condition.

**A PodDisruptionBudget per service that asks for one** (``spec.disruptionBudget.maxUnavailable``): named after the
service, owned by it, selecting its replicas by their labels. The operator watches the budgets that carry the service
label (:mod:`lyra.operator.caches`), and a pass whose service's budget is missing or differs from the one it writes
(another ``maxUnavailable``, selector or owner, or a ``minAvailable``: :class:`~lyra.operator.world.FoundBudget`)
applies it by server-side apply, the operator's fields forced (a budget deleted or edited by hand is put back on the
next pass); a service that no longer asks for one has the budget it owns deleted (never one it does not own). A
budget being deleted (``deletionTimestamp``: the operator's own foreground deletion, or one by hand) is left alone
until the garbage collector has removed it, and the pass its removal wakes applies the one the service asks for by
then, once: an apply to a budget on its way out would only change what is about to go, and again each pass. Each
write has an Event ``DisruptionBudget`` on the budget, saying what it was and what it becomes (not while its write is
refused or held back). A ``minAvailable`` added by hand cannot be taken off by the apply: the API refuses a budget with
both, so the write backs off with a Warning Event until someone removes it. A service that asks for a budget carries
the condition ``DisruptionBudget``: True (``BudgetInPlace``) while the budget is the one asked for, False
(``BudgetApplying``) while it is missing or differs and the operator applies it, False (``BudgetBeingDeleted``) while
the one found is being deleted. A finalizer other than the garbage collector's own (``foregroundDeletion``,
``orphan``) can hold such a budget for good; the condition names it, with one Warning Event on the service, since no
budget protects the replicas until whoever set the finalizer removes it.

**Which replicas a scale-down deletes.** The ReplicaSet controller deletes a Deployment's replicas with the lowest
``controller.kubernetes.io/pod-deletion-cost`` first (after unbound, unready and not-running ones); left alone it
spreads, taking replicas from the servers that hold the most, so that every server keeps a few and none is freed to
lend. Each pass therefore gives every bound, live replica of a service the cost :func:`replica_deletion_costs` rules:
the number of the service's replicas on its server times the number of inference servers, plus the server's rank in
Lyra's lend order (:func:`lyra.core.ordering.lend_order`: most GPUs first, then by name; 0 is lent first). The
fewer replicas a server holds the sooner they go, and among servers holding as many, the one Lyra lends next is
emptied first: a scale-down frees whole servers, those the loan cycle lends. The cost is written
(:class:`~lyra.operator.actions.SetDeletionCost`) only where it differs from the one the pod carries, before the
Deployment is scaled.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from lyra.api import conditions, names
from lyra.api.resources import ConditionStatus, InferenceServiceStatus, ReclaimWait, name_problem, wire
from lyra.core.model import Pool
from lyra.core.ordering import lend_order
from lyra.core.placement import PodRole
from lyra.operator import manifests
from lyra.operator.actions import (
    ApplyDeployment,
    ApplyDisruptionBudget,
    PatchStatus,
    ReclaimWaitReport,
    SetDeletionCost,
)
from lyra.operator.changes import Changes, changed_fields
from lyra.operator.conditions import set_applied, set_condition
from lyra.operator.isolation import Undecidable, decide_alone, key_of
from lyra.operator.sizing import (
    InferenceGpuCaps,
    desired_replicas,
    main_inference_type,
    server_sizes,
    servers_needed,
)
from lyra.operator.templates import template_problem
from lyra.operator.timestamps import format_time_ms, parse_time
from lyra.operator.world import FoundBudget, ObjectRef, PodRecord, ServiceRecord, World

log = logging.getLogger("lyra.operator")


class ServiceBook:
    def __init__(
        self, world: World, changes: Changes, *, scheduler_name: str = "", caps: InferenceGpuCaps | None = None
    ) -> None:
        self.world = world
        self.changes = changes
        self.scheduler_name = scheduler_name  # of the replicas (OperatorConfig.scheduler_name)
        self.caps = caps or InferenceGpuCaps()
        #: Per capped namespace, the GPUs its services have not claimed yet in this pass (name order).
        self.cap_left: dict[str, int] = {}
        #: Per GPU type, the services whose replicas need it (named in reclaim messages).
        self.users: dict[str, list[str]] = defaultdict(list)
        #: Each service's status as this pass decides it, and the problem it reports (written by write_statuses).
        self.statuses: dict[str, InferenceServiceStatus] = {}
        self.problems: dict[str, tuple[str, str]] = {}
        #: Each inference server's place in the lend order (0: lent first), and each service's bound, live replicas.
        self.lend_rank = {
            node.name: rank for rank, node in enumerate(lend_order(n for n in world.nodes if n.pool is Pool.INFERENCE))
        }
        self.replicas_of: dict[str, list[PodRecord]] = defaultdict(list)
        for pod in world.pods:
            if pod.role is PodRole.INFERENCE and pod.owner is not None and pod.node and pod.is_live:
                self.replicas_of[pod.owner].append(pod)

    def plan(self) -> dict[str, int]:
        """Statuses and Deployments of every service; returns the servers needed per inference GPU type. Each
        service is decided alone (:func:`lyra.operator.isolation.decide_alone`): one that raises gets no Deployment
        and no servers, and says why (``InvalidSpec``); the others are decided in the same pass."""
        main_type = main_inference_type(self.world.nodes)
        demands: dict[str, Counter[int]] = defaultdict(Counter)  # per GPU type, replicas per size
        server_gpus = server_sizes(self.world.nodes)
        for service in self.world.services:
            claimed = dict(self.cap_left)
            outcome = decide_alone(
                self.changes,
                service.ref,
                "sizing the service",
                partial(self.plan_one, service, main_type, server_gpus),
            )
            if isinstance(outcome, Undecidable):
                self.cap_left = claimed  # it claims nothing of its namespace's cap
                self.problems.pop(service.ref.key, None)
                self.service_status(service, 0, service.spec.gpu_type, 0, (conditions.INVALID_SPEC, outcome.message))
                continue
            if outcome is not None:
                gpu_type, replicas = outcome
                demands[gpu_type][service.spec.gpus_per_replica] += replicas
                if replicas:
                    self.users[gpu_type].append(f"{service.ref.key} ({replicas} replicas)")
        demand = servers_needed(dict(demands), server_gpus)
        for gpu_type in server_gpus:
            demand.setdefault(gpu_type, 0)
        self.changes.report = replace(self.changes.report, inference_servers_needed=dict(sorted(demand.items())))
        return demand

    def plan_one(
        self, service: ServiceRecord, main_type: str | None, server_gpus: Mapping[str, int]
    ) -> tuple[str, int] | None:
        """One service's status and Deployment; returns its GPU type and the replicas it claims (``None``: none, it
        has a problem its status says)."""
        replicas = desired_replicas(service.spec)
        gpu_type = service.spec.gpu_type or main_type
        size = server_gpus.get(gpu_type, 0) if gpu_type else 0
        if gpu_type is None or gpu_type not in server_gpus or service.spec.gpus_per_replica > size:
            reason = (
                f"no inference server has GPU type {gpu_type}"
                if gpu_type not in server_gpus
                else f"{service.spec.gpus_per_replica} GPUs per replica exceed a {gpu_type} server ({size})"
            )
            self.service_status(service, replicas, gpu_type, 0, (conditions.NO_SERVERS, reason))
            return None
        built = self.build(service, gpu_type)
        if isinstance(built, str):  # this service alone: no Deployment, no demand
            self.service_status(service, 0, gpu_type, 0, (conditions.INVALID_SPEC, built))
            return None
        wanted, replicas = replicas, self.within_cap(service, replicas)
        needed_alone = servers_needed({gpu_type: {service.spec.gpus_per_replica: replicas}}, server_gpus)
        self.service_status(service, replicas, gpu_type, needed_alone[gpu_type], None, wanted=wanted)
        self.deployment(service, replicas, built)
        self.disruption_budget(service)
        self.deletion_costs(service)
        return gpu_type, replicas

    def within_cap(self, service: ServiceRecord, wanted: int) -> int:
        """The replicas the service may have: ``wanted``, or what its namespace's cap has left (services of a
        namespace claim in name order, the order of the World)."""
        namespace = service.ref.namespace
        cap = self.caps.cap_of(namespace)
        if cap is None:
            return wanted
        left = self.cap_left.setdefault(namespace, cap)
        granted = min(wanted, left // service.spec.gpus_per_replica)
        self.cap_left[namespace] = left - granted * service.spec.gpus_per_replica
        return granted

    def cap_condition(
        self, service: ServiceRecord, status: InferenceServiceStatus, replicas: int, wanted: int | None
    ) -> InferenceServiceStatus:
        """``Capped`` as the namespace's cap says (removed where none applies); a Warning Event when it turns true."""
        namespace = service.ref.namespace
        cap = self.caps.cap_of(namespace)
        if cap is None or wanted is None:
            if any(c.type == conditions.CAPPED for c in status.conditions):
                status = status.model_copy(
                    update={"conditions": [c for c in status.conditions if c.type != conditions.CAPPED]}
                )
            return status
        gpus = service.spec.gpus_per_replica
        capped = replicas < wanted
        if capped:
            over = wanted - replicas
            message = (
                f"{replicas} of {wanted} replicas: namespace {namespace} may claim {cap} inference GPUs "
                f"(--inference-gpu-cap), its services before this one in name order hold "
                f"{cap - self.cap_left[namespace] - replicas * gpus}; {over} replicas ({over * gpus} GPUs) over the cap"
            )
        else:
            message = f"{wanted} replicas ({wanted * gpus} GPUs) within namespace {namespace}'s cap of {cap} GPUs"
        was = next((c for c in status.conditions if c.type == conditions.CAPPED), None)
        status = set_condition(
            status,
            conditions.CAPPED,
            capped,
            conditions.NAMESPACE_CAP if capped else conditions.WITHIN_CAP,
            message,
            now=self.changes.now,
            generation=service.generation,
        )
        if capped and (was is None or was.status is not ConditionStatus.TRUE):
            self.changes.emit(service.ref, conditions.CAPPED, message, warning=True)
        return status

    def build(self, service: ServiceRecord, gpu_type: str) -> dict[str, Any] | str:
        """The Deployment the service wants (with 0 replicas, set by :meth:`deployment`), or why none can be made
        from its template (naming the field)."""
        named = name_problem(service.ref.name)
        if named is not None:  # stored before the CRD's rule on names: no Deployment could label its replicas
            return f"the replicas cannot be made: {named}"
        problem = template_problem(service.spec.template, "gpusPerReplica")
        if problem is not None:
            return f"the replicas cannot be built: {problem}"
        try:
            return manifests.deployment(
                namespace=service.ref.namespace,
                service=service.ref.name,
                service_uid=service.ref.uid,
                replicas=0,
                template=service.spec.template.body(),
                gpus_per_replica=service.spec.gpus_per_replica,
                gpu_type=gpu_type,
                scheduler_name=self.scheduler_name,
            )
        except Exception as error:  # a bug in building it stops this service only, and says so
            log.exception("InferenceService %s: its Deployment cannot be built", service.ref.key)
            return f"the replicas cannot be built: {type(error).__name__}: {error}"

    def deployment(self, service: ServiceRecord, replicas: int, manifest: dict[str, Any]) -> None:
        """Create the service's Deployment, or bring it to ``replicas`` and, when the template hash it records is not
        that of the pod template rendered now (or it records none: an older operator's), to the rendered template."""
        manifest["spec"]["replicas"] = replicas
        wanted = manifests.recorded_template_hash(manifest)
        if service.deployment_replicas is None:
            self.changes.actions.append(ApplyDeployment(service.ref, manifest, create=True))
            return
        roll = service.deployment_template_hash != wanted
        if not roll and service.deployment_replicas == replicas:
            return
        action = ApplyDeployment(
            service.ref, manifest, create=False, roll=roll, resource_version=service.deployment_version
        )
        self.changes.actions.append(action)
        if service.deployment_replicas != replicas:
            self.changes.emit(service.ref, conditions.SCALED, f"replicas {service.deployment_replicas} -> {replicas}")
        if roll:
            was = service.deployment_template_hash or "none (made by an earlier version of the operator)"
            self.changes.emit(
                service.ref,
                conditions.TEMPLATE_CHANGED,
                f"the replicas' pod template changed (template hash {was} -> {wanted}): the Deployment rolls them",
            )

    def disruption_budget(self, service: ServiceRecord) -> None:
        """Apply the service's PodDisruptionBudget where the one found is missing or not the one the operator writes
        for ``spec.disruptionBudget``, or delete the one the service owns when it asks for none (module docstring)."""
        budget = service.spec.disruption_budget
        wanted = "" if budget is None else str(budget.max_unavailable)
        found = service.budget
        self.budget_condition(service, wanted, found)
        if found is not None and found.deleting:
            return  # the pass its deletion wakes applies the one asked for, if any: once, to a budget that stays
        if budget is None and (found is None or not found.owned):
            return
        if budget is not None and found is not None and found.kept == wanted:
            return
        ref = ObjectRef(names.DISRUPTION_BUDGET_KIND, service.ref.namespace, service.ref.name)
        manifest = (
            None
            if budget is None
            else manifests.disruption_budget(
                namespace=service.ref.namespace,
                service=service.ref.name,
                service_uid=service.ref.uid,
                max_unavailable=budget.max_unavailable,
            )
        )
        self.changes.actions.append(ApplyDisruptionBudget(ref, manifest, wanted))
        refused = self.changes.failures.get(key_of(ref))
        if refused is not None and self.changes.now < refused.retry_at:
            return  # held back: the write is not tried in this pass, so nothing is said
        was = "none" if found is None else found.shown
        self.changes.emit(  # on the budget, the write's subject: an Event after a refused write is not posted
            ref,
            conditions.DISRUPTION_BUDGET,
            f"PodDisruptionBudget {service.ref.name}: {was} -> "
            + (f"maxUnavailable {wanted}" if wanted else "none (deleted)"),
        )

    def budget_condition(self, service: ServiceRecord, wanted: str, found: FoundBudget | None) -> None:
        """``DisruptionBudget`` on the service's status, for a service that asks for a budget (``wanted``: its
        ``maxUnavailable``; removed where it asks for none), and a Warning Event when a budget being deleted is held by
        finalizers the garbage collector does not remove (module docstring)."""
        status = self.statuses[service.ref.key]
        was = next((c for c in status.conditions if c.type == conditions.DISRUPTION_BUDGET), None)
        if not wanted:
            if was is not None:
                kept = [c for c in status.conditions if c.type != conditions.DISRUPTION_BUDGET]
                self.statuses[service.ref.key] = status.model_copy(update={"conditions": kept})
            return
        name = service.ref.name
        held: list[str] = []
        if found is not None and found.deleting:
            held = [f for f in found.finalizers if f not in names.GARBAGE_COLLECTOR_FINALIZERS]
            reason = conditions.BUDGET_BEING_DELETED
            message = (
                f"PodDisruptionBudget {name} is being deleted"
                + (f", held by finalizers the garbage collector does not remove ({', '.join(held)})" if held else "")
                + f": the operator applies maxUnavailable {wanted} once it is gone"
            )
        elif found is not None and found.kept == wanted:
            reason, message = conditions.BUDGET_IN_PLACE, f"PodDisruptionBudget {name}: maxUnavailable {wanted}"
        else:
            reason = conditions.BUDGET_APPLYING
            message = (
                f"PodDisruptionBudget {name} "
                + ("is missing" if found is None else f"has {found.shown}")
                + f": the operator applies maxUnavailable {wanted}"
            )
        self.statuses[service.ref.key] = set_condition(
            status,
            conditions.DISRUPTION_BUDGET,
            reason == conditions.BUDGET_IN_PLACE,
            reason,
            message,
            now=self.changes.now,
            generation=service.generation,
        )
        if held and (was is None or was.message != message):
            self.changes.emit(service.ref, conditions.DISRUPTION_BUDGET, message, warning=True)

    def deletion_costs(self, service: ServiceRecord) -> None:
        """Write the deletion cost of each of the service's replicas whose cost differs from the rule's (module
        docstring, "Which replicas a scale-down deletes")."""
        pods = self.replicas_of.get(service.ref.key, [])
        costs = replica_deletion_costs(Counter(p.node for p in pods), self.lend_rank)
        for pod in sorted(pods, key=lambda p: p.ref.name):
            cost = costs[pod.node]
            if pod.deletion_cost != str(cost):
                self.changes.actions.append(SetDeletionCost(pod.ref, cost, service.ref, pod.node))

    def service_status(
        self,
        service: ServiceRecord,
        replicas: int,
        gpu_type: str | None,
        needed: int,
        problem: tuple[str, str] | None,
        *,
        wanted: int | None = None,
    ) -> None:
        """The service's status as this pass decides it; ``wanted``: the replicas before its namespace's cap (``None``
        when the service claims nothing: it has a problem)."""
        status = service.status.model_copy(
            update={
                "replicas": replicas,
                "ready_replicas": service.ready_replicas,
                "servers_needed": needed,
                "selector": manifests.selector_of(service.ref.name),
                "gpu_type": gpu_type,
                "observed_generation": service.generation,
            }
        )
        if problem is not None:
            status = set_condition(
                status,
                conditions.READY,
                False,
                problem[0],
                problem[1],
                now=self.changes.now,
                generation=service.generation,
            )
        else:
            ready = service.ready_replicas >= replicas
            status = set_condition(
                status,
                conditions.READY,
                ready,
                conditions.REPLICAS_READY if ready else conditions.REPLICAS_PENDING,
                f"{service.ready_replicas} of {replicas} replicas ready",
                now=self.changes.now,
                generation=service.generation,
            )
        status = self.cap_condition(service, status, replicas, wanted)
        self.statuses[service.ref.key] = status
        if problem is not None:
            self.problems[service.ref.key] = problem

    def follow_reclaims(self, reclaiming_since: Mapping[str, float]) -> None:
        """Start or end each service's reclaim record. ``reclaiming_since``: per GPU type, when the oldest reclaim
        under way in this pass (or begun and finished in it) began."""
        for service in self.world.services:
            decide_alone(
                self.changes,
                service.ref,
                "following the reclaim for the service",
                partial(self.follow_reclaim, service, reclaiming_since),
            )

    def follow_reclaim(self, service: ServiceRecord, reclaiming_since: Mapping[str, float]) -> None:
        """One service's reclaim record, started or ended."""
        now = self.changes.now
        status = self.statuses.get(service.ref.key)
        if status is None or status.gpu_type is None:
            return
        running = sum(
            1
            for pod in self.world.pods_of(service.ref.key)
            if pod.role is PodRole.INFERENCE and pod.phase == names.POD_RUNNING and pod.node and not pod.terminating
        )
        record = status.reclaim
        if record is None:
            began = reclaiming_since.get(status.gpu_type)
            if began is not None and running < status.replicas:
                record = ReclaimWait(started_at=format_time_ms(began), gpu_type=status.gpu_type)
                self.statuses[service.ref.key] = status.model_copy(update={"reclaim": record})
            return
        if running < status.replicas:
            return
        began = parse_time(record.started_at)
        waited = max(now - began, 0.0) if began is not None else 0.0
        self.changes.emit(
            service.ref,
            conditions.RECLAIM_SERVED,
            f"{running} of {status.replicas} replicas running {waited:.1f} s after the reclaim of "
            f"{record.gpu_type} servers began",
        )
        wait = ReclaimWaitReport(service.ref.key, record.gpu_type, round(waited, 3))
        report = self.changes.report
        self.changes.report = replace(report, reclaim_waits=(*report.reclaim_waits, wait))
        self.statuses[service.ref.key] = status.model_copy(update={"reclaim": None})

    def write_statuses(self) -> None:
        for service in self.world.services:
            status = self.statuses.get(service.ref.key)
            if status is None:
                continue
            failure = self.changes.failures.get(key_of(service.ref))
            status = set_applied(status, failure, now=self.changes.now, generation=service.generation)
            if status == service.status:
                continue
            written = wire(status)
            self.changes.actions.append(PatchStatus(service.ref, written, changed_fields(service.status, written)))
            problem = self.problems.get(service.ref.key)
            if problem is not None and service.status.conditions != status.conditions:
                self.changes.emit(service.ref, problem[0], problem[1], warning=True)


def replica_deletion_costs(replicas_on: Mapping[str, int], lend_rank: Mapping[str, int]) -> dict[str, int]:
    """The deletion cost of one service's replicas on each server they hold (``replicas_on``: how many there): the
    count times the number of ranked servers, plus the server's rank in the lend order (``lend_rank``: 0 to n - 1,
    0 for the server lent first; a server without one ranks after them all, by name). Lower costs are deleted first:
    the servers holding the fewest replicas, and among equals the one lent first, are emptied first. Each server's
    cost is its own, so a scale-down never splits its deletions between servers by chance."""
    ranks = dict(lend_rank)
    for node in sorted(n for n in replicas_on if n not in ranks):
        ranks[node] = len(ranks)
    return {node: count * len(ranks) + ranks[node] for node, count in replicas_on.items()}
