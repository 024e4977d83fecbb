"""The live benchmark, small (``bench/operator_live_bench.py``): the operator on its watch caches, on a real control
plane with KWOK nodes, other teams' GPU and CPU pods (shaped like real ones: environment, volumes, probes), 30
TrainingJobs and 3 InferenceServices before the operator starts, and a stream of job submissions, job deletions and
inference scale changes. It fails if a pass lists the cluster, or if the operator's caches miss an event.

* **Every change acted on** within a deadline: an operator whose cache missed a job's creation or a scale change
  never acts on it, and the benchmark reports the change as missed (it does not wait without end).
* **No list after the first pass**, from the API server's audit log (every get, list and watch by a
  ServiceAccount, and every write; the operator runs as its own, with the chart's RBAC): its lists all come before
  its first write, one per kind, paginated, and it watches the five kinds. No repair is tolerated: a pass whose
  write the watch does not bring back reopens the watch from its last version (:mod:`lyra.operator.caches`), it
  never lists again; only ``410 Gone`` lists, and a stream of a few minutes does not outlive etcd's history.
* **The operator's caches equal the cluster**: its ``/debug/caches`` (``--debug-endpoints``) against a fresh
  paginated list at the end, every object cached at least at its listed resourceVersion (KWOK's node heartbeats
  move on meanwhile), none missing, none extra.
* **Steady passes write nothing**: once every job runs or waits in the queue, the service has its replicas and no
  worker is in flight (leaving, or left behind by a deleted job: its GPUs free, a queued job may start), three more
  passes make no write.

Proven able to fail: with :meth:`lyra.kubewatch.WatchCache.apply` made to drop every 7th ``MODIFIED`` event (the
cache's version moves on, its object does not), this test failed (docs/benchmarks.md, "The operator, live").

The benchmark's figures at these sizes mean little (the machine is shared); the full-size run is ``make bench``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.operator_live_bench import LiveSizes, run_live

from lyra.operator.caches import KINDS

pytestmark = pytest.mark.integration

SMALL = LiveSizes(
    nodes=20,
    gpu_pods=40,
    other_pods=40,
    jobs=10,
    interval_s=0.5,
    change_deadline_s=60,
    resync_s=2,
    steady_passes=3,
    queued_jobs=30,
    services=3,
    rich_pods=True,
)


@pytest.mark.timeout(900)
def test_the_live_benchmark_small_no_pass_lists_and_the_caches_miss_no_event(tmp_path: Path) -> None:
    result = run_live(SMALL, tmp_path)

    assert not result.missed, f"changes never acted on: {result.missed}"
    assert len(result.acted) == SMALL.jobs + SMALL.jobs // 5  # every job, and every scale change
    assert result.writes, "the operator wrote nothing: the test proves nothing"
    assert result.reclaims >= 1, "the stream's scale-ups of chat reclaimed no lent server"
    assert not result.lists_in_passes, f"the operator listed after its first pass began: {result.lists_in_passes}"
    first_pages = [uri for uri in result.first_lists if "continue=" not in uri]
    assert len(first_pages) == len(KINDS), f"one list per kind (and its pages): {result.first_lists}"
    assert all("limit=" in uri for uri in result.first_lists), f"the first lists are paginated: {result.first_lists}"
    assert result.watched == {
        "nodes", "pods", "trainingjobs", "inferenceservices", "deployments", "poddisruptionbudgets"
    }  # fmt: skip
    assert not result.cache_differences, f"the operator's caches differ from a fresh list: {result.cache_differences}"
    assert result.converged, "the cluster did not converge, or the operator made no passes after"
    assert not result.steady_writes, f"steady passes wrote: {result.steady_writes}"
    assert result.peak_mib >= result.rss_mib > 0, "the operator's peak memory is read from its /proc status"
