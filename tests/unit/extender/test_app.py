"""The extender's HTTP verbs, on a fixed view: both protocol modes, scores, preemption victims, and hostile bodies.

The cluster: training nodes t0, t1 (A100 x 8), inference nodes s0 (serving), i0 (idle), l0 and l1 (loaned), r0
(reclaiming), all T4 x 8, and a plain GPU node g0 without Lyra's labels. Job ``ns/gpt`` has a base worker (4 GPUs)
on t1; job ``ns/bert`` a flexible worker (2 GPUs) on l1; an inference replica (2 GPUs) runs on s0.
"""

from __future__ import annotations

import http.client
import json
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lyra.api.objects import Node, Pod
from lyra.extender.app import NOT_SYNCED, BodyRecorder, FixedView, create_app
from lyra.extender.view import build_view
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.waiting import wait_for

A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"


def node(name: str, pool: str | None, product: str, state: str | None = None, gpus: int = 8) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product}
    if pool is not None:
        labels["lyra.dev/pool"] = pool
    if state is not None:
        labels["lyra.dev/state"] = state
    return {
        "metadata": {"name": name, "labels": labels, "uid": f"uid-{name}"},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"}, "capacity": {"nvidia.com/gpu": gpus}},
    }


def pod(
    name: str, gpus: int, role: str | None = None, job: str | None = None, product: str | None = None, *, on: str = ""
) -> dict[str, Any]:
    labels = {}
    if role is not None:
        labels["lyra.dev/role"] = role
    if job is not None:
        labels["lyra.dev/job"] = job
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        "nodeName": on,
    }
    if product is not None:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
        "spec": spec,
        "status": {"phase": "Running" if on else "Pending"},
    }


NODES = [
    node("t0", "training", A100),
    node("t1", "training", A100),
    node("s0", "inference", T4, "serving"),
    node("i0", "inference", T4, "idle"),
    node("l0", "inference", T4, "loaned"),
    node("l1", "inference", T4, "loaned"),
    node("r0", "inference", T4, "reclaiming"),
    node("g0", None, T4),
]
RUNNING = [
    pod("gpt-0", 4, "base", "gpt", A100, on="t1"),
    pod("bert-0", 2, "flexible", "bert", T4, on="l1"),
    pod("chat-0", 2, "inference", on="s0"),
]
NAMES = [n["metadata"]["name"] for n in NODES]


@pytest.fixture
def api() -> TestClient:
    view = build_view([Node.model_validate(n) for n in NODES], [Pod.model_validate(p) for p in RUNNING])
    return TestClient(create_app(FixedView(view)))


def names_args(subject: dict[str, Any]) -> dict[str, Any]:
    return {"Pod": subject, "Nodes": None, "NodeNames": NAMES}


def test_there_is_no_filter_verb(api: TestClient) -> None:
    """Refusals belong to kube-scheduler's plugins (taints, node affinity), which it re-checks on node changes; an
    extender's refusal would leave a pod waiting for the unschedulable flush (docs/architecture.md)."""
    assert api.post("/filter", json=names_args(pod("chat-1", 2, "inference"))).status_code == 404


def test_a_node_the_view_calls_reclaiming_is_not_refused_only_unscored(api: TestClient) -> None:
    """The scheduler sends only nodes its plugins found feasible; a view a moment old (r0 has just returned to
    serving) must not stop the pod from landing there: r0 is simply left unscored."""
    hosts = api.post("/prioritize", json=names_args(pod("chat-1", 2, "inference"))).json()
    assert {h["Host"] for h in hosts} == {"s0", "i0"}
    assert {h["Host"]: h["Score"] for h in hosts}["s0"] > {h["Host"]: h["Score"] for h in hosts}["i0"]


def test_pods_and_nodes_with_hundreds_of_labels_are_scored() -> None:
    many = {f"feature.node.kubernetes.io/f{i}": "true" for i in range(600)}
    nodes = [dict(n, metadata={**n["metadata"], "labels": n["metadata"]["labels"] | many}) for n in NODES]
    api = TestClient(create_app(FixedView(build_view([Node.model_validate(n) for n in nodes], []))))
    subject = pod("chat-1", 2, "inference")
    subject["metadata"]["labels"] |= many
    answer = api.post("/prioritize", json={"Pod": subject, "NodeNames": NAMES})
    assert answer.status_code == 200
    assert {h["Host"] for h in answer.json()} == {"s0", "i0"}


