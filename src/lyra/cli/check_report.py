"""The JSON document of ``lyra check --json``: a pydantic model at the edge, with stable camelCase field names."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from lyra.check.invariants import Invariant, Limits, Report


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class ViolationOut(_Out):
    invariant: Invariant = Field(
        description="The broken invariant's identifier (docs/user-guide.md, lyra.check.invariants)."
    )
    kind: str
    namespace: str = Field(description="Empty for nodes.")
    name: str
    message: str


class CheckedCounts(_Out):
    nodes: int
    pods: int
    training_jobs: int
    inference_services: int


class CheckReport(_Out):
    """``lyra check --json``: stable field names, violations in a deterministic order."""

    clean: bool
    checked_at: str = Field(description="RFC 3339 time of the check.")
    gang_timeout_seconds: float
    reclaim_deadline_seconds: float
    checked: CheckedCounts
    violations: list[ViolationOut]


def report_of(report: Report, now: float, limits: Limits) -> CheckReport:
    return CheckReport(
        clean=report.clean,
        checked_at=datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        gang_timeout_seconds=limits.gang_timeout_s,
        reclaim_deadline_seconds=limits.reclaim_deadline_s,
        checked=CheckedCounts(
            nodes=report.nodes, pods=report.pods, training_jobs=report.jobs, inference_services=report.services
        ),
        violations=[
            ViolationOut(invariant=v.invariant, kind=v.kind, namespace=v.namespace, name=v.name, message=v.message)
            for v in report.violations
        ],
    )
