"""Node and pod faults on the local control plane, with the real operator (as its ServiceAccount): each scenario
breaks something the way Kubernetes would see it break, checks that Lyra carries on, puts the cluster back, and ends
with ``lyra check`` clean and every job accounted for (docs/reliability.md, "Node and pod health", "Ownership by
UID").

* **Dead kubelet.** KWOK manages a fake node only while it holds the node's Lease (``kube-node-lease``); the test
  holds it under another identity, so KWOK stops reporting the node, and writes what the node-lifecycle controller
  writes once a kubelet falls silent (``Ready=Unknown``, the ``unreachable`` NoSchedule and NoExecute taints)
  without waiting its grace period. (Removing KWOK's node annotation does not stop it: a node it has seen stays
  managed while it holds the Lease.) The pods on the node are marked for KWOK to leave alone (the local cluster's
  ``kubelet-gone`` annotation) before any of that, so nothing finishes their deletion. The job on the node is
  re-queued, not failed, and restarts elsewhere while its old worker stays ``Terminating``; another job is admitted
  beside it. Released, the Lease expires and KWOK takes it back: the node reports Ready and the deletion finishes.
* **Node deleted** while it hosts a worker: the job is scaled in and runs on; the node is created again afterwards.
* **Node drained** (``kubectl drain``: cordoned, its pods evicted) while it hosts a flexible worker: the job is
  scaled in, nothing is made for the node while it is cordoned, and the job grows back once it is uncordoned.
* **Worker deleted by hand**: the job gets its worker back and runs on.
* **Job re-created under its name** while the old run's pods still exist (deleted with ``propagationPolicy:
  Orphan``, so the garbage collector leaves them): they are not the new run's; the operator deletes them and the new
  run runs with pods owned by its own UID.
* **Worker evicted by the kubelet** (its status written as the kubelet writes it: ``Failed``, reason ``Evicted``): a
  preemption, not a failure; the job runs again on a new worker.
* **Worker preempted by kube-scheduler** for another team's GPU pod of a higher PriorityClass: the job is scaled in,
  no worker is made for the GPUs the preemptor is nominated to (none waits unplaced), and the job grows back once the
  preemptor is gone.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.localcluster import populate
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.fakenodes import KUBELET_GONE_ANNOTATION, KUBELET_GONE_VALUE
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    A100,
    DEADLINE_S,
    Operator,
    assert_check_clean,
    create_job,
    custom,
    job,
    running,
    wait_quiet,
    workers,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(900)]

NODE_GRACE_S = 10
NODE_LEASE_NAMESPACE = "kube-node-lease"
#: Keeps a pod on the dead node from being removed before the node is revived, whatever else might finish its
#: deletion (KWOK leaves it alone already: ``KUBELET_GONE_ANNOTATION``).
NO_KUBELET_FINALIZER = f"{names.GROUP}/test-dead-kubelet"
ONE_NODE = {"minWorkers": 1, "maxWorkers": 1, "gpusPerWorker": 8, "gpuTypes": [A100]}


@pytest.fixture
def operator(operator_kubeconfig: Path, tmp_path: Path) -> Iterator[Operator]:
    running_operator = Operator(
        operator_kubeconfig,
        tmp_path / "operator.log",
        options=("--node-grace", str(NODE_GRACE_S)),
    )
    running_operator.start()
    try:
        yield running_operator
    except BaseException:
        print("--- operator ---\n" + running_operator.tail(150))
        raise
    finally:
        running_operator.stop()


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def pod_or_none(api: client.ApiClient, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return core(api).read_namespaced_pod(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def pods_on(api: client.ApiClient, node: str) -> list[client.V1Pod]:
    pods: list[client.V1Pod] = core(api).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return pods


def all_schedulable(api: client.ApiClient) -> bool:
    nodes = [n.metadata.name for n in core(api).list_node(label_selector=names.POOL_LABEL).items]
    return len(nodes) == 12 and len(populate.schedulable_nodes(api, nodes)) == 12


def never_failed(api: client.ApiClient, namespace: str, name: str) -> None:
    events = core(api).list_namespaced_event(namespace).items
    mine = [e for e in events if e.involved_object.name == name and e.involved_object.kind == names.TRAINING_JOB_KIND]
    assert not [e.reason for e in mine if e.reason in ("WorkerFailed", "InvalidSpec")], "the job never failed"
    assert job(api, namespace, name)["status"]["phase"] != "Failed"


class StolenNodeLease:
    """Holds a node's Lease (``kube-node-lease``) under another identity, renewing it every ``RENEW_S``: KWOK manages
    only the nodes whose Lease it holds, so it stops heartbeating the node and finishing its pods' deletions, as a
    dead kubelet would. While stolen it also keeps the node-lifecycle controller's verdict written (``Ready=Unknown``
    since ``since``). Released, the Lease expires within ``DURATION_S`` and KWOK takes it back."""

    HOLDER = "lyra-test-dead-kubelet"
    DURATION_S = 15
    RENEW_S = 3.0

    def __init__(self, api: client.ApiClient, node: str, since: str) -> None:
        self.api = api
        self.node = node
        self.since = since
        self.stop = threading.Event()
        self.renewals = 0
        self.rewrites = 0  # how often the Ready condition had to be written again (KWOK's last heartbeat)
        self.thread = threading.Thread(target=self.run, name=f"lease-{node}", daemon=True)

    def renew(self) -> None:
        leases = client.CoordinationV1Api(self.api)
        lease = leases.read_namespaced_lease(self.node, NODE_LEASE_NAMESPACE)
        lease.spec.holder_identity = self.HOLDER
        lease.spec.lease_duration_seconds = self.DURATION_S
        lease.spec.renew_time = datetime.now(UTC)
        leases.replace_namespaced_lease(self.node, NODE_LEASE_NAMESPACE, lease)
        self.renewals += 1

    def hold_verdict(self) -> None:
        conditions = core(self.api).read_node_status(self.node).status.conditions or []
        ready = next((c for c in conditions if c.type == "Ready"), None)
        if ready is not None and ready.status == "Unknown":
            return
        verdict = {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": self.since,
            "lastTransitionTime": self.since,
        }
        core(self.api).patch_node_status(self.node, {"status": {"conditions": [verdict]}})
        self.rewrites += 1

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.renew()
                self.hold_verdict()
            except ApiException as error:
                if error.status != 409:  # a conflict is retried at the next renewal
                    raise
            self.stop.wait(self.RENEW_S)

    def __enter__(self) -> StolenNodeLease:
        self.renew()
        self.hold_verdict()
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def hold_pods(api: client.ApiClient, node: str) -> None:
    """The pods on ``node`` are left alone by KWOK, as by a kubelet that is gone, and kept by the test's finalizer."""
    for pod in pods_on(api, node):
        finalizers = [*(pod.metadata.finalizers or []), NO_KUBELET_FINALIZER]
        patch = {"metadata": {"finalizers": finalizers, "annotations": {KUBELET_GONE_ANNOTATION: KUBELET_GONE_VALUE}}}
        core(api).patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, patch)


