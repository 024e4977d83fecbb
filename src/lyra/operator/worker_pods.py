"""Worker pods made to match each running job's intent (target and planned placement): workers are interchangeable,
the lowest-indexed live workers carry the base role, surplus workers leave from nodes above their plan first, and a
new worker never reuses an index still held by a pod of an earlier run."""

from __future__ import annotations

from collections import defaultdict

from lyra.api import conditions, names
from lyra.core.placement import PodRole
from lyra.operator import manifests
from lyra.operator.actions import CreatePod, CreateService, SetPodRole
from lyra.operator.job_work import WorkLedger
from lyra.operator.training_pass import JobState, TrainingPass
from lyra.operator.world import ObjectRef, PodRecord


class WorkerPods:
    """The pods of the pass's running jobs."""

    def __init__(self, training: TrainingPass, work: WorkLedger) -> None:
        self.training = training
        self.work = work

    def converge_job(self, job: JobState) -> None:
        """One running job's pods made to match its intent."""
        spec = job.record.spec
        live = [p for p in job.live if p.ref.key not in self.training.changes.deleted]
        target = job.status.workers.target
        if len(live) > target:
            planned = dict(job.status.placements)
            on_node: dict[str, int] = defaultdict(int)
            for pod in live:
                on_node[pod.node] += 1
            # Leave first from nodes above their plan, unbound before bound, highest index first.
            ranked = sorted(
                live, key=lambda p: (on_node[p.node] <= planned.get(p.node, 0), bool(p.node), -(p.index or 0))
            )
            for pod in ranked[: len(live) - target]:
                self.training.changes.delete(pod, spec.preemption.grace_period_seconds, conditions.SCALED_IN)
                on_node[pod.node] -= 1
            live = [p for p in live if p.ref.key not in self.training.changes.deleted]
        elif len(live) < target and job.status.gpu_type:
            live += self.create_workers(job, live, target - len(live))
        self.relabel(job, live)
        current = len([p for p in live if p.node])
        if current != job.status.workers.current:
            fields = self.work.fold_work(job)
            fields["workers"] = job.status.workers.model_copy(update={"current": current})
            job.update(**fields)
        if current == len(live) == job.status.workers.target:
            actual: dict[str, int] = defaultdict(int)
            for pod in live:
                actual[pod.node] += 1
            if dict(actual) != job.status.placements:  # once placed, the status shows where workers really are
                job.update(placements=dict(sorted(actual.items())))

    def create_workers(self, job: JobState, live: list[PodRecord], count: int) -> list[PodRecord]:
        spec = job.record.spec
        gpu_type = job.status.gpu_type or ""
        room: dict[str, int] = dict(job.status.placements)
        for pod in live:
            if pod.node in room:
                room[pod.node] -= 1
        nodes = [n for n, r in sorted(room.items()) for _ in range(max(r, 0))]
        taken = {p.index for p in job.pods if p.index is not None} | self.training.stale_indices[job.key]
        indices = [i for i in range(len(taken) + count + 1) if i not in taken][:count]
        bases = sum(1 for p in live if p.role is PodRole.TRAINING_BASE)
        template = spec.template.body()
        # The c10d store lives on the lowest-indexed base worker, never scaled in: a live one, or this new gang's.
        hosts = [p.index for p in live if p.role is PodRole.TRAINING_BASE and p.index is not None]
        rendezvous_host = min(hosts) if hosts else min(indices)
        namespace, name = job.record.ref.namespace, job.record.ref.name
        service = manifests.rendezvous_service(namespace=namespace, job=name, job_uid=job.record.ref.uid)
        service_ref = ObjectRef("Service", namespace, manifests.rendezvous_service_name(name))
        self.training.changes.actions.append(CreateService(service_ref, service, job.record.ref))
        workers = manifests.WorkerPodBuilder(
            namespace=job.record.ref.namespace,
            job=job.record.ref.name,
            job_uid=job.record.ref.uid,
            template=template,
            gpus_per_worker=spec.gpus_per_worker,
            gpu_type=gpu_type,
            grace_seconds=spec.preemption.grace_period_seconds,
            min_workers=spec.min_workers,
            max_workers=spec.max_workers,
            rendezvous_host=rendezvous_host,
            scheduler_name=self.training.config.scheduler_name,
        )
        created = []
        for position, index in enumerate(indices):
            role = names.ROLE_BASE if bases + position < spec.min_workers else names.ROLE_FLEXIBLE
            node = nodes[position] if position < len(nodes) else None
            manifest = workers.pod(index=index, role=role, planned_node=node)
            ref = ObjectRef("Pod", job.record.ref.namespace, manifests.worker_name(job.record.ref.name, index))
            self.training.changes.actions.append(CreatePod(ref, manifest, job.record.ref, node or ""))
            pod_role = PodRole.TRAINING_BASE if role == names.ROLE_BASE else PodRole.TRAINING_FLEXIBLE
            created.append(
                PodRecord(ref, pod_role, job.key, index, "", names.POD_PENDING, spec.gpus_per_worker, False, None)
            )
        return created

    def relabel(self, job: JobState, live: list[PodRecord]) -> None:
        """The lowest-indexed live workers carry the base role; the rest are flexible. A worker whose labels were
        edited (its role or job label removed or changed) has both written back."""
        ordered = sorted(live, key=lambda p: (p.index if p.index is not None else 1 << 30, p.ref.name))
        for position, pod in enumerate(ordered):
            want = PodRole.TRAINING_BASE if position < job.record.spec.min_workers else PodRole.TRAINING_FLEXIBLE
            if (pod.role is not want or not pod.labelled) and pod.created is not None:
                label = names.ROLE_BASE if want is PodRole.TRAINING_BASE else names.ROLE_FLEXIBLE
                self.training.changes.actions.append(SetPodRole(pod.ref, label, job.record.ref, pod.node))
