"""``promtool check metrics`` (Prometheus' own linter, from the cached Debian package) passes on the operator's
exposition after a loan and a reclaim, and on the extender's after it answered requests."""

from __future__ import annotations

from fastapi.testclient import TestClient

from lyra.api.objects import Node, Pod
from lyra.extender.app import FixedView, create_app
from lyra.extender.view import build_view
from lyra.operator.metrics import OperatorMetrics
from tests.prometheus_support import check_metrics
from tests.unit.extender.test_app import NODES, RUNNING, names_args, pod
from tests.unit.operator.test_metrics import reclaim_by_preemption, small_cluster


def test_the_operator_exposition_passes_promtool() -> None:
    cluster = small_cluster()
    metrics = OperatorMetrics()
    for counts in reclaim_by_preemption(cluster):
        metrics.count(counts)
    metrics.leading(cluster.world())
    for phase in ("observe", "decide", "commit"):
        metrics.phase_took(phase, 0.01)
    metrics.pass_ended("succeeded")
    exposition = metrics.exposition()

    assert b'lyra_preemptions_total{reason="reclaim"} 1.0' in exposition
    assert check_metrics(exposition) == ""


def test_the_extender_exposition_passes_promtool() -> None:
    view = build_view([Node.model_validate(n) for n in NODES], [Pod.model_validate(p) for p in RUNNING])
    api = TestClient(create_app(FixedView(view)))
    assert api.post("/prioritize", json=names_args(pod("new", 1))).status_code == 200
    assert api.post("/prioritize", content=b"not json").status_code >= 400
    exposition = api.get("/metrics").content

    assert b"lyra_extender_requests_total" in exposition
    assert check_metrics(exposition) == ""
