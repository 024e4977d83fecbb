"""An in-memory cluster for the operator's unit tests: objects as the API server stores them, and a small stand-in
for what the API server, the scheduler and the kubelet do with the operator's actions.

It shares no code with the operator's commit step: it applies actions by its own reading of them, places pods by
its own rules (the node with room that its required affinity and tolerations allow and its preferred affinity
weighs most, then by name), and keeps terminating pods until ``finish_terminations``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from lyra.operator.actions import (
    ApplyDeployment,
    ApplyDisruptionBudget,
    CreatePod,
    CreateService,
    Decision,
    DeletePod,
    Emit,
    PatchStatus,
    ReclaimReport,
    SetDeletionCost,
    SetNodeState,
    SetPodRole,
)
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.node_health import HealthMemory
from lyra.operator.readers import read_world
from lyra.operator.world import World

T4 = "Tesla-T4"
A100 = "NVIDIA-A100-SXM4-80GB"


def report_reclaim(decision: Decision, gpu_type: str = T4) -> ReclaimReport:
    """The reclaim a decision reports for ``gpu_type`` (there must be one)."""
    reclaim = decision.report.loans[gpu_type].reclaim
    assert reclaim is not None, f"no reclaim of {gpu_type}: {decision.report.as_json()}"
    return reclaim


def node(name: str, pool: str, product: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {"lyra.dev/pool": pool, "nvidia.com/gpu.product": product, "kubernetes.io/hostname": name},
            "annotations": {},
        },
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def training_job(name: str, low: int, high: int, duration: float = 600, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lyra.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "minWorkers": low,
            "maxWorkers": high,
            "gpusPerWorker": spec.pop("gpusPerWorker", 1),
            "expectedDuration": duration,
            "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}},
            **spec,
        },
    }


def inference_service(name: str, replicas: int, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lyra.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "serve", "uid": f"uid-{name}", "generation": 1},
        "spec": {
            "replicas": replicas,
            "gpusPerReplica": gpus,
            "minReplicas": 0,
            "maxReplicas": 64,
            "template": {"spec": {"containers": [{"name": "server", "image": "server:1"}]}},
            **spec,
        },
    }


def replica_set(service: str) -> dict[str, Any]:
    """The controller reference of a replica of ``service``: its Deployment's ReplicaSet (named after it)."""
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{service}-5d8f9", "uid": f"rs-{service}",
            "controller": True}  # fmt: skip


def _matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(e["key"]) in e["values"] for e in term.get("matchExpressions", []))


def _tolerated(taints: list[dict[str, Any]], tolerations: list[dict[str, Any]]) -> bool:
    for taint in taints:
        if taint.get("effect") != "NoSchedule":
            continue
        if not any(t.get("key") == taint["key"] and t.get("value") == taint.get("value") for t in tolerations):
            return False
    return True


