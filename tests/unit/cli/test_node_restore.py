"""`lyra nodes restore`'s plan, on nodes and pods as listed: only the keys Lyra wrote go, everything else stays in
its order, and training on lent servers is found by its owner, whatever its labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lyra.api import names
from lyra.cli import main
from lyra.cli.node_restore import plan_restore, restore_node


def node(name: str, state: str | None, *, pool: str = "inference", extra_taints: int = 1) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, names.POOL_LABEL: pool, "zone": "a"}
    taints: list[dict[str, Any]] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] * extra_taints
    annotations = {"node.alpha.kubernetes.io/ttl": "0"}
    if state is not None:
        labels[names.STATE_LABEL] = state
        taints = [*taints[:1], {"key": names.STATE_TAINT, "value": state, "effect": "NoSchedule"}, *taints[1:]]
        annotations[names.IDLE_SINCE_ANNOTATION] = "2026-11-26T10:00:00Z"
        if state == "reclaiming":
            annotations[names.RECLAIM_STARTED_ANNOTATION] = "2026-11-26T10:05:00Z"
    return {
        "metadata": {"name": name, "resourceVersion": "42", "labels": labels, "annotations": annotations},
        "spec": {"taints": taints},
    }


def pod(name: str, node_name: str, *, owner_kind: str | None, labels: dict[str, str] | None = None,
        phase: str = "Running") -> dict[str, Any]:  # fmt: skip
    owners = (
        [{"apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": owner_kind, "name": "job", "controller": True}]
        if owner_kind
        else []
    )
    return {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "labels": labels or {},
                     "ownerReferences": owners},
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }  # fmt: skip


def test_only_the_keys_lyra_wrote_are_removed_and_the_rest_keeps_its_order() -> None:
    restore = restore_node(node("t4-0", "loaned", extra_taints=2), pool_labels=False)

    assert restore is not None
    assert restore.labels == (names.STATE_LABEL,)
    assert restore.annotations == (names.IDLE_SINCE_ANNOTATION,)
    assert restore.taints == (names.STATE_TAINT,)
    assert restore.patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    assert {"op": "remove", "path": "/metadata/labels/lyra.dev~1state"} in restore.patch
    taints = next(op for op in restore.patch if op["path"] == "/spec/taints")
    assert taints["value"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] * 2


def test_the_pool_label_goes_only_when_asked_and_a_clean_node_needs_nothing() -> None:
    assert restore_node(node("t4-0", None), pool_labels=False) is None
    with_pool = restore_node(node("t4-0", None), pool_labels=True)
    assert with_pool is not None
    assert with_pool.labels == (names.POOL_LABEL,)
    assert with_pool.taints == ()
    reclaiming = restore_node(node("t4-1", "reclaiming"), pool_labels=True)
    assert reclaiming is not None
    assert reclaiming.annotations == (names.RECLAIM_STARTED_ANNOTATION, names.IDLE_SINCE_ANNOTATION)


def test_training_on_lent_servers_blocks_by_its_owner_not_its_labels() -> None:
    nodes = [node("t4-0", "loaned"), node("t4-1", "serving"), node("a100-0", None, pool="training")]
    pods = [
        pod("stripped", "t4-0", owner_kind=names.TRAINING_JOB_KIND),  # no lyra.dev/role: still a worker
        pod("done", "t4-0", owner_kind=names.TRAINING_JOB_KIND, phase="Succeeded"),
        pod("disguised", "t4-0", owner_kind=None, labels={names.ROLE_LABEL: "base", names.JOB_LABEL: "x"}),
        pod("on-training", "a100-0", owner_kind=names.TRAINING_JOB_KIND),
        pod("on-serving", "t4-1", owner_kind=names.TRAINING_JOB_KIND),
    ]

    plan = plan_restore(nodes, pods, pool_labels=False)

    assert [p.name for p in plan.blockers] == ["stripped"]
    assert plan.blockers[0].job == "team/job"
    assert [r.node for r in plan.nodes] == ["t4-0", "t4-1"]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--timeout", "-1"], 2, "--timeout"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], 2, "kubeconfig"),
        (["--lease-namespace", "Lyra_System"], 2, "argument --lease-namespace: expected a DNS label"),
    ],
)
def test_bad_input_is_refused_with_a_message(
    argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["nodes", "restore", *argv])
    assert exited.value.code == code
    assert message in capsys.readouterr().err
