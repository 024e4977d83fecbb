"""The golden decisions of ``allocate_workers``: a fixed set of inputs and a digest of the plan each gets, recorded
from the code as it was before the allocation search was rebuilt, so that a rebuild can show its decisions are
byte-identical (``test_allocation_golden``).

The inputs are stored, not regenerated, so that the record does not depend on hypothesis' generation or on the
operator's reading of a cluster: 300 ``allocation_cases`` of the property tests (each also with a restart cost of 0,
60 or 600 s), 120 instances of the optimality families (queued only, running, migration), the poster's examples,
the core benchmark's 2,000 jobs on 4,096 GPUs, and the snapshots the scale benchmark's decide pass hands
``allocate_workers`` at 500, 1,000 and 5,000 nodes.

Record again (only when a decision is meant to change): ``uv run --locked python -m tests.unit.core.allocation_golden``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lyra.core import AllocationPlan, ClusterSnapshot, GpuCatalog, GpuType, Server, TrainingJob, allocate_workers
from lyra.core.model import LoanState, Pool

GOLDEN_DIR = Path(__file__).parent / "golden"
INPUTS = GOLDEN_DIR / "allocation_inputs.json.gz"
DIGESTS = GOLDEN_DIR / "allocation_plans.json"

#: Hypothesis examples of ``allocation_cases`` in the record, and the restart costs they are also decided with.
PROPERTY_CASES = 300
RESTART_COSTS = (0.0, 60.0, 600.0)
#: Instances per optimality family, each from its seeded generator.
FAMILY_CASES = 30
#: Scale benchmark sizes whose decide pass's snapshot is recorded.
SCALE_NODES = (500, 1_000, 5_000)


# ------------------------------------------------------------------------------------------- serialisation


def snapshot_to_json(snapshot: ClusterSnapshot) -> dict[str, Any]:
    return {
        "gpus": [[g.name, g.speed, g.memory_gib] for g in snapshot.gpus.types.values()],
        "servers": [[s.name, s.pool.value, s.gpu_type, s.gpus, s.state and s.state.value] for s in snapshot.servers],
        "jobs": [
            {
                "name": j.name,
                "gpus_per_worker": j.gpus_per_worker,
                "min_workers": j.min_workers,
                "max_workers": j.max_workers,
                "remaining_work": j.remaining_work,
                "submit_time": j.submit_time,
                "priority": j.priority,
                "placement": dict(j.placement),
                "seconds_since_checkpoint": j.seconds_since_checkpoint,
                "gpu_types": sorted(j.gpu_types) if j.gpu_types is not None else None,
                "gpu_memory_gib": j.gpu_memory_gib,
                "speeds": dict(j.speeds),
                "mix_gpu_types": j.mix_gpu_types,
                "scaling_overhead": j.scaling_overhead,
            }
            for j in snapshot.jobs
        ],
    }


def snapshot_from_json(raw: Mapping[str, Any]) -> ClusterSnapshot:
    catalog = GpuCatalog.of(*(GpuType(name, speed, memory) for name, speed, memory in raw["gpus"]))
    servers = tuple(
        Server(name, Pool(pool), gpu_type, gpus, LoanState(state) if state else None)
        for name, pool, gpu_type, gpus, state in raw["servers"]
    )
    jobs = tuple(
        TrainingJob(**{**j, "gpu_types": frozenset(j["gpu_types"]) if j["gpu_types"] is not None else None})
        for j in raw["jobs"]
    )
    return ClusterSnapshot(servers, jobs, catalog)


def canonical_plan(plan: AllocationPlan) -> str:
    """Every field of the plan, floats by their exact hexadecimal form, keys sorted: equal strings, equal plans."""

    def exact(value: float) -> str:
        return value.hex() if math.isfinite(value) else repr(value)

    return json.dumps(
        {
            "workers": dict(plan.workers),
            "gpu_types": {name: list(types) for name, types in plan.gpu_types.items()},
            "placement": {name: dict(hosts) for name, hosts in plan.placement.items()},
            "started": list(plan.started),
            "preempted": list(plan.preempted),
            "resized": list(plan.resized),
            "migrated": list(plan.migrated),
            "queued": dict(plan.queued),
            "gpus_used": plan.gpus_used,
            "capacity_gpus": plan.capacity_gpus,
            "fluid_average_jct": exact(plan.fluid_average_jct),
            "evaluations": plan.evaluations,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def digest(plan: AllocationPlan) -> str:
    return hashlib.sha256(canonical_plan(plan).encode()).hexdigest()


def decide(case: Mapping[str, Any]) -> AllocationPlan:
    """The plan of one recorded case."""
    return allocate_workers(
        snapshot_from_json(case["snapshot"]),
        held=dict(case["held"]),
        search_budget=case["search_budget"],
        restart_cost_s=case["restart_cost_s"],
    )


def load_cases() -> list[dict[str, Any]]:
    with gzip.open(INPUTS, "rt", encoding="utf-8") as stream:
        cases: list[dict[str, Any]] = json.load(stream)
    return cases


def load_digests() -> dict[str, str]:
    digests: dict[str, str] = json.loads(DIGESTS.read_text(encoding="utf-8"))
    return digests


# ------------------------------------------------------------------------------------------------ recording


def _case(
    name: str,
    snapshot: ClusterSnapshot,
    held: Mapping[str, int] | None = None,
    restart_cost_s: float | None = None,
    search_budget: int | None = None,
) -> dict[str, Any]:
    from lyra.core.allocation import DEFAULT_SEARCH_BUDGET

    return {
        "name": name,
        "snapshot": snapshot_to_json(snapshot),
        "held": dict(held or {}),
        "restart_cost_s": restart_cost_s,
        "search_budget": DEFAULT_SEARCH_BUDGET if search_budget is None else search_budget,
    }


def _property_cases() -> Iterator[dict[str, Any]]:
    from hypothesis import HealthCheck, Phase, given, settings

    from .strategies import allocation_cases

    drawn: list[tuple[ClusterSnapshot, dict[str, int]]] = []

    @settings(
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=PROPERTY_CASES,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=allocation_cases())
    def collect(case: tuple[ClusterSnapshot, dict[str, int]]) -> None:
        drawn.append(case)

    collect()
    for n, (snapshot, held) in enumerate(drawn[:PROPERTY_CASES]):
        yield _case(f"property-{n:03d}", snapshot, held)
        yield _case(f"property-{n:03d}-restart", snapshot, held, RESTART_COSTS[n % len(RESTART_COSTS)])


def _family_cases() -> Iterator[dict[str, Any]]:
    from .test_allocation_optimality import SEEDS, random_instance, running_instance

    for family in ("under-subscribed", "running", "migration"):
        rng = random.Random(SEEDS[family])
        for n in range(FAMILY_CASES):
            if family == "under-subscribed":
                instance = random_instance(rng)
            else:
                instance = running_instance(rng, migration=family == "migration")
            yield _case(f"{family}-{n:03d}", instance.snapshot, instance.held, instance.restart_cost_s)


def _poster_cases() -> Iterator[dict[str, Any]]:
    from .builders import snapshot, training
    from .test_allocation import ex1, ex2

    for name, jobs in (("ex1", ex1()), ("ex2", ex2())):
        yield _case(f"poster-{name}", snapshot([training("v0")], jobs))
        yield _case(f"poster-{name}-budget-0", snapshot([training("v0")], jobs), search_budget=0)
    for current in ({"A": 6, "B": 2}, {"A": 4, "B": 4}, {"A": 2, "B": 6}):
        jobs = [job.on({"v0": current[job.build().name]}) for job in ex1()]
        yield _case(f"poster-ex1-from-A{current['A']}-B{current['B']}", snapshot([training("v0")], jobs))


def _scale_cases() -> Iterator[dict[str, Any]]:
    from bench import core_bench, operator_scale_bench

    from lyra.operator import job_intent

    yield _case("core-bench-2000-jobs", core_bench.allocation_cluster())
    yield _case("core-bench-2000-jobs-restart", core_bench.allocation_cluster(), restart_cost_s=60.0)
    real = job_intent.allocate_workers
    for nodes in SCALE_NODES:
        seen: list[dict[str, Any]] = []

        def recording(snapshot: ClusterSnapshot, **kwargs: Any) -> AllocationPlan:
            seen.append(_case(f"scale-{nodes}-nodes", snapshot, kwargs.get("held"), None, kwargs["search_budget"]))  # noqa: B023
            return real(snapshot, **kwargs)

        job_intent.allocate_workers = recording  # type: ignore[assignment]
        try:
            world = operator_scale_bench.world_of(operator_scale_bench.filled_caches(nodes))
            operator_scale_bench.decide(world)
        finally:
            job_intent.allocate_workers = real
        if len(seen) != 1:
            raise SystemExit(f"the decide pass at {nodes} nodes allocated {len(seen)} times, expected once")
        yield seen[0]


def record() -> None:
    cases = [*_poster_cases(), *_property_cases(), *_family_cases(), *_scale_cases()]
    names = [case["name"] for case in cases]
    if len(set(names)) != len(names):
        raise SystemExit("golden case names repeat")
    GOLDEN_DIR.mkdir(exist_ok=True)
    with gzip.GzipFile(INPUTS, "wb", mtime=0) as stream:
        stream.write(json.dumps(cases, sort_keys=True, separators=(",", ":")).encode())
    digests = {case["name"]: digest(decide(case)) for case in cases}
    DIGESTS.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded {len(cases)} cases in {INPUTS} and {DIGESTS}")


if __name__ == "__main__":
    if sys.argv[1:]:
        raise SystemExit("usage: python -m tests.unit.core.allocation_golden (records the golden decisions)")
    record()
