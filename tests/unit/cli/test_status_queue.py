"""`lyra status` lists the queue in the order the operator's allocator admits jobs, and what inference needs as the
operator's passes size it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lyra.cli.status_commands import render
from lyra.operator.config import OperatorConfig
from lyra.operator.decide import decide
from tests.unit.operator.fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job


def test_the_status_queue_is_the_admission_order() -> None:
    # An 8-GPU A100 server (speed 1.0) and an 8-GPU T4 server (speed 0.4), lent at once; every job needs 20 workers,
    # so all wait. Admission: "urgent" first (priority 1); then by time at base on the fastest type each may use:
    # "long" 200 s on an A100, "t4-only" 100 s / 0.4 = 250 s on a T4; "same" ties "long" and follows it by name.
    # (Sorting by expected duration alone would put "t4-only" before "long".)
    cluster = FakeCluster([node("a0", "training", A100), node("t0", "inference", T4)])
    cluster.add_job(training_job("t4-only", 20, 20, duration=100, gpuTypes=[T4]))
    cluster.add_job(training_job("long", 20, 20, duration=200))
    cluster.add_job(training_job("same", 20, 20, duration=200))
    cluster.add_job(training_job("urgent", 20, 20, duration=1000, priority=1))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig(lend_delay_s=0)))
    assert cluster.state("t0") == "loaned"
    queue = render(cluster.world()).split("QUEUE")[1].split("\n\n")[0].splitlines()[1:]
    assert [line.split()[1] for line in queue] == ["ml/urgent", "ml/long", "ml/same", "ml/t4-only"]


def test_the_status_says_which_servers_take_no_new_work_and_the_gpus_in_use() -> None:
    """Cordoned and unhealthy servers are marked; GPUS counts the servers' GPUs, IN USE those bound pods hold (the
    elastic job's 8 workers of 1 GPU on a0: a1 is cordoned, a2 stopped reporting before anything ran there)."""
    cluster = FakeCluster([node(f"a{i}", "training", A100) for i in range(3)] + [node("t0", "inference", T4)])
    cluster.nodes["a1"]["spec"]["unschedulable"] = True  # kubectl cordon a1
    cluster.nodes["t0"]["spec"]["unschedulable"] = True
    cluster.nodes["a2"]["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    cluster.add_job(training_job("elastic", 1, 8, gpuTypes=[A100]))
    cluster.apply(decide(cluster.world(), OperatorConfig(lend_delay_s=0)))
    servers = render(cluster.world()).split("\n\n")[0].splitlines()
    assert servers[0].split() == ["POOL", "GPU", "TYPE", "STATE", "SERVERS", "GPUS", "IN", "USE"]
    assert [line.split(maxsplit=2)[2].rsplit(maxsplit=3) for line in servers[1:]] == [
        [
            "new, cordoned",
            "1",
            "8",
            "0",
        ],  # an inference server Lyra has not given a state: left as it is while cordoned
        ["-", "1", "8", "8"],
        ["-, cordoned", "1", "8", "0"],
        ["-, unhealthy", "1", "8", "0"],
    ]


def test_the_status_shows_what_inference_needs_holds_and_lends_per_gpu_type() -> None:
    """chat's 10 one-GPU replicas need 2 of the 4 T4 servers (8 GPUs each); the other 2 are lent. No service asks
    for the A100 inference server: it needs none, and is lent too."""
    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(4)] + [node("a0", "inference", A100)])
    cluster.add_service(inference_service("chat", 10, gpuType=T4))
    for _ in range(4):
        cluster.apply(decide(cluster.world(), OperatorConfig(lend_delay_s=0)))
        cluster.finish_terminations()
    block = next(part for part in render(cluster.world()).split("\n\n") if part.startswith("INFERENCE"))
    header, *rows = block.splitlines()
    assert header.split() == ["INFERENCE", "SERVERS", "NEEDED", "HELD", "LENT"]
    assert [row.split() for row in rows] == [[A100, "0", "0", "1"], [T4, "2", "2", "2"]]


def test_status_takes_the_operators_caps_and_refuses_bad_ones(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Bad caps exit 2 with one line, before the cluster is read; caps with --shadow are refused (the operator in
    shadow mode sized its own plan)."""
    from lyra.cli import main

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("not read\n")
    assert main(["status", "--kubeconfig", str(kubeconfig), "--inference-gpu-cap", "serve=x"]) == 2
    assert capsys.readouterr().err == (
        "lyra status: --inference-gpu-cap: 'serve=x' is not NAMESPACE=GPUS (a whole number of GPUs)\n"
    )
    shadow = ["status", "--shadow", "http://127.0.0.1:9", "--inference-gpu-cap", "serve=8"]
    assert main(shadow) == 2
    assert capsys.readouterr().err == (
        "lyra status: --inference-gpu-cap does not go with --shadow (the operator sized its plan)\n"
    )
