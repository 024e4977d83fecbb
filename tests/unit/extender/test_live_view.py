"""The extender's view follows events one at a time: after any sequence of node and pod events its used and free
GPUs and its jobs' nodes are what the final objects say (counted here from scratch), its reclaim ranks are those
of a view built from the final objects, and the watcher feeds it from list-and-watch caches."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from lyra.api.convert import pod_facts
from lyra.api.objects import Node, Pod
from lyra.extender.view import LiveView, build_view
from lyra.extender.watch import RANK_CPU_SHARE, RANK_INTERVAL_S, WatchedView, rank_wait_s
from lyra.localcluster.waiting import wait_for
from tests.unit.extender.test_app import A100, T4, node, pod
from tests.unit.kubewatch.fake_server import FakeServer

STATES = ("serving", "idle", "loaned", "reclaiming")


def random_cluster_events(rng: random.Random, count: int) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    """(kind, key, object or None for a deletion): nodes changing state, pods coming, moving, finishing, going."""
    nodes = [f"n{i}" for i in range(8)]
    for name in nodes:
        yield "node", name, node(name, "inference", T4, rng.choice(STATES))
    for _ in range(count):
        if rng.random() < 0.15:
            name = rng.choice(nodes)
            gone = rng.random() < 0.1
            yield "node", name, None if gone else node(name, "inference", T4, rng.choice(STATES))
            continue
        name = f"p{rng.randrange(30)}"
        if rng.random() < 0.2:
            yield "pod", f"ns/{name}", None
            continue
        job = rng.choice(("a", "b", "c", None))
        role = rng.choice(("base", "flexible")) if job else rng.choice(("inference", None))
        made = pod(name, rng.randint(0, 1), role, job, on=rng.choice([*nodes, ""]))  # rarely overfills a node
        if rng.random() < 0.1:
            made["status"]["phase"] = "Succeeded"
        yield "pod", f"ns/{name}", made


def expected_usage(pods: dict[str, dict[str, Any]]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    used: dict[str, int] = {}
    job_nodes: dict[str, dict[str, int]] = {}
    for raw in pods.values():
        host = raw["spec"]["nodeName"]
        if not host or raw["status"]["phase"] == "Succeeded":
            continue
        gpus = int(raw["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        if gpus:
            used[host] = used.get(host, 0) + gpus
        job = raw["metadata"]["labels"].get("lyra.dev/job")
        if job is not None and raw["metadata"]["labels"].get("lyra.dev/role") in ("base", "flexible"):
            hosts = job_nodes.setdefault(f"ns/{job}", {})
            hosts[host] = hosts.get(host, 0) + 1
    return used, job_nodes


@pytest.mark.parametrize("seed", range(20))
def test_a_view_updated_event_by_event_matches_the_final_objects(seed: int) -> None:
    live = LiveView()
    nodes: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    rng = random.Random(seed)
    for kind, key, raw in random_cluster_events(random.Random(seed + 1000), 150):
        if kind == "node":
            live.set_node(key, Node.model_validate(raw) if raw else None)
            if raw:
                nodes[key] = raw
            else:
                nodes.pop(key, None)
        else:
            parsed = Pod.model_validate(raw) if raw else None
            live.set_pod(key, pod_facts(parsed) if parsed else None)
            if raw:
                pods[key] = raw
            else:
                pods.pop(key, None)
        if live.ranks_stale and rng.random() < 0.2:  # as the watcher does, now and then
            live.refresh_ranks()
    live.refresh_ranks()
    for name in sorted(nodes):  # then only nodes change: lent, reclaimed, returned
        nodes[name] = node(name, "inference", T4, rng.choice(STATES))
        live.set_node(name, Node.model_validate(nodes[name]))
    if live.ranks_stale:
        live.refresh_ranks()
    for name in sorted(nodes)[:3]:  # then only workers change: a node is emptied and a big base worker lands on it
        for key in [k for k, p in pods.items() if p["spec"]["nodeName"] == name]:
            del pods[key]
            live.set_pod(key, None)
        key = f"ns/big-{name}"
        pods[key] = pod(f"big-{name}", 6, "base", f"big-{name}", on=name)
        live.set_pod(key, pod_facts(Pod.model_validate(pods[key])))
    if live.ranks_stale:
        live.refresh_ranks()
    used, job_nodes = expected_usage(pods)
    view = live.view
    assert dict(view.used_gpus) == used
    assert {job: dict(hosts) for job, hosts in view.job_nodes.items()} == job_nodes
    assert {name: v.free_gpus for name, v in view.nodes.items()} == {
        name: max(8 - used.get(name, 0), 0) for name in nodes
    }
    fresh = build_view([Node.model_validate(n) for n in nodes.values()], [Pod.model_validate(p) for p in pods.values()])
    assert dict(view.nodes) == dict(fresh.nodes)  # reclaim ranks included


def test_a_job_mapping_handed_to_a_request_is_never_changed_afterwards() -> None:
    live = LiveView()
    live.set_node("l0", Node.model_validate(node("l0", "inference", T4, "loaned")))
    first = pod_facts(Pod.model_validate(pod("w0", 1, "base", "gpt", on="l0")))
    live.set_pod("ns/w0", first)
    held = live.view.job_nodes["ns/gpt"]
    second = pod_facts(Pod.model_validate(pod("w1", 1, "base", "gpt", on="l0")))
    live.set_pod("ns/w1", second)
    assert dict(held) == {"l0": 1}
    assert dict(live.view.job_nodes["ns/gpt"]) == {"l0": 2}


def test_a_pod_change_that_leaves_its_facts_as_they_were_changes_nothing() -> None:
    """A pod's status moving (pending, started, ready) is most of the pod events while pods land: it must not
    rescore its node nor mark the reclaim order stale."""
    live = LiveView()
    live.set_node("l0", Node.model_validate(node("l0", "inference", T4, "loaned")))
    pending = pod("w0", 1, "flexible", "gpt", on="l0")
    live.set_pod("ns/w0", pod_facts(Pod.model_validate(pending)))
    live.refresh_ranks()
    before = live.view.nodes["l0"]
    started = pending | {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    live.set_pod("ns/w0", pod_facts(Pod.model_validate(started)))
    assert live.view.nodes["l0"] is before
    assert not live.ranks_stale
    moved = pod("w0", 2, "flexible", "gpt", on="l0")
    live.set_pod("ns/w0", pod_facts(Pod.model_validate(moved)))
    assert live.view.nodes["l0"].free_gpus == before.free_gpus - 1
    assert live.ranks_stale


def test_the_watched_view_follows_its_caches_event_by_event() -> None:
    nodes, pods = FakeServer(), FakeServer()
    nodes.put(node("t0", "training", A100))
    nodes.put(node("l0", "inference", T4, "loaned"))
    pods.put(pod("gpt-0", 4, "base", "gpt", A100, on="t0"))
    source = WatchedView(sources={"nodes": nodes, "pods": pods}, rank_interval_s=0.01)
    source.start()
    try:
        assert source.wait_synced(10)
        view = source.current()
        assert view.nodes["t0"].free_gpus == 4
        pods.put(pod("bert-0", 2, "flexible", "bert", T4, on="l0"))
        pods.put(pod("gpt-0", 4, "base", "gpt", A100, on="t0") | {"status": {"phase": "Succeeded"}})
        nodes.put(node("s0", "inference", T4, "serving"))
        wait_for(
            lambda: view.nodes.get("s0") is not None and view.nodes["t0"].free_gpus == 8,
            10,
            "the events in the view",
        )
        assert view.nodes["l0"].free_gpus == 6
        assert dict(view.job_nodes) == {"ns/bert": {"l0": 1}}
        assert source.caches["pods"].lists == 1
    finally:
        source.stop()


def test_a_pod_is_parsed_only_when_what_the_view_keeps_of_it_may_have_moved() -> None:
    nodes, pods = FakeServer(), FakeServer()
    nodes.put(node("l0", "inference", T4, "loaned"))
    source = WatchedView(sources={"nodes": nodes, "pods": pods}, rank_interval_s=0.01)
    source.start()
    try:
        assert source.wait_synced(10)
        view = source.current()
        unbound = pod("bert-0", 2, "flexible", "bert", T4)
        pods.put(unbound)
        wait_for(lambda: source.caches["pods"].events >= 1, 10, "the pending pod's event")
        assert source.pods_parsed == 0  # bound to no node: it holds nothing
        bound = pod("bert-0", 2, "flexible", "bert", T4, on="l0") | {"status": {"phase": "Pending"}}
        pods.put(bound)
        wait_for(lambda: view.nodes["l0"].free_gpus == 6, 10, "the bound pod in the view")
        assert source.pods_parsed == 1
        started = bound | {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        pods.put(started)
        wait_for(lambda: source.caches["pods"].events >= 3, 10, "the started pod's event")
        assert source.pods_parsed == 1  # it started: its status moved, nothing the view keeps
        pods.put(started | {"status": {"phase": "Succeeded"}})
        wait_for(lambda: view.nodes["l0"].free_gpus == 8, 10, "the finished pod out of the view")
        assert source.pods_parsed == 2
    finally:
        source.stop()


def test_the_rank_thread_keeps_to_its_share_of_a_core() -> None:
    assert rank_wait_s(RANK_INTERVAL_S, 0.0) == RANK_INTERVAL_S  # nothing was due, or a refresh cost nothing
    assert rank_wait_s(RANK_INTERVAL_S, 0.001) == RANK_INTERVAL_S  # a small cluster: the interval rules
    spent = 0.01  # a refresh at 5,000 nodes with 1,000 loaned, on a busy machine
    waited = rank_wait_s(RANK_INTERVAL_S, spent)
    assert waited > RANK_INTERVAL_S
    assert spent / (spent + waited) <= RANK_CPU_SHARE
