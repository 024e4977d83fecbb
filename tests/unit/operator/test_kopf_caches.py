"""The kopf watch layer's mapping (:mod:`lyra.operator.kopf_caches`): what each kind's index keeps of an object,
what is a change that wakes a pass, what a deletion does, the versions ``catch_up`` waits for, and kopf's login from
the operator's kubeconfig. kopf's handlers are called here as kopf calls them (an index handler's result applied to
its indexer, an event handler with the raw event); the integration test runs them under kopf itself."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
import pytest
from kubernetes import client

from lyra.api import names
from lyra.api.convert import node_gpu_type, node_pool
from lyra.kubewatch.kinds import NODES, PODS
from lyra.operator.caches import KINDS, StaleCacheError
from lyra.operator.kopf_caches import (
    RESOURCES,
    KopfCaches,
    changed,
    connection_info,
    index_entry,
    newest,
)
from lyra.operator.runner import watch_layer


def pod(name: str, *, gpus: int = 1, version: str = "10", phase: str = "Running") -> dict[str, Any]:
    resources = {"limits": {names.GPU_RESOURCE: str(gpus)}} if gpus else {"requests": {"cpu": "1"}}
    return {
        "metadata": {
            "name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": version,
            "managedFields": [{"manager": "kubelet"}], "annotations": {"other.io/x": "y", "lyra.dev/k": "v"},
        },
        "spec": {"nodeName": "n1", "volumes": [{"name": "v"}],
                 "containers": [{"name": "main", "image": "a:1", "env": [], "resources": resources}]},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": "t"}]},
    }  # fmt: skip


def node(name: str, *, version: str = "5", heartbeat: str = "t1", ready: str = "True") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version,
                     "labels": {names.POOL_LABEL: names.POOL_INFERENCE}},
        "spec": {"taints": []},
        "status": {"capacity": {names.GPU_RESOURCE: "8"}, "images": ["big"],
                   "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]},
    }  # fmt: skip


def test_a_gpu_pod_is_indexed_slimmed_under_its_namespace_and_name() -> None:
    entry = index_entry(PODS, pod("w1"))
    assert list(entry) == ["ml/w1"]
    kept = entry["ml/w1"]
    assert kept == PODS.slim(pod("w1"))
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"lyra.dev/k": "v"}
    assert "volumes" not in kept["spec"]
    assert kept["status"]["conditions"] == [{"type": "Ready", "status": "True"}]


def test_a_pod_the_kind_does_not_keep_is_indexed_as_nothing_so_kopf_drops_what_it_held() -> None:
    assert index_entry(PODS, pod("web", gpus=0)) == {}
    assert index_entry(PODS, {"metadata": {}}) == {}


def test_only_a_kept_field_is_a_change_not_a_heartbeat_or_a_new_version() -> None:
    before = index_entry(NODES, node("n1"))["n1"]
    heartbeat = index_entry(NODES, node("n1", version="6", heartbeat="t2"))["n1"]
    not_ready = index_entry(NODES, node("n1", version="7", ready="False"))["n1"]
    assert not changed(before, heartbeat)
    assert changed(heartbeat, not_ready)
    assert changed(None, before)
    assert changed(before, None)
    assert not changed(None, None)


def test_of_two_objects_kept_under_one_name_the_newest_is_read() -> None:
    old, new = PODS.slim(pod("w1", version="9")), PODS.slim(pod("w1", version="12"))
    assert newest([new, old]) is new
    assert newest([old, new]) is new


def held(caches: KopfCaches) -> KopfCaches:
    """The indexers made ready as kopf makes them at its start (one per index handler)."""
    caches.indexers.ensure(caches.registry._indexing.get_all_handlers())
    return caches


def index(caches: KopfCaches, name: str, raw: dict[str, Any]) -> None:
    """What kopf does with an event that is not a deletion: the index handler, its result stored under the object."""
    body = kopf.Body(copy.deepcopy(raw))
    handler = next(h for h in caches.registry._indexing.get_all_handlers() if h.id == name)
    result = asyncio.run(handler.fn(body=body))
    caches.indexers[handler.id].replace(caches.indexers.make_key(body), result)


def observe(caches: KopfCaches, name: str, kind: str | None, raw: dict[str, Any]) -> None:
    """What kopf does next with every event (once every kind has listed): the event handler."""
    if kind == "DELETED":
        caches.indexers.discard(kopf.Body(raw))
    handler = next(h for h in caches.registry._watching.get_all_handlers() if h.id == f"{name}-events")
    asyncio.run(handler.fn(event={"type": kind, "object": raw}))


def test_every_kind_has_an_index_and_an_event_handler_and_its_server_side_selector() -> None:
    caches = KopfCaches(client.Configuration())
    assert set(RESOURCES) == set(KINDS)
    assert {h.id for h in caches.registry._indexing.get_all_handlers()} == set(KINDS)
    assert {h.id for h in caches.registry._watching.get_all_handlers()} == {f"{n}-events" for n in KINDS}
    selectors = {str(k): v for k, v in caches.settings.watching.label_selectors.items()}
    assert sorted(selectors.values()) == sorted(k.label_selector for k in KINDS.values() if k.label_selector)
    assert caches.settings.peering.standalone
    assert caches.settings.scanning.disabled
    assert not caches.settings.posting.enabled


def test_changes_wake_a_pass_heartbeats_do_not_and_the_snapshot_reads_the_indexes() -> None:
    wakes: list[None] = []
    caches = held(KopfCaches(client.Configuration(), on_change=lambda: wakes.append(None)))
    index(caches, "nodes", node("n1"))
    index(caches, "pods", pod("w1"))
    index(caches, "pods", pod("web", gpus=0))
    assert len(wakes) == 2
    index(caches, "nodes", node("n1", version="6", heartbeat="t2"))
    assert len(wakes) == 2, "a heartbeat that changes nothing kept wakes nothing"
    index(caches, "pods", pod("w1", version="11", phase="Failed"))
    assert len(wakes) == 3
    objects = caches.snapshot()
    assert [o["metadata"]["name"] for o in objects["pods"]] == ["w1"]
    assert objects["pods"][0]["status"]["phase"] == "Failed"
    assert objects["nodes"][0]["metadata"]["resourceVersion"] == "6"
    assert objects["jobs"] == objects["services"] == objects["deployments"] == []
    assert caches.versions()["pods"] == {"ml/w1": "11"}
    labels = node("n1")["metadata"]["labels"]
    assert caches.node_kinds() == {(node_gpu_type(labels), node_pool(labels))}


def test_a_deletion_wakes_a_pass_and_leaves_the_index_and_its_version_is_seen() -> None:
    wakes: list[None] = []
    caches = held(KopfCaches(client.Configuration(), on_change=lambda: wakes.append(None)))
    index(caches, "pods", pod("w1"))
    assert not caches.synced
    observe(caches, "pods", None, pod("w1"))  # the listing's event
    assert caches.synced, "kopf calls event handlers only once every kind has listed"
    gone = pod("w1", version="20")
    observe(caches, "pods", "DELETED", gone)
    assert len(wakes) == 2
    assert caches.snapshot()["pods"] == []
    assert caches.caches["pods"].version == "20"
    assert caches.caches["pods"].events == 2


def test_catch_up_waits_for_the_written_version_and_fails_with_why_when_it_does_not_come() -> None:
    caches = held(KopfCaches(client.Configuration(), catch_up_s=0.05))
    caches.wrote("Pod", "15")
    caches.wrote("Event", "99")  # no index receives Events: nothing to wait for
    with pytest.raises(
        StaleCacheError, match="kopf's pods watch is at version none, before the operator's write at 15"
    ):
        caches.catch_up()
    observe(caches, "pods", "MODIFIED", pod("w1", version="16"))
    caches.catch_up()  # a later version: the write has been seen
    caches.failure = "APIForbiddenError: forbidden"
    with pytest.raises(StaleCacheError, match="kopf's watches have ended"):
        caches.catch_up()


def test_kopf_logs_in_with_the_kubeconfigs_token_and_certificates() -> None:
    configuration = client.Configuration(host="https://10.0.0.1:6443")
    configuration.api_key["BearerToken"] = "Bearer abc.def"
    configuration.ssl_ca_cert = "/tmp/ca.crt"
    info = connection_info(configuration)
    assert (info.server, info.scheme, info.token, info.ca_path) == (
        "https://10.0.0.1:6443",
        "Bearer",
        "abc.def",
        "/tmp/ca.crt",
    )
    assert not info.insecure
    certificates = client.Configuration(host="https://h")
    certificates.cert_file, certificates.key_file, certificates.verify_ssl = "/c.crt", "/c.key", False
    info = connection_info(certificates)
    assert (info.token, info.certificate_path, info.private_key_path, info.insecure) == (None, "/c.crt", "/c.key", True)


def test_the_watch_layer_is_chosen_by_name() -> None:
    api = client.ApiClient(client.Configuration(host="https://h"))
    assert type(watch_layer("kopf", api)).__name__ == "KopfCaches"
    assert type(watch_layer("kubewatch", api)).__name__ == "ClusterCaches"
    with pytest.raises(ValueError, match="no watch layer 'informer'"):
        watch_layer("informer", api)
