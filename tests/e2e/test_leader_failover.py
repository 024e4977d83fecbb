"""No single point in placement: the leader of the bundled kube-scheduler, or of the operator, is killed (SIGKILL:
no Lease released) while a reclaim's replicas wait for their servers, and the standby takes over: every replica
still runs within ``RETURN_TO_RUNNING_S`` of its servers' return.

* **scheduler**: two kube-scheduler processes (the cached binary) with the chart's KubeSchedulerConfiguration (its
  ConfigMap, rendered by helm: profile ``lyra-scheduler``, leader election on a Lease, the extender stanza pointed at
  the system's extender) and short lease settings (``leaseDuration`` 4 s, ``renewDeadline`` 3 s, ``retryPeriod``
  1 s, as the chart's 15/10/2 s scaled down); the operator names ``lyra-scheduler`` in every pod it makes, so only
  these two place Lyra's pods. The first leads (its log says it acquired the Lease), the second stands by; the
  leader is killed as soon as a server is seen reclaiming: the new replicas' servers are still held by training
  workers then, so none of them can have been placed. Both log each pod they bind (``-v=2``), and the test checks
  that the standby placed the replicas: a leader that placed them all before it died would test nothing.
* **operator**: two operators (the tests' 4 s lease); the one that created the Lease is killed at the same moment,
  inside the pass that began the reclaim (it marks the servers, then deletes the workers): the standby inherits a
  half-done reclaim, finishes it and returns the servers (its log says so).

The cluster and the story are test_reclaim_race.py's: six idle T4 servers lent, the T4 job grown onto them, then the
service scaled to every T4 server."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from lyra.api import names
from lyra.chart.rendering import helm_template
from lyra.chart.values import BUNDLED_SCHEDULER_NAME
from lyra.localcluster.binaries import BinaryCache
from lyra.localcluster.ports import LOOPBACK, allocate_ports
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.e2e.system_support import System
from tests.e2e.test_reclaim_race import (
    BASE_REPLICAS,
    POLL_S,
    RETURN_TO_RUNNING_S,
    SERVERS,
    FirstTimes,
    lent_and_grown,
    service,
)
from tests.operator_support import (
    DEADLINE_S,
    OPERATOR_NAMESPACE,
    T4,
    ChildProcess,
    Operator,
    create_job,
    custom,
    lease_holder,
    node_states,
    running_replicas,
    scale_service,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REPOSITORY = Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "helm" / "lyra"
#: The chart's leader election (kube-scheduler's defaults, 15/10/2 s), scaled down so a takeover fits the test.
SHORT_LEASE = {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}
ACQUIRED = "successfully acquired lease"
#: What kube-scheduler logs (at ``-v=2``) for each pod it binds, and the pod's ``namespace/name`` after it.
BOUND = re.compile(r'"Successfully bound pod to node" pod="([^"]+)"')
#: What the operator logs when it gives a server back to inference.
RETURNED = re.compile(r"node \S+ -> serving")


def bundled_scheduler_config(kubeconfig: Path, extender_url: str, directory: Path) -> Path:
    """The chart's KubeSchedulerConfiguration (plain HTTP to the extender, as the system's extender serves), its
    Lease in the operator's namespace with short lease settings, connecting with ``kubeconfig``."""
    helm = BinaryCache().binary_set().helm
    rendered = helm_template(helm, CHART, namespace=OPERATOR_NAMESPACE, settings=["extender.tls.enabled=false"])
    [configmap] = [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "lyra-scheduler"
    ]
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    assert config["leaderElection"]["leaderElect"] is True
    assert config["profiles"] == [{"schedulerName": BUNDLED_SCHEDULER_NAME}]
    config["leaderElection"] |= SHORT_LEASE
    [extender] = config["extenders"]
    extender["urlPrefix"] = extender_url
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    path = directory / "bundled-scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Scheduler(ChildProcess):
    """One bundled kube-scheduler process, its log in a file."""

    def __init__(self, config: Path, kubeconfig: Path, log: Path) -> None:
        super().__init__(log)
        [port] = allocate_ports(1)
        self.run(
            [
                str(BinaryCache().binary_set().kube_scheduler),
                f"--config={config}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                "-v=2",  # each pod it binds, in its log
            ]
        )

    def bound(self) -> set[str]:
        """The pods (``namespace/name``) this scheduler has bound, from its log."""
        return set(BOUND.findall(self.log.read_text(errors="replace"))) if self.log.exists() else set()


@contextmanager
def two_schedulers(system: System, directory: Path) -> Iterator[tuple[Scheduler, Scheduler]]:
    """The bundled scheduler's two replicas: the first has acquired the Lease, the second is trying to."""
    kubeconfig = system.cluster.kubeconfig
    config = bundled_scheduler_config(kubeconfig, f"http://{LOOPBACK}:{system.extender_port}", directory)
    first = Scheduler(config, kubeconfig, system.logs / "bundled-scheduler-1.log")
    second: Scheduler | None = None
    try:
        wait_for(lambda: first.says(ACQUIRED), DEADLINE_S, "the first bundled scheduler to lead")
        second = Scheduler(config, kubeconfig, system.logs / "bundled-scheduler-2.log")
        wait_for(lambda: second.says("attempting to acquire leader lease"), DEADLINE_S, "the second to stand by")
        yield first, second
    finally:
        first.stop()
        if second is not None:
            second.stop()


