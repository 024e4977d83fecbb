"""An InferenceService's edits reach its Deployment: the Deployment records the hash of the pod template the operator
rendered (``lyra.dev/template-hash``); when the service's template, image or gpuType (or anything the operator
derives) renders otherwise, the pass writes the Deployment's template with its replicas, once; a Deployment made by an
operator without the hash is written once. Deciding again after applying does nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from lyra.api import names
from lyra.operator.actions import ApplyDeployment, Emit
from lyra.operator.commit import deployment_patch
from lyra.operator.decide import decide
from lyra.operator.runner import describe

from .fake_cluster import A100, T4, FakeCluster, inference_service, node
from .test_decide import CONFIG, settle


def two_types() -> FakeCluster:
    """Two T4 and two A100 inference servers, and a service of two T4 replicas, settled."""
    cluster = FakeCluster(
        [node(f"t{i}", "inference", T4) for i in range(2)] + [node(f"a{i}", "inference", A100) for i in range(2)]
    )
    cluster.add_service(inference_service("chat", 2, gpuType=T4))
    settle(cluster)
    return cluster


def spec_of(cluster: FakeCluster) -> dict[str, Any]:
    spec: dict[str, Any] = cluster.services["serve/chat"]["spec"]
    return spec


def container(cluster: FakeCluster) -> dict[str, Any]:
    first: dict[str, Any] = cluster.deployments["serve/chat"]["spec"]["template"]["spec"]["containers"][0]
    return first


def required_types(cluster: FakeCluster) -> set[str]:
    affinity = cluster.deployments["serve/chat"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return {
        value
        for term in terms
        for expression in term["matchExpressions"]
        if expression["key"] == names.GPU_PRODUCT_LABEL
        for value in expression["values"]
    }


def replica_nodes(cluster: FakeCluster) -> set[str]:
    return {p["spec"]["nodeName"] for p in cluster.pods.values() if p["metadata"]["labels"].get(names.SERVICE_LABEL)}


def template_writes(actions: tuple[object, ...]) -> list[ApplyDeployment]:
    return [a for a in actions if isinstance(a, ApplyDeployment)]


@dataclass(frozen=True)
class Edit:
    name: str
    edit: Callable[[dict[str, Any]], None]
    reached: Callable[[FakeCluster], bool]
    servers: set[str]


EDITS = [
    Edit(
        "template",
        lambda spec: spec["template"]["spec"]["containers"][0].update(env=[{"name": "MODE", "value": "fast"}]),
        lambda c: {"name": "MODE", "value": "fast"} in container(c).get("env", []),
        {"t0", "t1"},
    ),
    Edit(
        "image",
        lambda spec: spec["template"]["spec"]["containers"][0].update(image="server:2"),
        lambda c: container(c)["image"] == "server:2",
        {"t0", "t1"},
    ),
    Edit(
        "gpuType",
        lambda spec: spec.update(gpuType=A100),
        lambda c: required_types(c) == {A100},
        {"a0", "a1"},
    ),
]


@pytest.mark.parametrize("edit", EDITS, ids=[e.name for e in EDITS])
def test_an_edit_writes_the_deployments_template_once_and_the_replicas_follow(edit: Edit) -> None:
    cluster = two_types()
    assert replica_nodes(cluster) <= {"t0", "t1"}
    before = cluster.deployments["serve/chat"]
    edit.edit(spec_of(cluster))
    cluster.services["serve/chat"]["metadata"]["generation"] = 2
    decision = decide(cluster.world(), CONFIG)
    writes = template_writes(decision.actions)
    assert len(writes) == 1
    write = writes[0]
    assert (write.create, write.roll, write.manifest["spec"]["replicas"]) == (False, True, 2)
    assert write.resource_version == before["metadata"]["resourceVersion"], "written over the Deployment as read"
    said = [a for a in decision.actions if isinstance(a, Emit) and a.reason == "TemplateChanged"]
    assert len(said) == 1
    assert before["metadata"]["annotations"][names.TEMPLATE_HASH_ANNOTATION] in said[0].message
    cluster.apply(decision)
    assert edit.reached(cluster), "the Deployment's template follows the service"
    settle(cluster)
    running = [p for p in cluster.pods.values() if p["status"]["phase"] == "Running"]
    assert len(running) == 2
    assert replica_nodes(cluster) <= edit.servers, "the replicas run on servers of the service's type"
    assert decide(cluster.world(), CONFIG).is_noop, "applied, then decided again: nothing to do"
    assert [e.reason for e in cluster.events].count("TemplateChanged") == 1


def test_an_unchanged_service_gets_no_deployment_action_and_a_scale_writes_only_replicas() -> None:
    cluster = two_types()
    assert decide(cluster.world(), CONFIG).is_noop
    uids = {p["metadata"]["uid"] for p in cluster.pods.values()}
    spec_of(cluster)["replicas"] = 3
    writes = template_writes(decide(cluster.world(), CONFIG).actions)
    assert [(w.create, w.roll, w.manifest["spec"]["replicas"]) for w in writes] == [(False, False, 3)]
    assert deployment_patch(writes[0]) == {"spec": {"replicas": 3}}, "a scale leaves the template alone"
    settle(cluster)
    assert uids <= {p["metadata"]["uid"] for p in cluster.pods.values()}, "no replica replaced by a scale"


def test_a_deployment_made_without_a_template_hash_is_written_once() -> None:
    cluster = two_types()
    deployment = cluster.deployments["serve/chat"]
    wanted = deployment["metadata"].pop("annotations")[names.TEMPLATE_HASH_ANNOTATION]  # as an older operator made it
    uids = {p["metadata"]["uid"] for p in cluster.pods.values()}
    decision = decide(cluster.world(), CONFIG)
    writes = template_writes(decision.actions)
    assert [(w.create, w.roll) for w in writes] == [(False, True)]
    said = [a.message for a in decision.actions if isinstance(a, Emit) and a.reason == "TemplateChanged"]
    assert said == [
        f"the replicas' pod template changed (template hash none (made by an earlier version of the operator) -> "
        f"{wanted}): the Deployment rolls them"
    ]
    cluster.apply(decision)
    assert deployment["metadata"]["annotations"] == {names.TEMPLATE_HASH_ANNOTATION: wanted}
    assert {p["metadata"]["uid"] for p in cluster.pods.values()} == uids, "the same template: nothing rolls"
    assert decide(cluster.world(), CONFIG).is_noop


def test_a_template_write_replaces_the_template_whole_over_the_version_read() -> None:
    cluster = two_types()
    spec_of(cluster)["template"]["spec"]["containers"][0]["image"] = "server:2"
    (write,) = template_writes(decide(cluster.world(), CONFIG).actions)
    patch = deployment_patch(write)
    template = write.manifest["spec"]["template"]
    assert patch == {
        "metadata": {
            "resourceVersion": write.resource_version,
            "annotations": {
                names.TEMPLATE_HASH_ANNOTATION: write.manifest["metadata"]["annotations"][
                    names.TEMPLATE_HASH_ANNOTATION
                ]
            },
        },
        "spec": {"replicas": 2, "template": {**template, "$patch": "replace"}},
    }
    assert write.resource_version


def test_what_the_operator_derives_counts_too_a_new_scheduler_name_rolls_the_replicas() -> None:
    cluster = two_types()
    renamed = replace(CONFIG, scheduler_name="lyra-scheduler")
    writes = template_writes(decide(cluster.world(), renamed).actions)
    assert [(w.roll, w.manifest["spec"]["template"]["spec"]["schedulerName"]) for w in writes] == [
        (True, "lyra-scheduler")
    ]


def test_a_dry_run_says_which_deployments_template_it_would_write() -> None:
    cluster = two_types()
    spec_of(cluster)["gpuType"] = A100
    lines = describe(decide(cluster.world(), CONFIG))
    assert "ApplyDeployment InferenceService serve/chat pod template and replicas (2 replicas)" in lines