def release_pods(api: client.ApiClient, node: str) -> None:
    for pod in pods_on(api, node):
        if NO_KUBELET_FINALIZER in (pod.metadata.finalizers or []):
            rest = [f for f in pod.metadata.finalizers if f != NO_KUBELET_FINALIZER]
            patch = {"metadata": {"finalizers": rest or None, "annotations": {KUBELET_GONE_ANNOTATION: None}}}
            core(api).patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, patch)


@contextmanager
def dead_kubelet(api: client.ApiClient, node: str) -> Iterator[StolenNodeLease]:
    """The kubelet of ``node`` stops reporting, and the node-lifecycle controller's verdict is written at once
    (``Ready=Unknown``, the ``unreachable`` taints) instead of after its grace period; afterwards the node is revived
    and waited for until it is schedulable again."""
    api_core = core(api)
    since = now_text()
    # Nothing confirms the deletion of a pod on a dead node. Holding KWOK's Lease alone did not always stop KWOK
    # from finishing one (about one run in six: its pod events can overtake the Lease's), so its pods are marked
    # for KWOK to leave alone before the node falls silent, and nothing can delete them before the verdict.
    hold_pods(api, node)
    try:
        with StolenNodeLease(api, node, since) as lease:
            taints = [t.to_dict() for t in api_core.read_node(node).spec.taints or []]
            kept = [
                {k: v for k, v in t.items() if v is not None}
                for t in taints
                if not t["key"].startswith("node.kubernetes")
            ]
            unreachable = [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": since},
            ]
            api_core.patch_node(node, {"spec": {"taints": kept + unreachable}})
            yield lease
    finally:
        release_pods(api, node)  # the Lease is still the test's for up to DURATION_S: KWOK takes the pods back after
    wait_for(lambda: populate.schedulable_nodes(api, [node]) == [node], DEADLINE_S * 2, f"node {node} revived")


