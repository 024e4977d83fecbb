"""The pass report: typed in the operator, the same JSON as before for the logs and ``lyra operator --once``."""

from __future__ import annotations

import json

from lyra.operator.actions import AllocationReport, LoanReport, PassReport, ReclaimReport, ReclaimWaitReport

from .fake_cluster import T4


def test_the_json_keeps_its_keys_and_leaves_empty_entries_out() -> None:
    reclaim = ReclaimReport(servers=("t0",), preempted=("ml/a",), scaled_in={"ml/b": 2}, lost_gpu_seconds=12.345)
    report = PassReport(
        inference_servers_needed={T4: 3},
        loans={T4: LoanReport(needed=3, held=2, reclaim=reclaim), "A100": LoanReport(needed=0, held=1, lend=("a0",))},
        allocation=AllocationReport(
            workers={"ml/b": 2},
            started=(),
            resized=("ml/b",),
            queued={"ml/a": "waiting for GPUs"},
            gpus_used=16,
            capacity_gpus=24,
            fluid_average_jct_s=99.96,
        ),
        preempted={"ml/a": "reclaim"},
        disrupted={"ml/b": {T4: 1}},
        reclaim_waits=(ReclaimWaitReport("serve/chat", T4, 4.5),),
    )
    assert list(report.as_json()) == [
        "inference_servers_needed", "preempted", "disrupted", "reclaim_waits", "allocation", "loans"
    ]  # fmt: skip
    assert report.as_json() == {
        "inference_servers_needed": {T4: 3},
        "loans": {
            T4: {
                "needed": 3,
                "held": 2,
                "reclaim": {
                    "servers": ["t0"],
                    "preempted": ["ml/a"],
                    "scaled_in": {"ml/b": 2},
                    "lost_gpu_seconds": 12.3,
                },
            },
            "A100": {"needed": 0, "held": 1, "lend": ["a0"]},
        },
        "allocation": {
            "workers": {"ml/b": 2},
            "started": [],
            "resized": ["ml/b"],
            "queued": {"ml/a": "waiting for GPUs"},
            "gpus_used": 16,
            "capacity_gpus": 24,
            "fluid_average_jct_s": 100.0,
        },
        "preempted": {"ml/a": "reclaim"},
        "disrupted": {"ml/b": {T4: 1}},
        "reclaim_waits": [{"service": "serve/chat", "gpu_type": T4, "seconds": 4.5}],
    }
    json.dumps(report.as_json())  # plain JSON, no default= needed


def test_errors_are_reported_where_the_plans_would_be() -> None:
    report = PassReport(loans_error="two jobs claim t0", allocation_error="bad snapshot", left_out={"ml/x": "why"})
    assert report.as_json() == {
        "inference_servers_needed": {},
        "loans": {"error": "two jobs claim t0"},
        "allocation_error": "bad snapshot",
        "left_out": {"ml/x": "why"},
    }
