"""``bench.measure``: how many times a benchmark's call runs, with and without its warm-up."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from bench import Benchmark, measure
from bench.simulate_bench import TARGET_MS, benchmarks


def _counting(calls: list[int]) -> Callable[[], Callable[[], object]]:
    def setup() -> Callable[[], object]:
        return lambda: calls.append(len(calls))

    return setup


@pytest.mark.parametrize(("warm_up", "expected_calls"), [(True, 4), (False, 3)])
def test_a_warm_up_is_one_untimed_call_more(warm_up: bool, expected_calls: int) -> None:
    calls: list[int] = []
    benchmark = Benchmark(name="count", setup=_counting(calls), what="counts its calls", repeats=3, warm_up=warm_up)
    result = measure(benchmark)
    assert len(calls) == expected_calls
    assert result.repeats == 3


def test_a_repeat_count_given_overrides_the_benchmarks_own() -> None:
    calls: list[int] = []
    benchmark = Benchmark(name="count", setup=_counting(calls), what="counts its calls", repeats=3, warm_up=False)
    assert measure(benchmark, repeats=5).repeats == 5
    assert len(calls) == 5


def test_a_whole_trace_simulated_is_timed_once_without_a_warm_up() -> None:
    # Each run takes tens of seconds; a warm-up would double make bench's time in the simulator.
    simulated = benchmarks()
    assert simulated, "the shared traces are needed (../shared/traces/README.md)"
    for benchmark in simulated:
        assert (benchmark.repeats, benchmark.warm_up, benchmark.target_ms) == (1, False, TARGET_MS)
