"""The scheduling benchmark's pure parts: the second scheduler's command line and the pods it is given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bench.scheduling_bench import (
    EXTENDER_SCHEDULER,
    MAIN_THREAD,
    PODS,
    Mode,
    Run,
    _replaced,
    _spent,
    _threads_cpu_seconds,
    bracketed,
    held,
    main,
    pods,
    probes_summary,
    round_order,
    summary,
    thread_breakdown,
    threads_summary,
)


def test_a_flag_is_replaced_in_place_and_the_others_are_kept() -> None:
    argv = ["kube-scheduler", "--config=/a.yaml", "--secure-port=10259", "--bind-address=127.0.0.1"]
    assert _replaced(argv, "secure-port", "4000") == [
        "kube-scheduler", "--config=/a.yaml", "--secure-port=4000", "--bind-address=127.0.0.1",
    ]  # fmt: skip


def test_a_flag_the_command_line_lacks_is_refused_not_added() -> None:
    with pytest.raises(RuntimeError, match="--config="):
        _replaced(["kube-scheduler", "--secure-port=1"], "config", "/b.yaml")


def test_pods_go_to_the_named_scheduler_or_to_the_default_one() -> None:
    named, default = pods(EXTENDER_SCHEDULER), pods()
    assert len(named) == len(default) == PODS
    assert {pod["spec"]["schedulerName"] for pod in named} == {EXTENDER_SCHEDULER}
    assert all("schedulerName" not in pod["spec"] for pod in default)
    assert [pod["spec"]["containers"] for pod in named] == [pod["spec"]["containers"] for pod in default]


@pytest.mark.parametrize("argv", [["--nodes", "50"], ["--nodes", "305"], ["--rounds", "0"]])
def test_sizes_that_cannot_hold_the_pods_are_refused_before_any_work(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "--nodes must be multiples of 10 of at least 300" in capsys.readouterr().err


def _round(without: float, lyra: float, null: float, null_go: float | None = None) -> dict[Mode, Run]:
    def run(mode: Mode, rate: float, scheduler_cpu_s: float = 5.0) -> Run:
        return Run(mode, rate, PODS / rate, scheduler_cpu_s, None if mode is Mode.WITHOUT else 1.0)

    return {
        Mode.WITHOUT: run(Mode.WITHOUT, without),
        Mode.LYRA: run(Mode.LYRA, lyra),
        Mode.NULL: run(Mode.NULL, null),
        Mode.NULL_GO: run(Mode.NULL_GO, null if null_go is None else null_go, 4.0),
    }


def test_the_table_gives_medians_of_per_round_ratios_and_the_extenders_own_cost_beyond_a_null_one() -> None:
    # three rounds as measured at 5,000 nodes: the null extender was slowest in the third, so its ratio to "without"
    # and the extender's ratio to it are medians of their own rounds, not ratios of medians
    rounds = [_round(118.1, 103.0, 120.3, 118.1), _round(120.9, 103.2, 106.5, 96.7), _round(103.0, 89.1, 85.5, 95.8)]
    header, rule, row = summary({5000: rounds}, floor=True)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert len(cells) == len(header.strip("|").split("|")) == rule.count("|") - 1
    assert cells[4] == "8.47 / 9.71"  # milliseconds a pod: 1,000 / the median rates (118.1 and 103.0 pods/s)
    assert cells[5] == "0.865x"  # median of 0.872, 0.854, 0.865
    assert cells[6] == "0.87, 0.85, 0.87"
    assert cells[10] == "0.881x"  # the null extender: median of 1.019, 0.881, 0.830
    assert cells[11] == "0.969x"  # the extender over the null one: median of 0.856, 0.969, 1.042
    assert cells[12] == "0.930x"  # the Go null extender: median of 1.000, 0.800, 0.930
    assert cells[13] == "4.0"  # kube-scheduler's CPU seconds with it
    assert cells[-1] == "MISS"
    without_floor = summary({500: [_round(200.0, 190.0, 199.0)]}, floor=False)
    assert [line.count("|") for line in without_floor] == [row.count("|") - 5] * 3  # no floor columns
    assert "0.950x" in without_floor[2]


def test_the_probes_table_gives_each_modes_median_ratio_to_without_and_kube_schedulers_cpu() -> None:
    def round_(without: float, lyra: float, null_go: float, late: float, scoring: float) -> dict[Mode, Run]:
        rates = {Mode.WITHOUT: without, Mode.LYRA: lyra, Mode.NULL_GO: null_go, Mode.GO_LATE: late}
        rates[Mode.GO_SCORING] = scoring
        cpus = {Mode.WITHOUT: 1.9, Mode.LYRA: 2.6, Mode.NULL_GO: 2.3, Mode.GO_LATE: 2.7, Mode.GO_SCORING: 2.5}
        return {mode: Run(mode, rate, PODS / rate, cpus[mode], 0.1) for mode, rate in rates.items()}

    # the rounds' ratios (late over without): 0.5, 0.7, 0.6: the median of the ratios, 0.6, not of the rates
    rounds = [round_(400.0, 300.0, 360.0, 200.0, 280.0), round_(200.0, 150.0, 180.0, 140.0, 140.0)]
    rounds.append(round_(300.0, 210.0, 270.0, 180.0, 210.0))
    header, rule, *rows = probes_summary({500: rounds})
    assert header.count("|") == rule.count("|") == 6
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    assert [row[1] for row in cells] == [
        Mode.WITHOUT, Mode.NULL_GO, Mode.GO_LATE, Mode.GO_SCORING, Mode.LYRA,
    ]  # fmt: skip
    assert cells[0][2:] == ["1", "-", "1.90"]
    assert cells[2][2:] == ["0.600x", "0.50, 0.70, 0.60", "2.70"]
    assert cells[4][2:] == ["0.750x", "0.75, 0.75, 0.70", "2.60"]


def test_every_round_opens_and_closes_without_an_extender_and_rotates_the_modes_between() -> None:
    modes = [Mode.WITHOUT, Mode.LYRA, Mode.NULL, Mode.NULL_GO]
    orders = [round_order(modes, round_) for round_ in range(4)]
    assert orders[0] == [Mode.WITHOUT, Mode.LYRA, Mode.NULL, Mode.NULL_GO, Mode.WITHOUT]
    assert orders[1] == [Mode.WITHOUT, Mode.NULL, Mode.NULL_GO, Mode.LYRA, Mode.WITHOUT]
    assert orders[3] == orders[0]
    assert [order[1] for order in orders[:3]] == [Mode.LYRA, Mode.NULL, Mode.NULL_GO]  # none always follows it
    assert round_order([Mode.WITHOUT, Mode.LYRA], 1) == [Mode.WITHOUT, Mode.LYRA, Mode.WITHOUT]


def test_the_two_runs_without_an_extender_count_as_one_by_their_total_time() -> None:
    fast = Run(Mode.WITHOUT, PODS / 2.0, 2.0, 1.5, None)
    slow = Run(Mode.WITHOUT, PODS / 6.0, 6.0, 2.5, None)
    both = bracketed(fast, slow)
    # 2,000 pods in 8 s: 250 pods/s, not the mean of 500 and 166.7 pods/s
    assert (both.mode, both.rate, both.elapsed_s, both.scheduler_cpu_s, both.extender_cpu_s) == (
        Mode.WITHOUT, 250.0, 4.0, 2.0, None,
    )  # fmt: skip


def _state(pid: int) -> str:
    """The state letter, read here apart from the benchmark's own reader."""
    return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]


