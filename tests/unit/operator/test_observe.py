"""Reading listed objects: what is not Lyra's is ignored, what cannot be read is reported and skipped, never fatal."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from lyra.api import names
from lyra.core.model import LoanState, Pool
from lyra.core.placement import PodRole
from lyra.operator import manifests
from lyra.operator.node_health import HealthMemory
from lyra.operator.readers import Readings, read_world
from lyra.operator.timestamps import format_time, parse_time
from lyra.operator.world import World
from tests.unit.kubewatch.test_kinds import kubelet_pod

from .fake_cluster import A100, T4, inference_service, node, training_job


def world(**objects: list[dict[str, Any]]) -> Any:
    lists: dict[str, list[dict[str, Any]]] = {"nodes": [], "pods": [], "jobs": [], "services": []}
    lists.update(objects)
    return read_world(0.0, **lists)


def test_pool_nodes_are_read_with_their_state_taint_and_annotations() -> None:
    loaned = node("t0", "inference", T4)
    loaned["metadata"]["labels"]["lyra.dev/state"] = "loaned"
    loaned["metadata"]["annotations"]["lyra.dev/idle-since"] = "2026-01-01T00:00:00Z"
    loaned["spec"]["taints"] = [
        {"key": "lyra.dev/state", "value": "loaned", "effect": "NoSchedule"},
        {"key": "gpu", "value": "x", "effect": "NoSchedule"},
    ]
    unlabelled = node("x", "inference", T4)
    del unlabelled["metadata"]["labels"]["lyra.dev/pool"]
    cpu_only = node("c", "training", A100, gpus=0)
    read = world(nodes=[loaned, unlabelled, cpu_only, node("a0", "training", A100)])
    assert [n.name for n in read.nodes] == ["a0", "t0"]
    t0 = read.nodes[1]
    assert (t0.pool, t0.state, t0.taint) == (Pool.INFERENCE, LoanState.LOANED, "loaned")
    assert [t.key for t in t0.other_taints] == ["gpu"]
    assert t0.idle_since == parse_time("2026-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ({"metadata": {"name": "j"}, "spec": {"minWorkers": 3, "maxWorkers": 1}}, "spec"),
        ({"metadata": {"name": "j"}}, "spec"),
        ({"metadata": {}, "spec": {}}, "metadata.name"),
    ],
    ids=["min-above-max", "no-spec", "no-name"],
)
def test_an_unreadable_job_is_reported_and_the_rest_is_read(broken: dict[str, Any], reason: str) -> None:
    read = world(jobs=[broken, training_job("ok", 1, 2)], services=[inference_service("chat", 1)])
    assert [j.ref.name for j in read.jobs] == ["ok"]
    assert len(read.services) == 1
    assert len(read.unreadable) == 1
    assert read.unreadable[0].reason.startswith(reason)


#: A worker's controller reference: its TrainingJob (Lyra knows its pods by it, never by their labels).
JOB_BERT = {"apiVersion": "lyra.dev/v1alpha1", "kind": "TrainingJob", "name": "bert", "uid": "u", "controller": True}


def test_a_workers_index_is_its_label_or_for_an_older_operators_pod_its_name() -> None:
    made = manifests.worker_pod(
        namespace="ml", job="bert", job_uid="u", index=4, role=names.ROLE_FLEXIBLE, template={}, gpus_per_worker=1,
        gpu_type="Tesla-T4", planned_node=None, grace_seconds=1, min_workers=1, max_workers=8,
    )  # fmt: skip
    assert made["metadata"]["labels"][names.WORKER_INDEX_LABEL] == "4"
    made["metadata"]["name"] = "renamed"  # the label alone says it
    older = {
        "metadata": {"name": "bert-w6", "namespace": "ml", "labels": {"lyra.dev/role": "base", "lyra.dev/job": "bert"}}
    }
    neither = {
        "metadata": {"name": "bert", "namespace": "ml", "labels": {"lyra.dev/role": "base", "lyra.dev/job": "bert"}}
    }
    for pod in (older, neither):
        pod["metadata"]["ownerReferences"] = [JOB_BERT]
        pod["spec"] = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}
        pod["status"] = {"phase": "Pending"}
    made["status"] = {"phase": "Pending"}
    assert {p.ref.name: p.index for p in world(pods=[made, older, neither]).pods} == {
        "renamed": 4,
        "bert-w6": 6,
        "bert": None,
    }


def test_pods_keep_role_owner_index_and_gpus() -> None:
    worker = {
        "metadata": {
            "name": "bert-w3",
            "namespace": "ml",
            "labels": {"lyra.dev/role": "flexible", "lyra.dev/job": "bert"},
            "ownerReferences": [JOB_BERT],
        },
        "spec": {"nodeName": "t0", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running"},
    }
    cpu_pod = {"metadata": {"name": "web", "namespace": "x"}, "spec": {"containers": [{}]}}
    read = world(pods=[worker, cpu_pod])
    (pod,) = read.pods
    assert (pod.role, pod.owner, pod.index, pod.gpus, pod.node) == (PodRole.TRAINING_FLEXIBLE, "ml/bert", 3, 2, "t0")
    assert pod.holds_gpus
    assert pod.is_live


def test_nodes_and_pods_with_hundreds_of_labels_are_read() -> None:
    """Feature discovery labels a GPU node hundreds of times; a pod may carry as many labels and annotations."""
    many = {f"feature.node.kubernetes.io/f{i}": "true" for i in range(600)}
    labelled = node("t0", "inference", T4)
    labelled["metadata"]["labels"] |= many
    labelled["metadata"]["annotations"] |= many
    worker = {
        "metadata": {"name": "bert-w0", "namespace": "ml", "labels": {"lyra.dev/role": "base", "lyra.dev/job": "bert"}},
        "spec": {"nodeName": "t0", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }
    worker["metadata"]["labels"] |= many
    read = world(nodes=[labelled], pods=[worker])
    assert [n.name for n in read.nodes] == ["t0"]
    assert [p.ref.name for p in read.pods] == ["bert-w0"]
    assert not read.unreadable


def test_times_round_trip_and_bad_times_read_as_unknown() -> None:
    assert parse_time(format_time(1_700_000_000)) == 1_700_000_000
    assert parse_time("yesterday") is None
    assert parse_time(None) is None


def test_status_tables_show_pools_queue_and_running_jobs() -> None:
    from lyra.cli.status_commands import render
    from lyra.operator.decide import OperatorConfig, decide

    from .fake_cluster import FakeCluster

    cluster = FakeCluster([node("a0", "training", A100), node("t0", "inference", T4)])
    cluster.add_job(training_job("fits", 2, 2))
    cluster.add_job(training_job("huge", 20, 20))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig(lend_delay_s=0)))
    text = render(cluster.world())
    assert "training    NVIDIA-A100-SXM4-80GB" in text
    assert "ml/huge" in text.split("RUNNING")[0], "the oversized job is in the queue"
    assert "ml/fits   2/2" in text


def test_pod_readings_read_a_pod_again_only_when_its_object_changed_and_forget_deleted_pods() -> None:
    first = kubelet_pod("w0", {names.ROLE_LABEL: names.ROLE_BASE, names.JOB_LABEL: "j"}, 1)
    second = kubelet_pod("w1", {names.ROLE_LABEL: names.ROLE_BASE, names.JOB_LABEL: "j"}, 1)
    broken = kubelet_pod("bad", {}, 1) | {"spec": "not a pod spec"}
    readings = Readings()

    def world(*pods: dict[str, Any]) -> World:
        return read_world(1_800_000_000.0, nodes=[], pods=pods, jobs=[], services=[], readings=readings)

    cold = world(first, second, broken)
    assert readings.pods.hits == 0
    assert [u.ref.name for u in cold.unreadable] == ["bad"]

    again = world(first, second, broken)
    assert readings.pods.hits == 3
    assert again == cold  # the same records, the unreadable pod reported again
    assert again == read_world(1_800_000_000.0, nodes=[], pods=[first, second, broken], jobs=[], services=[])

    finished = copy.deepcopy(second)
    finished["status"]["phase"] = "Succeeded"
    changed = world(first, finished)  # an event replaced w1's object; bad was deleted
    assert readings.pods.hits == 1
    assert {p.ref.name: p.phase for p in changed.pods} == {"w0": "Running", "w1": "Succeeded"}
    assert changed.unreadable == ()

    world(first, finished, broken)  # bad's object again after it was forgotten: read afresh, not from memory
    assert readings.pods.hits == 2


def test_node_readings_keep_all_but_health_which_each_pass_judges_at_its_own_time() -> None:
    healthy = node("a0", "training", A100)
    dipped = node("a1", "training", A100)
    dipped["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    dipped["status"]["allocatable"] = {"nvidia.com/gpu": "6"}  # a device plugin restarting: dated by the memory
    not_ready = node("a2", "training", A100)
    not_ready["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2027-01-15T08:00:00Z", "reason": "KubeletDown"}
    ]
    other_pool = node("c0", "training", A100)
    del other_pool["metadata"]["labels"]["lyra.dev/pool"]
    no_product = node("t9", "inference", T4)
    del no_product["metadata"]["labels"]["nvidia.com/gpu.product"]
    readings, memory = Readings(), HealthMemory()

    def world(now: float, *nodes: dict[str, Any]) -> World:
        return read_world(now, nodes=nodes, pods=[], jobs=[], services=[], readings=readings, memory=memory)

    objects = (healthy, dipped, not_ready, other_pool, no_product)
    first = world(100.0, *objects)
    assert [n.name for n in first.nodes] == ["a0", "a1", "a2"]
    assert [u.ref.name for u in first.unreadable] == ["t9"]
    later = world(400.0, *objects)
    assert readings.nodes.hits == 5
    assert later.unreadable == first.unreadable  # the node left out is reported again
    assert later == replace(first, now=400.0)  # the dip still dated from the first pass that saw it
    assert later.nodes[1].unhealthy_since == 100.0
    assert "6 of 8" in later.nodes[1].health
    assert later.nodes[2].unhealthy_since == parse_time("2027-01-15T08:00:00Z")
    assert later == read_world(400.0, nodes=objects, pods=[], jobs=[], services=[], memory=memory)

    recovered = copy.deepcopy(dipped)
    recovered["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    healed = world(500.0, healthy, recovered, not_ready)  # an event replaced a1's object
    assert readings.nodes.hits == 2
    assert healed.nodes[1].healthy
    again = world(600.0, healthy, dipped, not_ready)  # dipped again: a new dip, dated now (the memory forgot it)
    assert again.nodes[1].unhealthy_since == 600.0


def test_job_readings_read_a_job_again_only_when_its_object_changed() -> None:
    queued = training_job("q", 1, 2)
    running = training_job("r", 1, 2)
    broken = {"metadata": {"name": "bad", "namespace": "ml"}, "spec": {"minWorkers": 3, "maxWorkers": 1}}
    readings = Readings()

    def world(*jobs: dict[str, Any]) -> World:
        return read_world(1_800_000_000.0, nodes=[], pods=[], jobs=jobs, services=[], readings=readings)

    cold = world(queued, running, broken)
    again = world(queued, running, broken)
    assert readings.jobs.hits == 3
    assert again == cold
    assert [u.ref.name for u in again.unreadable] == ["bad"]
    assert again.jobs[0] is cold.jobs[0]
    started = copy.deepcopy(running)
    started["status"] = {"phase": "Running"}
    changed = world(queued, started)
    assert readings.jobs.hits == 1
    assert {j.ref.name: j.status.phase.value for j in changed.jobs} == {"q": "Queued", "r": "Running"}
    assert changed.unreadable == ()