def test_a_dead_kubelet_requeues_its_job_and_admission_goes_on(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator
) -> None:
    wait_for(lambda: all_schedulable(api), DEADLINE_S, "every node schedulable")
    with temporary_namespace(api, "faults-dead-kubelet") as namespace:
        create_job(api, namespace, "stuck", **ONE_NODE)
        wait_for(lambda: running(api, namespace, "stuck", 1), DEADLINE_S, "the job running")
        [old] = workers(api, namespace, "stuck")
        dead = old.spec.node_name
        silent_at = time.monotonic()
        with dead_kubelet(api, dead) as lease:

            def requeued_elsewhere() -> bool:
                pods = workers(api, namespace, "stuck")
                return running(api, namespace, "stuck", 1) and pods[0].spec.node_name != dead

            wait_for(requeued_elsewhere, DEADLINE_S, "the stuck job running on another node")
            restarted_s = time.monotonic() - silent_at
            status = job(api, namespace, "stuck")["status"]
            assert status["preemptions"] == 1
            events = core(api).list_namespaced_event(namespace).items
            preempted = [e.message for e in events if e.reason == "Preempted" and e.involved_object.name == "stuck"]
            assert any(f"node {dead} lost (" in m and "unreachable" in m for m in preempted), preempted
            leaving = pod_or_none(api, namespace, old.metadata.name)
            assert leaving is not None, "the old worker still exists"
            assert leaving.metadata.uid == old.metadata.uid
            assert leaving.metadata.deletion_timestamp is not None, "the old worker is terminating"

            create_job(api, namespace, "other", **ONE_NODE)
            wait_for(lambda: running(api, namespace, "other", 1), DEADLINE_S, "another job admitted meanwhile")
            stuck = pod_or_none(api, namespace, old.metadata.name)
            assert stuck is not None, "the old worker still terminating on the dead node"
            assert stuck.metadata.uid == old.metadata.uid
            print(
                f"dead kubelet: the job ran again on another node {restarted_s:.1f} s after its node fell silent "
                f"(grace {NODE_GRACE_S} s); lease renewed {lease.renewals} times, Ready=Unknown written "
                f"{lease.rewrites} times"
            )
        wait_for(
            lambda: (
                (gone := pod_or_none(api, namespace, old.metadata.name)) is None
                or gone.metadata.uid != old.metadata.uid
            ),
            DEADLINE_S,
            "the revived node's kubelet finishing the deletion",
        )
        for name in ("stuck", "other"):
            never_failed(api, namespace, name)
            assert running(api, namespace, name, 1)
        assert_check_clean(cluster.kubeconfig)


def spread_on_four_nodes(api: client.ApiClient, namespace: str) -> None:
    """An elastic job "spread" (2 to 4 workers of 8 A100 GPUs), running on the four A100 nodes."""
    create_job(api, namespace, "spread", minWorkers=2, maxWorkers=4, gpusPerWorker=8, gpuTypes=[A100])
    wait_for(lambda: running(api, namespace, "spread", 4), DEADLINE_S, "the job on the four A100 nodes")


