"""The operator running for real (``lyra operator`` in a subprocess) on its own local control plane: real
kube-apiserver, kube-scheduler (without the extender: placement must be right from labels, taints and affinity
alone), kube-controller-manager (Deployments, garbage collection) and KWOK GPU nodes (4 training A100 servers, 8
inference T4 servers, 8 GPUs each). The operator runs as the ServiceAccount of manifests/operator/rbac.yaml, so the
story also proves those rules are enough.

One story, in order: idle inference nodes are lent and an elastic T4 job grows on them while an A100-only job stays
on training nodes and an oversized job waits with a reason; inference load rises, the operator reclaims with
scale-in rather than preemption, is SIGKILLed in the middle of the reclaim, restarts and converges: no node left
reclaiming, no job lost, no job above maxWorkers, every replica placed. A second operator stands by while the first
holds the leader Lease and takes over when it dies. ``--dry-run --once`` reports and changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from lyra.operator.timestamps import parse_time
from tests.operator_support import (
    A100,
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_job,
    create_service,
    dry_run_once,
    inference_service,
    job,
    labels_of,
    lease_holder,
    loans_settled,
    lyra_node_fields,
    node_states,
    reclaimed_by_scale_in,
    running,
    scale_chat,
    wait_quiet,
    workers,
)

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)  # two operators, a kill, a standby's takeover and `lyra check`: over 120 s on a busy machine
def test_the_operator_lends_reclaims_survives_a_kill_and_converges(
    operator_kubeconfig: Path, api: client.ApiClient, tmp_path: Path
) -> None:
    operators = [Operator(operator_kubeconfig, tmp_path / f"operator-{n}.log") for n in ("a", "b")]
    with temporary_namespace(api, "operator-story") as namespace:
        try:
            _story(api, namespace, *operators)
        except BaseException:
            for operator in operators:
                print(f"--- {operator.log.name} ---\n" + operator.tail())
            raise
        finally:
            for operator in operators:
                operator.stop()


def _story(api: client.ApiClient, namespace: str, operator: Operator, standby: Operator) -> None:
    create_service(api, namespace, inference_service("chat", replicas=4, gpus=2, min_replicas=1, max_replicas=64))
    create_job(api, namespace, "elastic", minWorkers=2, maxWorkers=12, gpusPerWorker=4, gpuTypes=[T4])
    create_job(api, namespace, "a100-only", minWorkers=2, maxWorkers=2, gpusPerWorker=8, gpuTypes=[A100])
    create_job(api, namespace, "oversized", minWorkers=40, maxWorkers=40, gpusPerWorker=8)
    operator.start()
    wait_for(lambda: f"-{operator.pid}-" in lease_holder(api), DEADLINE_S, "the first operator to lead")
    standby.start()  # a second operator: it stands by while the first holds the lease
    wait_for(lambda: "standing by" in standby.log.read_text(), DEADLINE_S, "the second operator to stand by")

    # 1. Loaning: the 4 replicas (8 GPUs) prefer the one T4 server kept serving for them, but the default scheduler
    #    weighs that against spreading, so they may land on more (the e2e test, with the extender, packs them);
    #    every other T4 server is lent, and the elastic job grows there (2 workers of 4 GPUs per server, up to 12);
    #    the A100-only job runs on training servers.
    serving = loans_settled(api, namespace)
    loaned = 8 - serving
    oversized = job(api, namespace, "oversized")["status"]
    assert oversized["phase"] == "Queued"
    queued = next(c for c in oversized["conditions"] if c["type"] == "Running")
    assert queued["reason"] == "TooLarge"
    assert "larger than the cluster" in queued["message"]
    roles = [p.metadata.labels[names.ROLE_LABEL] for p in workers(api, namespace, "elastic")]
    assert roles.count(names.ROLE_BASE) == 2

    # 2. Inference load rises by two servers' worth (4 replicas of 2 GPUs per server): two loaned servers come back.
    #    Each holds only flexible workers of the elastic job (its base is 2 workers), so it is scaled in, never
    #    preempted. The leading operator is killed as soon as a server is reclaiming and restarted; the standby
    #    takes the lease over once it expires, and finishes the reclaim.
    replicas = 4 * (serving + 2)
    scale_chat(api, namespace, replicas)
    wait_for(lambda: "reclaiming" in node_states(api).values(), DEADLINE_S, "a server reclaiming")
    assert "pod " not in standby.log.read_text(), "the standby wrote nothing while the first operator led"
    operator.kill()
    operator.start()
    wait_for(lambda: f"-{operator.pid}-" not in lease_holder(api), DEADLINE_S, "a new leader")

    reclaimed_by_scale_in(api, namespace, loaned, replicas)
    assert len(workers(api, namespace, "elastic")) <= 12
    assert job(api, namespace, "a100-only")["status"]["phase"] == "Running"
    replicas = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{names.SERVICE_LABEL}=chat")
    for pod in replicas.items:
        assert labels_of(api, pod.spec.node_name).get(names.STATE_LABEL) in ("serving", "idle")
    assert_check_clean(operator.kubeconfig)  # as the operator's ServiceAccount: its read rights are enough
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    # Events come last in a pass: the killed operator's ScaledIn may be lost, the status keeps the count.
    assert "Started" in {e.reason for e in events if e.involved_object.kind == names.TRAINING_JOB_KIND}
    node_events = client.CoreV1Api(api).list_namespaced_event("default").items
    assert "Returned" in {e.reason for e in node_events if e.involved_object.kind == "Node"}

    # 3. Shadow mode reports a plan for a new job and changes nothing (and needs no lease).
    # A converged cluster needs no action: a shadow pass beside the running operators proposes nothing.
    wait_quiet(operator, DEADLINE_S)
    operator.stop()
    standby.stop()
    assert lease_holder(api) == "", "a cleanly stopped leader releases the lease"
    for log in (operator.log, standby.log):
        assert "Forbidden" not in log.read_text(), f"{log.name}: the RBAC of manifests/operator is not enough"
    create_job(api, namespace, "shadow", minWorkers=1, maxWorkers=1, gpusPerWorker=1, gpuTypes=[A100])
    before = lyra_node_fields(api)
    report = json.loads(dry_run_once(operator))
    assert report["dryRun"] is True
    assert any("shadow" in line for line in report["actions"])
    assert not workers(api, namespace, "shadow")
    assert "status" not in job(api, namespace, "shadow")
    assert lyra_node_fields(api) == before


def lyra(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lyra", *argv], capture_output=True, text=True, timeout=120, check=False
    )


def test_live_what_if_and_status_read_the_cluster(cluster: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = str(cluster.kubeconfig)
    saved = tmp_path / "live.json"
    live = lyra("plan", "allocate", "--from-cluster", "--kubeconfig", kubeconfig, "--save-snapshot", str(saved))
    assert live.returncode == 0, live.stderr
    replayed = lyra("plan", "allocate", "--snapshot", str(saved))
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == json.loads(live.stdout), "the saved snapshot replays to the same plan"
    servers = json.loads(saved.read_text())["servers"]
    assert len(servers) == 12
    status = lyra("status", "--kubeconfig", kubeconfig)
    assert status.returncode == 0, status.stderr
    assert "POOL" in status.stdout
    assert "Tesla-T4" in status.stdout
    refused = lyra("plan", "allocate", "--snapshot", str(saved), "--kubeconfig", kubeconfig)
    assert refused.returncode == 2
    assert "go with --from-cluster" in refused.stderr


def test_live_what_if_holds_a_cordoned_servers_gpus(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    """``kubectl cordon`` one of the four A100 servers: ``lyra plan allocate --from-cluster`` plans a job that could
    use all four on the other three, as the operator would, and the snapshot it saves marks the server cordoned and
    holds its 8 GPUs (``heldGpus``), so that it replays to the same plan. Before, the planner counted them free."""
    core = client.CoreV1Api(api)
    listed = core.list_node(label_selector=f"{names.POOL_LABEL}={names.POOL_TRAINING}").items
    a100s = sorted(n.metadata.name for n in listed)
    assert len(a100s) == 4
    wait_for(
        lambda: not any(p.spec.node_name in a100s for p in core.list_pod_for_all_namespaces().items),
        DEADLINE_S,
        "the A100 servers empty of earlier tests' pods",
    )
    # An earlier test's namespace is deleted when it ends, its TrainingJobs some time later: until then the planner
    # (as the operator) gives them GPUs (seen in CI: a queued job of 2 A100 servers left the new one none).
    wait_for(
        lambda: (
            not client.CustomObjectsApi(api).list_cluster_custom_object(
                names.GROUP, names.VERSION, names.TRAINING_JOB_PLURAL
            )["items"]
        ),
        DEADLINE_S,
        "no TrainingJob left by earlier tests",
    )
    saved = tmp_path / "cordoned.json"
    with temporary_namespace(api, "what-if-cordon") as namespace:
        create_job(api, namespace, "wide", minWorkers=1, maxWorkers=4, gpusPerWorker=8, gpuTypes=[A100])
        core.patch_node(a100s[0], {"spec": {"unschedulable": True}})
        try:
            live = lyra(
                "plan", "allocate", "--from-cluster", "--kubeconfig", str(cluster.kubeconfig), "--save-snapshot",
                str(saved),
            )  # fmt: skip
        finally:
            core.patch_node(a100s[0], {"spec": {"unschedulable": False}})
    assert live.returncode == 0, live.stderr
    plan = json.loads(live.stdout)
    key = f"{namespace}/wide"
    assert plan["workers"][key] == 3
    assert sorted(plan["placement"][key]) == a100s[1:]
    document = json.loads(saved.read_text())
    assert document["heldGpus"] == {a100s[0]: 8}
    assert [s["name"] for s in document["servers"] if s["cordoned"]] == [a100s[0]]
    replayed = lyra("plan", "allocate", "--snapshot", str(saved))
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == plan


def test_live_what_if_plans_loans_for_what_the_services_need(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    """``lyra plan loans --from-cluster`` without ``--demand`` balances each inference GPU type against what the
    InferenceServices need, as the operator sizes them: a service of 2 replicas of 8 T4 GPUs (a whole T4 server
    each) adds 2 servers to the T4 demand, whatever else runs. The saved snapshot carries that demand
    (``inferenceDemand``) and replays to the same plan. Given the operator's cap on the service's namespace (8 GPUs,
    ``--inference-gpu-cap``), the what-if and ``lyra status`` size it to one server."""
    kubeconfig = str(cluster.kubeconfig)

    def plan(saved: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        live = lyra("plan", "loans", "--from-cluster", "--kubeconfig", kubeconfig, "--save-snapshot", str(saved))
        assert live.returncode == 0, live.stderr
        return json.loads(live.stdout), json.loads(saved.read_text())

    before, document = plan(tmp_path / "before.json")
    t4_servers = [s for s in document["servers"] if s["pool"] == names.POOL_INFERENCE and s["gpuType"] == T4]
    assert t4_servers, "the local cluster has T4 inference servers"
    assert {s["gpus"] for s in t4_servers} == {8}, "a replica of 8 GPUs fills one server"
    assert T4 in before["gpuTypes"]
    with temporary_namespace(api, "what-if-loans") as namespace:
        create_service(api, namespace, inference_service("whole-servers", replicas=2, gpus=8))
        after, document = plan(tmp_path / "after.json")
        # Sized with the operator's cap on the namespace (8 GPUs: one replica), the service adds one server.
        capped = lyra("plan", "loans", "--from-cluster", "--kubeconfig", kubeconfig, "--inference-gpu-cap",
                      f"{namespace}=8")  # fmt: skip
        assert capped.returncode == 0, capped.stderr
        status = lyra("status", "--kubeconfig", kubeconfig, "--inference-gpu-cap", f"{namespace}=8")
        assert status.returncode == 0, status.stderr
    assert json.loads(capped.stdout)["gpuTypes"][T4]["demandServers"] == before["gpuTypes"][T4]["demandServers"] + 1
    t4_row = next(line.split() for line in status.stdout.splitlines() if line.startswith(f"{T4} "))
    assert t4_row[1] == str(before["gpuTypes"][T4]["demandServers"] + 1), status.stdout
    assert after["gpuTypes"][T4]["demandServers"] == before["gpuTypes"][T4]["demandServers"] + 2
    assert document["inferenceDemand"][T4] == after["gpuTypes"][T4]["demandServers"]
    replayed = lyra("plan", "loans", "--snapshot", str(tmp_path / "after.json"))
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == after


def phase_of(api: client.ApiClient, namespace: str, name: str) -> str | None:
    phase: str | None = job(api, namespace, name).get("status", {}).get("phase")
    return phase


@contextmanager
def operator_and_emulator(operator: Operator, cluster: ControlPlane, log: Path) -> Iterator[None]:
    """``lyra emulate`` beside the operator (started by the test); both stopped, and their logs shown on failure."""
    with log.open("ab") as out:
        emulator = subprocess.Popen(
            [sys.executable, "-m", "lyra", "emulate", "--kubeconfig", str(cluster.kubeconfig), "--interval", "0.5"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    except BaseException:
        print("--- operator ---\n" + operator.tail() + "\n--- emulate ---\n" + log.read_text())
        raise
    finally:
        operator.stop()
        emulator.terminate()
        emulator.wait(timeout=30)


def test_emulated_jobs_finish_sooner_with_more_workers(
    operator_kubeconfig: Path, cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    """With ``lyra emulate`` standing in for the training programs, a job's workers finish when its work is done
    at its pace: 4 workers of reference GPUs do 20 s of single-worker work in about 5 s; then the job is
    Succeeded and its GPUs go to the job queued behind it."""
    operator = Operator(operator_kubeconfig, tmp_path / "operator.log")
    with (
        temporary_namespace(api, "operator-emulate") as namespace,
        operator_and_emulator(operator, cluster, tmp_path / "emulate.log"),
    ):
        create_job(api, namespace, "quick", minWorkers=1, maxWorkers=4, gpusPerWorker=8, gpuTypes=[A100],
                   expectedDuration=20)  # fmt: skip
        operator.start()
        wait_for(lambda: running(api, namespace, "quick", 4), DEADLINE_S, "the quick job at 4 workers")
        create_job(api, namespace, "behind", minWorkers=4, maxWorkers=4, gpusPerWorker=8, gpuTypes=[A100])
        wait_for(lambda: phase_of(api, namespace, "quick") == "Succeeded", DEADLINE_S, "the quick job to succeed")
        status = job(api, namespace, "quick")["status"]
        took = parse_time(status["finishedAt"]) - parse_time(status["startedAt"])  # type: ignore[operator]
        assert took < 12, f"4 workers should finish 20 s of work in about 5 s, took {took:.0f} s"
        wait_for(lambda: running(api, namespace, "behind", 4), DEADLINE_S, "the job behind it to start")


def no_other_workers(api: client.ApiClient, namespace: str) -> bool:
    """Workers of earlier tests (their namespaces are being deleted) no longer hold GPUs."""
    pods = client.CoreV1Api(api).list_pod_for_all_namespaces(label_selector=names.JOB_LABEL).items
    return all(p.metadata.namespace == namespace for p in pods)


def test_base_gangs_start_shortest_first_and_never_partially(
    operator_kubeconfig: Path, cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    """Two gangs that each need every A100 (4 workers x 8 GPUs), queued together: the shorter starts whole, the
    longer has no pod at all until the shorter is done, then starts whole. The operator resyncs only every 60 s
    here, so the longer job starting within seconds of the shorter one's end shows the watches wake it."""
    operator = Operator(operator_kubeconfig, tmp_path / "operator.log", resync_s=60)
    with temporary_namespace(api, "operator-sjf") as namespace:
        wait_for(lambda: no_other_workers(api, namespace), DEADLINE_S, "earlier tests' workers to be gone")
        gang = {"minWorkers": 4, "maxWorkers": 4, "gpusPerWorker": 8, "gpuTypes": [A100]}
        create_job(api, namespace, "long", expectedDuration=5000, **gang)
        create_job(api, namespace, "short", expectedDuration=8, **gang)
        with operator_and_emulator(operator, cluster, tmp_path / "emulate.log"):
            operator.start()
            wait_for(lambda: running(api, namespace, "short", 4), DEADLINE_S, "the short gang running whole")
            long = job(api, namespace, "long")["status"]
            assert long["phase"] == "Queued"
            assert next(c for c in long["conditions"] if c["type"] == "Running")["reason"] == "Queued"
            assert workers(api, namespace, "long") == [], "a base that does not fit has no pod at all"
            wait_for(lambda: phase_of(api, namespace, "short") == "Succeeded", DEADLINE_S, "the short gang to finish")
            finished = time.monotonic()
            wait_for(lambda: running(api, namespace, "long", 4), DEADLINE_S, "the long gang running whole after it")
            assert time.monotonic() - finished < 20, "woken by the watches, not by the 60 s resync"
