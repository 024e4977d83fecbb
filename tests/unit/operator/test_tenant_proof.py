"""Tenant-proof decisions (issue 25): no value a tenant's object carries stops a pass, and objects Lyra cannot run
cost no one GPUs.

* Each service's and job's part of a pass runs alone (:func:`lyra.operator.isolation.decide_alone`): whatever one
  raises fails that object only (``InvalidSpec``, the error named), and every other object is decided in the same
  pass. The issue's case: sizing of ``1e300`` requests per second at ``1e-300`` per replica.
* Every number of both specs is bounded in the CRDs and in the operator's reading; a property test feeds each its
  extremes (0, the smallest float, the CRD's bounds and beyond, huge values, NaN and infinities) through ``decide``.
* A name longer than Lyra can label pods with (63) is refused by the CRDs' root rule and, for an object stored before
  it, by the operator: no pod, no Deployment, no GPU, no reclaim.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lyra.api import names
from lyra.api.crds import all_crds
from lyra.api.resources import MAX_OBJECT_NAME, InferenceServiceSpec, LoadSizing, name_problem
from lyra.operator import job_intent, services
from lyra.operator.actions import ApplyDeployment, CreatePod
from lyra.operator.decide import OperatorConfig, decide
from lyra.operator.job_work import WorkLedger
from lyra.operator.priority_bounds import PriorityBounds
from lyra.operator.sizing import InferenceGpuCaps, desired_replicas
from lyra.settings import DEFAULT_MAX_PRIORITY

from .fake_cluster import A100, T4, FakeCluster, inference_service, node, training_job

CONFIG = OperatorConfig(lend_delay_s=30, reclaim_deadline_s=100, gang_timeout_s=600)
EXTREME_SIZING = {"requestsPerSecond": 1e300, "requestsPerSecondPerReplica": 1e-300}


def add_job(cluster: FakeCluster, namespace: str, body: dict[str, Any]) -> None:
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    cluster.jobs[f"{namespace}/{body['metadata']['name']}"] = body


def add_service(cluster: FakeCluster, namespace: str, body: dict[str, Any]) -> None:
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    cluster.services[f"{namespace}/{body['metadata']['name']}"] = body


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status.get("conditions", []) if c["type"] == kind)
    return found


def cluster_with_neighbours() -> FakeCluster:
    """Two A100 training servers and four T4 inference servers; namespace ``other`` runs a 1-worker job and a
    1-replica service, the neighbours whose decisions must go on whatever the tenant does."""
    cluster = FakeCluster([node(f"a{i}", "training", A100) for i in range(2)] + [
        node(f"t{i}", "inference", T4) for i in range(4)
    ])  # fmt: skip
    add_job(cluster, "other", training_job("neighbour", 1, 1, gpuTypes=[A100]))
    add_service(cluster, "other", inference_service("neighbour", 1, gpuType=T4))
    return cluster


def assert_neighbours_decided(cluster: FakeCluster, *, started: bool = True) -> None:
    job = cluster.jobs["other/neighbour"].get("status", {})
    assert job.get("phase") in (("Running",) if started else ("Running", "Queued")), job
    if started:
        assert any(p["metadata"]["namespace"] == "other" for p in cluster.pods.values()), "its worker was made"
    assert cluster.deployments["other/neighbour"]["spec"]["replicas"] == 1


# -- the case: extreme sizing ----------------------------------------------------------------------------


def test_desired_replicas_of_extreme_loads_is_the_maximum_never_an_overflow() -> None:
    def spec(load: float, per_replica: float) -> InferenceServiceSpec:  # as an unbounded older reading held it
        sizing = LoadSizing.model_construct(requests_per_second=load, requests_per_second_per_replica=per_replica)
        return InferenceServiceSpec.model_construct(replicas=1, min_replicas=0, max_replicas=64, sizing=sizing)

    assert desired_replicas(spec(1e300, 1e-300)) == 64  # 1e300 / 1e-300 is inf: math.ceil(inf) raised OverflowError
    assert desired_replicas(spec(1e9, 1e-3)) == 64  # the CRD's bounds
    assert desired_replicas(spec(0, 1e-3)) == 0
    assert desired_replicas(spec(1.5, 1)) == 2
    with pytest.raises(ValueError, match="not a load"):
        desired_replicas(spec(math.nan, 1))


def test_a_service_stored_with_extreme_sizing_is_refused_alone_and_another_namespaces_job_starts() -> None:
    cluster = cluster_with_neighbours()
    add_service(cluster, "tenant", inference_service("huge", 1, gpuType=T4, sizing=EXTREME_SIZING))
    cluster.apply(decide(cluster.world(), CONFIG))  # before the fix: OverflowError, "pass failed" for everybody
    assert_neighbours_decided(cluster)
    ready = condition(cluster.services["tenant/huge"]["status"], "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.sizing.requestsPerSecond" in ready["message"]
    assert "tenant/huge" not in cluster.deployments


def test_a_service_whose_sizing_raises_fails_alone_and_claims_nothing_of_its_namespaces_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever no bound foresaw (here sizing that raises for one service) stops that service only; the other
    service of its namespace still gets the whole cap."""

    def sizing(spec: InferenceServiceSpec) -> int:
        if spec.sizing is not None:
            raise OverflowError("cannot convert float infinity to integer")
        return desired_replicas(spec)

    monkeypatch.setattr(services, "desired_replicas", sizing)
    cluster = cluster_with_neighbours()
    add_service(cluster, "tenant", inference_service("a-huge", 4, gpuType=T4, sizing={"requestsPerSecond": 1,
                "requestsPerSecondPerReplica": 1}))  # fmt: skip
    add_service(cluster, "tenant", inference_service("b-small", 2, gpuType=T4))
    config = OperatorConfig(gang_timeout_s=600, inference_gpu_caps=InferenceGpuCaps((("tenant", 2),)))
    decision = decide(cluster.world(), config)
    cluster.apply(decision)
    assert_neighbours_decided(cluster)
    ready = condition(cluster.services["tenant/a-huge"]["status"], "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert ready["message"] == "sizing the service failed: OverflowError: cannot convert float infinity to integer"
    assert cluster.services["tenant/a-huge"]["status"]["serversNeeded"] == 0
    assert "tenant/a-huge" not in cluster.deployments
    assert cluster.deployments["tenant/b-small"]["spec"]["replicas"] == 2, "the cap is not spent by the failed one"
    assert any(e.reason == "InvalidSpec" and e.ref.name == "a-huge" for e in cluster.events)


def test_a_job_whose_modelling_raises_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    remaining = WorkLedger.remaining_work

    def poisoned(self: WorkLedger, job: Any) -> float:
        if job.key == "tenant/poison":
            raise OverflowError("math range error")
        return remaining(self, job)

    monkeypatch.setattr(WorkLedger, "remaining_work", poisoned)
    cluster = cluster_with_neighbours()
    add_job(cluster, "tenant", training_job("poison", 1, 1, gpuTypes=[A100]))
    cluster.apply(decide(cluster.world(), CONFIG))
    assert_neighbours_decided(cluster)
    status = cluster.jobs["tenant/poison"]["status"]
    assert status["phase"] == "Failed"
    assert condition(status, "Running")["message"] == "modelling the job failed: OverflowError: math range error"
    assert not any(p["metadata"]["namespace"] == "tenant" for p in cluster.pods.values())


def test_an_allocation_that_raises_for_one_job_fails_that_job_and_allocates_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    allocate = job_intent.allocate_workers

    def poisoned(snapshot: Any, **kwargs: Any) -> Any:
        if any(j.name == "tenant/poison" for j in snapshot.jobs):
            raise ZeroDivisionError("float division by zero")
        return allocate(snapshot, **kwargs)

    monkeypatch.setattr(job_intent, "allocate_workers", poisoned)
    cluster = cluster_with_neighbours()
    add_job(cluster, "tenant", training_job("poison", 1, 4, gpuTypes=[A100]))
    add_job(cluster, "tenant", training_job("fine", 1, 1, gpuTypes=[A100]))
    cluster.apply(decide(cluster.world(), CONFIG))
    assert_neighbours_decided(cluster)
    assert cluster.jobs["tenant/fine"]["status"]["phase"] == "Running"
    status = cluster.jobs["tenant/poison"]["status"]
    assert status["phase"] == "Failed"
    assert "allocating GPUs failed: ZeroDivisionError" in condition(status, "Running")["message"]


def test_a_job_whose_life_raises_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from lyra.operator.job_life import JobLives

    life = JobLives.life

    def poisoned(self: JobLives, job: Any) -> None:
        if job.key == "tenant/poison":
            raise KeyError("node")
        life(self, job)

    monkeypatch.setattr(JobLives, "life", poisoned)
    cluster = cluster_with_neighbours()
    add_job(cluster, "tenant", training_job("poison", 1, 1, gpuTypes=[A100]))
    cluster.apply(decide(cluster.world(), CONFIG))
    assert_neighbours_decided(cluster)
    status = cluster.jobs["tenant/poison"]["status"]
    assert condition(status, "Running")["message"] == "deciding the job's life failed: KeyError: 'node'"


# -- names Lyra cannot label pods with ---------------------------------------------------------------------------


def test_both_crds_refuse_a_name_longer_than_a_label_value_at_their_root() -> None:
    for crd in all_crds().values():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        [rule] = schema["x-kubernetes-validations"]
        assert rule["rule"] == f"oldSelf.hasValue() || self.metadata.name.size() <= {MAX_OBJECT_NAME}"
        assert rule["optionalOldSelf"] is True  # on create only: a stored object still takes status writes
    assert MAX_OBJECT_NAME == 63
    assert name_problem("j" * 63) is None
    assert name_problem("j" * 64) == f"metadata.name: {all_crds_message()} (64 characters)"


def all_crds_message() -> str:
    crd = next(iter(all_crds().values()))
    message: str = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0]["message"]
    return message


