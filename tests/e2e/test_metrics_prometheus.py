"""The operator's metrics as Prometheus sees them: Debian's Prometheus (from the binary cache) on loopback scrapes the
running operator and extender every second while inference servers are lent to a training job and reclaimed from
it, with the real kube-scheduler calling the extender. Everything is asked of Prometheus' HTTP API: servers were
loaned, loans and reclaims counted, one leader, pass durations observed, the extender answered the scheduler; and
``promtool check metrics`` passes on both live expositions."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster.ports import LOOPBACK, allocate_ports
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.e2e.system_support import System
from tests.operator_support import DEADLINE_S, T4, Operator, create_job, custom, node_states
from tests.prometheus_support import Prometheus, check_metrics, get

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

GPUS_PER_SERVER = 8
OPERATOR_JOB, EXTENDER_JOB = "lyra-operator", "lyra-extender"


def service(replicas: int) -> dict[str, object]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.INFERENCE_SERVICE_KIND,
        "metadata": {"name": "chat"},
        "spec": {
            "replicas": replicas,
            "maxReplicas": 8,
            "gpusPerReplica": GPUS_PER_SERVER,
            "gpuType": T4,
            "template": {"spec": {"containers": [{"name": "server", "image": "registry.invalid/chat:1"}]}},
        },
    }


def test_prometheus_sees_loans_reclaims_the_leader_and_pass_durations(
    system: System, tmp_path_factory: pytest.TempPathFactory
) -> None:
    api = system.api
    port = allocate_ports(1)[0]
    operator = Operator(system.operator_kubeconfig, system.logs / "operator-metrics.log", http_port=port)
    operator_url = f"http://{LOOPBACK}:{port}"
    targets = {OPERATOR_JOB: f"{LOOPBACK}:{port}", EXTENDER_JOB: f"{LOOPBACK}:{system.extender_port}"}
    with ExitStack() as stack:
        namespace = stack.enter_context(temporary_namespace(api, "metrics-prometheus"))
        prometheus = stack.enter_context(Prometheus(tmp_path_factory.mktemp("prometheus"), targets))
        stack.callback(operator.stop)
        try:
            _story(api, namespace, operator, operator_url, prometheus)
        except BaseException:
            system.print_logs()
            print(f"--- prometheus ---\n{prometheus.tail()}")
            raise


def _story(api: client.ApiClient, namespace: str, operator: Operator, url: str, prometheus: Prometheus) -> None:
    plural = names.INFERENCE_SERVICE_PLURAL
    custom(api).create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, service(1))
    create_job(api, namespace, "t4", minWorkers=2, maxWorkers=40, gpusPerWorker=1, gpuTypes=[T4])
    operator.start()

    def up(job: str) -> bool:
        return prometheus.value(f'up{{job="{job}"}}') == 1.0

    wait_for(lambda: up(OPERATOR_JOB) and up(EXTENDER_JOB), DEADLINE_S, "Prometheus scraping both")
    wait_for(lambda: get(f"{url}/readyz")[0] == 200, DEADLINE_S, "the operator ready")
    assert get(f"{url}/healthz")[0] == 200

    # Lent: Prometheus saw loaned servers and counted the loans.
    wait_for(
        lambda: (prometheus.value(f'sum(lyra_servers{{state="loaned",gpu_type="{T4}"}})') or 0) > 0,
        DEADLINE_S,
        "lyra_servers{state=loaned} > 0 in Prometheus",
    )
    wait_for(lambda: (prometheus.value("sum(lyra_loans_total)") or 0) > 0, DEADLINE_S, "lyra_loans_total > 0")
    lent = list(node_states(api).values()).count("loaned")
    assert lent > 0

    # Reclaimed: inference needs every T4 server back.
    custom(api).patch_namespaced_custom_object_scale(
        names.GROUP, names.VERSION, namespace, plural, "chat", {"spec": {"replicas": 8}}
    )
    wait_for(
        lambda: (prometheus.value("sum(lyra_reclaims_total)") or 0) >= lent,
        DEADLINE_S,
        f"lyra_reclaims_total >= {lent} (every lent server returned)",
    )
    assert (prometheus.value(f'sum(lyra_reclaim_duration_seconds_count{{gpu_type="{T4}"}})') or 0) >= lent
    assert prometheus.value(f'lyra_leader{{job="{OPERATOR_JOB}"}}') == 1.0
    for phase in ("observe", "decide", "commit"):
        count = prometheus.value(f'sum(lyra_reconcile_pass_duration_seconds_count{{phase="{phase}"}})')
        assert count is not None
        assert count > 0, phase
    assert (prometheus.value('sum(lyra_reconcile_passes_total{result="succeeded"})') or 0) > 0
    assert (prometheus.value('sum(lyra_actions_total{outcome="applied"})') or 0) > 0
    wait_for(
        lambda: (prometheus.value("sum(lyra_extender_requests_total)") or 0) > 0,
        DEADLINE_S,
        "the extender's requests from the scheduler in Prometheus",
    )

    for target in (url, f"http://{LOOPBACK}:{prometheus_target_port(prometheus, EXTENDER_JOB)}"):
        status, exposition = get(f"{target}/metrics")
        assert status == 200
        assert check_metrics(exposition) == ""


def prometheus_target_port(prometheus: Prometheus, job: str) -> str:
    """The port Prometheus scrapes for ``job`` (as its targets API reports it)."""
    result = prometheus.query(f'up{{job="{job}"}}')
    return str(result[0]["metric"]["instance"]).rsplit(":", 1)[1]
