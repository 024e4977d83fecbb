"""Properties of ``filter_nodes`` and ``score_nodes`` on random node sets (hypothesis, derandomised)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from lyra.core import LoanState, NodeView, PodRequest, PodRole, filter_nodes, score_nodes

from .builders import T4, V100
from .strategies import PROPERTY, node_views

ALLOCATED = st.sampled_from([None, frozenset({V100}), frozenset({T4}), frozenset({V100, T4})])


@PROPERTY
@given(
    views=node_views(),
    role=st.sampled_from(list(PodRole)),
    gpus=st.integers(0, 16),
    types=ALLOCATED,
    data=st.data(),
)
def test_scores_agree_with_the_filter_and_stay_in_range(
    views: list[NodeView], role: PodRole, gpus: int, types: frozenset[str] | None, data: st.DataObject
) -> None:
    job_nodes = {v.name: 1 for v in views if data.draw(st.booleans(), label=f"hosts {v.name}")}
    pod = PodRequest(role, gpus, "j", job_nodes, types)
    scores = score_nodes(pod, views)
    result = filter_nodes(pod, views)
    assert [n for n, _ in scores] == [v.name for v in views]
    assert set(result.passed) | set(result.failed) == {v.name for v in views}
    assert not set(result.passed) & set(result.failed)
    for name, score in scores:
        assert 0 <= score <= 10
        if name in result.failed:
            assert score == 0, (name, result.failed[name])
        elif role is not PodRole.UNMANAGED:
            assert score >= 1, name


@PROPERTY
@given(
    views=node_views(),
    role=st.sampled_from([PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE]),
    gpus=st.integers(0, 4),
    types=ALLOCATED,
)
def test_training_pods_never_land_on_a_type_their_job_was_not_allocated(
    views: list[NodeView], role: PodRole, gpus: int, types: frozenset[str] | None
) -> None:
    pod = PodRequest(role, gpus, "j", {v.name: 1 for v in views}, types)
    passed = set(filter_nodes(pod, views).passed)
    scores = dict(score_nodes(pod, views))
    for view in views:
        if types is not None and view.gpu_type not in types:
            assert view.name not in passed
            assert scores[view.name] == 0
    # Allocating every type is the same as allocating none.
    unrestricted = PodRequest(role, gpus, "j", pod.job_nodes, None)
    if types == frozenset({V100, T4}):
        assert passed == set(filter_nodes(unrestricted, views).passed)
        assert scores == dict(score_nodes(unrestricted, views))


@PROPERTY
@given(views=node_views(), gpus=st.integers(1, 4), data=st.data())
def test_training_scores_are_monotone_in_locality_packing_and_safety(
    views: list[NodeView], gpus: int, data: st.DataObject
) -> None:
    """Hosting the job, being fuller, or coming later in the reclaim order never lowers a node's score."""
    target = data.draw(st.sampled_from(views), label="target")
    assume_fits = target.free_gpus >= gpus
    for role in (PodRole.TRAINING_BASE, PodRole.TRAINING_FLEXIBLE):
        alone = dict(score_nodes(PodRequest(role, gpus, "j", {}), views))[target.name]
        hosted = dict(score_nodes(PodRequest(role, gpus, "j", {target.name: 1}), views))[target.name]
        assert hosted >= alone
        if assume_fits and target.free_gpus > gpus:
            fuller = dataclasses.replace(target, free_gpus=target.free_gpus - 1)
            swapped = [fuller if v is target else v for v in views]
            assert dict(score_nodes(PodRequest(role, gpus, "j", {}), swapped))[target.name] >= alone
        if target.state is LoanState.LOANED and target.reclaim_rank > 0:
            earlier = dataclasses.replace(target, reclaim_rank=target.reclaim_rank - 1)
            swapped = [earlier if v is target else v for v in views]
            assert dict(score_nodes(PodRequest(role, gpus, "j", {}), swapped))[target.name] <= alone
