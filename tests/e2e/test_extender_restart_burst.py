"""The extender killed as a burst of pods arrives and started again while it is placed: every pod is still placed by
Lyra's rules, and none is left Pending.

The whole system (default profile: 4 training servers of 8 A100s, 8 inference servers of 8 T4s; the real
kube-scheduler calling the real extender, ``ignorable``; the operator as its ServiceAccount). An InferenceService of 2
replicas x 8 GPUs runs and the six other T4 servers are lent. Then a burst arrives at once (``BURST``): a second
service of 12 one-GPU replicas (two servers come back for it), an A100-only job and a T4-only job of up to 32 and 40
one-GPU workers. The extender is SIGKILLed as the burst is submitted (killed once the burst's first pod existed, it
missed the burst on an idle machine: kube-scheduler had bound nearly every pod by then), stays down until
``BOUND_WHILE_DOWN`` of the burst's pods (``REPLICAS_WHILE_DOWN`` replicas among them) have been bound without it, and
is started again. The burst fits the cluster, so at
the end every pod runs, and each where the rules say: replicas on serving or idle inference servers of their GPU
type, workers on training servers or loaned ones of their job's type; the jobs' statuses count their running
workers, a dry-run pass has nothing left to do, and ``lyra check`` is clean.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.e2e.system_support import System
from tests.operator_support import (
    A100,
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_job,
    custom,
    inference_service,
    job,
    node_states,
    wait_quiet,
)

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.timeout(900)]

SERVERS = 8  # T4 servers in the default profile
BOUND_WHILE_DOWN = 12
REPLICAS_WHILE_DOWN = 4  # of the burst's service: they wait for two servers to be reclaimed


@dataclass(frozen=True)
class Service:
    name: str
    replicas: int
    gpus: int


@dataclass(frozen=True)
class Job:
    name: str
    low: int
    high: int
    gpu_type: str


STEADY = Service("chat", 2, 8)
BURST = (Service("burst", 12, 1), Job("a100", 4, 32, A100), Job("t4", 2, 40, T4))


def service(spec: Service) -> dict[str, Any]:
    return inference_service(spec.name, replicas=spec.replicas, gpus=spec.gpus)


def live_pods(api: client.ApiClient, namespace: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def bound(api: client.ApiClient, namespace: str) -> set[str]:
    return {p.metadata.name for p in live_pods(api, namespace) if p.spec.node_name}


def misplaced(api: client.ApiClient, namespace: str) -> list[str]:
    """Every live pod that is not running where the rules say, with why (the oracle: labels read here, not Lyra's
    readers)."""
    nodes = {n.metadata.name: n.metadata.labels or {} for n in client.CoreV1Api(api).list_node().items}
    gpu_types = {spec.name: spec.gpu_type for spec in BURST if isinstance(spec, Job)}
    wrong = []
    for pod in live_pods(api, namespace):
        labels = pod.metadata.labels or {}
        where = nodes.get(pod.spec.node_name or "", {})
        pool, state, product = (
            where.get(names.POOL_LABEL),
            where.get(names.STATE_LABEL),
            where.get(names.GPU_PRODUCT_LABEL),
        )
        name = f"{pod.metadata.name} on {pod.spec.node_name} ({pool}, {state}, {product})"
        if pod.status.phase != "Running" or not pod.spec.node_name:
            wrong.append(f"{pod.metadata.name}: {pod.status.phase}, not running")
        elif names.SERVICE_LABEL in labels:
            if pool != names.POOL_INFERENCE or state not in ("serving", "idle") or product != T4:
                wrong.append(f"replica {name}")
        elif names.JOB_LABEL in labels:
            lent = pool == names.POOL_INFERENCE and state == "loaned"
            if not (pool == names.POOL_TRAINING or lent) or product != gpu_types[labels[names.JOB_LABEL]]:
                wrong.append(f"worker {name}")
    return wrong


def converged(api: client.ApiClient, namespace: str) -> bool:
    """Every replica of both services and every worker the jobs' statuses target running, the statuses counting
    them. Held to the target, not only to the pods that exist: a pass creates its pods one by one, and a job whose
    first workers run while the rest are still being created is not converged."""
    pods = live_pods(api, namespace)
    running = [p for p in pods if p.status.phase == "Running" and p.spec.node_name]
    if len(running) != len(pods):
        return False
    replicas = sum(1 for p in running if (p.metadata.labels or {}).get(names.SERVICE_LABEL))
    if replicas != STEADY.replicas + sum(s.replicas for s in BURST if isinstance(s, Service)):
        return False
    for spec in BURST:
        if isinstance(spec, Job):
            status = job(api, namespace, spec.name).get("status", {})
            workers = sum(1 for p in running if (p.metadata.labels or {}).get(names.JOB_LABEL) == spec.name)
            counts = status.get("workers", {})
            if status.get("phase") != "Running" or not counts.get("target") or counts.get("current") != workers:
                return False
            if counts["target"] != workers:
                return False
    return True


def kill_extender(system: System) -> None:
    assert system.extender is not None
    system.extender.process.kill()
    system.extender.process.wait(timeout=30)
    system.extender = None


def test_a_burst_is_placed_by_the_rules_while_the_extender_dies_and_restarts(system: System) -> None:
    api = system.api
    operator = Operator(system.operator_kubeconfig, system.logs / "operator-burst.log")
    with temporary_namespace(api, "extender-burst") as namespace:
        objects = custom(api)
        objects.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, service(STEADY)
        )
        operator.start()
        try:
            lent = SERVERS - STEADY.replicas
            wait_for(lambda: list(node_states(api).values()).count("loaned") == lent, DEADLINE_S, f"{lent} lent")
            before = bound(api, namespace)
            kill_extender(system)
            for spec in BURST:
                if isinstance(spec, Service):
                    objects.create_namespaced_custom_object(
                        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, service(spec)
                    )
                else:
                    create_job(
                        api, namespace, spec.name, minWorkers=spec.low, maxWorkers=spec.high, gpusPerWorker=1,
                        gpuTypes=[spec.gpu_type],
                    )  # fmt: skip
            while_down: Counter[str] = Counter()

            def bound_without_the_extender() -> bool:
                while_down.clear()
                while_down.update(
                    "replicas" if names.SERVICE_LABEL in (p.metadata.labels or {}) else "workers"
                    for p in live_pods(api, namespace)
                    if p.spec.node_name and p.metadata.name not in before
                )
                return while_down["replicas"] >= REPLICAS_WHILE_DOWN and while_down.total() >= BOUND_WHILE_DOWN

            wait_for(
                bound_without_the_extender,
                2 * DEADLINE_S,
                f"{BOUND_WHILE_DOWN} pods, {REPLICAS_WHILE_DOWN} replicas among them, bound with the extender down",
            )
            system.start_extender()
            wait_for(lambda: converged(api, namespace), 2 * DEADLINE_S, "every pod of the burst running")
            wrong = misplaced(api, namespace)
            assert not wrong, wrong
            # A later pass may still act (a flexible worker left unplaced past the gang timeout is dropped and
            # offered again): the end state is checked once a pass has nothing left to do.
            wait_quiet(operator, DEADLINE_S)
            wait_for(lambda: converged(api, namespace), DEADLINE_S, "every pod of the burst running, once quiet")
            wrong = misplaced(api, namespace)
            assert not wrong, wrong
            assert_check_clean(system.cluster.kubeconfig)
        except BaseException:
            system.print_logs()
            print(operator.tail())
            raise
        finally:
            operator.stop()
            if system.extender is None:
                system.start_extender()
        print(
            f"bound while the extender was down: {dict(while_down)}; in the end {len(live_pods(api, namespace))} "
            "pods running, none misplaced, none pending"
        )
