"""The operator's metrics as Prometheus sees them: Debian's Prometheus (from the binary cache) on loopback scrapes the
running operators (a leader and a standby) and the extender every second while inference servers are lent to a
training job and reclaimed from it (all but one, scaling its flexible workers in, then the last, preempting it),
with the real kube-scheduler calling the extender. Everything is asked of Prometheus' HTTP API: servers were loaned,
loans and reclaims counted, exactly one leader and only its state gauges, pass durations observed, the extender
answered the scheduler; and ``promtool check metrics`` passes on the live expositions. Then every query of every
Grafana dashboard panel (``lyra.dashboards.definitions``) answers data over the scenario, and ``lyra report`` plots each
panel from this Prometheus.

Two releases are scraped at once, as one Prometheus sees several clusters or releases: this scenario's (jobs
``lyra-operator`` and ``lyra-extender`` in namespace ``lyra-system``) and a second one in shadow mode (an operator
with ``--dry-run`` and an extender of its own, jobs ``shadow-lyra-operator`` and ``shadow-lyra-extender`` in
namespace ``shadow``), whose series carry the same metric labels. Every panel's query answers without error (no
many-to-many matching, no duplicate series) with every variable at "All", with the job or the namespace narrowed to
this scenario's release, and narrowed to the shadow; the leader panel says one leader over both, one for this
release, none for the shadow."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes import client

from lyra.api import names
from lyra.dashboards.definitions import DASHBOARDS
from lyra.dashboards.grafana import concrete
from lyra.localcluster.ports import LOOPBACK, allocate_ports
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.e2e.system_support import Child, System
from tests.operator_support import (
    DEADLINE_S,
    RECLAIM_DEADLINE_S,
    T4,
    Operator,
    create_job,
    custom,
    inference_service,
    node_states,
    scale_service,
    workers,
)
from tests.prometheus_support import Prometheus, check_metrics, get

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

GPUS_PER_SERVER = 8
OPERATOR_JOB, EXTENDER_JOB = "lyra-operator", "lyra-extender"
NAMESPACE = "lyra-system"
#: The second release: a shadow (it decides and writes nothing), with its own jobs and namespace.
SHADOW_OPERATOR_JOB, SHADOW_EXTENDER_JOB, SHADOW_NAMESPACE = "shadow-lyra-operator", "shadow-lyra-extender", "shadow"


def service(replicas: int) -> dict[str, object]:
    return inference_service("chat", replicas=replicas, gpus=GPUS_PER_SERVER, max_replicas=8)


def test_prometheus_sees_loans_reclaims_the_leader_and_pass_durations(
    system: System, tmp_path_factory: pytest.TempPathFactory
) -> None:
    api = system.api
    *ports, shadow_port, shadow_extender_port = allocate_ports(4)
    leader, standby = (
        Operator(system.operator_kubeconfig, system.logs / f"operator-metrics-{i}.log", http_port=port)
        for i, port in enumerate(ports)
    )
    shadow = Operator(
        system.operator_kubeconfig, system.logs / "operator-shadow.log", http_port=shadow_port, options=("--dry-run",)
    )
    urls = [f"http://{LOOPBACK}:{port}" for port in ports]
    extender = f"http://{LOOPBACK}:{system.extender_port}"
    targets = {
        OPERATOR_JOB: [f"{LOOPBACK}:{port}" for port in ports],
        EXTENDER_JOB: [f"{LOOPBACK}:{system.extender_port}"],
        SHADOW_OPERATOR_JOB: [f"{LOOPBACK}:{shadow_port}"],
        SHADOW_EXTENDER_JOB: [f"{LOOPBACK}:{shadow_extender_port}"],
    }
    labels = {
        job: {"namespace": NAMESPACE if job in (OPERATOR_JOB, EXTENDER_JOB) else SHADOW_NAMESPACE} for job in targets
    }
    with ExitStack() as stack:
        namespace = stack.enter_context(temporary_namespace(api, "metrics-prometheus"))
        prometheus = stack.enter_context(Prometheus(tmp_path_factory.mktemp("prometheus"), targets, labels))
        stack.callback(leader.stop)
        stack.callback(standby.stop)
        shadow.start()
        stack.callback(shadow.stop)
        shadow_extender = Child(
            system.logs / "extender-shadow.log",
            "extender", "--kubeconfig", str(system.cluster.kubeconfig), "--port", str(shadow_extender_port),
        )  # fmt: skip
        stack.callback(shadow_extender.stop)
        try:
            started = time.time()
            _story(api, namespace, leader, standby, prometheus)
            for url in (*urls, extender):
                status, exposition = get(f"{url}/metrics")
                assert status == 200
                assert check_metrics(exposition) == "", url
            every_panel_answers(prometheus, started)
            report_plots_every_panel(prometheus, tmp_path_factory.mktemp("report"))
        except BaseException:
            system.print_logs()
            print(f"--- prometheus ---\n{prometheus.tail()}")
            raise


def _story(api: client.ApiClient, namespace: str, leader: Operator, standby: Operator, prometheus: Prometheus) -> None:
    plural = names.INFERENCE_SERVICE_PLURAL
    custom(api).create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, service(1))
    leader.start()

    def count(expression: str) -> float:
        return prometheus.value(expression) or 0.0

    # The first operator leads (it took the Lease), then a second one stands by. The job is submitted once Prometheus
    # has scraped the leader: its start is then counted in a series Prometheus saw at zero, which rate() can tell
    # (a process' counters are born counting whatever its first pass did, and no rate() sees that).
    wait_for(lambda: count(f'lyra_leader{{instance="{LOOPBACK}:{leader.http_port}"}}') == 1, DEADLINE_S, "a leader")
    create_job(api, namespace, "t4", minWorkers=2, maxWorkers=40, gpusPerWorker=1, gpuTypes=[T4])
    standby.start()
    wait_for(lambda: count(f'count(up{{job="{OPERATOR_JOB}"}} == 1)') == 2, DEADLINE_S, "both operators scraped")
    wait_for(lambda: count(f'up{{job="{EXTENDER_JOB}"}}') == 1, DEADLINE_S, "the extender scraped")
    for job in (SHADOW_OPERATOR_JOB, SHADOW_EXTENDER_JOB):
        wait_for(lambda job=job: count(f'up{{job="{job}"}}') == 1, DEADLINE_S, f"the second release's {job} scraped")
    for port in (leader.http_port, standby.http_port):
        assert get(f"http://{LOOPBACK}:{port}/healthz")[0] == 200
        wait_for(lambda port=port: get(f"http://{LOOPBACK}:{port}/readyz")[0] == 200, DEADLINE_S, "ready")

    # Lent: Prometheus saw loaned servers and counted the loans.
    wait_for(
        lambda: count(f'sum(lyra_servers{{state="loaned",gpu_type="{T4}"}})') > 0,
        DEADLINE_S,
        "lyra_servers{state=loaned} > 0 in Prometheus",
    )
    wait_for(lambda: count("sum(lyra_loans_total)") > 0, DEADLINE_S, "lyra_loans_total > 0")
    lent = list(node_states(api).values()).count("loaned")
    assert lent > 0

    # A partial reclaim: every lent server but one goes back once the job has spread over more than one. The reclaim
    # plan keeps the server with the job's base workers and scales in its flexible workers on the others.
    wait_for(lambda: spread_over(api, namespace, "t4") > 1, DEADLINE_S, "the job's workers on more than one server")
    scale_service(api, namespace, "chat", len(node_states(api)) - 1)
    wait_for(lambda: count("sum(lyra_workers_scaled_in_total)") > 0, DEADLINE_S, "lyra_workers_scaled_in_total > 0")

    # Reclaimed: inference needs every T4 server back.
    custom(api).patch_namespaced_custom_object_scale(
        names.GROUP, names.VERSION, namespace, plural, "chat", {"spec": {"replicas": 8}}
    )
    wait_for(
        lambda: count("sum(lyra_reclaims_total)") >= lent,
        DEADLINE_S,
        f"lyra_reclaims_total >= {lent} (every lent server returned)",
    )
    assert count(f'sum(lyra_reclaim_duration_seconds_count{{gpu_type="{T4}"}})') >= lent

    # One leader (either: on a busy machine a long pass can cost the first its Lease); the standby exports that it
    # does not lead, and no state, so sums count each server once.
    wait_for(lambda: one_leader_exports_state(prometheus), DEADLINE_S, "one leader, the only one with state gauges")
    inference = len(node_states(api))
    assert count('sum(lyra_servers{state!="training"})') == inference
    for phase in ("observe", "decide", "commit"):
        assert count(f'sum(lyra_reconcile_pass_duration_seconds_count{{phase="{phase}"}})') > 0, phase
    assert count('sum(lyra_reconcile_passes_total{result="succeeded"})') > 0
    assert count('sum(lyra_actions_total{outcome="applied"})') > 0
    wait_for(
        lambda: count("sum(lyra_extender_requests_total)") > 0,
        DEADLINE_S,
        "the extender's requests from the scheduler in Prometheus",
    )
    wait_for(
        lambda: count("sum(lyra_inference_reclaim_wait_seconds_count)") > 0,
        DEADLINE_S,
        "the replicas that waited for reclaimed servers served (ReclaimServed) in Prometheus",
    )

    # `kubectl cordon` of a T4 server: Prometheus counts it out of service until it is uncordoned.
    cordoned = f'sum(lyra_servers_out_of_service{{reason="cordoned",gpu_type="{T4}"}})'
    assert count(cordoned) == 0
    server = sorted(node_states(api))[0]
    nodes = client.CoreV1Api(api)
    nodes.patch_node(server, {"spec": {"unschedulable": True}})
    try:
        wait_for(lambda: count(cordoned) == 1, DEADLINE_S, f"{server} cordoned, as Prometheus sees it")
    finally:
        nodes.patch_node(server, {"spec": {"unschedulable": False}})
    wait_for(lambda: count(cordoned) == 0, DEADLINE_S, f"{server} uncordoned, as Prometheus sees it")


def spread_over(api: client.ApiClient, namespace: str, job: str) -> int:
    """How many servers the job's live workers are bound to."""
    return len({pod.spec.node_name for pod in workers(api, namespace, job) if pod.spec.node_name})


