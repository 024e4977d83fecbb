"""The GPU catalogue a pass decides with: ``--gpu-catalog`` first, then the memory nodes report
(``nvidia.com/gpu.memory``, MiB), then the family defaults; a disagreement is logged once."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, cast

import pytest

from lyra.api import names
from lyra.core.gpus import GpuCatalog, GpuType, MemoryDisagreement
from lyra.operator.commit import Cluster
from lyra.operator.decide import OperatorConfig, observed_gpus
from lyra.operator.runner import Reconciler, RunOptions

from .fake_cluster import A100, FakeCluster, node, training_job
from .test_decide import CONFIG, settle


def reporting(name: str, pool: str, product: str, memory: str) -> dict[str, Any]:
    labelled = node(name, pool, product)
    labelled["metadata"]["labels"][names.GPU_MEMORY_LABEL] = memory
    return labelled


@pytest.mark.parametrize(
    ("label", "mib"), [("15360", 15360), ("0", None), ("16GB", None), ("", None), ("-1", None), ("9" * 11, None)]
)
def test_the_label_is_read_as_whole_mib_or_not_at_all(label: str, mib: int | None) -> None:
    [record] = FakeCluster([reporting("t0", "inference", "Tesla-T4", label)]).world().nodes
    assert record.gpu_memory_mib == mib


def test_the_smallest_report_of_a_type_counts_and_the_catalogue_wins_over_it() -> None:
    world = FakeCluster(
        [reporting("a0", "training", A100, "40960"), reporting("a1", "training", A100, "81920")]
    ).world()
    gpus, disagreements = observed_gpus(world, GpuCatalog())
    assert gpus[A100] == GpuType(A100, 1.0, 40.0)
    described = GpuCatalog.of(GpuType(A100, 0.8, 80.0))
    gpus, disagreements = observed_gpus(world, described)
    assert gpus[A100] == GpuType(A100, 0.8, 80.0)
    assert disagreements == (MemoryDisagreement(A100, 80.0, 40.0),)


def phase_and_reason(config: OperatorConfig, memory: str | None) -> tuple[str, str]:
    """A job needing 60 GiB per GPU on one A100 node that reports ``memory`` MiB (None: no label)."""
    a100 = node("a0", "training", A100) if memory is None else reporting("a0", "training", A100, memory)
    cluster = FakeCluster([a100])
    cluster.add_job(training_job("big", 2, 2, gpuMemoryGiB=60))
    settle(cluster, config=config)
    status = cluster.job_status("big")
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    return status["phase"], running["reason"]


def test_a_job_is_kept_off_a_type_its_nodes_report_too_small_unless_the_catalogue_says_otherwise() -> None:
    assert phase_and_reason(CONFIG, None) == ("Running", "Started")  # the family default: an 80GB A100
    assert phase_and_reason(CONFIG, "40960") == ("Queued", "TooLarge")  # the node says 40 GiB
    speed_only = replace(CONFIG, gpus=GpuCatalog.of(GpuType(A100, 0.9)))
    assert phase_and_reason(speed_only, "40960") == ("Queued", "TooLarge")  # an entry without memory: the label's
    described = replace(CONFIG, gpus=GpuCatalog.of(GpuType(A100, 1.0, 80.0)))
    assert phase_and_reason(described, "40960") == ("Running", "Started")  # the catalogue wins
    too_small = replace(CONFIG, gpus=GpuCatalog.of(GpuType(A100, 1.0, 16.0)))
    assert phase_and_reason(too_small, None) == ("Queued", "TooLarge")


def test_a_disagreement_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    world = FakeCluster([reporting("a0", "training", A100, "40960")]).world()
    config = OperatorConfig(gpus=GpuCatalog.of(GpuType(A100, 1.0, 80.0)))
    reconciler = Reconciler(cast(Cluster, None), RunOptions(config=config))
    with caplog.at_level(logging.WARNING, logger="lyra.operator"):
        for _ in range(3):
            reconciler.report_memory_disagreements(world)
    [line] = [r.getMessage() for r in caplog.records]
    assert (
        f"GPU type {A100}: nodes report 40.0 GiB per GPU ({names.GPU_MEMORY_LABEL}), the GPU catalogue says 80.0"
        in line
    )
