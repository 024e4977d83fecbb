"""The operator on kopf's watches (``--watch-layer kopf``): the same passes lend, place, reclaim and converge.

kopf's indexes are the caches the pass reads (:mod:`lyra.operator.kopf_caches`); the fenced Lease still says who
writes. One story on a control plane of the module's own: idle T4 servers are lent and an elastic job grows there,
an A100-only job runs on training servers, then more inference load takes two servers back (the reclaim deletes
workers: a deletion, which no kopf index handler sees, must wake the pass), and ``lyra check`` finds nothing wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import (
    A100,
    DEADLINE_S,
    T4,
    Operator,
    assert_check_clean,
    create_job,
    create_service,
    inference_service,
    lease_holder,
    loans_settled,
    reclaimed_by_scale_in,
    scale_chat,
)

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_the_operator_on_kopf_lends_places_reclaims_and_converges(
    operator_kubeconfig: Path, api: client.ApiClient, tmp_path: Path
) -> None:
    operator = Operator(operator_kubeconfig, tmp_path / "operator.log", options=("--watch-layer", "kopf"))
    with temporary_namespace(api, "kopf-story") as namespace:
        try:
            _story(api, namespace, operator)
        except BaseException:
            print(f"--- {operator.log.name} ---\n" + operator.tail())
            raise
        finally:
            operator.stop()
    log = operator.log.read_text()
    assert "Forbidden" not in log, "kopf's watches need no more than the chart's RBAC"
    assert "Traceback" not in log


def _story(api: client.ApiClient, namespace: str, operator: Operator) -> None:
    create_service(api, namespace, inference_service("chat", replicas=4, gpus=2, min_replicas=1, max_replicas=64))
    create_job(api, namespace, "elastic", minWorkers=2, maxWorkers=12, gpusPerWorker=4, gpuTypes=[T4])
    create_job(api, namespace, "a100-only", minWorkers=2, maxWorkers=2, gpusPerWorker=8, gpuTypes=[A100])
    operator.start()
    wait_for(lambda: f"-{operator.pid}-" in lease_holder(api), DEADLINE_S, "the operator to lead")

    serving = loans_settled(api, namespace)
    loaned = 8 - serving

    replicas = 4 * (serving + 2)  # two servers' worth more: two loaned servers come back, the elastic job shrinks
    scale_chat(api, namespace, replicas)

    reclaimed_by_scale_in(api, namespace, loaned, replicas)
    assert_check_clean(operator.kubeconfig)