def test_a_job_with_a_64_character_name_stored_before_the_rule_gets_no_pod_and_no_gpu() -> None:
    cluster = FakeCluster([node("a0", "training", A100)])
    long_name = "j" * 64
    add_job(cluster, "tenant", training_job(long_name, 1, 8, gpuTypes=[A100], priority=1_000_000))
    add_job(cluster, "other", training_job("neighbour", 1, 8, gpuTypes=[A100]))
    add_job(cluster, "other", training_job("n" * 63, 1, 1, gpuTypes=[A100]))  # the longest name that runs
    decision = decide(cluster.world(), CONFIG)
    cluster.apply(decision)
    status = cluster.jobs[f"tenant/{long_name}"]["status"]
    assert status["phase"] == "Failed"
    running = condition(status, "Running")
    assert running["reason"] == "InvalidSpec"
    assert running["message"].startswith("the worker pods cannot be made: metadata.name: the name may have at most 63")
    assert not any(p["metadata"]["namespace"] == "tenant" for p in cluster.pods.values())
    assert cluster.jobs["other/neighbour"]["status"]["workers"]["target"] == 7, "every GPU but the other job's"
    assert cluster.jobs[f"other/{'n' * 63}"]["status"]["phase"] == "Running"
    again = decide(cluster.world(), CONFIG)
    assert not [a for a in again.of(CreatePod) if a.ref.namespace == "tenant"], "never re-admitted"