def scaled_in_to_three(api: client.ApiClient, namespace: str) -> bool:
    status = job(api, namespace, "spread").get("status", {})
    return status.get("scaleIns", 0) >= 1 and running(api, namespace, "spread", 3)


def test_a_node_deleted_under_a_worker_scales_its_job_in(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator
) -> None:
    wait_for(lambda: all_schedulable(api), DEADLINE_S, "every node schedulable")
    with temporary_namespace(api, "faults-node-deleted") as namespace:
        spread_on_four_nodes(api, namespace)
        victim = sorted(workers(api, namespace, "spread"), key=lambda p: p.metadata.name)[-1]
        gone = victim.spec.node_name
        saved = core(api).read_node(gone)
        body = api.sanitize_for_serialization(saved)
        try:
            core(api).delete_node(gone)
            wait_for(
                lambda: scaled_in_to_three(api, namespace), DEADLINE_S, "the job scaled in to the three nodes left"
            )
            assert job(api, namespace, "spread")["status"]["preemptions"] == 0
            wait_for(
                lambda: pod_or_none(api, namespace, victim.metadata.name) is None,
                DEADLINE_S * 2,
                "the pod of the deleted node removed (pod garbage collection)",
            )
        finally:
            _recreate_node(api, body)
        wait_for(lambda: all_schedulable(api), DEADLINE_S, "the node back")
        wait_for(lambda: running(api, namespace, "spread", 4), DEADLINE_S, "the job grown back onto it")
        never_failed(api, namespace, "spread")
        assert_check_clean(cluster.kubeconfig)


def cordon(api: client.ApiClient, node: str, cordoned: bool = True) -> None:
    """``kubectl cordon`` (``uncordon``): the node's ``spec.unschedulable``."""
    core(api).patch_node(node, {"spec": {"unschedulable": cordoned}})


def evict(api: client.ApiClient, pod: client.V1Pod) -> None:
    """What ``kubectl drain`` asks for each pod: an eviction (the API server writes the ``DisruptionTarget``
    condition, then deletes the pod with its grace)."""
    meta = client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace)
    core(api).create_namespaced_pod_eviction(
        pod.metadata.name, pod.metadata.namespace, client.V1Eviction(metadata=meta)
    )


def test_a_drained_node_scales_its_job_in_and_takes_no_work_until_uncordoned(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator
) -> None:
    wait_for(lambda: all_schedulable(api), DEADLINE_S, "every node schedulable")
    with temporary_namespace(api, "faults-drained") as namespace:
        spread_on_four_nodes(api, namespace)
        flexible = sorted(
            (
                p
                for p in workers(api, namespace, "spread")
                if p.metadata.labels[names.ROLE_LABEL] == names.ROLE_FLEXIBLE
            ),
            key=lambda p: p.metadata.name,
        )
        drained = flexible[-1].spec.node_name
        try:
            cordon(api, drained)
            for pod in pods_on(api, drained):
                evict(api, pod)
            wait_for(
                lambda: scaled_in_to_three(api, namespace), DEADLINE_S, "the job scaled in to the three nodes left"
            )
            status = job(api, namespace, "spread")["status"]
            assert status["workers"]["target"] == 3, status
            assert status["preemptions"] == 0
            assert drained not in status["placements"], status["placements"]
            pods = core(api).list_namespaced_pod(namespace, label_selector=f"{names.JOB_LABEL}=spread").items
            assert [p.metadata.name for p in pods if not p.spec.node_name] == [], "no worker made for the drained node"
            assert core(api).read_node(drained).spec.unschedulable, "Lyra leaves the cordon as the admin set it"
            events = core(api).list_namespaced_event(namespace).items
            print("scaled in:", [e.message for e in events if e.reason == "ScaledIn"])
        finally:
            cordon(api, drained, cordoned=False)
        wait_for(lambda: running(api, namespace, "spread", 4), DEADLINE_S, "the job grown back onto the node")
        never_failed(api, namespace, "spread")
        assert_check_clean(cluster.kubeconfig)


