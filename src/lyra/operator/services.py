"""The inference side of a pass: each InferenceService's replicas (from its spec or its load), its Deployment, its
status, and the servers of each GPU type inference needs (:mod:`lyra.operator.sizing`)."""

from __future__ import annotations

from collections import defaultdict

from lyra.api.resources import wire
from lyra.core.model import Pool
from lyra.operator import manifests
from lyra.operator.actions import ApplyDeployment, PatchStatus
from lyra.operator.changes import Changes, changed_fields
from lyra.operator.conditions import set_condition
from lyra.operator.observe import ServiceRecord, World
from lyra.operator.sizing import desired_replicas, main_inference_type, server_size, servers_needed


class ServiceBook:
    def __init__(self, world: World, changes: Changes) -> None:
        self.world = world
        self.changes = changes
        #: Per GPU type, the services whose replicas need it (named in reclaim messages).
        self.users: dict[str, list[str]] = defaultdict(list)

    def plan(self) -> dict[str, int]:
        """Statuses and Deployments of every service; returns the servers needed per inference GPU type."""
        main_type = main_inference_type(self.world.nodes)
        demands: dict[str, list[int]] = defaultdict(list)
        types = {n.gpu_type for n in self.world.nodes if n.pool is Pool.INFERENCE}
        for service in self.world.services:
            replicas = desired_replicas(service.spec)
            gpu_type = service.spec.gpu_type or main_type
            size = server_size(self.world.nodes, gpu_type) if gpu_type else 0
            if gpu_type is None or gpu_type not in types or service.spec.gpus_per_replica > size:
                reason = (
                    f"no inference server has GPU type {gpu_type}"
                    if gpu_type not in types
                    else f"{service.spec.gpus_per_replica} GPUs per replica exceed a {gpu_type} server ({size})"
                )
                self.service_status(service, replicas, gpu_type, 0, ("NoServers", reason))
                continue
            demands[gpu_type] += [service.spec.gpus_per_replica] * replicas
            if replicas:
                self.users[gpu_type].append(f"{service.ref.key} ({replicas} replicas)")
            needed_alone = servers_needed({gpu_type: [service.spec.gpus_per_replica] * replicas}, self.world.nodes)
            self.service_status(service, replicas, gpu_type, needed_alone[gpu_type], None)
            self.deployment(service, replicas, gpu_type)
        demand = servers_needed(dict(demands), self.world.nodes)
        for gpu_type in types:
            demand.setdefault(gpu_type, 0)
        self.changes.summary["inference_servers_needed"] = dict(sorted(demand.items()))
        return demand

    def deployment(self, service: ServiceRecord, replicas: int, gpu_type: str) -> None:
        if service.deployment_replicas == replicas:
            return
        manifest = manifests.deployment(
            namespace=service.ref.namespace,
            service=service.ref.name,
            service_uid=service.ref.uid,
            replicas=replicas,
            template=service.spec.template.model_dump(by_alias=True),
            gpus_per_replica=service.spec.gpus_per_replica,
            gpu_type=gpu_type,
        )
        self.changes.actions.append(ApplyDeployment(service.ref, manifest, create=service.deployment_replicas is None))
        if service.deployment_replicas is not None:
            self.changes.emit(service.ref, "Scaled", f"replicas {service.deployment_replicas} -> {replicas}")

    def service_status(
        self, service: ServiceRecord, replicas: int, gpu_type: str | None, needed: int, problem: tuple[str, str] | None
    ) -> None:
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
                status, "Ready", False, problem[0], problem[1], now=self.changes.now, generation=service.generation
            )
        else:
            ready = service.ready_replicas >= replicas
            status = set_condition(
                status,
                "Ready",
                ready,
                "ReplicasReady" if ready else "ReplicasPending",
                f"{service.ready_replicas} of {replicas} replicas ready",
                now=self.changes.now,
                generation=service.generation,
            )
        if status != service.status:
            self.changes.actions.append(PatchStatus(service.ref, wire(status), changed_fields(service.status, status)))
            if problem is not None and service.status.conditions != status.conditions:
                self.changes.emit(service.ref, problem[0], problem[1], warning=True)