def test_prioritize_with_full_nodes_scores_the_nodes_as_sent(api: TestClient) -> None:
    sent = [dict(n, spec={"podCIDR": "10.0.0.0/24"}) for n in NODES]
    hosts = api.post("/prioritize", json={"Pod": pod("chat-1", 2, "inference"), "Nodes": {"items": sent}}).json()
    assert [h["Host"] for h in hosts] == ["s0", "i0"]


def test_prioritize_packs_jobs_and_keeps_scores_in_range(api: TestClient) -> None:
    hosts = api.post("/prioritize", json=names_args(pod("gpt-1", 2, "base", "gpt", A100))).json()
    assert [h["Host"] for h in hosts] == ["t0", "t1"]  # request order; nodes scoring 0 are left out
    scores = {h["Host"]: h["Score"] for h in hosts}
    assert all(1 <= score <= 10 for score in scores.values())
    assert scores["t1"] > scores["t0"]  # where the job already runs
    flexible = {
        h["Host"]: h["Score"]
        for h in api.post("/prioritize", json=names_args(pod("b", 2, "flexible", "bert", T4))).json()
    }
    assert flexible["l1"] > flexible["l0"]


def test_preempt_never_evicts_inference_or_bases_for_flexible_workers(api: TestClient) -> None:
    args = {
        "Pod": pod("bert-1", 8, "flexible", "bert", T4),
        "NodeNameToMetaVictims": {
            "l1": {"Pods": [{"UID": "uid-bert-0"}], "NumPDBViolations": 0},
            "s0": {"Pods": [{"UID": "uid-chat-0"}], "NumPDBViolations": 0},
            "t1": {"Pods": [{"UID": "uid-gpt-0"}], "NumPDBViolations": 1},
        },
    }
    body = api.post("/preempt", json=args).json()
    assert body == {"NodeNameToMetaVictims": {"l1": {"Pods": [{"UID": "uid-bert-0"}], "NumPDBViolations": 0}}}


@pytest.mark.parametrize("across", [False, True], ids=["default", "admin-allows"])
def test_preempt_never_crosses_namespaces_unless_the_admin_allows_it(across: bool) -> None:
    view = build_view([Node.model_validate(n) for n in NODES], [Pod.model_validate(p) for p in RUNNING])
    api = TestClient(create_app(FixedView(view), preempt_across_namespaces=across))
    intruder = pod("gpt-9", 8, "base", "gpt", A100)
    intruder["metadata"]["namespace"] = "other-tenant"
    args = {
        "Pod": intruder,
        "NodeNameToMetaVictims": {
            "l1": {"Pods": [{"UID": "uid-bert-0"}], "NumPDBViolations": 0},
            "t1": {"Pods": [{"UID": "uid-gpt-0"}], "NumPDBViolations": 0},
        },
    }
    kept = api.post("/preempt", json=args).json()["NodeNameToMetaVictims"]
    assert set(kept) == ({"l1", "t1"} if across else set())


def test_until_synced_prioritize_scores_nothing_and_readyz_is_503() -> None:
    api = TestClient(create_app(FixedView(build_view([], []), synced=False)))
    answer = api.get("/readyz")
    assert answer.status_code == 503
    assert NOT_SYNCED in answer.text
    assert api.get("/healthz").status_code == 200
    assert api.post("/prioritize", json=names_args(pod("chat-1", 2, "inference"))).json() == []


