"""`lyra operator`, `status` and `emulate` refuse bad flags with exit code 2 and a message, before they connect to
anything."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

import pytest

from lyra.chart.values import Operator as ChartOperator
from lyra.cli import main, operator_commands
from lyra.cli.arguments import settings_given
from lyra.operator.config import LoopSettings, OperatorConfig
from lyra.operator.priority_bounds import PriorityBounds
from lyra.operator.sizing import InferenceGpuCaps
from lyra.settings import DEFAULT_INFERENCE_GPU_CAP, DEFAULT_MAX_PRIORITY
from tests.unit.cli.running import kubeconfig_text, taken_port


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lend-delay", "-1"], "expected seconds between 0 and 86400"),
        (["--reclaim-deadline", "soon"], "expected seconds"),
        (["--headroom", "-2"], "expected a number >= 0"),
        (["--search-budget", "0"], "expected a number >= 1"),
        (["--resync", "0"], "--resync must be > 0"),
        (["--max-priority", "ml"], "--max-priority: 'ml' is not NAMESPACE=PRIORITY"),
        (["--max-priority", "ml=high"], "is not NAMESPACE=PRIORITY"),
        (["--max-priority", "ML=1"], "'ML' is not a namespace name"),
        (["--max-priority", "ml=2000000"], "the bound of ml must be -1000000 to 1000000"),
        (["--max-priority", "ml=1", "--max-priority", "ml=2"], "a namespace is bounded twice: ml"),
        (["--watch-layer", "informer"], "--watch-layer (or $LYRA_WATCH_LAYER) 'informer': not a watch layer"),
        (["--watch-layer", ""], "not a watch layer (one of kubewatch, kopf)"),
        (["--scheduler-name", "Lyra Scheduler"], "argument --scheduler-name: expected a DNS subdomain"),
        (["--scheduler-name=-lyra"], "argument --scheduler-name: expected a DNS subdomain"),
        (["--scheduler-name", "x" * 254], "argument --scheduler-name: expected a DNS subdomain (at most 253"),
        (["--lease-namespace", "Lyra_System"], "argument --lease-namespace: expected a DNS label"),
        (["--lease-namespace", "lyra.system"], "argument --lease-namespace: expected a DNS label"),
        (["--lease-namespace", ""], "argument --lease-namespace: expected a DNS label"),
        (["--http-address", "a b"], "argument --http-address: expected an IP address or a host name, got 'a b'"),
        (["--http-address", "10.0.0.300:80"], "argument --http-address: expected an IP address or a host name"),
    ],
)
def test_bad_flags_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["operator", *argv])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


def test_a_bad_watch_layer_in_the_environment_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(operator_commands.WATCH_LAYER_ENV, "KOPF")
    assert main(["operator"]) == 2
    assert "--watch-layer (or $LYRA_WATCH_LAYER) 'KOPF': not a watch layer" in capsys.readouterr().err


def test_a_lease_namespace_from_the_environment_is_checked_as_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "Lyra")
    with pytest.raises(SystemExit) as exited:
        main(["operator"])
    assert exited.value.code == 2
    assert "argument --lease-namespace: expected a DNS label (at most 63 lower-case" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["", "lyra-scheduler", "scheduler.lyra.dev"])
def test_scheduler_names_kubernetes_takes_are_taken(name: str) -> None:
    args = _operator_parser().parse_args(["--scheduler-name", name])
    assert args.scheduler_name == name


@pytest.mark.parametrize("command", ["operator", "status", "emulate"])
def test_a_missing_kubeconfig_is_bad_input(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--kubeconfig", str(tmp_path / "none")])
    assert exited.value.code == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra", [[], ["--lease-duration", "4.4", "--renew-deadline", "4.3", "--retry-period", "0.5"]], ids=["", "4.4s"]
)
def test_the_defaults_are_valid_and_an_unreachable_cluster_fails_with_a_message(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    with caplog.at_level(logging.DEBUG, logger="urllib3"):
        assert main(["operator", "--once", "--kubeconfig", str(kubeconfig), *extra]) == 1
    error = capsys.readouterr().err
    assert "lyra operator: the pass failed: cannot reach the API server at https://127.0.0.1:1: connection refused" in (
        error
    )
    assert "Traceback" not in error
    # the client's retries are not logged one by one with urllib3's pool and retry counts: the failure is said once
    assert [
        r.getMessage() for r in caplog.records if r.name.startswith("urllib3") and r.levelno >= logging.WARNING
    ] == []


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--lease-duration", "10", "--renew-deadline", "10"], "must be shorter than the lease duration (10 s)"),
        (["--lease-duration", "4.4", "--renew-deadline", "4.4"], "must be shorter than the lease duration (4.4 s)"),
        (["--lease-duration", "4.4", "--renew-deadline", "4.395"], "by at least 0.2% of it"),
        (["--lease-duration", "4", "--renew-deadline", "5"], "--renew-deadline 5, --retry-period 0.533333 (default"),
        (["--lease-duration", "15", "--renew-deadline", "2", "--retry-period", "2"], "1.2 x the retry period"),
        (["--lease-duration", "15", "--retry-period", "9"], "--renew-deadline 10 (default: 2/3 of --lease-duration)"),
        (["--lease-duration", "0"], "the lease duration must be a number of seconds > 0 (got 0)"),
        (["--retry-period", "0"], "the retry period must be a number of seconds > 0 (got 0)"),
        (["--renew-deadline", "0"], "the renew deadline must be a number of seconds > 0 (got 0)"),
        (["--dry-run", "--lease-duration", "10", "--renew-deadline", "10"], "must be shorter than the lease duration"),
    ],
)
def test_lease_timings_that_cannot_fence_a_leader_are_refused(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["operator", *flags]) == 2
    error = capsys.readouterr().err
    assert says in error
    assert error.startswith("lyra operator: --lease-duration ")
    assert "Traceback" not in error


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "86401", "4,4", ""])
@pytest.mark.parametrize("flag", ["--lease-duration", "--renew-deadline", "--retry-period"])
def test_lease_flags_that_are_not_seconds_are_refused(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["operator", flag, value])
    assert exited.value.code == 2
    assert "expected seconds" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("gpuCatalog:\n  Tesla-T4: {speed: -0.4}\n", "gpuCatalog.Tesla-T4.speed: Input should be greater than 0"),
        ("Tesla-T4: {speed: 0.4}\n", "no gpuCatalog key"),
        (None, "No such file or directory"),
    ],
)
def test_a_bad_gpu_catalogue_exits_2_naming_the_file_and_the_field(
    content: str | None, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "gpus.yaml"
    if content is not None:
        catalog.write_text(content)
    with pytest.raises(SystemExit) as exited:
        main(["operator", "--once", "--gpu-catalog", str(catalog)])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"lyra operator: error: argument --gpu-catalog: {catalog}: " in error
    assert says in error
    assert "Traceback" not in error


def _operator_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lyra")
    commands = parser.add_subparsers()
    operator_commands.register(commands)
    return commands.choices["operator"]


def test_every_setting_has_one_flag_whose_default_is_the_settings_default() -> None:
    parser = _operator_parser()
    flags = {action.dest: action for action in parser._actions}
    for settings in (OperatorConfig, LoopSettings):
        for item in dataclasses.fields(settings):
            if "flag" not in item.metadata:
                continue
            action = flags[item.name]
            assert action.option_strings == [item.metadata["flag"]], item.name
            assert action.default == item.default, item.name
    parsed = parser.parse_args([])
    assert OperatorConfig(**settings_given(parsed, OperatorConfig)) == OperatorConfig()
    assert settings_given(parsed, LoopSettings) == {"resync_s": 10.0, "lease_duration_s": 15.0}
    given = parser.parse_args(["--lend-delay", "5", "--headroom", "2", "--scheduler-name", "lyra-scheduler"])
    config = OperatorConfig(**settings_given(given, OperatorConfig))
    assert (config.lend_delay_s, config.headroom, config.scheduler_name) == (5.0, 2, "lyra-scheduler")


def test_the_charts_defaults_are_the_operators() -> None:
    chart = ChartOperator()
    config, loop = OperatorConfig(), LoopSettings()
    assert (chart.headroom, chart.lend_delay_seconds, chart.reclaim_deadline_seconds) == (
        config.headroom,
        config.lend_delay_s,
        config.reclaim_deadline_s,
    )
    assert (chart.gang_timeout_seconds, chart.node_grace_seconds, chart.start_timeout_seconds) == (
        config.gang_timeout_s,
        config.node_grace_s,
        config.start_timeout_s,
    )
    assert (chart.resync_seconds, chart.lease_duration_seconds) == (loop.resync_s, loop.lease_duration_s)
    assert chart.http_port == _operator_parser().parse_args([]).http_port
    # Bounds on by default, the same in both: 64 inference GPUs and priority 0 for every namespace not named.
    assert chart.inference_gpu_caps == {"*": DEFAULT_INFERENCE_GPU_CAP} == {"*": 64}
    assert chart.max_priorities == {"*": DEFAULT_MAX_PRIORITY} == {"*": 0}
    assert InferenceGpuCaps.parse([], default=DEFAULT_INFERENCE_GPU_CAP).cap_of("any") == 64
    assert InferenceGpuCaps.parse(["*=8"], default=DEFAULT_INFERENCE_GPU_CAP).cap_of("any") == 8
    assert PriorityBounds.parse(["research=100"], default=DEFAULT_MAX_PRIORITY).entries == (("*", 0), ("research", 100))


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was a traceback from the standard library's HTTP server; nothing has started when it is said."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text("https://127.0.0.1:1"))
    with taken_port() as port:
        argv = ["--kubeconfig", str(kubeconfig), "--http-address", "127.0.0.1", "--http-port", str(port)]
        assert main(["operator", *argv]) == 1
    error = capsys.readouterr().err
    assert error == f"lyra operator: cannot listen on 127.0.0.1:{port}: address already in use\n"