def reclaim_begun(api: client.ApiClient) -> bool:
    """A server is being reclaimed: its training workers still hold its GPUs, so the replicas it is for cannot be
    placed yet."""
    return "reclaiming" in node_states(api).values()


def reclaim_killing_a_leader(system: System, namespace: str, kill: Any, leader_name: str) -> tuple[float, float, float]:
    """Scale the service to every server, kill the leader as soon as a server is seen reclaiming; (killed, servers
    back, replicas running), seconds after the scale-up."""
    api = system.api
    start = time.monotonic()
    scale_service(api, namespace, "chat", SERVERS)
    wait_for(lambda: reclaim_begun(api), DEADLINE_S, "a server reclaiming", interval=POLL_S, max_interval=POLL_S)
    kill()
    killed = time.monotonic() - start
    times = FirstTimes(
        start,
        {
            "servers": lambda: list(node_states(api).values()).count("serving") >= SERVERS,
            "replicas": lambda: running_replicas(api, namespace, "chat") == SERVERS,
        },
    )
    what = f"{SERVERS} servers serving and {SERVERS} replicas running after the {leader_name}'s leader was killed"
    wait_for(times.poll, 2 * DEADLINE_S, what, interval=POLL_S, max_interval=POLL_S)
    return killed, times.seen["servers"], times.seen["replicas"]


def lend(system: System, namespace: str) -> None:
    custom(system.api).create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, service("chat", BASE_REPLICAS)
    )
    create_job(system.api, namespace, "t4", minWorkers=2, maxWorkers=40, gpusPerWorker=1, gpuTypes=[T4])


def report(name: str, killed: float, servers: float, replicas: float) -> None:
    print(
        f"{name}: leader killed {killed:.1f} s after the scale-up; servers back {servers:.1f} s, replicas running "
        f"{replicas:.1f} s ({replicas - servers:.1f} s after the servers)"
    )
    assert replicas - servers <= RETURN_TO_RUNNING_S, (
        f"replicas ran {replicas - servers:.1f} s after their servers (more than {RETURN_TO_RUNNING_S:g} s)"
    )


def test_killing_the_bundled_schedulers_leader_during_a_reclaim(system: System, tmp_path: Path) -> None:
    api = system.api
    operator = Operator(
        system.operator_kubeconfig,
        system.logs / "operator-scheduler-failover.log",
        options=("--scheduler-name", BUNDLED_SCHEDULER_NAME),
    )
    with two_schedulers(system, tmp_path) as (first, second), temporary_namespace(api, "scheduler-failover") as ns:
        try:
            lend(system, ns)
            operator.start()
            wait_for(lambda: lent_and_grown(api, ns), 2 * DEADLINE_S, "six servers lent, the T4 job grown")
            assert not second.says(ACQUIRED)
            killed, servers, replicas = reclaim_killing_a_leader(system, ns, first.kill, "bundled scheduler")
            pods = client.CoreV1Api(api).list_namespaced_pod(ns).items
            assert {pod.spec.scheduler_name for pod in pods} == {BUNDLED_SCHEDULER_NAME}
            replica_names = {
                f"{ns}/{pod.metadata.name}"
                for pod in pods
                if (pod.metadata.labels or {}).get(names.SERVICE_LABEL) == "chat" and pod.status.phase == "Running"
            }
            by_standby = replica_names & second.bound()
            assert by_standby, (
                f"the standby placed none of the running replicas ({sorted(replica_names)}): the killed leader "
                f"had placed them all ({sorted(replica_names & first.bound())}), so no takeover was tested"
            )
            assert second.says(ACQUIRED), "the standby placed replicas but never said it took the Lease over"
            print(f"scheduler: the standby placed {len(by_standby)} of the {len(replica_names)} running replicas")
        except BaseException:
            system.print_logs()
            raise
        finally:
            operator.stop()
    report("scheduler", killed, servers, replicas)


def test_killing_the_operators_leader_during_a_reclaim(system: System) -> None:
    api = system.api
    first, second = (Operator(system.operator_kubeconfig, system.logs / f"operator-failover-{i}.log") for i in (1, 2))
    with temporary_namespace(api, "operator-failover") as ns:
        try:
            lend(system, ns)
            first.start()
            leader = wait_for(lambda: lease_holder(api) or None, DEADLINE_S, "the first operator to lead")
            second.start()
            wait_for(lambda: lent_and_grown(api, ns), 2 * DEADLINE_S, "six servers lent, the T4 job grown")
            assert lease_holder(api) == leader
            killed, servers, replicas = reclaim_killing_a_leader(system, ns, first.kill, "operator")
            # Killed within the pass that began the reclaim, the leader cannot have returned the servers: that takes
            # a later pass, once the workers have gone. The standby finishes the reclaim it inherits.
            assert lease_holder(api) not in {"", leader}, "the servers are back but the standby does not hold the Lease"
            assert RETURNED.search(second.log.read_text(errors="replace")), "the standby returned no server"
        except BaseException:
            system.print_logs()
            raise
        finally:
            first.stop()
            second.stop()
    report("operator", killed, servers, replicas)
