"""The operator's metrics, derived from passes on the in-memory cluster: gauges from the observed World, counters
from applied actions only (a refused write counts nothing but a refused action), cross-checked against the counts
the jobs' statuses keep; the exposition of a leader and of a standby; the documented list."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lyra.core.model import Pool
from lyra.operator.actions import PatchStatus, SetNodeState
from lyra.operator.commit import APPLIED, REFUSED
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.metrics import (
    DRAINED,
    FORCED,
    METRICS,
    AppliedCounts,
    OperatorMetrics,
    applied_counts,
    reference,
    state_gauges,
)

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job
from .test_health import cordon, drain, kill_kubelet
from .test_isolation import Fault, FaultyCluster

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=60)
DOCS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def small_cluster() -> FakeCluster:
    return FakeCluster([node("a0", "training", A100)] + [node(f"t{i}", "inference", T4) for i in range(4)])


def one_pass(cluster: FakeCluster, *, finish: bool = True, seconds: float = 40) -> AppliedCounts:
    """Decide, apply every action (the fake cluster refuses nothing), and count."""
    world = cluster.world()
    decision = decide(world, CONFIG)
    cluster.apply(decision)
    if finish:
        cluster.finish_terminations()
    cluster.tick(seconds)
    return applied_counts(
        world, decision, [APPLIED] * len(decision.actions), reclaim_deadline_s=CONFIG.reclaim_deadline_s
    )


def settle(cluster: FakeCluster, passes: int = 10) -> list[AppliedCounts]:
    return [one_pass(cluster) for _ in range(passes)]


@dataclass
class Totals:
    loans: Counter[tuple[str, ...]]
    reclaims: Counter[tuple[str, ...]]
    preemptions: Counter[tuple[str, ...]]
    scaled_in: Counter[tuple[str, ...]]
    reclaim_durations: list[tuple[str, float]]
    inference_waits: list[tuple[str, float]]
    queue_waits: list[float]


def total(counts: list[AppliedCounts]) -> Totals:
    result = Totals(Counter(), Counter(), Counter(), Counter(), [], [], [])
    for count in counts:
        result.loans.update(count.loans)
        result.reclaims.update(count.reclaims)
        result.preemptions.update(count.preemptions)
        result.scaled_in.update(count.scaled_in)
        result.reclaim_durations += count.reclaim_durations
        result.inference_waits += count.inference_waits
        result.queue_waits += count.queue_waits
    return result


def lend(cluster: FakeCluster) -> list[AppliedCounts]:
    cluster.add_service(inference_service("chat", 2))
    return settle(cluster)


def reclaim_by_scale_in(cluster: FakeCluster) -> list[AppliedCounts]:
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("elastic", 2, 16, gpuTypes=[T4]))
    counts = settle(cluster)
    cluster.services["serve/chat"]["spec"]["replicas"] = 20
    return counts + settle(cluster)


def reclaim_by_preemption(cluster: FakeCluster) -> list[AppliedCounts]:
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("rigid", 24, 24, gpuTypes=[T4]))
    counts = settle(cluster)
    cluster.services["serve/chat"]["spec"]["replicas"] = 20
    return counts + settle(cluster)


def reclaim_forced(cluster: FakeCluster) -> list[AppliedCounts]:
    """The workers on the reclaimed servers do not leave (terminations never finish) past the deadline."""
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("elastic", 2, 16, gpuTypes=[T4]))
    counts = settle(cluster)
    cluster.services["serve/chat"]["spec"]["replicas"] = 20
    counts += [one_pass(cluster, finish=False, seconds=60) for _ in range(3)]
    return counts + settle(cluster)


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[FakeCluster], list[AppliedCounts]]
    loans: Mapping[tuple[str, ...], int]
    reclaims: Mapping[tuple[str, ...], int]
    preemptions: Mapping[tuple[str, ...], int]
    inference_waits: int


SCENARIOS = [
    Scenario("lend", lend, {(T4,): 3}, {}, {}, 0),
    Scenario("reclaim by scale-in", reclaim_by_scale_in, {(T4,): 3}, {(T4, DRAINED): 2}, {}, 1),
    Scenario("reclaim by preemption", reclaim_by_preemption, {(T4,): 3}, {(T4, DRAINED): 2}, {("reclaim",): 1}, 1),
    # Of the two servers reclaimed, one ran no worker (it returns at once); the other's workers outlive the deadline.
    Scenario(
        "reclaim forced past its deadline", reclaim_forced, {(T4,): 3}, {(T4, DRAINED): 1, (T4, FORCED): 1}, {}, 1
    ),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_counters_count_what_the_passes_applied(scenario: Scenario) -> None:
    cluster = small_cluster()
    totals = total(scenario.run(cluster))

    assert dict(totals.loans) == scenario.loans
    assert dict(totals.reclaims) == scenario.reclaims
    assert dict(totals.preemptions) == scenario.preemptions
    assert len(totals.reclaim_durations) == sum(scenario.reclaims.values())
    forced = sum(n for (_, outcome), n in scenario.reclaims.items() if outcome == FORCED)
    assert sum(seconds > CONFIG.reclaim_deadline_s for _, seconds in totals.reclaim_durations) == forced
    assert [gpu_type for gpu_type, _ in totals.inference_waits] == [T4] * scenario.inference_waits
    # The jobs' statuses keep their own counts: the metrics agree with them.
    statuses = [job.get("status", {}) for job in cluster.jobs.values()]
    assert sum(totals.scaled_in.values()) == sum(s.get("scaleIns", 0) for s in statuses)
    assert sum(totals.preemptions.values()) == sum(s.get("preemptions", 0) for s in statuses)
    starts = sum(1 for event in cluster.events if event.reason == "Started")
    assert len(totals.queue_waits) == starts
    assert all(seconds >= 0 for seconds in totals.queue_waits)


def test_workers_kubernetes_takes_are_scaled_in_by_disruption_once_and_agree_with_the_status() -> None:
    """``kubectl drain a1``: its flexible workers are evicted (Kubernetes deletes them, not Lyra) and take their
    grace to leave: the scale-in counts each once, as a disruption, in the pass that writes it to the job's status."""
    cluster = FakeCluster([node("a0", "training", A100), node("a1", "training", A100)])
    cluster.add_job(training_job("elastic", 2, 16))
    counts = settle(cluster)
    on_a1 = [p for p in cluster.workers("elastic") if p["spec"]["nodeName"] == "a1"]
    assert len(on_a1) == 8
    assert {p["metadata"]["labels"]["lyra.dev/role"] for p in on_a1} == {"flexible"}
    drain(cluster, "a1")
    counts += [one_pass(cluster, finish=False, seconds=1) for _ in range(3)]
    counts += settle(cluster)
    totals = total(counts)
    assert {labels: n for labels, n in totals.scaled_in.items() if n} == {(A100, "disruption"): 8}
    assert cluster.job_status("elastic")["scaleIns"] == 8


