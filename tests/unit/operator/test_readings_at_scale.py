"""A later pass's read, from the last pass's readings after a burst of changes, is the read of a fresh operator:
on the scale benchmark's generated cluster (realistic objects), with the benchmark's own burst of pod, node and job
changes applied to the watch caches."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bench.operator_scale_bench import MIN_NODES, burst_of_changes, filled_caches, main, world_of

from lyra.kubewatch import WatchCache
from lyra.operator.decide import decide
from lyra.operator.readers import Readings

NODES = MIN_NODES  # 2,000 pods, 80 TrainingJobs, 8 InferenceServices


@pytest.fixture
def caches() -> Iterator[dict[str, WatchCache]]:
    made = filled_caches(NODES)
    yield made
    for cache in made.values():
        cache.stop()


def test_a_later_read_after_bursts_of_changes_is_a_fresh_read_and_decides_the_same(
    caches: dict[str, WatchCache],
) -> None:
    readings = Readings()
    world_of(caches, readings)
    burst = burst_of_changes(NODES, caches)
    for _ in range(3):
        burst()
        later = world_of(caches, readings)
        fresh = world_of(caches)
        assert 0 < readings.nodes.hits < NODES, "the changed nodes were read again, the others were not"
        assert 0 < readings.jobs.hits < len(later.jobs)
        assert 0 < readings.pods.hits < len(later.pods)
        assert later == fresh
        assert [n.resource_version for n in later.nodes] == [n.resource_version for n in fresh.nodes]
        assert [j.resource_version for j in later.jobs] == [j.resource_version for j in fresh.jobs]
        assert decide(later) == decide(fresh)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sustained", "5k", "operator"], "--sustained: NODES must be a whole number, got '5k'"),
        (["--sustained", "40", "operator"], "--sustained: NODES must be at least 200"),
        (["--sustained", "500", "fast"], "--sustained: the setting must be one of defaults, frozen"),
        (["--write-pages", "x", "/tmp"], "--write-pages: NODES must be a whole number"),
    ],
)
def test_the_benchmarks_flags_refuse_bad_values_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
