"""The scheduling benchmark's pure parts: the second scheduler's command line and the pods it is given."""

from __future__ import annotations

import pytest
from bench.scheduling_bench import EXTENDER_SCHEDULER, PODS, _replaced, main, pods


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
