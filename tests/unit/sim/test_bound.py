"""The lower bound on mean JCT (lyra.sim.bound): its parts by hand, and no scheme below it, on synthetic workloads
here, on real trace windows in test_oracle_real_traces.py, and on every table of docs/evaluation.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lyra.sim.bound import best_pace, jct_bound, srpt_finish_times
from lyra.sim.engine import Simulation
from lyra.sim.metrics import summarise
from lyra.sim.schemes import SCHEMES
from lyra.sim.workload import JobSpec, Window, build_workload
from tests.unit.sim.builders import flat_load, scenario, trace

DOCS = Path(__file__).resolve().parents[3] / "docs" / "evaluation.md"


def spec(*, work: float = 1000.0, gpus: int = 1, per_worker: int = 1, wmax: int | None = None, fits: bool = True,
         mixes: bool = False) -> JobSpec:  # fmt: skip
    workers = gpus // per_worker
    return JobSpec("j", 0.0, gpus, work, workers, wmax or workers, wmax is not None, 1.0, fits, mixes, per_worker)


@pytest.mark.parametrize(
    ("jobs", "speed", "finish"),
    [
        ([(0, 1), (0, 2)], 1.0, [1, 3]),
        ([(0, 4), (1, 1)], 1.0, [2, 5]),  # the short arrival preempts the long job
        ([(0, 4), (10, 2)], 2.0, [2, 11]),  # idle between them
        ([(0, 3), (0, 3), (0, 3)], 3.0, [1, 2, 3]),
    ],
)
def test_srpt_on_one_machine_by_hand(jobs: list[tuple[float, float]], speed: float, finish: list[float]) -> None:
    assert sorted(srpt_finish_times(jobs, speed)) == pytest.approx(finish)


def test_best_pace_is_the_most_workers_on_the_best_type_the_job_may_use() -> None:
    setup = scenario()  # 1 x 8 V100 (1.0), 2 x 8 T4 (0.4)
    assert best_pace(spec(), setup) == 1.0
    assert best_pace(spec(wmax=4), setup) == 4.0
    # 8 V100 workers at 1.0 against 16 T4 workers at 0.4 (6.4): a job that fits a T4 and may have 16 workers.
    assert best_pace(spec(wmax=16), setup) == pytest.approx(8.0)
    assert best_pace(spec(wmax=30, fits=True), scenario("speed: {V100: 1.0, T4: 0.6}")) == pytest.approx(9.6)
    assert best_pace(spec(wmax=30, fits=False), scenario("speed: {V100: 1.0, T4: 0.6}")) == 8.0
    # A mixing job: every worker its types hold, at the fastest speed (an upper bound on its slowest-type pace).
    assert best_pace(spec(wmax=30, mixes=True), setup) == pytest.approx(24.0)
    # Scaling overhead: 8 workers at 1 / (1 + 0.5 * 7).
    assert best_pace(spec(wmax=8), scenario("scaling: {overhead: 0.5}")) == pytest.approx(8 / 4.5)
    # Workers of 4 GPUs: two per 8-GPU server.
    assert best_pace(spec(gpus=8, per_worker=4, wmax=10, fits=False), setup) == 2.0


def test_the_capacity_part_binds_when_jobs_queue() -> None:
    """20 one-GPU jobs of 1,000 s at once on 8 V100s and 16 T4s (14.4 V100-equivalents): alone each takes 1,000 s,
    but the cluster's work-rate finishes the k-th no earlier than k * 1000 / 14.4 s."""
    setup = scenario()
    workload = build_workload(trace(*[(0.0, 1000.0, 1)] * 20), setup, Window(0.0, 86_400.0))
    bound = jct_bound(workload, setup)
    assert bound.alone_mean_s == pytest.approx(1000.0)
    assert bound.capacity_gpus == pytest.approx(14.4)
    expected = sum(max(1000.0, k * 1000.0 / 14.4) for k in range(1, 21)) / 20
    assert bound.mean_jct_s == pytest.approx(expected)
    assert bound.mean_jct_s > bound.alone_mean_s
    for name in ("baseline", "basic", "lyra", "lyra-exact-free", "las"):
        result = Simulation(workload, setup, SCHEMES[name], flat_load(0.0)).run()
        assert summarise(result).jct_mean_s >= bound.mean_jct_s, name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_scheme_beats_the_bound_on_random_elastic_workloads(seed: int) -> None:
    import random

    draw = random.Random(seed)
    jobs = [(draw.uniform(0, 20_000), draw.uniform(100, 8_000), draw.choice((1, 1, 2, 4, 8))) for _ in range(60)]
    setup = scenario(f"elasticity: {{share: 0.6}}\nmemory: {{inference_fit_share: 0.6}}\nseed: {seed}")
    workload = build_workload(trace(*jobs), setup, Window(0.0, 30_000.0))
    bound = jct_bound(workload, setup)
    for name in SCHEMES:
        if name == "ideal":
            continue
        result = Simulation(workload, setup, SCHEMES[name], flat_load(100.0)).run()
        for record, alone in zip(result.records, bound.alone_s, strict=True):
            assert record.jct_s >= alone * (1 - 1e-9), (name, record.name)
        assert summarise(result).jct_mean_s >= bound.mean_jct_s, name


#: Column headers of a mean JCT in docs/evaluation.md's tables: the scheme tables' and the seeds' (one scheme a row),
#: the sweep's and the map's (lyra's JCT, beside the others).
JCT_HEADERS = ("mean JCT (s)", "lyra JCT", "lyra JCT (s)")


def _is_jct(header: str) -> bool:
    return header.startswith("JCT mean") or header in JCT_HEADERS


def test_every_table_of_the_evaluation_shows_the_bound_and_no_scheme_beats_it() -> None:
    """Every table of docs/evaluation.md with a mean JCT (the scheme tables, the seeds', the sweep's and the map's)
    has a ``bound`` cell, ``bound (JCT / bound)``, and that mean JCT (``lyra``'s where a row holds several) is at
    least the bound, with the ratio written as it is."""
    tables = 0
    rows = 0
    header: list[str] | None = None
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
            if any(_is_jct(h) for h in header):
                assert "bound (JCT / bound)" in header, f"a table without a bound column: {line[:80]}"
                tables += 1
            continue
        if "bound (JCT / bound)" not in header or all(c and set(c) <= {"-", ":"} for c in cells):
            continue
        jct_column = next(i for i, h in enumerate(header) if _is_jct(h))
        mean = float(cells[jct_column].split("/")[0].replace(",", ""))
        match = re.fullmatch(
            r"([\d,]+) \((\d+\.\d\d)\N{MULTIPLICATION SIGN}\)", cells[header.index("bound (JCT / bound)")]
        )
        assert match, f"bound cell {cells[header.index('bound (JCT / bound)')]!r}"
        bound = float(match.group(1).replace(",", ""))
        assert mean >= bound, f"{cells[0]}: mean JCT {mean} below the bound {bound}"
        assert float(match.group(2)) == pytest.approx(mean / bound, abs=0.006)
        rows += 1
    assert tables >= 10  # the sweep's and the map's included
    assert rows >= 85