def test_refused_or_held_actions_count_nothing_but_themselves() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 2))
    cluster.apply(decide(cluster.world(), CONFIG))
    cluster.tick(40)
    world = cluster.world()
    decision = decide(world, CONFIG)
    lends = [a for a in decision.actions if isinstance(a, SetNodeState)]
    assert len(lends) == 3
    results = [REFUSED if isinstance(a, SetNodeState) else APPLIED for a in decision.actions]

    counts = applied_counts(world, decision, results, reclaim_deadline_s=CONFIG.reclaim_deadline_s)

    assert counts.loans == {}
    assert counts.actions[("SetNodeState", REFUSED)] == 3
    assert ("SetNodeState", APPLIED) not in counts.actions


def test_state_gauges_count_servers_gpus_jobs_and_workers_by_state() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 2))
    cluster.add_job(training_job("elastic", 2, 16, gpuTypes=[T4]))
    cluster.add_job(training_job("waiting", 64, 64, gpuTypes=[A100]))
    settle(cluster)

    gauges = state_gauges(cluster.world())

    assert gauges.servers == {
        ("loaned", T4): 3,
        ("serving", T4): 1,
        ("idle", T4): 0,
        ("reclaiming", T4): 0,
        ("training", A100): 1,
    }
    assert gauges.gpus[("loaned", T4)] == 24
    assert gauges.gpus[("training", A100)] == 8
    assert gauges.jobs == {("Queued",): 1, ("Running",): 1, ("Succeeded",): 0, ("Failed",): 0}
    assert gauges.workers == {("base", T4): 2, ("flexible", T4): 14}


