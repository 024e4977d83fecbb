"""Lyra's work in real containers: a loan, a reclaim by scale-in and one that preempts, on real nodes.

The cluster: real nodes (kubelets, containerd, runc, the fake GPU device plugin; ``lyra cluster up --real-nodes``) of
``T4_SERVERS`` T4 inference servers and one A100 training server, each of ``GPUS`` GPUs, with the project's images
on them; the real kube-scheduler calling Lyra's extender, and the operator (both out of cluster, as in the other e2e
tests). The workloads are examples/real-nodes/ (the project's workload images): an InferenceService of one replica
per server (a readiness probe on /healthz) and a TrainingJob of 1..2 workers of a whole T4 server each, whose
workers checkpoint to ``<job>-w<index>.json`` in a directory this test owns (a hostPath every node reaches).

1. Loan: one server serves the replica, the two others are lent and the job grows to both.
2. Reclaim by scale-in: the service scales to 2; the flexible worker's server comes back.
3. Reclaim that preempts: the service scales to 3; the base worker's server comes back, the job is preempted.
4. Resume: the service scales back to 1; the servers are lent again and the job starts again.
5. Drain: ``kubectl drain`` of the A100 server under the example job as written (cordoned, its pods evicted through
   the Eviction API): its workers checkpoint on SIGTERM, the job is re-queued and waits with no pod while the server
   is cordoned, and resumes from its checkpoints once it is uncordoned.
6. The service's PodDisruptionBudget (``maxUnavailable: 1``) on real replicas: at 2 replicas, a server under one is
   drained; the eviction of the other replica is refused (429) until the first one's replacement, on the server the
   operator reclaims for it, is Ready by its own readiness probe, and accepted after.

Asserted from what the containers wrote: each stopped worker's checkpoint says ``sigterm`` and was written inside its
grace period (between its pod's deletion and ``deletionTimestamp``, which the API server sets to the deletion's time
plus the grace period); the restarted job's worker printed that it resumed at the step its checkpoint holds, and its
step counter goes on from there; the replicas are Ready, by their readiness probes, within ``READY_AFTER_RETURN_S`` of
their servers' return to ``serving``. ``lyra check`` is clean at the end. Figures printed (``-s``) and recorded in
docs/development.md.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from lyra.api import names
from lyra.images import build
from lyra.imagespec import recipe
from lyra.localcluster import populate
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.profile import parse_profile
from lyra.localcluster.testing import real_node_cluster, temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.e2e.system_support import System
from tests.operator_support import (
    A100,
    DEADLINE_S,
    REPOSITORY,
    T4,
    Operator,
    assert_check_clean,
    custom,
    job,
    node_states,
    scale_service,
    service_account_kubeconfig,
    workers,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root (kubelet, containerd, runc, namespaces)"),
]

T4_SERVERS = 3
GPUS = 2  # per server; a replica and a worker each take a whole server
READY_AFTER_RETURN_S = 10.0
POLL_S = 0.1
EXAMPLES = REPOSITORY / "examples" / "real-nodes"
JOB = "t4-train"  # the example job, on T4s only; the example as written runs on the A100 server beside it
UID, GID = (int(part) for part in recipe.USER.split(":"))


# -- the workloads ------------------------------------------------------------------------------------------------


def service_body() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / "demo-replica-inferenceservice.yaml").read_text())
    body["spec"].update(replicas=1, minReplicas=1, maxReplicas=T4_SERVERS, gpusPerReplica=GPUS)
    body["spec"]["disruptionBudget"] = {"maxUnavailable": 1}
    return body


def job_body(checkpoints: Path, *, on_t4s: bool) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / "demo-worker-trainingjob.yaml").read_text())
    if on_t4s:
        body["metadata"]["name"] = JOB
        body["spec"].update(minWorkers=1, maxWorkers=2, gpusPerWorker=GPUS, gpuTypes=[T4])
    [volume] = body["spec"]["template"]["spec"]["volumes"]
    volume["hostPath"]["path"] = str(checkpoints)
    return body


def create(api: client.ApiClient, namespace: str, plural: str, body: dict[str, Any]) -> None:
    custom(api).create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, body)


@dataclass(frozen=True)
class Checkpoint:
    step: int
    reason: str
    written_at: float

    @classmethod
    def read(cls, path: Path) -> Checkpoint | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return cls(step=int(data["step"]), reason=str(data["reason"]), written_at=float(data["written_at"]))


# -- what the cluster says ----------------------------------------------------------------------------------------


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def ready_replicas(api: client.ApiClient, namespace: str) -> int:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=demo-serve")
    return sum(1 for p in pods.items if p.metadata.deletion_timestamp is None and ready(p))


def serving(api: client.ApiClient) -> int:
    return list(node_states(api).values()).count("serving")


def running_workers(api: client.ApiClient, namespace: str) -> dict[int, client.V1Pod]:
    return {
        int(p.metadata.labels[names.WORKER_INDEX_LABEL]): p
        for p in workers(api, namespace, JOB)
        if p.status.phase == "Running" and p.spec.node_name
    }


def job_counts(api: client.ApiClient, namespace: str) -> tuple[int, int]:
    status = job(api, namespace, JOB).get("status", {})
    return int(status.get("scaleIns", 0)), int(status.get("preemptions", 0))


class Deletions:
    """The deletionTimestamp of each worker pod of ``job`` seen being deleted (the API server's deletion time +
    grace)."""

    def __init__(self, api: client.ApiClient, namespace: str, job: str = JOB) -> None:
        self.api, self.namespace, self.job = api, namespace, job
        self.seen: dict[int, datetime] = {}

    def poll(self) -> None:
        pods = client.CoreV1Api(self.api).list_namespaced_pod(
            self.namespace, label_selector=f"{names.JOB_LABEL}={self.job}"
        )
        for pod in pods.items:
            index = int(pod.metadata.labels[names.WORKER_INDEX_LABEL])
            if pod.metadata.deletion_timestamp is not None:
                self.seen.setdefault(index, pod.metadata.deletion_timestamp)


@dataclass(frozen=True)
class Reclaimed:
    worker: int  # the index of the worker whose server was reclaimed
    ready_after_return: float  # seconds from the last needed server serving to every replica Ready
    checkpoint_before_deadline: float  # seconds between the worker's checkpoint and its pod's deletionTimestamp


def reclaim(api: client.ApiClient, namespace: str, *, replicas: int, checkpoints: Path, grace: int) -> Reclaimed:
    """Scale the service to ``replicas``, which reclaims a lent server and stops the worker on it: measure, check."""
    deletions = Deletions(api, namespace)
    seen: dict[str, float] = {}
    start = time.monotonic()

    def settled() -> bool:
        deletions.poll()
        for name, holds in (
            ("servers", lambda: serving(api) >= replicas),
            ("replicas", lambda: ready_replicas(api, namespace) == replicas),
        ):
            if name not in seen and holds():
                seen[name] = time.monotonic() - start
        return len(seen) == 2 and bool(deletions.seen)

    scale_service(api, namespace, "demo-serve", replicas)
    wait_for(settled, 2 * DEADLINE_S, f"{replicas} servers serving, {replicas} replicas Ready, a worker stopped",
             interval=POLL_S, max_interval=POLL_S)  # fmt: skip
    [(worker, deleted)] = deletions.seen.items()  # one server comes back: the one worker on it stops
    path = checkpoints / f"{JOB}-w{worker}.json"

    def checkpointed() -> Checkpoint | None:
        written = Checkpoint.read(path)
        return written if written is not None and written.reason == "sigterm" else None

    written = wait_for(checkpointed, grace + 5, f"worker {worker}'s checkpoint on SIGTERM")
    deadline = deleted.timestamp()  # deletion time + grace, to the second (rounded down)
    left = deadline - written.written_at
    assert -1.0 < left <= grace, f"checkpoint written {left:.2f}s before the pod's deletionTimestamp, grace {grace}s"
    return Reclaimed(worker, ready_after_return=seen["replicas"] - seen["servers"], checkpoint_before_deadline=left)


def pod_log(api: client.ApiClient, namespace: str, pod: str) -> str:
    return str(client.CoreV1Api(api).read_namespaced_pod_log(pod, namespace))


def assert_resumed(api: client.ApiClient, namespace: str, path: Path, pod: str, step: int) -> None:
    """The worker ``pod`` says it resumed from ``path`` at ``step``, and its step counter goes on from there."""
    said = f"resumed from /checkpoints/{path.name} at step {step}"
    wait_for(lambda: said in pod_log(api, namespace, pod), DEADLINE_S, f"{pod} to say {said!r}")

    def stepped_on() -> bool:
        now = Checkpoint.read(path)
        return now is not None and now.reason == "periodic" and now.step > step

    wait_for(stepped_on, DEADLINE_S, f"{pod}'s step counter to go on from its checkpoint")


# -- the system ---------------------------------------------------------------------------------------------------


#: Real nodes only where the workloads can go: three T4 inference servers and an A100 training server (the order
#: ``--real-nodes`` takes them in does not matter: all four start). The one KWOK node is of a GPU type no workload
#: here asks for, so every pod of the story runs as a container.
PROFILE = {
    "name": "real-containers",
    "nodeGroups": [
        {"name": "kwok-v100", "pool": "training", "count": 1, "gpu": {"product": "Tesla-V100-SXM2-16GB", "count": 8}}
    ],
    "realNodeGroups": [
        {"name": "real-t4", "pool": "inference", "count": T4_SERVERS, "pods": 30,
         "gpu": {"product": T4, "count": GPUS, "memoryMiB": 15360}},
        {"name": "real-a100", "pool": "training", "count": 1, "pods": 30,
         "gpu": {"product": A100, "count": GPUS, "memoryMiB": 81920}},
    ],
}  # fmt: skip
REAL_NODES = T4_SERVERS + 1


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """The real nodes of :data:`PROFILE` with the images built now on them, a kube-scheduler calling an extender."""
    images = tmp_path_factory.mktemp("images")
    try:
        # what the story's pods run: the sandbox (pause) and the two workloads
        build.ImageBuilder(REPOSITORY, images, print).build(
            only=("pause", recipe.TRAINING_WORKER.image, recipe.INFERENCE_REPLICA.image)
        )
    except build.ImageBuildError as error:
        pytest.fail(str(error), pytrace=False)
    port = allocate_ports(1)[0]
    state = tmp_path_factory.mktemp("real-containers")
    with ExitStack() as stack:
        cluster = stack.enter_context(
            real_node_cluster(
                state / "cluster", real_nodes=REAL_NODES, images_dir=images,
                profile=parse_profile(PROFILE, "the test's profile"), extender_url=f"http://127.0.0.1:{port}",
                crd_dir=REPOSITORY / "manifests" / "crds",
            )
        ).control_plane  # fmt: skip
        api = stack.enter_context(populate.admin_api(cluster.kubeconfig))
        logs = state / "logs"
        logs.mkdir()
        running = System(cluster, api, service_account_kubeconfig(cluster, api, state), logs, port)
        running.start_extender()
        stack.callback(running.stop_extender)
        yield running


def test_workers_checkpoint_inside_their_grace_and_resume_replicas_ready_by_their_probes(
    system: System, tmp_path: Path
) -> None:
    api = system.api
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    os.chown(checkpoints, UID, GID)
    operator = Operator(system.operator_kubeconfig, system.logs / "operator.log")
    with temporary_namespace(api, "real-containers") as namespace, ExitStack() as stack:
        stack.callback(operator.stop)
        try:
            _story(api, namespace, operator, checkpoints)
            _drain(api, namespace, checkpoints)
            _drain_under_the_budget(api, namespace)
            assert_check_clean(system.cluster.kubeconfig)  # converged: both jobs running, the replica Ready
        except BaseException:
            system.print_logs()
            print(operator.tail())
            raise


def _story(api: client.ApiClient, namespace: str, operator: Operator, checkpoints: Path) -> None:
    service, training = service_body(), job_body(checkpoints, on_t4s=True)
    grace = int(training["spec"]["preemption"]["gracePeriodSeconds"])
    create(api, namespace, names.INFERENCE_SERVICE_PLURAL, service)
    create(api, namespace, names.TRAINING_JOB_PLURAL, training)
    create(api, namespace, names.TRAINING_JOB_PLURAL, job_body(checkpoints, on_t4s=False))
    operator.start()

    # The example as written: its worker runs on the A100 training server and checkpoints there.
    a100 = checkpoints / "demo-train-w0.json"
    wait_for(lambda: (Checkpoint.read(a100) or Checkpoint(0, "", 0)).step > 0, 3 * DEADLINE_S, "the A100 job's worker")

    # 1. The loan: two servers lent, the job grown onto both, each worker checkpointing to its own file.
    def lent_and_grown() -> bool:
        if list(node_states(api).values()).count("loaned") != T4_SERVERS - 1 or ready_replicas(api, namespace) != 1:
            return False
        return sorted(running_workers(api, namespace)) == [0, 1] and all(
            (checkpoints / f"{JOB}-w{i}.json").is_file() for i in (0, 1)
        )

    wait_for(lent_and_grown, 3 * DEADLINE_S, "two servers lent, two workers running and checkpointing")
    scale_ins, preemptions = job_counts(api, namespace)

    # 2. Reclaim by scale-in: the worker on the reclaimed server gets SIGTERM and checkpoints; the job goes on.
    scaled_in = reclaim(api, namespace, replicas=2, checkpoints=checkpoints, grace=grace)
    wait_for(lambda: job_counts(api, namespace) == (scale_ins + 1, preemptions), DEADLINE_S, "the job's scale-in")
    [left] = [index for index in (0, 1) if index != scaled_in.worker]
    assert sorted(running_workers(api, namespace)) == [left], "the other worker goes on"

    # 3. Reclaim that preempts: the last lent server comes back; its worker checkpoints inside its grace period.
    preempted = reclaim(api, namespace, replicas=3, checkpoints=checkpoints, grace=grace)
    assert preempted.worker == left
    wait_for(lambda: job_counts(api, namespace)[1] == preemptions + 1, DEADLINE_S, "the job's preemption")
    stopped = {index: Checkpoint.read(checkpoints / f"{JOB}-w{index}.json") for index in (0, 1)}

    # 4. Resume: the servers are lent again and the job starts again; each worker resumes from its checkpoint.
    scale_service(api, namespace, "demo-serve", 1)
    wait_for(lambda: sorted(running_workers(api, namespace)) == [0, 1], 3 * DEADLINE_S, "the job running again")
    for index, checkpoint in stopped.items():
        assert checkpoint is not None
        assert checkpoint.reason == "sigterm"
        assert_resumed(api, namespace, checkpoints / f"{JOB}-w{index}.json", f"{JOB}-w{index}", checkpoint.step)
    for name, measured in (("scale-in", scaled_in), ("preemption", preempted)):
        print(
            f"{name}: replicas Ready {measured.ready_after_return:.1f}s after their servers' return; checkpoint "
            f"{measured.checkpoint_before_deadline:.1f}s before the pod's deletionTimestamp (grace {grace}s)"
        )
    slow = [m for m in (scaled_in, preempted) if m.ready_after_return > READY_AFTER_RETURN_S]
    assert not slow, f"replicas Ready more than {READY_AFTER_RETURN_S:g}s after their servers' return: {slow}"


#: The example job as written, on the A100 training server.
A100_JOB = "demo-train"


def _drain(api: client.ApiClient, namespace: str, checkpoints: Path) -> None:
    """5. ``kubectl drain`` of the A100 server under the example job (two workers of one GPU there): cordoned, its
    pods evicted. Each worker checkpoints on its SIGTERM inside its grace; the job loses its base and is re-queued
    (a preemption), and waits ``Queued`` with no pod while the only server it may use is cordoned. Uncordoned, it
    starts again there and each worker resumes from its checkpoint."""
    core = client.CoreV1Api(api)
    [server] = [n.metadata.name for n in core.list_node(label_selector=f"{names.GPU_PRODUCT_LABEL}={A100}").items]

    def on_server() -> list[client.V1Pod]:
        pods = workers(api, namespace, A100_JOB)
        return [p for p in pods if p.spec.node_name == server and p.status.phase == "Running"]

    wait_for(lambda: len(on_server()) == 2, 3 * DEADLINE_S, "the example job's two workers on the A100 server")
    grace = int(job(api, namespace, A100_JOB)["spec"]["preemption"]["gracePeriodSeconds"])
    preemptions = int(job(api, namespace, A100_JOB).get("status", {}).get("preemptions", 0))
    deletions = Deletions(api, namespace, A100_JOB)
    stopped: dict[int, Checkpoint] = {}
    drained_at = time.time()
    core.patch_node(server, {"spec": {"unschedulable": True}})
    try:
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={server}").items:
            meta = client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace)
            core.create_namespaced_pod_eviction(
                pod.metadata.name, pod.metadata.namespace, client.V1Eviction(metadata=meta)
            )

        def queued_with_no_pod() -> bool:
            deletions.poll()
            status = job(api, namespace, A100_JOB).get("status", {})
            pods = core.list_namespaced_pod(namespace, label_selector=f"{names.JOB_LABEL}={A100_JOB}").items
            return status.get("phase") == "Queued" and status.get("preemptions", 0) == preemptions + 1 and not pods

        wait_for(queued_with_no_pod, DEADLINE_S, "the example job re-queued, its workers gone, no pod made",
                 interval=POLL_S, max_interval=POLL_S)  # fmt: skip
        for index in (0, 1):
            written = Checkpoint.read(checkpoints / f"{A100_JOB}-w{index}.json")
            assert written is not None
            assert written.reason == "sigterm", f"worker {index}'s checkpoint: {written}"
            assert written.written_at >= drained_at - 1.0, f"worker {index}'s checkpoint is older than the drain"
            if index in deletions.seen:  # a pod seen terminating (polled every POLL_S): inside its grace
                left = deletions.seen[index].timestamp() - written.written_at
                assert -1.0 < left <= grace, f"worker {index}'s checkpoint {left:.2f}s before its deletionTimestamp"
            stopped[index] = written
        message = next(
            c["message"] for c in job(api, namespace, A100_JOB)["status"]["conditions"] if c["type"] == "Running"
        )
        print(f"drain: {message}; deletions seen for workers {sorted(deletions.seen)}")
    finally:
        core.patch_node(server, {"spec": {"unschedulable": False}})
    wait_for(lambda: len(on_server()) == 2, 3 * DEADLINE_S, "the example job running again on the A100 server")
    for index, checkpoint in stopped.items():
        assert_resumed(
            api, namespace, checkpoints / f"{A100_JOB}-w{index}.json", f"{A100_JOB}-w{index}", checkpoint.step
        )


def replicas_now(api: client.ApiClient, namespace: str) -> list[client.V1Pod]:
    """The service's replicas not being deleted, by name."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=demo-serve")
    return sorted((p for p in pods.items if p.metadata.deletion_timestamp is None), key=lambda p: p.metadata.name)