def _recreate_node(api: client.ApiClient, saved: dict[str, Any]) -> None:
    body = copy.deepcopy(saved)
    metadata = body["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        metadata.pop(key, None)
    body["spec"] = {k: v for k, v in body.get("spec", {}).items() if k != "taints"}
    body["status"] = {k: body["status"][k] for k in ("capacity", "allocatable", "nodeInfo") if k in body["status"]}
    try:
        core(api).create_node(cast(Any, body))
    except ApiException as error:
        if error.status != 409:
            raise


def test_a_worker_deleted_by_hand_is_replaced(cluster: ControlPlane, api: client.ApiClient, operator: Operator) -> None:
    wait_for(lambda: all_schedulable(api), DEADLINE_S, "every node schedulable")
    with temporary_namespace(api, "faults-pod-deleted") as namespace:
        create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=2, gpusPerWorker=8, gpuTypes=[A100])
        wait_for(lambda: running(api, namespace, "elastic", 2), DEADLINE_S, "the job with two workers")
        flexible = next(
            p for p in workers(api, namespace, "elastic") if p.metadata.labels[names.ROLE_LABEL] == names.ROLE_FLEXIBLE
        )
        core(api).delete_namespaced_pod(flexible.metadata.name, namespace)

        def replaced() -> bool:
            pods = workers(api, namespace, "elastic")
            return running(api, namespace, "elastic", 2) and flexible.metadata.uid not in {p.metadata.uid for p in pods}

        wait_for(replaced, DEADLINE_S, "the worker replaced")
        status = job(api, namespace, "elastic")["status"]
        assert status["phase"] == "Running"
        assert status["preemptions"] == 0
        never_failed(api, namespace, "elastic")
        assert_check_clean(cluster.kubeconfig)


def test_a_job_recreated_under_its_name_does_not_adopt_the_old_runs_pods(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator
) -> None:
    wait_for(lambda: all_schedulable(api), DEADLINE_S, "every node schedulable")
    with temporary_namespace(api, "faults-recreated") as namespace:
        create_job(api, namespace, "again", minWorkers=2, maxWorkers=2, gpusPerWorker=4, gpuTypes=[A100])
        wait_for(lambda: running(api, namespace, "again", 2), DEADLINE_S, "the first run running")
        old_uids = {p.metadata.uid for p in workers(api, namespace, "again")}
        first_uid = job(api, namespace, "again")["metadata"]["uid"]
        custom(api).delete_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.TRAINING_JOB_PLURAL,
            "again",
            body=client.V1DeleteOptions(propagation_policy="Orphan"),
        )

        def deleted() -> bool:
            try:
                job(api, namespace, "again")
            except ApiException as error:
                return error.status == 404
            return False

        wait_for(deleted, DEADLINE_S, "the first run's TrainingJob gone")
        assert {p.metadata.uid for p in workers(api, namespace, "again")} == old_uids, "its pods are still there"
        create_job(api, namespace, "again", minWorkers=2, maxWorkers=2, gpusPerWorker=4, gpuTypes=[A100])
        second_uid = job(api, namespace, "again")["metadata"]["uid"]
        assert second_uid != first_uid

        def new_run_only() -> bool:
            """Two running workers owned by the new run, none of them an old run's pod (which still carry the job's
            label, so they are told apart by UID here too)."""
            pods = [p for p in workers(api, namespace, "again") if p.metadata.uid not in old_uids]
            owners = {ref.uid for p in pods for ref in p.metadata.owner_references or [] if ref.controller}
            status = job(api, namespace, "again").get("status", {})
            return (
                len(pods) == 2
                and all(p.spec.node_name and p.status.phase == "Running" for p in pods)
                and status.get("workers", {}).get("current") == 2
                and owners == {second_uid}
            )

        wait_for(new_run_only, DEADLINE_S, "the new run running on pods of its own")
        # The orphans are nobody's: Orphan asked for them to stay, and Lyra knows its pods by owner, never by the
        # labels they still carry. They keep their GPUs (the new run took other names) until their owner deletes them.
        left = {p.metadata.uid: p for p in core(api).list_namespaced_pod(namespace).items if p.metadata.uid in old_uids}
        assert set(left) == old_uids, "the orphaned pods were deleted"
        assert all(not p.metadata.owner_references for p in left.values())
        new_names = {p.metadata.name for p in workers(api, namespace, "again") if p.metadata.uid not in old_uids}
        assert not new_names & {p.metadata.name for p in left.values()}
        never_failed(api, namespace, "again")
        assert_check_clean(cluster.kubeconfig)


