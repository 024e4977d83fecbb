"""Inference sizing: replicas from load within bounds, servers from packing replicas whole onto servers."""

from __future__ import annotations

import pytest

from lyra.api.resources import InferenceServiceSpec
from lyra.operator.sizing import desired_replicas, servers_for

# (requests per second, per replica, min, max, expected replicas)
LOAD_TABLE = [
    (0.0, 10.0, 1, 8, 1),
    (95.0, 10.0, 0, 8, 8),
    (40.0, 10.0, 0, 8, 4),
    (41.0, 10.0, 0, 8, 5),
    (0.0, 10.0, 0, 8, 0),
]


@pytest.mark.parametrize(("load", "per", "low", "high", "expected"), LOAD_TABLE)
def test_replicas_follow_the_load_within_bounds(load: float, per: float, low: int, high: int, expected: int) -> None:
    spec = InferenceServiceSpec.model_validate(
        {
            "replicas": low,
            "gpusPerReplica": 1,
            "minReplicas": low,
            "maxReplicas": high,
            "template": {"spec": {"containers": [{"name": "server", "image": "server:1"}]}},
            "sizing": {"requestsPerSecond": load, "requestsPerSecondPerReplica": per},
        }
    )
    assert desired_replicas(spec) == expected


def test_without_sizing_the_spec_says_how_many() -> None:
    spec = InferenceServiceSpec.model_validate(
        {
            "replicas": 3,
            "gpusPerReplica": 2,
            "maxReplicas": 5,
            "template": {"spec": {"containers": [{"name": "server", "image": "server:1"}]}},
        }
    )
    assert desired_replicas(spec) == 3


@pytest.mark.parametrize(
    ("sizes", "server", "expected"),
    [
        ([], 8, 0),
        ([1] * 8, 8, 1),
        ([1] * 9, 8, 2),
        ([3, 3, 3], 8, 2),  # two threes per server: a replica's GPUs sit on one server
        ([5, 4, 4, 3], 8, 2),  # first-fit decreasing: 5+3, 4+4
        ([8, 1], 8, 2),
    ],
)
def test_servers_hold_whole_replicas(sizes: list[int], server: int, expected: int) -> None:
    assert servers_for(sizes, server) == expected


def test_a_replica_larger_than_a_server_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        servers_for([9], 8)