def test_the_timed_scheduler_is_held_while_pods_are_created_and_resumed_however_the_block_ends() -> None:
    # A stand-in for kube-scheduler: a process that waits on its stdin until the test closes it (no timer).
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        seen: list[str] = []

        def creating() -> None:
            with held(child.pid, hold=True):
                seen.append(_state(child.pid))
                raise RuntimeError("a create failed")

        with pytest.raises(RuntimeError, match="a create failed"):
            creating()
        assert seen == ["T"], "stopped while held"
        assert _state(child.pid) != "T", "resumed, though the block raised"
        with held(child.pid, hold=False):
            assert _state(child.pid) != "T"
    finally:
        child.kill()
        child.communicate()


def test_the_extenders_cpu_by_thread_is_a_median_of_rounds_with_a_thread_absent_from_a_round_counted_zero() -> None:
    rounds = [_round(200.0, 190.0, 199.0) for _ in range(3)]
    for round_, threads in zip(
        rounds,
        [{"main": 0.5, "watch-pods": 0.2}, {"main": 0.7, "watch-pods": 0.1, "extender-ranks": 0.3}, {"main": 0.6}],
        strict=True,
    ):
        round_[Mode.LYRA].extender_threads_cpu_s.update(threads)
    (line,) = threads_summary({500: rounds})
    assert line == "500 nodes, the extender's CPU s by thread (median of rounds): main 0.60, watch-pods 0.10"
    assert thread_breakdown({"main": 0.004}) == "no thread took 0.01 s"


_CHILD = """
import sys, threading, time
from lyra.osthreads import name_os_thread
def burn():
    name_os_thread()
    while time.thread_time() < 0.05:
        pass
    print("burnt", flush=True)
    sys.stdin.read()
threading.Thread(target=burn, name="watch-everything-at-once").start()
"""


def test_the_cpu_of_a_process_is_read_per_thread_by_the_name_lyra_gave_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "burnt\n"
        seconds = _threads_cpu_seconds(child.pid)
        assert set(seconds) == {MAIN_THREAD, "watch-everythin"}  # the kernel keeps 15 bytes of a name
        assert seconds["watch-everythin"] >= 0.04
        assert _spent({"main": 1.0}, {"main": 1.5, "new": 0.25}) == {"main": 0.5, "new": 0.25}
    finally:
        child.kill()
        child.communicate()