def test_a_worker_evicted_by_the_kubelet_is_a_preemption_not_a_failure(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator
) -> None:
    wait_for(lambda: all_schedulable(api), DEADLINE_S, "every node schedulable")
    with temporary_namespace(api, "faults-evicted") as namespace:
        create_job(api, namespace, "evicted", **ONE_NODE)
        wait_for(lambda: running(api, namespace, "evicted", 1), DEADLINE_S, "the job running")
        [victim] = workers(api, namespace, "evicted")
        evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
        core(api).patch_namespaced_pod_status(victim.metadata.name, namespace, {"status": evicted})

        def running_again() -> bool:
            pods = workers(api, namespace, "evicted")
            return running(api, namespace, "evicted", 1) and pods[0].metadata.uid != victim.metadata.uid

        wait_for(running_again, DEADLINE_S, "the job running again on a new worker")
        status = job(api, namespace, "evicted")["status"]
        assert status["preemptions"] == 1
        events = core(api).list_namespaced_event(namespace).items
        preempted = [e.message for e in events if e.reason == "Preempted" and e.involved_object.name == "evicted"]
        assert any(f"worker {victim.metadata.name} disrupted (Evicted)" in m for m in preempted), preempted

        def removed() -> bool:
            pod = pod_or_none(api, namespace, victim.metadata.name)
            return pod is None or pod.metadata.uid != victim.metadata.uid

        wait_for(removed, DEADLINE_S, "the evicted pod's object removed")
        never_failed(api, namespace, "evicted")
        assert_check_clean(cluster.kubeconfig)


URGENT_CLASS = "lyra-test-urgent"


