"""The pods the operator makes carry Lyra's placement rules themselves: for every kind of node (pool, loan state, GPU
type) and every kind of pod Lyra makes, kube-scheduler's node affinity and taint checks admit exactly the nodes the
core's rules (:func:`lyra.core.placement.filter_nodes`) admit. The extender refuses nothing, so these objects are
the only enforcement (docs/architecture.md, "Where a pod lands").

The matcher here is written from the Kubernetes API reference (nodeSelectorTerms are ORed, matchExpressions ANDed;
a NoSchedule taint is tolerated by a toleration with the same key and value under ``Equal``, or the key under
``Exists``) and shares no code with :mod:`lyra.operator.manifests`.
"""

from __future__ import annotations

from itertools import product
from typing import Any

import pytest

from lyra.core.model import LoanState, Pool
from lyra.core.placement import NodeView, PodRequest, PodRole, filter_nodes
from lyra.operator import manifests

A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"
TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "x.invalid/a:1"}]}}


def node_kinds() -> list[tuple[Pool, LoanState | None, str]]:
    kinds: list[tuple[Pool, LoanState | None, str]] = [(Pool.TRAINING, None, t) for t in (A100, T4)]
    kinds += [(Pool.INFERENCE, state, t) for state, t in product(LoanState, (A100, T4))]
    return kinds


def labels_and_taints(pool: Pool, state: LoanState | None, gpu_type: str) -> tuple[dict[str, str], list[Any]]:
    labels = {"lyra.dev/pool": pool.value, "nvidia.com/gpu.product": gpu_type, "kubernetes.io/hostname": "n"}
    taints = []
    if state is not None:
        labels["lyra.dev/state"] = state.value
        taints.append({"key": "lyra.dev/state", "value": state.value, "effect": "NoSchedule"})
    return labels, taints


def expression_holds(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not modelled")


def admitted(spec: dict[str, Any], labels: dict[str, str], taints: list[dict[str, Any]]) -> bool:
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    if not any(
        all(expression_holds(e, labels) for e in term["matchExpressions"]) for term in required["nodeSelectorTerms"]
    ):
        return False
    for taint in taints:
        if taint["effect"] not in ("NoSchedule", "NoExecute"):
            continue
        tolerated = False
        for toleration in spec.get("tolerations", []):
            if toleration.get("effect") not in (None, "", taint["effect"]):
                continue
            if toleration.get("operator", "Equal") == "Exists":
                tolerated = toleration.get("key") in (None, "", taint["key"])
            else:
                tolerated = toleration.get("key") == taint["key"] and toleration.get("value") == taint["value"]
            if tolerated:
                break
        if not tolerated:
            return False
    return True


def worker_spec(role: str, gpu_type: str) -> dict[str, Any]:
    pod = manifests.worker_pod(
        namespace="ns", job="j", job_uid="u", index=0, role=role, template=TEMPLATE, gpus_per_worker=1,
        gpu_type=gpu_type, planned_node=None, grace_seconds=1, min_workers=1, max_workers=2,
    )  # fmt: skip
    spec: dict[str, Any] = pod["spec"]
    return spec


def replica_spec(gpu_type: str) -> dict[str, Any]:
    deployment = manifests.deployment(
        namespace="ns", service="s", service_uid="u", replicas=1, template=TEMPLATE, gpus_per_replica=1,
        gpu_type=gpu_type,
    )  # fmt: skip
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


CASES = [
    (role, wanted, kind)
    for role in (PodRole.INFERENCE, PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE)
    for wanted in (A100, T4)
    for kind in node_kinds()
]


@pytest.mark.parametrize(("role", "wanted", "kind"), CASES)
def test_the_operators_pods_admit_exactly_the_nodes_lyras_rules_admit(
    role: PodRole, wanted: str, kind: tuple[Pool, LoanState | None, str]
) -> None:
    pool, state, gpu_type = kind
    labels, taints = labels_and_taints(pool, state, gpu_type)
    if role is PodRole.INFERENCE:
        spec = replica_spec(wanted)
        request = PodRequest(role, 1)
        # A service names its GPU type; the core's inference rule is about loan states only.
        same_type = gpu_type == wanted
    else:
        spec = worker_spec("base" if role is PodRole.TRAINING_BASE else "flexible", wanted)
        request = PodRequest(role, 1, gpu_types=frozenset({wanted}))
        same_type = True
    view = NodeView("n", pool, state if pool is Pool.INFERENCE else None, 8, 8, 0, gpu_type)
    core_admits = bool(filter_nodes(request, [view]).passed) and same_type
    assert admitted(spec, labels, taints) == core_admits


def test_a_gpu_pod_lyra_does_not_manage_stays_off_every_inference_server() -> None:
    """Stricter than the core's rule for unmanaged pods (which allows serving and idle servers): without a toleration
    of Lyra's state taint, another GPU pod runs on training servers only."""
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": []}]}}}}  # fmt: skip
    for pool, state, gpu_type in node_kinds():
        labels, taints = labels_and_taints(pool, state, gpu_type)
        assert admitted(spec, labels, taints) == (pool is Pool.TRAINING)
