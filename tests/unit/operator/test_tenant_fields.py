"""Tenant safety: the scheduling fields of the pods the operator makes are Lyra's (docs/security.md).

Each field a template may not set is refused, naming the field: by the rules the CRDs carry (the same rules run here
in Python; tests/integration/test_tenant_fields.py sends them to a real API server) and by the operator for objects
stored before the rules, which get an ``InvalidSpec`` condition and no pod while a good job beside them runs. And
whatever a template still carries is overridden in the pods and Deployments the operator builds: with every hostile
field set at once, the pods admit exactly the nodes a clean template's pods admit.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lyra.api import names, tenancy
from lyra.api.crds import all_crds
from lyra.operator import manifests
from lyra.operator.actions import CreatePod
from lyra.operator.decide import OperatorConfig, decide

from .fake_cluster import A100, FakeCluster, inference_service, node, training_job
from .test_decide import CONFIG, settle
from .test_placement_rules import admitted, labels_and_taints, node_kinds

CONTAINERS = [{"name": "main", "image": "x.invalid/a:1"}]
STATE = names.STATE_TAINT
REQUIRED, PREFERRED = (
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
)

#: (id, a pod spec's hostile setting, the field the refusal names).
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("node-name", {"nodeName": "t4-serving-0"}, "nodeName"),
    ("scheduler-name", {"schedulerName": "my-scheduler"}, "schedulerName"),
    ("priority-class", {"priorityClassName": "system-cluster-critical"}, "priorityClassName"),
    ("priority", {"priority": 2_000_000_000}, "priority"),
    ("tolerate-everything", {"tolerations": [{"operator": "Exists"}]}, "tolerations"),
    ("tolerate-empty-key", {"tolerations": [{"key": "", "operator": "Exists", "effect": "NoSchedule"}]}, "tolerations"),
    ("tolerate-serving", {"tolerations": [{"key": STATE, "operator": "Equal", "value": "serving"}]}, "tolerations"),
    ("tolerate-any-state", {"tolerations": [{"key": STATE, "operator": "Exists"}]}, "tolerations"),
    ("select-a-pool", {"nodeSelector": {names.POOL_LABEL: names.POOL_INFERENCE}}, "nodeSelector"),
    ("select-a-state", {"nodeSelector": {names.STATE_LABEL: "serving"}}, "nodeSelector"),
    ("select-a-gpu-type", {"nodeSelector": {names.GPU_PRODUCT_LABEL: A100}}, "nodeSelector"),
    ("node-affinity", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Exists"}]}]}}}},
     "affinity.nodeAffinity"),
    # Pod (anti-)affinity terms reaching other namespaces (issue 25: this one kept another namespace's pods Pending
    # with 31 of 32 GPUs free): a term selects pods of the object's own namespace only.
    ("anti-affinity-every-namespace", {"affinity": {"podAntiAffinity": {REQUIRED: [
        {"labelSelector": {}, "namespaceSelector": {}, "topologyKey": "kubernetes.io/os"}]}}},
     "affinity.podAntiAffinity"),
    ("anti-affinity-named-namespace", {"affinity": {"podAntiAffinity": {PREFERRED: [
        {"weight": 100, "podAffinityTerm": {"namespaces": ["serving"], "topologyKey": "kubernetes.io/hostname"}}]}}},
     "affinity.podAntiAffinity"),
    ("affinity-named-namespace", {"affinity": {"podAffinity": {REQUIRED: [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "namespaces": ["other"],
         "topologyKey": "kubernetes.io/hostname"}]}}},
     "affinity.podAffinity"),
    ("affinity-namespace-selector", {"affinity": {"podAffinity": {PREFERRED: [
        {"weight": 1, "podAffinityTerm": {"namespaceSelector": {"matchLabels": {"team": "b"}},
                                          "topologyKey": "topology.kubernetes.io/zone"}}]}}},
     "affinity.podAffinity"),
]  # fmt: skip

#: What stays the tenant's: accepted, and kept in the pods.
ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("a-zone-selector", {"nodeSelector": {"topology.kubernetes.io/zone": "eu-1a"}}),
    ("a-keyed-toleration", {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}),
    ("pod-anti-affinity", {"affinity": {"podAntiAffinity": {PREFERRED: [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}}),
    ("own-service-account", {"serviceAccountName": "trainer"}),
    ("own-namespace-anti-affinity", {"affinity": {"podAntiAffinity": {REQUIRED: [
        {"labelSelector": {"matchLabels": {"app": "trainer"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
    ("topology-spread", {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "trainer"}}}]}),
]  # fmt: skip


def spec_with(setting: dict[str, Any]) -> dict[str, Any]:
    return {"containers": copy.deepcopy(CONTAINERS), **copy.deepcopy(setting)}


@pytest.mark.parametrize(("setting", "field"), [(r[1], r[2]) for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_each_lyra_field_is_refused_naming_it(setting: dict[str, Any], field: str) -> None:
    problem = tenancy.scheduling_problem(spec_with(setting))
    assert problem is not None
    assert problem.startswith(f"spec.template.spec.{field}: ")


@pytest.mark.parametrize("setting", [a[1] for a in ALLOWED], ids=[a[0] for a in ALLOWED])
def test_what_stays_the_tenants_is_accepted(setting: dict[str, Any]) -> None:
    assert tenancy.scheduling_problem(spec_with(setting)) is None


def test_both_crds_carry_every_rule_on_the_template_spec() -> None:
    for crd in all_crds().values():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        pod_spec = schema["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
        assert pod_spec["x-kubernetes-validations"] == tenancy.cel_rules()
        for rule in tenancy.RULES:  # every field a rule names is in the schema (CEL cannot see unknown fields)
            node_schema = pod_spec
            for part in rule.field.split("."):
                node_schema = node_schema["properties"][part]


# -- the operator: a template stored before the rules ------------------------------------------------------------


@pytest.mark.parametrize(("setting", "field"), [(r[1], r[2]) for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_stored_job_with_a_lyra_field_fails_alone_with_the_field_named(setting: dict[str, Any], field: str) -> None:
    config = OperatorConfig(gang_timeout_s=600)
    cluster = FakeCluster([node("a0", "training", A100)])
    cluster.add_job(training_job("good", 1, 1))
    cluster.add_job(training_job("hostile", 1, 1, template={"spec": spec_with(setting)}))
    decision = decide(cluster.world(), config)
    assert [a.ref.name for a in decision.of(CreatePod)] == ["good-w0"]
    cluster.apply(decision)
    assert cluster.job_status("good")["phase"] == "Running"
    running = next(c for c in cluster.job_status("hostile")["conditions"] if c["type"] == "Running")
    assert running["reason"] == "InvalidSpec"
    assert f"spec.template.spec.{field}: " in running["message"]


def test_a_stored_service_with_a_lyra_field_gets_no_deployment() -> None:
    cluster = FakeCluster([node("t0", "inference", A100)])
    template = {"spec": spec_with({"nodeName": "t0"})}
    cluster.add_service(inference_service("hostile", 1, gpuType=A100, template=template))
    cluster.apply(decide(cluster.world(), OperatorConfig()))
    assert not cluster.deployments
    status = cluster.services["serve/hostile"]["status"]
    assert any("spec.template.spec.nodeName: " in c["message"] for c in status["conditions"])


# -- the manifests: whatever a template carries, the pods are Lyra's ---------------------------------------------

HOSTILE = {
    "metadata": {
        "labels": {names.ROLE_LABEL: names.ROLE_INFERENCE, names.SERVICE_LABEL: "chat", "team": "a"},
        "annotations": {manifests.PLANNED_NODE_ANNOTATION: "t4-serving-0", "note": "kept"},
        "finalizers": ["example.com/never-let-go"],
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "y"}],
        "namespace": "kube-system",
    },
    "spec": {
        "containers": CONTAINERS,
        "nodeName": "t4-serving-0",
        "schedulerName": "my-scheduler",
        "priorityClassName": "system-cluster-critical",
        "priority": 2_000_000_000,
        "tolerations": [
            {"operator": "Exists"},
            {"key": STATE, "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "nodeSelector": {names.POOL_LABEL: names.POOL_INFERENCE, "topology.kubernetes.io/zone": "eu-1a"},
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}},
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [],
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {},
                        "namespaceSelector": {},
                        "namespaces": ["b"],
                        "topologyKey": "kubernetes.io/os",
                    }
                ],
            },
        },
        "serviceAccountName": "trainer",
    },
}


def _worker(template: dict[str, Any], role: str = names.ROLE_BASE, gpu_type: str = A100) -> dict[str, Any]:
    return manifests.worker_pod(
        namespace="ml", job="j", job_uid="u", index=0, role=role, template=template, gpus_per_worker=1,
        gpu_type=gpu_type, planned_node=None, grace_seconds=1, min_workers=1, max_workers=2,
    )  # fmt: skip


def _replica_template(template: dict[str, Any], gpu_type: str = A100) -> dict[str, Any]:
    deployment = manifests.deployment(
        namespace="serve", service="s", service_uid="u", replicas=1, template=template, gpus_per_replica=1,
        gpu_type=gpu_type,
    )  # fmt: skip
    pod_template: dict[str, Any] = deployment["spec"]["template"]
    return pod_template


@pytest.mark.parametrize("kind", ["worker", "replica"])
def test_the_operators_pods_carry_none_of_a_templates_lyra_fields(kind: str) -> None:
    pod = _worker(HOSTILE) if kind == "worker" else _replica_template(HOSTILE)
    spec, metadata = pod["spec"], pod["metadata"]
    for owned in tenancy.OWNED_FIELDS:
        assert owned not in spec, owned
    assert all(t.get("key") for t in spec["tolerations"]), "no toleration of every taint"
    ours = [t for t in spec["tolerations"] if t["key"] == STATE]
    assert all(t["operator"] == "Equal" for t in ours), "only the operator's own, by value"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["nodeSelector"] == {"topology.kubernetes.io/zone": "eu-1a"}
    assert spec["affinity"]["podAntiAffinity"] == {  # its terms select pods of the pod's own namespace only
        "preferredDuringSchedulingIgnoredDuringExecution": [],
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}, "topologyKey": "kubernetes.io/os"}],
    }
    assert spec["affinity"]["nodeAffinity"] != HOSTILE["spec"]["affinity"]["nodeAffinity"]
    assert spec["serviceAccountName"] == "trainer"
    assert set(metadata) <= {"name", "namespace", "labels", "annotations", "ownerReferences"}
    assert metadata.get("namespace", "ml") != "kube-system"
    assert metadata["annotations"].get("note") == "kept"
    assert metadata["labels"]["team"] == "a"
    if kind == "worker":
        assert metadata["labels"][names.ROLE_LABEL] == names.ROLE_BASE
        assert names.SERVICE_LABEL not in metadata["labels"]
        assert manifests.PLANNED_NODE_ANNOTATION not in metadata["annotations"]
        assert [o["kind"] for o in metadata["ownerReferences"]] == [names.TRAINING_JOB_KIND]


@pytest.mark.parametrize("kind", ["worker", "replica"])
def test_a_hostile_template_admits_exactly_the_nodes_a_clean_one_admits(kind: str) -> None:
    clean = {"spec": {"containers": CONTAINERS}}
    for pool, state, gpu_type in node_kinds():
        labels, taints = labels_and_taints(pool, state, gpu_type)
        labels["topology.kubernetes.io/zone"] = "eu-1a"  # the tenant's own selector matches: only Lyra's rules decide
        for wanted in (A100, gpu_type):
            if kind == "worker":
                hostile_spec, clean_spec = (
                    _worker(HOSTILE, gpu_type=wanted)["spec"],
                    _worker(clean, gpu_type=wanted)["spec"],
                )
            else:
                hostile_spec = _replica_template(HOSTILE, wanted)["spec"]
                clean_spec = _replica_template(clean, wanted)["spec"]
            assert admitted(hostile_spec, labels, taints) == admitted(clean_spec, labels, taints), (pool, state)


def _in(namespace: str, name: str, low: int, high: int, **spec: Any) -> dict[str, Any]:
    body = training_job(name, low, high, **spec)
    body["metadata"]["namespace"] = namespace
    return body


def test_another_namespaces_queued_base_takes_only_flexible_workers_even_at_the_highest_priority() -> None:
    """What a tenant's TrainingJob can do to another namespace's running job through the allocation: scale in its
    flexible workers to start a base gang (in queue order, which spec.priority leads), never touch its base."""
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])  # 16 GPUs
    cluster.jobs["team-a/elastic"] = _in("team-a", "elastic", 2, 16)
    settle(cluster)
    assert len(cluster.workers("elastic")) == 16
    cluster.jobs["team-b/urgent"] = _in("team-b", "urgent", 4, 4, priority=1_000_000)
    settle(cluster, config=CONFIG)
    elastic = cluster.jobs["team-a/elastic"]["status"]
    assert cluster.jobs["team-b/urgent"]["status"]["phase"] == "Running"
    assert (elastic["phase"], len(cluster.workers("elastic")), elastic["preemptions"]) == ("Running", 12, 0)
    resized = [e.message for e in cluster.events if e.ref.key == "team-a/elastic" and e.reason == "Resized"]
    assert resized == ["workers 16 -> 12 (4 on a0, 8 on a1)"]
    cluster.jobs["team-b/huge"] = _in("team-b", "huge", 14, 14, priority=1_000_000)  # needs elastic's base too
    settle(cluster, config=CONFIG)
    assert cluster.jobs["team-b/huge"]["status"]["phase"] == "Queued"
    elastic = cluster.jobs["team-a/elastic"]["status"]
    assert (elastic["phase"], elastic["preemptions"]) == ("Running", 0), "a base is never taken by the allocation"
    assert sorted(p["metadata"]["labels"]["lyra.dev/role"] for p in cluster.workers("elastic")).count("base") == 2