def urgent_pod(namespace: str) -> dict[str, Any]:
    """Another team's pod of 8 A100 GPUs, of a PriorityClass above the workers' (they have none: priority 0)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "urgent", "namespace": namespace, "labels": {"app": "theirs"}},
        "spec": {
            "priorityClassName": URGENT_CLASS,
            "nodeSelector": {names.GPU_PRODUCT_LABEL: A100},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/theirs:1",
                    "resources": {"limits": {names.GPU_RESOURCE: "8"}, "requests": {names.GPU_RESOURCE: "8"}},
                }
            ],
        },
    }


def test_a_worker_preempted_by_kube_scheduler_scales_its_job_in_and_no_worker_waits_for_the_preemptors_gpus(
    cluster: ControlPlane, api: client.ApiClient, operator: Operator
) -> None:
    """The victim is kept (KWOK leaves it alone, a finalizer holds it) so that each step of its leaving is seen: still
    running its grace, then exited 143 on the SIGTERM (``Failed``) while the kubelet tears it down, then gone. All the
    while the preemptor waits, nominated to the victim's node; the job is scaled in once, and no worker is made for
    the GPUs it waits for (one would wait unplaced: kube-scheduler keeps them for the preemptor)."""
    wait_for(lambda: all_schedulable(api), DEADLINE_S, "every node schedulable")
    scheduling = client.SchedulingV1Api(api)
    scheduling.create_priority_class(
        client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=URGENT_CLASS), value=1_000_000, preemption_policy="PreemptLowerPriority"
        )
    )
    try:
        with temporary_namespace(api, "faults-scheduler-preempted") as namespace:
            try:
                spread_on_four_nodes(api, namespace)
                before = {p.metadata.uid for p in workers(api, namespace, "spread")}
                for pod in workers(api, namespace, "spread"):
                    keep = {
                        "finalizers": [NO_KUBELET_FINALIZER],
                        "annotations": {KUBELET_GONE_ANNOTATION: KUBELET_GONE_VALUE},
                    }
                    core(api).patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": keep})
                core(api).create_namespaced_pod(namespace, cast(Any, urgent_pod(namespace)))

                def nominated() -> str:
                    return str(core(api).read_namespaced_pod("urgent", namespace).status.nominated_node_name or "")

                taken = wait_for(
                    nominated, DEADLINE_S, "the urgent pod nominated where kube-scheduler preempts a worker"
                )

                def deleted() -> list[client.V1Pod]:
                    pods = core(api).list_namespaced_pod(namespace, label_selector=f"{names.JOB_LABEL}=spread").items
                    return [p for p in pods if p.metadata.deletion_timestamp]

                [victim] = wait_for(deleted, DEADLINE_S, "the worker kube-scheduler preempts deleted")
                assert victim.spec.node_name == taken
                assert any(
                    c.type == "DisruptionTarget" and c.reason == "PreemptionByScheduler"
                    for c in victim.status.conditions
                )
                wait_for(
                    lambda: scaled_in_to_three(api, namespace), DEADLINE_S, "the job scaled in to the three nodes left"
                )

                def no_new_worker() -> None:
                    wait_quiet(operator, DEADLINE_S)
                    pods = workers(api, namespace, "spread")
                    assert {p.metadata.uid for p in pods} <= before, "a worker was made for the preemptor's GPUs"
                    status = job(api, namespace, "spread")["status"]
                    assert (status["phase"], status["workers"]["target"], status["scaleIns"]) == ("Running", 3, 1), (
                        status
                    )
                    assert taken not in status["placements"], status["placements"]

                no_new_worker()
                terminated = {"terminated": {"exitCode": 143, "reason": "Error"}}
                exited = {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": terminated}]}
                core(api).patch_namespaced_pod_status(victim.metadata.name, namespace, {"status": exited})
                no_new_worker()  # exited, it holds no GPU: they are the preemptor's to take
                assert nominated() == taken
                core(api).patch_namespaced_pod(
                    victim.metadata.name,
                    namespace,
                    {"metadata": {"finalizers": None, "annotations": {KUBELET_GONE_ANNOTATION: None}}},
                )
                wait_for(
                    lambda: pod_or_none(api, namespace, victim.metadata.name) is None, DEADLINE_S, "the victim gone"
                )
                wait_for(
                    lambda: core(api).read_namespaced_pod("urgent", namespace).spec.node_name == taken,
                    DEADLINE_S,
                    "the urgent pod bound",
                )
                no_new_worker()
                events = core(api).list_namespaced_event(namespace).items
                scaled = [e.message for e in events if e.reason == "ScaledIn" and e.involved_object.name == "spread"]
                assert any("(PreemptionByScheduler)" in m for m in scaled), scaled
                print("scaled in:", scaled)
                core(api).delete_namespaced_pod("urgent", namespace, grace_period_seconds=0)
                wait_for(lambda: running(api, namespace, "spread", 4), DEADLINE_S, "the job grown back onto the node")
                never_failed(api, namespace, "spread")
                assert job(api, namespace, "spread")["status"]["preemptions"] == 0
                assert_check_clean(cluster.kubeconfig)
            finally:  # whatever happened, the namespace can go: no pod is kept by the test's finalizer
                for pod in core(api).list_namespaced_pod(namespace).items:
                    if NO_KUBELET_FINALIZER in (pod.metadata.finalizers or []):
                        release = {"finalizers": None, "annotations": {KUBELET_GONE_ANNOTATION: None}}
                        core(api).patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": release})
    finally:
        scheduling.delete_priority_class(URGENT_CLASS)
