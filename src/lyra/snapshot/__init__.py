"""The snapshot and plan documents: Lyra's JSON wire format between a live cluster, the planner and the core."""

from lyra.snapshot.document import (
    MAX_GPU_CATALOG_BYTES,
    MAX_GPU_TYPES,
    MAX_JOBS,
    MAX_NAME_LENGTH,
    MAX_SECONDS,
    MAX_SERVERS,
    MAX_SNAPSHOT_BYTES,
    SNAPSHOT_API_VERSION,
    GpuCatalogDocument,
    PlannerInput,
    SnapshotDocument,
    SnapshotError,
    parse_gpu_catalog,
    parse_planner_input,
    parse_snapshot,
    snapshot_json_schema,
)
from lyra.snapshot.plans import (
    allocation_plan_document,
    loan_plan_document,
    migration_plan_document,
    reclaim_plan_document,
)

__all__ = [
    "MAX_GPU_CATALOG_BYTES",
    "MAX_GPU_TYPES",
    "MAX_JOBS",
    "MAX_NAME_LENGTH",
    "MAX_SECONDS",
    "MAX_SERVERS",
    "MAX_SNAPSHOT_BYTES",
    "SNAPSHOT_API_VERSION",
    "GpuCatalogDocument",
    "PlannerInput",
    "SnapshotDocument",
    "SnapshotError",
    "allocation_plan_document",
    "loan_plan_document",
    "migration_plan_document",
    "parse_gpu_catalog",
    "parse_planner_input",
    "parse_snapshot",
    "reclaim_plan_document",
    "snapshot_json_schema",
]
