"""`lyra extender` refuses bad flags with exit 2 and a message, before it binds a port or reads a kubeconfig."""

from __future__ import annotations

from pathlib import Path

import pytest

from lyra.cli import main

CASES = [
    (["--port", "0"], "--port must be between 1 and 65535"),
    (["--port", "70000"], "--port must be between 1 and 65535"),
    (["--host", ""], "--host must be an IP address or a host name"),
    (["--max-body-mib", "0"], "--max-body-mib must be between 1 and 1024"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "no such file"),
    (["--tls-cert-file", "/nonexistent/cert.pem"], "--tls-cert-file and --tls-key-file go together"),
    (["--client-ca-file", "/nonexistent/ca.pem"], "--client-ca-file needs --tls-cert-file and --tls-key-file"),
    (["--tls-cert-file", "/nonexistent/c.pem", "--tls-key-file", "/nonexistent/k.pem"], "cannot be used"),
]


@pytest.mark.parametrize(("flags", "message"), CASES)
def test_bad_flags_exit_2_with_a_message(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extender", *flags]) == 2
    assert message in capsys.readouterr().err


def test_an_unreadable_kubeconfig_exits_1_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert main(["extender", "--kubeconfig", str(broken), "--port", "18888"]) == 1
    assert "no usable kubeconfig" in capsys.readouterr().err


def test_a_certificate_that_is_not_pem_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    assert main(["extender", "--tls-cert-file", str(cert), "--tls-key-file", str(key)]) == 2
    assert f"--tls-cert-file {cert}" in capsys.readouterr().err