def ready_since(pod: client.V1Pod) -> datetime | None:
    """When the pod's Ready condition last turned True (its readiness probe's first success), ``None`` if not Ready."""
    return next(
        (c.last_transition_time for c in pod.status.conditions or [] if c.type == "Ready" and c.status == "True"),
        None,
    )


def _drain_under_the_budget(api: client.ApiClient, namespace: str) -> None:
    """6. Two replicas Ready by their probes under the service's budget (``maxUnavailable: 1``, applied by the
    operator). The server under the first is drained: cordoned, its replica evicted. The second replica's eviction is
    tried every POLL_S: refused (429) while the first one's replacement is not Ready, and accepted once it is; the
    replacement runs on the server the operator took back from the training job (neither drained nor the second's)."""
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    scale_service(api, namespace, "demo-serve", 2)

    def two_ready_and_allowed() -> bool:
        budget = policy.read_namespaced_pod_disruption_budget("demo-serve", namespace)
        status = budget.status
        return (
            ready_replicas(api, namespace) == 2
            and budget.spec.max_unavailable == 1
            and status is not None
            and status.current_healthy == 2
            and status.disruptions_allowed == 1
        )

    wait_for(two_ready_and_allowed, 3 * DEADLINE_S, "2 replicas Ready under the budget, one disruption allowed",
             retry_on=(ApiException,))  # fmt: skip
    first, second = replicas_now(api, namespace)
    drained = first.spec.node_name

    def evict(pod: client.V1Pod) -> None:
        meta = client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace)
        core.create_namespaced_pod_eviction(pod.metadata.name, namespace, client.V1Eviction(metadata=meta))

    refused = 0

    def second_evicted() -> bool:
        nonlocal refused
        try:
            evict(second)
        except ApiException as error:
            if error.status != 429:
                raise
            refused += 1
            return False
        return True

    core.patch_node(drained, {"spec": {"unschedulable": True}})
    try:
        evict(first)
        wait_for(second_evicted, 3 * DEADLINE_S, "the second replica's eviction accepted", interval=POLL_S,
                 max_interval=POLL_S)  # fmt: skip
        accepted = datetime.now(tz=UTC)
        # The first one's replacement is the one Ready: the second's has no server yet (the drained one is cordoned,
        # the second's own is held until the second is gone, the third runs the first's replacement).
        [replacement] = [
            p for p in replicas_now(api, namespace)
            if p.metadata.name not in (first.metadata.name, second.metadata.name) and ready_since(p) is not None
        ]  # fmt: skip
        became_ready = ready_since(replacement)
        assert became_ready is not None
        # lastTransitionTime has whole seconds: Ready at most a second after it says, and before the acceptance
        assert became_ready <= accepted, (became_ready, accepted)
        assert refused >= 1, "the second eviction was never refused: the budget held nothing back"
        assert replacement.spec.node_name not in (drained, second.spec.node_name), replacement.spec.node_name
        print(
            f"budget: the second eviction refused {refused} times, accepted "
            f"{(accepted - became_ready).total_seconds():.1f}s after the replacement's Ready "
            f"(on {replacement.spec.node_name}, reclaimed from training)"
        )
    finally:
        core.patch_node(drained, {"spec": {"unschedulable": False}})
    wait_for(lambda: ready_replicas(api, namespace) == 2, 3 * DEADLINE_S, "2 replicas Ready again")
