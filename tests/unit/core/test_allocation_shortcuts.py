"""Shortcuts of the allocator that must decide nothing differently, each checked against the allocator with the
shortcut turned off: on random clusters, and on a case built so that the shortcut fires.

* Phase 1 does not try a rebuild for a base that no type it may use could hold once this plan's bases leave their
  servers, nor again for a base of the shape whose rebuild already failed, until a base starts.
* The searches of one decision (second opinions included) share the objective of the candidates they scored.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lyra.core import ClusterSnapshot, LoanState, Pool, Server, TrainingJob, allocate_workers
from lyra.core.allocation.admission import Admission
from lyra.core.allocation.problem import Problem
from lyra.core.allocation.search import Scores, Search
from lyra.core.fluid import FluidModel
from lyra.core.packing import Move

from .builders import CATALOG, T4, V100, job, loaned, snapshot, training
from .strategies import PROPERTY, allocation_cases

Case = tuple[ClusterSnapshot, dict[str, int]]

#: Phase 1's three orders (``admit_bases`` options), as ``allocate_workers`` uses them.
ORDERS = [
    {"longest_first": False},
    {"longest_first": True},
    {"longest_first": False, "fast_type_first": True},
]


class EveryRebuild(Admission):
    """Phase 1 that tries every rebuild in full."""

    def _could_rebuild_for(self, i: int) -> bool:
        return True

    def _place_rebuilding(self, i: int) -> bool:
        self._failed_rebuilds.clear()
        return super()._place_rebuilding(i)


Admitted = tuple[list[int], list[int], dict[str, dict[int, int]]]


def _admitted(kind: type[Admission], case: Case, order: dict[str, bool], removals: list[str]) -> Admitted:
    """Phase 1 of ``case`` by ``kind``: the bases started, every job's kind, the workers per server; each job whose
    workers a rebuild or repacking took off (``remove_all``) is appended to ``removals``."""
    problem = Problem(*case)
    layout = problem.layout
    remove_all = layout.remove_all

    def counted(job: str, gpus_per_worker: int) -> list[Move]:
        removals.append(job)
        return remove_all(job, gpus_per_worker)

    layout.remove_all = counted  # type: ignore[method-assign]
    kind(problem).admit_bases(**order)
    return problem.started, problem.kind, {name: dict(hosts) for name, hosts in layout.jobs.items()}


@st.composite
def crowded_cases(draw: st.DrawFn) -> Case:
    """A few small servers of both types, a few elastic jobs running on them and many bases waiting, most with
    workers of several GPUs, some limited to one type: phase 1 runs out of room and tries rebuilds often."""
    kinds = draw(
        st.lists(
            st.sampled_from([(Pool.TRAINING, V100, None), (Pool.INFERENCE, T4, LoanState.LOANED)]),
            min_size=2,
            max_size=5,
        ),
        label="servers",
    )
    servers = [
        Server(
            f"{'v' if pool is Pool.TRAINING else 'l'}{k}", pool, gpu_type, draw(st.sampled_from([2, 4, 6, 8])), state
        )
        for k, (pool, gpu_type, state) in enumerate(kinds)
    ]
    jobs: list[TrainingJob] = []
    for k, server in enumerate(servers):
        if server.gpus >= 4 and draw(st.booleans(), label=f"elastic job on {server.name}"):
            width = draw(st.integers(2, server.gpus // 2))
            jobs.append(job(f"r{k}").gpus(2).workers(1, width).work(5000.0).on({server.name: width}).build())
    for k in range(draw(st.integers(4, 12), label="queued")):
        spec = job(f"q{k:02d}").gpus(draw(st.sampled_from([1, 2, 2, 4, 4, 8]))).workers(draw(st.integers(1, 3)))
        restriction = draw(st.sampled_from([None, None, V100, T4]))
        if restriction:
            spec = spec.types(restriction)
        jobs.append(spec.work(float(draw(st.integers(10, 900)))).build())
    return ClusterSnapshot(tuple(servers), tuple(jobs), CATALOG), {}


#: Found by hypothesis against a rebuild shortcut keyed on the base's types alone. Longest first, q00, q03 and q04
#: start; q02's rebuild (two V100 workers of two GPUs) fails, then q01's (two V100 workers of one GPU) succeeds.
SMALLER_AFTER_LARGER: Case = (
    snapshot(
        [loaned("l0", 4), training("v1", 8)],
        [
            job("q00").gpus(4).work(10),
            job("q01").workers(2).types(V100).work(10),
            job("q02").gpus(2).workers(2).types(V100).work(11),
            job("q03").gpus(2).work(10),
            job("q04").types(V100).work(10),
            job("r1").gpus(2).workers(1, 2).work(5000).on({"v1": 2}),
        ],
    ),
    {},
)

#: Found by hypothesis against a rebuild shortcut that outlives the start of a base. Shortest first, q00, q01 and
#: q07 start; q06's rebuild fails; q02, q03 and q04 start; then q05's rebuild, of q06's shape, succeeds.
AFTER_A_START: Case = (
    snapshot(
        [training("v0", 2), training("v1", 8), loaned("l2", 2), loaned("l3", 6), loaned("l4", 8)],
        [
            job("q00").gpus(2).workers(3).work(10),
            job("q01").gpus(2).workers(3).work(10),
            job("q02").work(10),
            job("q03").work(10),
            job("q04").gpus(4).work(10),
            job("q05").gpus(2).workers(2).types(V100).work(20),
            job("q06").gpus(2).workers(2).types(V100).work(11),
            job("q07").workers(2).types(V100).work(10),
            job("r3").gpus(2).workers(1, 3).work(5000).on({"l3": 3}),
        ],
    ),
    {},
)


@PROPERTY
@example(case=SMALLER_AFTER_LARGER)
@example(case=AFTER_A_START)
@given(case=st.one_of(allocation_cases(max_jobs=10), crowded_cases()))
def test_phase_one_skips_only_rebuilds_that_would_fail(case: Case) -> None:
    for order in ORDERS:
        assert _admitted(Admission, case, order, []) == _admitted(EveryRebuild, case, order, [])


#: Two 4-GPU bases fill an 8-GPU and a 6-GPU server; then three 8-GPU bases wait. The first one's rebuild is tried
#: and fails (the 6-GPU server can never hold an 8-GPU worker), the second has its shape and is not tried, and the
#: third needs two such servers, which no rebuild can make.
BLOCKED = (
    snapshot(
        [training("v0", 8), training("v1", 6)],
        [
            job("a").gpus(4).work(10),
            job("b").gpus(4).work(20),
            job("c").gpus(8).work(300),
            job("d").gpus(8).work(400),
            job("e").gpus(8).workers(2).work(500),
        ],
    ),
    {},
)


def test_a_failed_rebuild_is_not_tried_again_for_the_same_shape() -> None:
    tried: list[str] = []
    every: list[str] = []
    admitted = _admitted(Admission, BLOCKED, ORDERS[0], tried)
    assert admitted == _admitted(EveryRebuild, BLOCKED, ORDERS[0], every)
    started, _, _ = admitted
    assert [BLOCKED[0].jobs[i].name for i in started] == ["a", "b"]
    # Each rebuild takes the started bases a and b off their servers; repacking takes off those on the type too.
    assert len(every) - len(tried) == 4, (tried, every)


def _never_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every search scores every candidate itself."""
    init = Search.__init__

    def alone(self: Search, problem: Problem, budget: int, restart: float | None, scores: Scores | None = None) -> None:
        init(self, problem, budget, restart, None)

    monkeypatch.setattr(Search, "__init__", alone)


