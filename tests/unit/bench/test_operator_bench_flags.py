"""The operator benchmarks' command lines refuse bad flags with one line naming the flag (exit 2), before any work."""

from __future__ import annotations

import pytest
from bench import operator_envelope_bench, operator_live_bench, operator_writes_bench


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sizes", "5000,x"], "expected node counts"),
        (["--sizes", "100"], "at least 200 nodes"),
        (["--repeats", "0"], "must be at least 1"),
        (["--latency-ms", "-1"], "within 0-1000 ms"),
        (["--latency-ms", "1001"], "within 0-1000 ms"),
        (["--latency-ms", "nan"], "within 0-1000 ms"),
        (["--latency-ms", "fast"], "expected milliseconds"),
    ],
)
def test_the_writes_benchmark_refuses(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        operator_writes_bench.main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sizes", "500,abc"], "expected a whole number"),
        (["--sizes", "199"], "must be at least 200"),
        (["--repeats", "0"], "must be at least 1"),
        (["--plot", "growth.svg"], "must end in .png"),
    ],
)
def test_the_envelope_benchmark_refuses(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        operator_envelope_bench.main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--queued-jobs", "-1"], "--queued-jobs: at least 0"),
        (["--services", "0"], "--services: 1 to 1,000"),
        (["--services", "1001"], "--services: 1 to 1,000"),
        (["--start-timeout", "0"], "--start-timeout: seconds above 0"),
        (["--start-timeout", "nan"], "--start-timeout: seconds above 0"),
        (["--scale-step", "0"], "--scale-step: at least 1"),
        (["--scale-step", "16"], "chat's maxReplicas"),  # 4 + 16 x 4 scale-ups passes 64
        (["--service-replicas", "0"], "--service-replicas: 1 to 64"),
        (["--service-replicas", "65"], "--service-replicas: 1 to 64"),
        # 1,000 nodes: 750 inference nodes, 625 of them full of the 5,000 GPU pods; 299 + 8 servers do not fit.
        (["--services", "300"], "could need 307 T4 servers, and the inference nodes the --gpu-pods leave hold 125"),
    ],
)
def test_the_live_benchmark_refuses(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        operator_live_bench.main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
