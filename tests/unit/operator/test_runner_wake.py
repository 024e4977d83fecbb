"""The reconcile loop's wake-up: a change that arrives while a pass runs wakes the next pass at once, not at the
resync (the pass that created a gang's pods must see them turn Running without waiting a resync period); an object
whose retry comes due is retried then, not at the resync."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

from lyra.operator.actions import PatchStatus
from lyra.operator.decide import OperatorConfig
from lyra.operator.isolation import Backoff
from lyra.operator.leader import LeaderLease
from lyra.operator.runner import Cluster, Reconciler, RunOptions
from lyra.operator.world import ObjectRef

RESYNC_S = 3600.0  # far longer than the test may take: only a wake-up can start the second pass


class CountedPasses(Reconciler):
    """A loop whose passes do nothing but count and call :meth:`on_pass` with the count; a stub cluster."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        super().__init__(
            cast(Cluster, SimpleNamespace(caches=None, backoff=Backoff())),
            RunOptions(config=OperatorConfig(), resync_s=RESYNC_S),
        )
        self.loop = loop
        self.stop = stop
        self.count = 0

    def pass_once(self) -> object:  # type: ignore[override]
        self.count += 1
        self.on_pass(self.count)
        return None

    def on_pass(self, count: int) -> None:
        raise NotImplementedError


class EventDuringPass(CountedPasses):
    """During the first pass a cache reports a change, as the watch thread does (``call_soon_threadsafe``)."""

    def on_pass(self, count: int) -> None:
        if count == 1:
            self.loop.call_soon_threadsafe(self.wake.set)  # a pod turned Running while this pass ran
        else:
            self.loop.call_soon_threadsafe(self.stop.set)


def passes_until_stopped(kind: type[CountedPasses]) -> int:
    """Run a loop of ``kind`` until it stops itself (at most 30 s); the passes it made."""

    async def scenario() -> int:
        stop = asyncio.Event()
        reconciler = kind(asyncio.get_running_loop(), stop)
        await asyncio.wait_for(reconciler.run(stop), timeout=30)
        return reconciler.count

    return asyncio.run(scenario())


def test_a_change_during_a_pass_wakes_the_next_pass_without_waiting_for_the_resync() -> None:
    assert passes_until_stopped(EventDuringPass) == 2


class RetryDue(CountedPasses):
    """The first pass has a status write fail with a server error (retried 1 s later, by the backoff); the second
    stops the loop; no event comes."""

    def on_pass(self, count: int) -> None:
        if count == 1:
            action = PatchStatus(ObjectRef("TrainingJob", "ml", "j"), {}, ("conditions",))
            self.cluster.backoff.record(action, "InternalError", "500", self.clock(), transient=True)
            self.retry_due = self.cluster.backoff.next_retry()  # as a leading pass that committed leaves it
        else:
            self.loop.call_soon_threadsafe(self.stop.set)


def test_a_retry_that_comes_due_starts_a_pass_without_waiting_for_the_resync() -> None:
    assert passes_until_stopped(RetryDue) == 2


class StandingBy:
    """A Lease another operator holds."""

    def may_write(self) -> bool:
        return False

    def try_lead(self) -> bool:
        return False


def test_an_operator_standing_by_waits_for_the_resync_whatever_its_backoff_holds() -> None:
    """Failures it kept from when it led are past due: an operator standing by retries nothing, so it must not make
    a pass (and a Lease request) at once, again and again."""
    backoff = Backoff()
    action = PatchStatus(ObjectRef("TrainingJob", "ml", "j"), {}, ("conditions",))
    backoff.record(action, "InternalError", "500", 0.0, transient=True)
    reconciler = Reconciler(
        cast(Cluster, SimpleNamespace(caches=None, backoff=backoff)),
        RunOptions(config=OperatorConfig(), resync_s=RESYNC_S),
        clock=lambda: 100.0,
        lease=cast(LeaderLease, StandingBy()),
    )
    reconciler.pass_once()
    assert reconciler.next_pass_in() == RESYNC_S
