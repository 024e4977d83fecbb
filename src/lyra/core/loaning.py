"""How many inference servers to lend to training, and how many loaned ones must come back.

Inference owns its servers. Those it needs now (its demand plus a headroom of spare servers that absorbs load
spikes while a reclaim is in flight) stay with it; the rest of its idle servers are lent. When demand rises above
what inference holds, loaned servers are called back: :func:`lyra.core.reclaim.plan_reclaim` picks which.

Servers already ``reclaiming`` count as inference's: they are on their way back. Idle servers are lent in a
deterministic order: most GPUs first, then by name (:func:`lyra.core.ordering.lend_order`).

Hysteresis is the loan cycle's (:mod:`lyra.core.loan_cycle`): it shows an idle server that has not been idle for the
lend delay as ``serving``, so it is held, never lent.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from lyra.core.errors import InvalidClusterError
from lyra.core.model import ClusterSnapshot, InferenceDemand, LoanState, Server
from lyra.core.ordering import ServerLike, lend_order, serve_order


@dataclass(frozen=True, slots=True)
class LoanPlan:
    """``lend`` idle servers to training; call ``reclaim`` loaned servers back; ``shortfall`` servers are missing
    even after every loaned server is back (inference is under-provisioned: scale the pool or shed load)."""

    lend: tuple[str, ...]
    reclaim: int
    shortfall: int
    needed: int
    held: int

    @property
    def is_noop(self) -> bool:
        return not self.lend and self.reclaim == 0


def plan_loans(
    snapshot: ClusterSnapshot,
    demand: InferenceDemand,
    *,
    headroom: int = 0,
    gpu_type: str | None = None,
    among: Collection[str] | None = None,
    unlendable: Collection[str] = (),
) -> LoanPlan:
    """Balance the inference pool against ``demand`` (in servers) with ``headroom`` spare servers kept back, as one
    turn of the operator's loan cycle does (:mod:`lyra.core.loan_cycle`, taking every idle server to have been idle
    for the lend delay and every serving one to run replicas): inference needs ``demand + headroom`` servers; idle
    servers up to the demand the serving ones leave are kept for it (the last in the lend order); of the others, the
    last ``headroom`` in the lend order are never lent (a spare server is an idle one, even where servers serving
    replicas outnumber the demand).

    With ``gpu_type``, only the inference servers of that GPU type are balanced (demand is then in servers of that
    type); with ``among``, only those it names (the operator's loan cycle leaves out a cordoned server that serves
    no replica: it is neither lent, nor room for inference, nor reclaimed). An idle server in ``unlendable`` (an
    unhealthy one: it would take no training work) is never lent, but is room for inference all the same."""
    if not isinstance(headroom, int) or headroom < 0:
        raise InvalidClusterError(f"headroom must be an integer >= 0, got {headroom!r}")

    def of(state: LoanState) -> tuple[Server, ...]:
        return tuple(
            s
            for s in snapshot.servers_in(state)
            if (gpu_type is None or s.gpu_type == gpu_type) and (among is None or s.name in among)
        )

    idle = of(LoanState.IDLE)
    serving = of(LoanState.SERVING)
    held = len(serving) + len(idle) + len(of(LoanState.RECLAIMING))
    kept = {s.name for s in serve_order(idle)[: max(demand.servers - len(serving), 0)]}
    lendable = lend_order(s for s in idle if s.name not in unlendable and s.name not in kept)
    may_lend = lendable[: max(len(lendable) - headroom, 0)]
    return balance_loans(held, len(of(LoanState.LOANED)), may_lend, demand.servers + headroom)


def balance_loans(held: int, loaned: int, idle: Iterable[ServerLike], needed: int) -> LoanPlan:
    """The balance of one pool: inference holds ``held`` servers (serving, idle or reclaiming: those on their way
    back are its), ``loaned`` more are lent, ``idle`` are those of the held it may lend, and it needs ``needed``
    (demand plus headroom). :func:`plan_loans` and the loan cycle (:mod:`lyra.core.loan_cycle`) both balance by it."""
    if needed > held:
        reclaim = min(needed - held, loaned)
        return LoanPlan(lend=(), reclaim=reclaim, shortfall=needed - held - reclaim, needed=needed, held=held)
    lendable = lend_order(idle)[: held - needed]
    return LoanPlan(lend=tuple(s.name for s in lendable), reclaim=0, shortfall=0, needed=needed, held=held)
