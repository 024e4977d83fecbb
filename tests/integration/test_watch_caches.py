"""The operator on its watch caches, on a real control plane: after its first list of each kind it never lists
again, however many passes a stream of changes makes it run, and its caches miss no event.

The local control plane audits every list and watch by a ServiceAccount (``logs/audit.log``), with the client's
user agent, which names the operator's process. The proof that no pass lists: every list request of the operator
comes before its first write (its first pass), one per kind. The proof that no event is missed: a cache on the
same module kept by this test equals a fresh list at the end, and the running operator's view agrees with one
(a ``--dry-run --once`` operator, which lists afresh, proposes nothing once the running one has converged). And
steady passes write nothing: the converged operator makes three more passes without a write.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.api import names
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from lyra.operator.caches import KINDS, RELIST_MESSAGE, ClusterCaches, list_once
from tests.operator_support import (
    A100,
    DEADLINE_S,
    T4,
    Operator,
    create_job,
    custom,
    dry_run_once,
    inference_service,
    job,
    running_replicas,
    scale_service,
    service_account_kubeconfig,
)

pytestmark = pytest.mark.integration

WRITES = frozenset({"create", "update", "patch", "delete"})
#: Lists a pass may make to repair a watch that lost the operator's own write (each one logged).
MAX_REPAIRS = 2


def audited(cluster: ControlPlane, pid: int) -> list[dict[str, Any]]:
    """The operator process's requests the audit log recorded, in order: complete ones, and watches (which stay open:
    their response has started)."""
    marker = f"-{pid}-"
    events = []
    for line in cluster.layout.audit_log.read_text().splitlines():
        event = json.loads(line)
        stage = "ResponseStarted" if event.get("verb") == "watch" else "ResponseComplete"
        if marker in event.get("userAgent", "") and event.get("stage") == stage:
            events.append(event)
    return sorted(events, key=lambda e: e["requestReceivedTimestamp"])


def passes_made(port: int) -> float:
    """The operator's successful passes so far, from its metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("lyra_reconcile_passes_total{") and 'result="succeeded"' in line
    )


def received(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def service(name: str, replicas: int) -> dict[str, Any]:
    return inference_service(name, replicas=replicas, gpus=4, max_replicas=16)


def comparable(objects: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each object by key and resourceVersion; nodes by what Lyra reads of them that is not a heartbeat (KWOK's
    heartbeats move their versions all the time)."""
    seen: dict[str, Any] = {}
    for kind, items in objects.items():
        for item in items:
            meta = item["metadata"]
            key = f"{kind}:{meta.get('namespace', '')}/{meta['name']}"
            if kind == "nodes":
                seen[key] = (meta.get("labels"), meta.get("annotations"), item["spec"].get("taints"))
            else:
                seen[key] = meta["resourceVersion"]
    return seen


def caches_match_a_fresh_list(caches: ClusterCaches, api: client.ApiClient) -> bool:
    fresh = list_once(api)
    return comparable(caches.snapshot()) == comparable(fresh)


@pytest.mark.timeout(300)
def test_the_operator_never_lists_in_a_pass_and_its_caches_miss_no_event(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    port = allocate_ports(1)[0]
    kubeconfig = service_account_kubeconfig(cluster, api, tmp_path)
    operator = Operator(kubeconfig, tmp_path / "operator.log", http_port=port)
    mirror = ClusterCaches.on_api(api)  # the same caches, kept by this test, compared with a fresh list at the end
    mirror.start()
    operator.start()
    try:
        with temporary_namespace(api, "watch-caches") as namespace:
            # A stream of changes: jobs arrive, inference arrives and grows, a job leaves, another arrives.
            create_job(api, namespace, "elastic", minWorkers=1, maxWorkers=6, gpusPerWorker=2, gpuTypes=[T4])
            create_job(api, namespace, "a100", minWorkers=2, maxWorkers=2, gpusPerWorker=4, gpuTypes=[A100])
            objects = custom(api)
            objects.create_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.INFERENCE_SERVICE_PLURAL, service("chat", 2)
            )
            for name in ("elastic", "a100"):
                wait_for(
                    lambda n=name: job(api, namespace, n).get("status", {}).get("phase") == "Running",
                    DEADLINE_S,
                    f"job {name} running",
                )
            scale_service(api, namespace, "chat", 6)
            objects.delete_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.TRAINING_JOB_PLURAL, "a100"
            )
            create_job(api, namespace, "late", minWorkers=1, maxWorkers=2, gpusPerWorker=1, gpuTypes=[A100])
            wait_for(lambda: running_replicas(api, namespace, "chat") == 6, DEADLINE_S, "6 replicas running")
            wait_for(
                lambda: job(api, namespace, "late").get("status", {}).get("phase") == "Running",
                DEADLINE_S,
                "job late running",
            )
            wait_for(lambda: not json.loads(dry_run_once(operator))["actions"], DEADLINE_S, "a converged cluster")
            wait_for(lambda: caches_match_a_fresh_list(mirror, api), DEADLINE_S, "the caches equal a fresh list")
            # Steady passes write nothing: three more passes on the converged cluster, and no write of theirs.
            converged = datetime.now(UTC)
            passes = passes_made(port)
            wait_for(lambda: passes_made(port) >= passes + 3, DEADLINE_S, "three more passes")
            steady = [
                f"{e['verb']} {e['requestURI']}"
                for e in audited(cluster, operator.pid or 0)
                if e["verb"] in WRITES and "/leases/" not in e["requestURI"] and received(e) > converged
            ]
            assert not steady, f"steady passes wrote: {steady}"

            requests = audited(cluster, operator.pid or 0)
            writes = [e for e in requests if e["verb"] in WRITES and "/leases/" not in e["requestURI"]]
            lists = [e for e in requests if e["verb"] == "list"]
            assert writes, "the operator wrote nothing: the test proves nothing"
            first_write = received(writes[0])
            in_passes = [e["requestURI"] for e in lists if received(e) >= first_write]
            # The one list a pass may cause: a cache whose watch did not bring the operator's own write back within
            # the catch-up time lists again (operator.caches); each is logged. Seen once in a CI run on a loaded
            # machine. Anything else, or more than a rare repair, is a pass listing the cluster.
            repairs = operator.log.read_text().count(RELIST_MESSAGE.split("%s")[1].strip())
            assert len(in_passes) <= repairs, (
                f"the operator listed {len(in_passes)} times in its passes ({repairs} logged repairs): {in_passes[:5]}"
            )
            assert repairs <= MAX_REPAIRS, f"{repairs} caches listed again: their watches lose the operator's writes"
            assert len(lists) == len(KINDS) + len(in_passes), [e["requestURI"] for e in lists]
            assert all("limit=" in e["requestURI"] for e in lists), "the first lists are paginated"
            watched = {e["objectRef"]["resource"] for e in requests if e["verb"] == "watch"}
            assert watched == {"nodes", "pods", "trainingjobs", "inferenceservices", "deployments"}
    finally:
        operator.stop()
        mirror.stop()
