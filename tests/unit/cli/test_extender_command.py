"""`lyra extender` refuses bad flags with exit 2 and a message, before it binds a port or reads a kubeconfig."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lyra.chart.values import Extender as ChartExtender
from lyra.cli import extender_commands, main
from lyra.extender.app import DEFAULT_CLIENT_TIMEOUT_S, DEFAULT_MAX_BODY_MIB, DEFAULT_MAX_HELD_MIB
from lyra.localcluster.componentconfig import DEFAULT_EXTENDER_URL
from lyra.settings import ExtenderSettings
from tests.unit.cli.running import kubeconfig_text, taken_port

CASES = [
    (["--port", "0"], "argument --port: expected a port between 1 and 65535, got 0"),
    (["--port", "70000"], "argument --port: expected a port between 1 and 65535, got 70000"),
    (["--port", "x"], "argument --port: expected a whole number, got 'x'"),
    (["--host", ""], "argument --host: expected an IP address or a host name, got ''"),
    (["--host", "a b"], "argument --host: expected an IP address or a host name, got 'a b'"),
    (["--host=-lyra"], "argument --host: expected an IP address or a host name"),
    (["--host", "a..b"], "argument --host: expected an IP address or a host name"),
    (["--host", "x" * 64], "argument --host: expected an IP address or a host name"),
    (["--max-body-mib", "0"], "argument --max-body-mib: expected a number >= 1, got 0"),
    (["--max-body-mib", "2048"], "--max-body-mib must be between 1 and 1024"),
    (["--max-held-mib", "2"], "--max-held-mib must be between --max-body-mib (6) and 4096, got 2"),
    (["--max-held-mib", "0"], "argument --max-held-mib: expected a number >= 1, got 0"),
    (["--client-timeout", "0.5"], "--client-timeout must be between 1 and 300 seconds, got 0.5"),
    (["--client-timeout", "nan"], "argument --client-timeout: expected seconds"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "no such file"),
    (["--tls-cert-file", "/nonexistent/cert.pem"], "--tls-cert-file and --tls-key-file go together"),
    (["--client-ca-file", "/nonexistent/ca.pem"], "--client-ca-file needs --tls-cert-file and --tls-key-file"),
    (["--tls-cert-file", "/nonexistent/c.pem", "--tls-key-file", "/nonexistent/k.pem"], "cannot be used"),
]


@pytest.mark.parametrize(("flags", "message"), CASES)
def test_bad_flags_exit_2_with_a_message(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["extender", *flags])
    except SystemExit as stop:  # refused by argparse while reading the flag
        code = stop.code  # type: ignore[assignment]
    assert code == 2
    error = capsys.readouterr().err
    assert message in error
    assert "Traceback" not in error


def test_the_flags_defaults_are_the_settings_and_the_local_cluster_calls_there() -> None:
    """One default for each extender setting: the flag's, the chart's Service port and the local kube-scheduler's
    extender URL all come from :class:`ExtenderSettings`."""
    parser = argparse.ArgumentParser(prog="lyra")
    commands = parser.add_subparsers()
    extender_commands.register(commands)
    parsed = commands.choices["extender"].parse_args([])
    assert (parsed.host, parsed.port, parsed.max_body_mib) == ("127.0.0.1", 8888, DEFAULT_MAX_BODY_MIB)
    assert (parsed.max_held_mib, parsed.client_timeout_s) == (DEFAULT_MAX_HELD_MIB, DEFAULT_CLIENT_TIMEOUT_S)
    assert ExtenderSettings() == ExtenderSettings(
        parsed.host, parsed.port, parsed.max_body_mib, parsed.max_held_mib, parsed.client_timeout_s
    )
    assert DEFAULT_EXTENDER_URL == "http://127.0.0.1:8888"
    assert ChartExtender().port == 8888


def test_an_unreadable_kubeconfig_is_bad_input_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert main(["extender", "--kubeconfig", str(broken), "--port", "18888"]) == 2
    assert f"--kubeconfig {broken}: not valid YAML (line 2, column 1" in capsys.readouterr().err


def test_a_certificate_that_is_not_pem_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    assert main(["extender", "--tls-cert-file", str(cert), "--tls-key-file", str(key)]) == 2
    assert f"--tls-cert-file {cert}" in capsys.readouterr().err


def test_a_port_in_use_is_one_line_and_exit_1_before_the_watch_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn logged the failure and exited 3; now the socket is bound first and the failure said as the
    operator's is."""
    from lyra.extender.watch import WatchedView

    def not_started(self: WatchedView) -> None:
        raise AssertionError("the watch started for an extender that cannot listen")

    monkeypatch.setattr(WatchedView, "start", not_started)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text("https://127.0.0.1:1"))
    with taken_port() as port:
        assert main(["extender", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", str(port)]) == 1
    assert capsys.readouterr().err == f"lyra extender: cannot listen on 127.0.0.1:{port}: address already in use\n"