COMMON_BAD_BODIES = [
    (b"not json", 400, "not JSON"),
    (b"[]", 400, "JSON object"),
    (b'{"Pod": 3}', 422, "Pod"),
    (b'{"Pod": {"metadata": {}}}', 422, "name"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "JSON"),
]
BAD_BODIES = [(verb, *case) for verb in ("prioritize", "preempt") for case in COMMON_BAD_BODIES] + [
    ("prioritize", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "t0"}', 422, "NodeNames"),
    ("prioritize", b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": 5}}', 422, "Nodes"),
    ("preempt", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNameToMetaVictims": []}', 422, "NodeNameToMetaVictims"),
]


@pytest.mark.parametrize(("verb", "raw", "status", "says"), BAD_BODIES)
def test_bad_bodies_get_a_4xx_with_a_message(api: TestClient, verb: str, raw: bytes, status: int, says: str) -> None:
    answer = api.post(f"/{verb}", content=raw, headers={"Content-Type": "application/json"})
    assert answer.status_code == status
    assert says.lower() in answer.json()["Error"].lower()


def test_an_oversized_body_is_refused_before_it_is_read() -> None:
    api = TestClient(create_app(FixedView(build_view([], [])), max_body_bytes=1024))
    answer = api.post("/prioritize", content=b"{" + b" " * 4096 + b"}", headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    assert "limit" in answer.json()["Error"]


def test_metrics_count_requests_by_verb_and_outcome(api: TestClient) -> None:
    api.post("/prioritize", json=names_args(pod("chat-1", 2, "inference")))
    api.post("/prioritize", content=b"nope")
    text = api.get("/metrics").text
    assert 'lyra_extender_requests_total{outcome="ok",verb="prioritize"} 1.0' in text
    assert 'lyra_extender_requests_total{outcome="bad-request",verb="prioritize"} 1.0' in text
    # every verb and outcome exists from the start (the first refusal shows in rate()); the process's own metrics;
    # no *_created series; latency buckets up to kube-scheduler's 5 s timeout
    assert 'lyra_extender_requests_total{outcome="refused",verb="preempt"} 0.0' in text
    assert 'lyra_extender_request_seconds_bucket{le="5.0",verb="preempt"} 0.0' in text
    assert "process_resident_memory_bytes" in text
    assert "_created" not in text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
FIELDS = ["Pod", "Nodes", "NodeNames", "NodeNameToMetaVictims", "NodeNameToVictims"]


@settings(max_examples=150, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    verb=st.sampled_from(["prioritize", "preempt"]),
    replaced=st.dictionaries(st.sampled_from([*FIELDS, "metadata", "spec", "labels"]), json_values, max_size=3),
)
def test_no_body_makes_the_extender_fail_with_a_5xx(api: TestClient, verb: str, replaced: dict[str, Any]) -> None:
    body: dict[str, Any] = names_args(pod("p", 1, "flexible", "j", T4))
    body["NodeNameToMetaVictims"] = {"l1": {"Pods": [{"UID": "uid-bert-0"}], "NumPDBViolations": 0}}
    inner = {key: value for key, value in replaced.items() if key not in FIELDS}
    if "labels" in inner:
        body["Pod"]["metadata"]["labels"] = inner.pop("labels")
    body["Pod"].update(inner)
    body.update({key: value for key, value in replaced.items() if key in FIELDS})
    answer = api.post(f"/{verb}", json=body)
    assert answer.status_code < 500
    if answer.status_code >= 400:
        assert answer.json()["Error"]


def test_the_recorder_keeps_the_first_bodies_of_each_verb(tmp_path: Path) -> None:
    view = build_view([Node.model_validate(n) for n in NODES], [])
    api = TestClient(create_app(FixedView(view), recorder=BodyRecorder(tmp_path, limit=2)))
    for bad in (b"not json", b"[1]"):  # answered 400, not kept, and not counted against the limit
        api.post("/prioritize", content=bad, headers={"Content-Type": "application/json"})
    for index in range(3):
        api.post("/prioritize", json=names_args(pod(f"p{index}", 1)))
    api.post("/preempt", json={"Pod": pod("q", 1), "NodeNameToMetaVictims": {}})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "preempt-000.json",
        "prioritize-000.json",
        "prioritize-001.json",
    ]
    assert json.loads((tmp_path / "prioritize-001.json").read_text())["Pod"]["metadata"]["name"] == "p1"


def test_a_50_mb_body_without_a_length_is_refused_without_holding_it_in_memory() -> None:
    """A real server (the test client buffers bodies): chunked upload of 50 MiB against a 1 MiB limit."""
    app = create_app(FixedView(build_view([], [])), max_body_bytes=1024 * 1024)
    port = allocate_ports(1)[0]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 10, "the test server to start")
        tracemalloc.start()
        sent = 0
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.putrequest("POST", "/prioritize")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Transfer-Encoding", "chunked")
        connection.endheaders()
        chunk = b" " * (1024 * 1024)
        try:
            for _ in range(50):
                connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += 1
            connection.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server closed the connection after refusing: what should happen
        answer = connection.getresponse()
        assert answer.status == 413
        assert "limit" in json.loads(answer.read())["Error"]
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # The client's own 1 MiB chunk and the server's 1 MiB of accepted body, never the 50 MiB sent.
        connection.close()
        assert peak < 8 * 1024 * 1024, f"{peak / 2**20:.1f} MiB allocated while {sent} MiB were sent"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.parametrize("name", ['s"0', "s\\0", "s\t0", "sé0"])
def test_a_node_name_sent_in_full_comes_back_as_valid_json_whatever_it_holds(api: TestClient, name: str) -> None:
    sent = [dict(n, metadata={**n["metadata"], "name": name}) if n["metadata"]["name"] == "s0" else n for n in NODES]
    answer = api.post("/prioritize", json={"Pod": pod("chat-1", 2, "inference"), "Nodes": {"items": sent}})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert [h["Host"] for h in json.loads(answer.content)] == [name, "i0"]