class FakeCluster:
    def __init__(self, nodes: Iterable[dict[str, Any]], now: float = 1_000_000.0) -> None:
        self.nodes = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}  # the caller's data stays as it was
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, dict[str, Any]] = {}
        self.headless: dict[str, dict[str, Any]] = {}  # Services, by namespace/name
        self.budgets: dict[str, dict[str, Any]] = {}  # PodDisruptionBudgets, by namespace/name
        #: The template each replica was made from (what a ReplicaSet's pod-template-hash says), by pod key.
        self.made_from: dict[str, dict[str, Any]] = {}
        self.events: list[Emit] = []
        self.now = now
        self.uids = 0
        self.versions = 0  # the resourceVersions of Deployments
        self.memory: HealthMemory | None = None  # the running operator's memory of GPU dips, when a test keeps one

    # -- objects -------------------------------------------------------------------------------------------------

    def add_job(self, body: dict[str, Any]) -> None:
        self.jobs[f"ml/{body['metadata']['name']}"] = copy.deepcopy(body)

    def add_service(self, body: dict[str, Any]) -> None:
        self.services[f"serve/{body['metadata']['name']}"] = copy.deepcopy(body)

    def world(self) -> World:
        return read_world(
            self.now,
            nodes=self.nodes.values(),
            pods=self.pods.values(),
            jobs=self.jobs.values(),
            services=self.services.values(),
            deployments=self.deployments.values(),
            budgets=[b for b in self.budgets.values() if "lyra.dev/service" in b["metadata"].get("labels", {})],
            memory=self.memory,
        )

    def state(self, node_name: str) -> str | None:
        return self.nodes[node_name]["metadata"]["labels"].get("lyra.dev/state")

    def taint(self, node_name: str) -> list[tuple[str, str]]:
        return [(t["key"], t.get("value", "")) for t in self.nodes[node_name]["spec"].get("taints", [])]

    def workers(self, job: str, *, live: bool = True) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods.values()
            if p["metadata"]["labels"].get("lyra.dev/job") == job
            and (not live or ("deletionTimestamp" not in p["metadata"] and p["status"]["phase"] == "Running"))
        ]

    def job_status(self, job: str) -> dict[str, Any]:
        return self.jobs[f"ml/{job}"].get("status", {})

    def used(self, node_name: str) -> int:
        """The GPUs of the pods on the node, and of those nominated to it (kube-scheduler places no pod of a lower
        priority on the GPUs a preemptor waits for; Lyra's pods have none)."""
        return sum(
            int(p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
            for p in self.pods.values()
            if (p["spec"].get("nodeName") or p["status"].get("nominatedNodeName")) == node_name
            and p["status"]["phase"] in ("Running", "Pending")
        )

    # -- what the API server, scheduler and kubelet do -------------------------------------------------------

    def apply(self, decision: Decision, limit: int | None = None) -> None:
        for action in decision.actions[:limit]:
            self._apply(action)
        self.schedule()

    def _apply(self, action: object) -> None:
        if isinstance(action, SetNodeState):
            meta = self.nodes[action.node]["metadata"]
            meta["labels"]["lyra.dev/state"] = action.state.value
            for key, value in action.annotations.items():
                if value is None:
                    meta["annotations"].pop(key, None)
                else:
                    meta["annotations"][key] = value
            self.nodes[action.node]["spec"]["taints"] = [
                {"key": t.key, "value": t.value, "effect": t.effect} for t in action.taints
            ]
        elif isinstance(action, PatchStatus):
            store = self.jobs if action.ref.kind == "TrainingJob" else self.services
            store[action.ref.key]["status"] = copy.deepcopy(dict(action.status))
        elif isinstance(action, DeletePod):
            pod = self.pods.get(action.ref.key)
            if pod is not None:
                held = bool(pod["metadata"].get("finalizers"))  # the API server only marks a pod with finalizers
                if (action.grace_seconds == 0 or not pod["spec"].get("nodeName")) and not held:
                    del self.pods[action.ref.key]
                else:
                    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        elif isinstance(action, SetPodRole):
            labels = self.pods[action.ref.key]["metadata"]["labels"]
            labels["lyra.dev/role"] = action.role
            if action.owner is not None and action.owner.kind == "TrainingJob":
                labels["lyra.dev/job"] = action.owner.name
        elif isinstance(action, SetDeletionCost):
            pod = self.pods.get(action.ref.key)
            if pod is not None:
                pod["metadata"].setdefault("annotations", {})["controller.kubernetes.io/pod-deletion-cost"] = str(
                    action.cost
                )
        elif isinstance(action, CreatePod):
            if action.ref.key not in self.pods:
                body = copy.deepcopy(dict(action.manifest))
                self.uids += 1
                body["metadata"]["uid"] = f"pod-{self.uids}"
                body["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
                body["status"] = {"phase": "Pending"}
                self.pods[action.ref.key] = body
        elif isinstance(action, CreateService):
            self.headless.setdefault(action.ref.key, copy.deepcopy(dict(action.manifest)))
        elif isinstance(action, ApplyDeployment):
            self._deploy(action)
        elif isinstance(action, ApplyDisruptionBudget):
            if action.manifest is None:
                self.budgets.pop(action.ref.key, None)
            else:  # as a forced server-side apply: the fields it sets are its; others' stay (a minAvailable)
                applied = copy.deepcopy(dict(action.manifest))
                budget = self.budgets.setdefault(action.ref.key, {"metadata": {}, "spec": {}})
                meta = budget["metadata"]
                meta.update({k: v for k, v in applied["metadata"].items() if k not in ("labels", "ownerReferences")})
                meta["labels"] = {**meta.get("labels", {}), **applied["metadata"]["labels"]}
                owners = {
                    o["uid"]: o for o in [*meta.get("ownerReferences", []), *applied["metadata"]["ownerReferences"]]
                }
                meta["ownerReferences"] = list(owners.values())
                budget["spec"].update(applied["spec"])  # the selector is atomic: replaced whole
                self.versions += 1
                meta["resourceVersion"] = str(self.versions)
        elif isinstance(action, Emit):
            self.events.append(action)

    def _deletion_rank(self, key: str) -> tuple[bool, int, str]:
        """The ReplicaSet controller's order of deletion, as far as the fake's replicas differ: unbound first, then
        the lowest ``controller.kubernetes.io/pod-deletion-cost`` (0 when absent), then (the fake's own tie-break)
        the highest name."""
        pod = self.pods[key]
        cost = int((pod["metadata"].get("annotations") or {}).get("controller.kubernetes.io/pod-deletion-cost", "0"))
        return (bool(pod["spec"].get("nodeName")), cost, "".join(chr(0x10FFFF - ord(c)) for c in key))

    def _deploy(self, action: ApplyDeployment) -> None:
        """Create, scale (only ``spec.replicas`` changes) or, with ``roll``, write the template and its hash too; the
        Deployment controller then replaces every replica made from another template (all at once, for brevity)."""
        manifest = copy.deepcopy(dict(action.manifest))
        key = action.ref.key
        body = self.deployments.get(key)
        if action.create or body is None:
            body = self.deployments[key] = manifest
            body["status"] = {"replicas": 0, "readyReplicas": 0}
        else:
            body["spec"]["replicas"] = manifest["spec"]["replicas"]
            if action.roll:
                body["spec"]["template"] = manifest["spec"]["template"]
                annotations = body["metadata"].setdefault("annotations", {})
                annotations.update(manifest["metadata"]["annotations"])
        self.versions += 1
        body["metadata"]["resourceVersion"] = str(self.versions)
        template = body["spec"]["template"]
        for stale in [
            k
            for k, p in self.pods.items()
            if p["metadata"]["labels"].get("lyra.dev/service") == action.ref.name and self.made_from.get(k) != template
        ]:
            del self.pods[stale]
            self.made_from.pop(stale, None)
        mine = sorted(
            k for k, p in self.pods.items() if p["metadata"]["labels"].get("lyra.dev/service") == action.ref.name
        )
        replicas = body["spec"]["replicas"]
        for extra in sorted(mine, key=self._deletion_rank)[: max(0, len(mine) - replicas)]:
            del self.pods[extra]
        taken = set(self.pods)
        free = (i for i in range(len(mine) + replicas) if f"{action.ref.namespace}/{action.ref.name}-r{i}" not in taken)
        for index in [next(free) for _ in range(len(mine), replicas)]:
            template = copy.deepcopy(body["spec"]["template"])
            name = f"{action.ref.name}-r{index}"
            self.made_from[f"{action.ref.namespace}/{name}"] = copy.deepcopy(body["spec"]["template"])
            self.pods[f"{action.ref.namespace}/{name}"] = {
                "metadata": {
                    **template["metadata"],
                    "name": name,
                    "namespace": action.ref.namespace,
                    "uid": f"replica-{name}",
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "ownerReferences": [replica_set(action.ref.name)],
                },
                "spec": template["spec"],
                "status": {"phase": "Pending"},
            }

    def schedule(self) -> None:
        for pod in sorted(self.pods.values(), key=lambda p: p["metadata"]["name"]):
            if pod["spec"].get("nodeName") or pod["status"].get("nominatedNodeName"):
                continue  # bound, or a preemptor the test binds once its victims are gone
            need = int(pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
            preferences = pod["spec"]["affinity"]["nodeAffinity"].get(
                "preferredDuringSchedulingIgnoredDuringExecution", []
            )

            def preference(name: str, preferences: list[dict[str, Any]] = preferences) -> int:
                labels = self.nodes[name]["metadata"]["labels"]
                return sum(p["weight"] for p in preferences if _matches(p["preference"], labels))

            candidates = sorted(self.nodes, key=lambda n: (-preference(n), n))
            for name in candidates:
                node_body = self.nodes[name]
                labels = node_body["metadata"]["labels"]
                terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                    "nodeSelectorTerms"
                ]
                if not any(_matches(t, labels) for t in terms):
                    continue
                if not _tolerated(node_body["spec"].get("taints", []), pod["spec"].get("tolerations", [])):
                    continue
                if node_body["spec"].get("unschedulable"):
                    continue  # cordoned: kube-scheduler places no pod there (NodeUnschedulable)
                capacity = int(node_body["status"]["allocatable"]["nvidia.com/gpu"])
                if capacity - self.used(name) >= need:
                    pod["spec"]["nodeName"] = name
                    pod["status"]["phase"] = "Running"
                    break
        for key, deployment in self.deployments.items():
            _, name = key.split("/")
            ready = [
                p
                for p in self.pods.values()
                if p["metadata"]["labels"].get("lyra.dev/service") == name and p["status"]["phase"] == "Running"
            ]
            deployment["status"] = {"replicas": deployment["spec"]["replicas"], "readyReplicas": len(ready)}

    def finish_terminations(self, *, except_on: Iterable[str] = ()) -> None:
        """Terminating pods are gone, but those on the ``except_on`` nodes (no kubelet there to confirm) and those
        with finalizers (nobody removes them)."""
        dead = set(except_on)
        for key in [
            k
            for k, p in self.pods.items()
            if "deletionTimestamp" in p["metadata"]
            and p["spec"].get("nodeName") not in dead
            and not p["metadata"].get("finalizers")
        ]:
            del self.pods[key]
        self.schedule()

    def settle(self, config: OperatorConfig, passes: int = 10, seconds: float = 1) -> None:
        """Decide and apply until a pass has nothing to do, the pods being deleted gone after each pass, ``seconds``
        between passes."""
        for _ in range(passes):
            decision = decide(self.world(), config)
            if decision.is_noop:
                return
            self.apply(decision)
            self.finish_terminations()
            self.tick(seconds)
        raise AssertionError(f"no fixed point after {passes} passes")

    def tick(self, seconds: float) -> None:
        self.now += seconds