def test_a_service_with_a_64_character_name_stored_before_the_rule_reclaims_nothing() -> None:
    """Servers lent to training stay lent: a Deployment that can never exist claims no server."""
    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(4)])
    add_job(cluster, "other", training_job("borrower", 1, 32, gpuTypes=[T4]))
    add_service(cluster, "other", inference_service("chat", 1, gpuType=T4))
    for _ in range(2):
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.tick(31)
    lent = {n for n in cluster.nodes if cluster.state(n) == "loaned"}
    assert len(lent) == 3, {n: cluster.state(n) for n in cluster.nodes}
    long_name = "s" * 64
    add_service(cluster, "tenant", inference_service(long_name, 3, gpus=8, gpuType=T4))
    decision = decide(cluster.world(), CONFIG)
    cluster.apply(decision)
    assert {n for n in cluster.nodes if cluster.state(n) == "loaned"} == lent, "nothing reclaimed"
    assert decision.report.inference_servers_needed == {T4: 1}
    ready = condition(cluster.services[f"tenant/{long_name}"]["status"], "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "metadata.name: the name may have at most 63 characters" in ready["message"]
    assert not [a for a in decision.of(ApplyDeployment) if a.ref.namespace == "tenant"]


# -- priority bounds --------------------------------------------------------------------------------------------


def test_a_namespaces_priority_bound_orders_its_jobs_and_says_so() -> None:
    """Room for one base: the tenant's long job at priority 1,000,000 would go first; bounded at 0 (the default), the
    neighbour's shorter job does, and the tenant's job carries ``PriorityBounded``."""
    cluster = FakeCluster([node("a0", "training", A100)])
    add_job(cluster, "tenant", training_job("first", 8, 8, duration=36_000, gpuTypes=[A100], priority=1_000_000))
    add_job(cluster, "other", training_job("short", 8, 8, duration=60, gpuTypes=[A100]))
    unbounded = copy.deepcopy(cluster)
    unbounded.apply(decide(unbounded.world(), CONFIG))
    assert unbounded.jobs["tenant/first"]["status"]["phase"] == "Running", "unbounded, the priority wins"
    bounds = PriorityBounds.parse([], default=DEFAULT_MAX_PRIORITY)
    config = OperatorConfig(gang_timeout_s=600, priority_bounds=bounds)
    cluster.apply(decide(cluster.world(), config))
    assert cluster.jobs["other/short"]["status"]["phase"] == "Running"
    status = cluster.jobs["tenant/first"]["status"]
    assert status["phase"] == "Queued"
    bounded = condition(status, "PriorityBounded")
    assert (bounded["status"], bounded["reason"]) == ("True", "NamespaceBound")
    assert bounded["message"] == (
        "spec.priority 1000000 is above 0, the highest namespace tenant may use (--max-priority): the queue orders "
        "the job at 0"
    )
    trusted = OperatorConfig(gang_timeout_s=600, priority_bounds=PriorityBounds.parse(["tenant=1000000"], default=0))
    cluster.apply(decide(cluster.world(), trusted))
    assert not any(c["type"] == "PriorityBounded" for c in cluster.jobs["tenant/first"]["status"]["conditions"])


# -- every number of both specs, at its extremes -----------------------------------------------------------------

ITEM, ENTRY = "[]", "{}"


def _spec_schema(kind: str) -> dict[str, Any]:
    crd = next(c for c in all_crds().values() if c["spec"]["names"]["kind"] == kind)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def numeric_fields(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every integer and number of a schema: its path (``[]`` an array's item, ``{}`` a map's value) and schema."""
    if schema.get("type") in ("integer", "number"):
        return [(path, schema)]
    found = []
    for key, child in schema.get("properties", {}).items():
        found += numeric_fields(child, (*path, key))
    if isinstance(schema.get("items"), dict):
        found += numeric_fields(schema["items"], (*path, ITEM))
    if isinstance(schema.get("additionalProperties"), dict):
        found += numeric_fields(schema["additionalProperties"], (*path, ENTRY))
    return found


def minimal(schema: dict[str, Any]) -> Any:
    """The smallest value a schema accepts: required fields only."""
    kind = schema.get("type")
    if kind == "object":
        return {k: minimal(schema["properties"][k]) for k in schema.get("required", [])}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    return "x"


def with_value(body: dict[str, Any], schema: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set ``path`` of ``body`` (an object of ``schema``) to ``value``, making the arrays and maps on the way."""
    here: Any = body
    for position, step in enumerate(path):
        last = position == len(path) - 1
        if step == ITEM:
            schema = schema["items"]
            if not here:
                here.append(minimal(schema))
            key: Any = 0
        elif step == ENTRY:
            schema = schema["additionalProperties"]
            key = A100 if path[position - 1] == "speeds" else "k"
        else:
            schema = schema["properties"][step]
            key = step
        if last:
            here[key] = value
        else:
            if isinstance(here, dict) and key not in here:
                here[key] = minimal(schema)
            here = here[key]


def extremes(schema: dict[str, Any]) -> list[Any]:
    low, high = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63 - 1)
    values: list[Any] = [0, 1, -1, low, high, high + 1, low - 1, 2**63, 5e-324, 1e-300, 1e300, -1e300]
    values += [math.nan, math.inf, -math.inf]
    if schema["type"] == "number":
        values += [float(low), float(high), high * (1 + 1e-9)]
    return values


TJ_SCHEMA, IS_SCHEMA = _spec_schema(names.TRAINING_JOB_KIND), _spec_schema(names.INFERENCE_SERVICE_KIND)
TJ_FIELDS, IS_FIELDS = numeric_fields(TJ_SCHEMA), numeric_fields(IS_SCHEMA)


def test_the_property_test_covers_every_numeric_field_of_both_specs() -> None:
    tj = {".".join(p) for p, _ in TJ_FIELDS}
    assert {"minWorkers", "maxWorkers", "gpusPerWorker", "expectedDuration", "priority", "gpuMemoryGiB",
            "speeds.{}", "scalingOverhead", "preemption.gracePeriodSeconds",
            "template.spec.containers.[].ports.[].containerPort", "template.spec.tolerations.[].tolerationSeconds",
            "template.spec.priority"} <= tj  # fmt: skip
    services_fields = {".".join(p) for p, _ in IS_FIELDS}
    assert {"replicas", "gpusPerReplica", "minReplicas", "maxReplicas", "sizing.requestsPerSecond",
            "sizing.requestsPerSecondPerReplica"} <= services_fields  # fmt: skip
    for _, schema in TJ_FIELDS + IS_FIELDS:
        assert "minimum" in schema, schema  # every number is bounded in the CRD
        assert "maximum" in schema, schema


def _hostile(fields: list[tuple[tuple[str, ...], dict[str, Any]]]) -> st.SearchStrategy[list[tuple[Any, Any]]]:
    one = st.sampled_from(fields).flatmap(lambda f: st.tuples(st.just(f), st.sampled_from(extremes(f[1]))))
    return st.lists(one, min_size=1, max_size=4)


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(job_fields=_hostile(TJ_FIELDS), service_fields=_hostile(IS_FIELDS))
def test_no_extreme_number_fails_a_pass_and_the_neighbours_are_decided(
    job_fields: list[tuple[Any, Any]], service_fields: list[tuple[Any, Any]]
) -> None:
    cluster = cluster_with_neighbours()
    job = training_job("hostile", 1, 2, gpuTypes=[A100])
    service = inference_service("hostile", 1, gpuType=T4)
    for (path, _), value in job_fields:
        with_value(job["spec"], TJ_SCHEMA, path, value)
    for (path, _), value in service_fields:
        with_value(service["spec"], IS_SCHEMA, path, value)
    add_job(cluster, "tenant", job)
    add_service(cluster, "tenant", service)
    for _ in range(2):  # the pass that decides, and the one after it: neither fails
        cluster.apply(decide(cluster.world(), CONFIG))
    assert_neighbours_decided(cluster, started=False)
    for store, key in ((cluster.jobs, "tenant/hostile"), (cluster.services, "tenant/hostile")):
        assert store[key].get("status", {}).get("conditions"), "the hostile object is decided or refused, and says so"


def test_a_job_whose_scale_in_for_a_reclaim_raises_fails_alone_and_the_reclaim_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lyra.operator.job_life import JobLives

    def poisoned(self: JobLives, job_key: str, pods: list[Any], why: str) -> None:
        raise ArithmeticError("no work left to fold")

    cluster = FakeCluster([node(f"t{i}", "inference", T4) for i in range(4)])
    add_job(cluster, "other", training_job("borrower", 1, 32, gpuTypes=[T4]))
    add_service(cluster, "serve", inference_service("chat", 1, gpus=8, gpuType=T4))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), CONFIG))
        cluster.tick(31)
    assert sum(cluster.state(n) == "loaned" for n in cluster.nodes) == 3
    monkeypatch.setattr(JobLives, "scale_in", poisoned)
    cluster.services["serve/chat"]["spec"]["replicas"] = 2  # one more server: a reclaim scales the borrower in
    cluster.apply(decide(cluster.world(), CONFIG))
    status = cluster.jobs["other/borrower"]["status"]
    assert condition(status, "Running")["message"] == "scaling the job in failed: ArithmeticError: no work left to fold"
    assert status["phase"] == "Failed"
    assert sum(cluster.state(n) == "reclaiming" for n in cluster.nodes) == 1, "the reclaim is under way"
    cluster.finish_terminations()
    cluster.apply(decide(cluster.world(), CONFIG))
    assert cluster.deployments["serve/chat"]["spec"]["replicas"] == 2
    assert sum(cluster.state(n) in ("serving", "idle") for n in cluster.nodes) >= 2, "the server came back"
