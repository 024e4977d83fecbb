"""An admin's cap on the GPUs a namespace's InferenceServices may claim (``--inference-gpu-cap``): services take
their replicas in name order until the cap is spent; one cut short runs fewer replicas, needs fewer servers and says
so (``Capped``); the reclaim it would have caused does not happen."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lyra.operator.config import OperatorConfig
from lyra.operator.sizing import InferenceGpuCaps

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=60)


def capped(*settings: str) -> OperatorConfig:
    return OperatorConfig(
        lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=60, inference_gpu_caps=InferenceGpuCaps.parse(settings)
    )


def settle(cluster: FakeCluster, config: OperatorConfig, passes: int = 10) -> None:
    cluster.settle(config, passes, seconds=40)


def cluster_of(servers: int = 6) -> FakeCluster:
    return FakeCluster([node("a0", "training", A100)] + [node(f"t{i}", "inference", T4) for i in range(servers)])


def service_in(namespace: str, name: str, replicas: int, gpus: int) -> dict[str, Any]:
    body = copy.deepcopy(inference_service(name, replicas, gpus, gpuType=T4))
    body["metadata"]["namespace"] = namespace
    return body


def status_of(cluster: FakeCluster, key: str) -> dict[str, Any]:
    status: dict[str, Any] = cluster.services[key]["status"]
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def replicas_of(cluster: FakeCluster, service: str) -> int:
    return sum(1 for p in cluster.pods.values() if p["metadata"]["labels"].get("lyra.dev/service") == service)


def test_a_capped_namespace_claims_no_more_than_its_cap_and_the_service_says_by_how_much() -> None:
    cluster = cluster_of()
    cluster.add_service(service_in("serve", "chat", 5, 8))  # five servers' worth
    cluster.add_job(training_job("elastic", 2, 40, gpuTypes=[T4]))
    settle(cluster, capped("serve=16"))
    status = status_of(cluster, "serve/chat")
    assert status["replicas"] == 2
    assert status["serversNeeded"] == 2
    assert replicas_of(cluster, "chat") == 2
    capped_now = condition(status, "Capped")
    assert capped_now is not None
    assert (capped_now["status"], capped_now["reason"]) == ("True", "NamespaceCap")
    assert "2 of 5 replicas" in capped_now["message"]
    assert "may claim 16 inference GPUs" in capped_now["message"]
    assert "3 replicas (24 GPUs) over the cap" in capped_now["message"]
    assert [cluster.state(f"t{i}") for i in range(6)].count("loaned") == 4, "the rest stays lent to training"
    assert [e.reason for e in cluster.events].count("Capped") == 1, "one Warning Event when it becomes capped"


def test_without_a_cap_the_same_service_takes_every_server_it_asks_for() -> None:
    cluster = cluster_of()
    cluster.add_service(service_in("serve", "chat", 5, 8))
    settle(cluster, CONFIG)
    status = status_of(cluster, "serve/chat")
    assert status["replicas"] == 5
    assert condition(status, "Capped") is None


def test_services_of_a_namespace_claim_in_name_order_and_other_namespaces_are_not_counted() -> None:
    cluster = cluster_of(8)
    for namespace, name, replicas, gpus in (
        ("serve", "alpha", 3, 2),  # 6 GPUs: within the cap
        ("serve", "beta", 4, 4),  # 16 GPUs wanted, 10 left: 2 replicas (8 GPUs)
        ("serve", "gamma", 1, 1),  # 2 GPUs left: it fits, 1 GPU unclaimed
        ("other", "delta", 2, 8),  # another namespace, under *=16
    ):
        cluster.add_service(service_in(namespace, name, replicas, gpus))
    cluster.services["other/delta"] = cluster.services.pop("serve/delta")
    settle(cluster, capped("serve=16", "*=16"))
    replicas = {key: status_of(cluster, key)["replicas"] for key in ("serve/alpha", "serve/beta", "serve/gamma")}
    assert replicas == {"serve/alpha": 3, "serve/beta": 2, "serve/gamma": 1}
    assert status_of(cluster, "other/delta")["replicas"] == 2
    beta = condition(status_of(cluster, "serve/beta"), "Capped")
    assert beta is not None
    assert beta["status"] == "True"
    assert "services before this one in name order hold 6" in beta["message"]
    for within in ("serve/alpha", "serve/gamma", "other/delta"):
        found = condition(status_of(cluster, within), "Capped")
        assert found is not None
        assert (found["status"], found["reason"]) == ("False", "WithinCap"), within


def test_raising_the_cap_lets_the_replicas_come_and_the_condition_turns_false() -> None:
    cluster = cluster_of()
    cluster.add_service(service_in("serve", "chat", 4, 8))
    settle(cluster, capped("serve=8"))
    assert status_of(cluster, "serve/chat")["replicas"] == 1
    settle(cluster, capped("serve=32"))
    status = status_of(cluster, "serve/chat")
    assert status["replicas"] == 4
    assert replicas_of(cluster, "chat") == 4
    found = condition(status, "Capped")
    assert found is not None
    assert found["status"] == "False"
    settle(cluster, CONFIG)
    assert condition(status_of(cluster, "serve/chat"), "Capped") is None, "no cap, no condition"


def test_a_cap_of_zero_keeps_every_replica_away() -> None:
    cluster = cluster_of()
    cluster.add_service(service_in("serve", "chat", 3, 1))
    settle(cluster, capped("*=0"))
    assert status_of(cluster, "serve/chat")["replicas"] == 0
    assert replicas_of(cluster, "chat") == 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["serve"], "is not NAMESPACE=GPUS"),
        (["serve=-1"], "is not NAMESPACE=GPUS"),
        (["serve=1.5"], "is not NAMESPACE=GPUS"),
        (["Serve=1"], "is not a namespace name"),
        (["serve=1", "serve=2"], "capped twice: serve"),
        (["serve=999999999999"], "must be 0 to"),
    ],
)
def test_bad_caps_are_refused_with_what_is_wrong(settings: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        InferenceGpuCaps.parse(settings)


def test_the_cap_of_a_namespace_not_named_is_the_wildcards_or_none() -> None:
    assert InferenceGpuCaps.parse(["serve=4", "*=2"]).cap_of("serve") == 4
    assert InferenceGpuCaps.parse(["serve=4", "*=2"]).cap_of("ml") == 2
    assert InferenceGpuCaps.parse(["serve=4"]).cap_of("ml") is None


def test_the_what_if_and_the_status_size_the_services_with_the_operators_caps() -> None:
    """``lyra plan --from-cluster`` and ``lyra status`` take the operator's caps (``--inference-gpu-cap``): sized
    with them, the services need the servers the operator's passes settled on (``serversNeeded``); sized without,
    they need more than the operator will ever keep."""
    from lyra.cli.inference_gpu_cap_flag import inference_gpu_caps
    from lyra.cli.status_commands import render
    from lyra.operator.decide import live_view

    cluster = cluster_of()
    cluster.add_service(service_in("serve", "chat", 5, 8))
    config = capped("serve=16")
    settle(cluster, config)
    world = cluster.world()
    assert status_of(cluster, "serve/chat")["serversNeeded"] == 2
    assert live_view(world, config, allocating=False).demand == {T4: 2}
    assert live_view(world, CONFIG, allocating=False).demand == {T4: 5}, "uncapped: all five replicas"
    caps = inference_gpu_caps(["serve=16"])
    assert caps.cap_of("elsewhere") == 64, "a namespace not named: the operator's default"
    needed = [line.split() for line in render(world, caps).splitlines() if line.startswith(T4 + " ")]
    assert needed == [[T4, "2", "2", "4"]]
    assert [line.split() for line in render(world).splitlines() if line.startswith(T4 + " ")] == [[T4, "5", "2", "4"]]