def test_servers_out_of_service_are_counted_by_reason_an_unhealthy_cordoned_one_as_unhealthy() -> None:
    cluster = FakeCluster([node(f"a{i}", "training", A100) for i in range(3)] + [node("t0", "inference", T4)])
    assert state_gauges(cluster.world()).out_of_service == {
        ("cordoned", A100): 0,
        ("unhealthy", A100): 0,
        ("cordoned", T4): 0,
        ("unhealthy", T4): 0,
    }, "both reasons of every GPU type exist at zero"
    cordon(cluster, "a0")
    cordon(cluster, "t0")
    kill_kubelet(cluster, "a1", since=cluster.now)
    cordon(cluster, "a2")
    kill_kubelet(cluster, "a2", since=cluster.now)
    gauges = state_gauges(cluster.world())
    assert gauges.out_of_service == {
        ("cordoned", A100): 1,
        ("unhealthy", A100): 2,
        ("cordoned", T4): 1,
        ("unhealthy", T4): 0,
    }
    metrics = OperatorMetrics()
    metrics.leading(cluster.world())
    exported = samples(metrics.exposition())["lyra_servers_out_of_service"]
    assert ({"reason": "unhealthy", "gpu_type": A100}, 2.0) in exported
    metrics.standing_by()
    assert "lyra_servers_out_of_service" not in samples(metrics.exposition()), "a state gauge: the leader's only"