def one_leader_exports_state(prometheus: Prometheus) -> bool:
    leaders = prometheus.query(f'lyra_leader{{job="{OPERATOR_JOB}"}} == 1')
    standbys = prometheus.query(f'lyra_leader{{job="{OPERATOR_JOB}"}} == 0')
    with_state = prometheus.query("count by (instance) (lyra_servers)")
    return (
        len(leaders) == 1
        and len(standbys) == 1
        and [s["metric"]["instance"] for s in with_state] == [leaders[0]["metric"]["instance"]]
    )


def every_panel_answers(prometheus: Prometheus, started: float) -> None:
    """Every query of every panel parses (Prometheus answers it) and has data over the scenario: at least one series
    with a number. One exception, only if the Lease moved during the scenario: a quantile may be NaN throughout (a
    series with nothing to rank), as a new leader's counters are born in its first pass, already counting whatever
    that pass applied, which rate() cannot see (docs/operations.md, what the metrics count)."""
    span = math.ceil(time.time() - started) + 5
    leaders = prometheus.value(f'count(max_over_time(lyra_leader{{job="{OPERATOR_JOB}"}}[{span}s]) == 1)')
    moved = leaders != 1
    # The range's steps end exactly now: the story's last wait saw a sample Prometheus had already stored, which a
    # grid aligned on ``started`` could end up to a step before (a story that ends within a second of its last
    # scrape then shows the panel empty).
    end = time.time()
    start = end - math.ceil(end - started)
    missing = []
    leaked = []
    for dashboard in DASHBOARDS:
        for panel in dashboard.panels:
            for query in panel.queries:
                # As Grafana asks it with every variable at "All" (both releases), and with the job or the namespace
                # variable on this scenario's release: data each time (query_range fails on any error of the query,
                # a many-to-many match or duplicate series among them).
                for choices in ({}, {"job": f"{OPERATOR_JOB}|{EXTENDER_JOB}"}, {"namespace": NAMESPACE}):
                    expr = concrete(query.expr, dashboard.variables, choices)
                    result = prometheus.query_range(expr, start, end, 1)
                    numbers = [float(v) for series in result for _, v in series["values"] if math.isfinite(float(v))]
                    excused = moved and result and expr.startswith("histogram_quantile")
                    if not numbers and not excused:
                        missing.append(f"{dashboard.title}: {panel.title}: {expr} ({len(result)} series)")
                # The shadow release alone: answered without error (it lends nothing, so may have no data).
                prometheus.query_range(
                    concrete(query.expr, dashboard.variables, {"namespace": SHADOW_NAMESPACE}), start, end, 1
                )
                # A release that is not scraped selects nothing: the variables really narrow every series.
                other = concrete(query.expr, dashboard.variables, {"namespace": "another-release"})
                if prometheus.query_range(other, start, end, 1):
                    leaked.append(f"{dashboard.title}: {panel.title}: {other}")
    assert missing == [], f"panels without data ({leaders} leaders during the scenario):\n" + "\n".join(missing)
    leader_panel = next(p for d in DASHBOARDS for p in d.panels if p.title == "Leader")
    [leader_query] = leader_panel.queries
    variables = DASHBOARDS[-1].variables
    for choices, leading in (({}, 1.0), ({"namespace": NAMESPACE}, 1.0), ({"namespace": SHADOW_NAMESPACE}, 0.0)):
        assert prometheus.value(concrete(leader_query.expr, variables, choices)) == leading, choices
    releases = prometheus.query("count by (namespace, job) (lyra_build_info)")
    assert sorted((r["metric"]["namespace"], r["metric"]["job"]) for r in releases) == [
        (NAMESPACE, OPERATOR_JOB), (SHADOW_NAMESPACE, SHADOW_OPERATOR_JOB)
    ]  # fmt: skip
    assert leaked == [], "panels not narrowed by the namespace variable:\n" + "\n".join(leaked)


def report_plots_every_panel(prometheus: Prometheus, out: Path) -> None:
    command = [sys.executable, "-m", "lyra", "report", "--prometheus", prometheus.url, "--out-dir", str(out)]
    deadline = ["--reclaim-deadline", str(RECLAIM_DEADLINE_S)]
    result = subprocess.run(
        [*command, "--since", "15m", *deadline], capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    panels = sum(len(dashboard.panels) for dashboard in DASHBOARDS)
    assert len(list(out.glob("*.png"))) == panels, result.stdout
    assert "no data" not in result.stdout, result.stdout
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in out.glob("*.png"))