@PROPERTY
@given(case=allocation_cases(max_jobs=10))
def test_shared_scores_change_no_plan(case: Case) -> None:
    snap, held = case
    for restart in (None, 60.0):
        shared = allocate_workers(snap, held=held, restart_cost_s=restart)
        with pytest.MonkeyPatch.context() as monkeypatch:
            _never_shared(monkeypatch)
            alone = allocate_workers(snap, held=held, restart_cost_s=restart)
        assert shared == alone


#: Three elastic jobs of different lengths on one server: phase 1 admits all three, so a second opinion (longest
#: first) searches again and meets candidates the first search scored.
SECOND_OPINION = (
    snapshot(
        [training("v0", 8)],
        [job("a").workers(1, 4).work(100), job("b").workers(1, 4).work(400), job("c").workers(1, 4).work(900)],
    ),
    {},
)


def _count_runs(monkeypatch: pytest.MonkeyPatch, runs: list[int]) -> None:
    run: Callable[..., list[float]] = FluidModel.run

    def counted(self: FluidModel, *args: object, **kwargs: object) -> list[float]:
        runs.append(1)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(FluidModel, "run", counted)


def test_a_decision_scores_a_candidate_once() -> None:
    snap, held = SECOND_OPINION
    shared: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        _count_runs(patch, shared)
        plan = allocate_workers(snap, held=held)
    alone: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        _count_runs(patch, alone)
        _never_shared(patch)
        assert allocate_workers(snap, held=held) == plan
    assert 0 < len(shared) < len(alone), (len(shared), len(alone))
