"""The operator's collector settings: its thresholds, and what survived the first pass frozen, once."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest

from lyra.operator import heap
from lyra.operator.decide import OperatorConfig
from lyra.operator.runner import Cluster, Reconciler, RunOptions


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


@pytest.mark.usefixtures("collector")
def test_the_operator_collects_young_objects_less_often_and_says_what_it_replaced() -> None:
    gc.set_threshold(700, 10, 10)
    assert heap.tune_collector() == (700, 10, 10)
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, heap.MIDDLE_THRESHOLD, 10)


@pytest.mark.usefixtures("collector")
def test_what_survived_is_frozen_and_collections_no_longer_visit_it() -> None:
    survivor = [{"kept": i} for i in range(1_000)]
    heap.freeze_survivors()
    assert gc.get_freeze_count() >= len(survivor)
    assert not any(o is survivor for o in gc.get_objects())


class Passes(Reconciler):
    """A loop whose passes only count (the first one fails, as a pass may); it stops after the fourth."""

    def __init__(self, stop: asyncio.Event) -> None:
        super().__init__(cast(Cluster, SimpleNamespace(caches=None, server=None)), RunOptions(config=OperatorConfig()))
        self.stop = stop
        self.count = 0
        self.frozen_after: list[int] = []
        self.after_first_pass = lambda: self.frozen_after.append(self.count)

    def pass_once(self) -> object:  # type: ignore[override]
        self.count += 1
        self.wake.set()
        if self.count == 1:
            raise RuntimeError("the API server is unreachable")
        if self.count >= 4:
            self.stop.set()
        return None


def test_the_loop_freezes_once_after_its_first_completed_pass() -> None:
    async def scenario() -> list[int]:
        stop = asyncio.Event()
        reconciler = Passes(stop)
        await asyncio.wait_for(reconciler.run(stop), timeout=30)
        return reconciler.frozen_after

    assert asyncio.run(scenario()) == [2]