def samples(exposition: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_a_standby_exports_no_state_only_that_it_does_not_lead() -> None:
    cluster = small_cluster()
    cluster.add_service(inference_service("chat", 2))
    settle(cluster, 3)
    metrics = OperatorMetrics(version="1.2.3")

    metrics.leading(cluster.world())
    leader = samples(metrics.exposition())
    metrics.standing_by()
    standby = samples(metrics.exposition())

    assert leader["lyra_leader"] == [({}, 1.0)]
    assert ({"state": "loaned", "gpu_type": T4}, 3.0) in leader["lyra_servers"]
    assert standby["lyra_leader"] == [({}, 0.0)]
    assert standby["lyra_build_info"] == [({"version": "1.2.3"}, 1.0)]
    assert not {"lyra_servers", "lyra_gpus", "lyra_training_jobs", "lyra_training_workers"} & standby.keys()


def test_a_leader_whose_lease_fence_closes_stops_exporting_state_before_its_next_pass() -> None:
    cluster = small_cluster()
    metrics = OperatorMetrics()
    fence = {"open": True}
    metrics.follow(lambda: fence["open"])
    metrics.leading(cluster.world())
    assert samples(metrics.exposition())["lyra_leader"] == [({}, 1.0)]

    fence["open"] = False
    lapsed = samples(metrics.exposition())

    assert lapsed["lyra_leader"] == [({}, 0.0)]
    assert "lyra_servers" not in lapsed


def test_counters_and_histograms_start_at_zero_so_prometheus_sees_the_first_event() -> None:
    """rate() and increase() miss an event that a series is born counting: every series a dashboard reads exists at
    zero before its first event (GPU types from the first pass that sees them, inference types for loans)."""
    metrics = OperatorMetrics()
    before = samples(metrics.exposition())
    assert {labels["reason"] for labels, value in before["lyra_preemptions_total"] if value == 0} == {
        "reclaim",
        "allocation",
        "lost_base",
        "node_lost",
        "disruption",
    }
    assert {labels["result"] for labels, _ in before["lyra_reconcile_passes_total"]} == {"succeeded", "failed"}
    assert "lyra_loans_total" not in before

    metrics.leading(small_cluster().world())
    zeroed = samples(metrics.exposition())

    assert zeroed["lyra_loans_total"] == [({"gpu_type": T4}, 0.0)]
    assert sorted(labels["outcome"] for labels, _ in zeroed["lyra_reclaims_total"]) == ["drained", "forced"]
    assert zeroed["lyra_reclaim_duration_seconds_count"] == [({"gpu_type": T4}, 0.0)]
    assert zeroed["lyra_inference_reclaim_wait_seconds_count"] == [({"gpu_type": T4}, 0.0)]
    assert sorted((labels["gpu_type"], labels["cause"]) for labels, _ in zeroed["lyra_workers_scaled_in_total"]) == [
        (A100, "deleted"),
        (A100, "disruption"),
        (T4, "deleted"),
        (T4, "disruption"),
    ]
    assert all(value == 0 for labels, value in zeroed["lyra_workers_scaled_in_total"])


def test_a_standby_zeroes_the_gpu_types_it_knows_so_a_takeover_counts_from_zero() -> None:
    metrics = OperatorMetrics()
    metrics.standing_by()
    metrics.zero_gpu_types({(T4, Pool.INFERENCE), (A100, Pool.TRAINING)})
    standby = samples(metrics.exposition())

    assert standby["lyra_leader"] == [({}, 0.0)]
    assert standby["lyra_loans_total"] == [({"gpu_type": T4}, 0.0)]
    assert standby["lyra_inference_reclaim_wait_seconds_count"] == [({"gpu_type": T4}, 0.0)]
    assert sorted({labels["gpu_type"] for labels, _ in standby["lyra_workers_scaled_in_total"]}) == [A100, T4]


def test_every_metric_is_exported_under_its_documented_name() -> None:
    cluster = small_cluster()
    metrics = OperatorMetrics()
    metrics.leading(cluster.world())
    names = {family.name for family in text_string_to_metric_families(metrics.exposition().decode())}
    # The parser names a counter's family without its _total suffix.
    assert {spec.name.removesuffix("_total") for spec in METRICS} <= names
    assert all(spec.name.startswith("lyra_") for spec in METRICS)
    assert all((spec.kind == "counter") == spec.name.endswith("_total") for spec in METRICS)
    assert not any(label in ("node", "job", "pod", "name") for spec in METRICS for label in spec.labels)


def test_the_metrics_reference_in_the_docs_is_the_generated_one() -> None:
    assert reference() in DOCS.read_text(), "regenerate it: uv run python -m lyra.operator.metrics"


def test_the_commit_reports_each_actions_fate_and_only_applied_starts_are_counted() -> None:
    """Through the real commit step: a job whose status write the API refuses neither starts nor counts as started;
    the other job does, in the same pass."""
    fake = FakeCluster([node("a0", "training", A100)])
    fake.add_job(training_job("broken-status", 2, 2))
    fake.add_job(training_job("good", 2, 2))
    refused = Fault(lambda a: isinstance(a, PatchStatus) and a.ref.name == "broken-status", 500, "InternalError", "x")
    cluster = FaultyCluster(fake=fake, faults=[refused])
    world = fake.world()
    decision = decide(world, CONFIG, cluster.backoff.failures())

    outcome = cluster.apply(decision, fake.now)
    counts = applied_counts(world, decision, outcome.results, reclaim_deadline_s=CONFIG.reclaim_deadline_s)

    assert len(outcome.results) == len(decision.actions)
    assert outcome.results.count(APPLIED) == outcome.applied
    assert outcome.results.count(REFUSED) == outcome.failed == 1
    assert outcome.results.count("skipped") == outcome.skipped > 0
    assert counts.actions[("PatchStatus", REFUSED)] == 1
    assert counts.actions[("CreatePod", APPLIED)] == 2
    assert len(counts.queue_waits) == 1, "only the good job started"


def test_the_exposition_carries_the_process_metrics_and_no_created_series() -> None:
    """What an SRE expects of every exporter: the process's CPU and memory; no ``*_created`` series beside each
    counter and histogram (a second series per child that nothing reads)."""
    metrics = OperatorMetrics()
    metrics.leading(small_cluster().world())
    text = metrics.exposition().decode()
    exported = samples(metrics.exposition())

    assert exported["process_cpu_seconds_total"][0][1] > 0
    assert exported["process_resident_memory_bytes"][0][1] > 0
    assert "python_gc_collections_total" in exported
    assert "_created" not in text


def test_the_watch_caches_counts_are_exported_per_cache() -> None:
    """LISTs, errors and events of each watch cache, read at the scrape: a climbing LIST count says watches expire."""

    class Counts:
        def __init__(self, lists: int, errors: int, events: int) -> None:
            self.lists, self.errors, self.events = lists, errors, events

    metrics = OperatorMetrics()
    caches = {"nodes": Counts(1, 0, 40), "pods": Counts(3, 2, 900)}
    metrics.watch(caches)
    exported = samples(metrics.exposition())

    assert exported["lyra_watch_lists_total"] == [({"cache": "nodes"}, 1.0), ({"cache": "pods"}, 3.0)]
    assert exported["lyra_watch_errors_total"] == [({"cache": "nodes"}, 0.0), ({"cache": "pods"}, 2.0)]
    caches["pods"].lists = 4
    assert samples(metrics.exposition())["lyra_watch_lists_total"][1] == ({"cache": "pods"}, 4.0)
