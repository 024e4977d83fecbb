"""`lyra status --shadow`: the shadow operator's plan, read from its `/plan` endpoint, and bad addresses refused."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from http.server import ThreadingHTTPServer

import pytest

from lyra.cli import main
from lyra.cli.status_commands import render_shadow
from lyra.localcluster.ports import allocate_ports
from lyra.operator.endpoints import Health, serve
from lyra.operator.metrics import OperatorMetrics

PLAN = {
    "dryRun": True,
    "decidedAt": "2026-11-26T16:00:00Z",
    "pass": 3,
    "actions": ["node t4-0: loaned (idle for 60 s, not needed)", "CreatePod TrainingJob team/bert Started"],
    "summary": {"lent": 1, "reclaimed": 0},
}


@pytest.fixture
def shadow() -> Iterator[tuple[str, dict[str, Mapping[str, object]]]]:
    holder: dict[str, Mapping[str, object]] = {}
    server: ThreadingHTTPServer = serve(
        "127.0.0.1",
        0,
        OperatorMetrics(),
        Health(60),
        plan=lambda: holder.get("plan"),
    )
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", holder
    finally:
        server.shutdown()
        server.server_close()


def test_the_plan_is_rendered_by_kind_then_line_by_line() -> None:
    text = render_shadow(PLAN)
    assert (
        text.splitlines()[0]
        == "shadow mode: pass 3 at 2026-11-26T16:00:00Z would apply 2 actions (1 CreatePod, 1 node)"
    )
    assert "summary: lent=1" in text
    assert "  node t4-0: loaned (idle for 60 s, not needed)" in text


def test_status_reads_the_shadow_operators_plan(
    shadow: tuple[str, dict[str, Mapping[str, object]]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, holder = shadow
    assert main(["status", "--shadow", url]) == 1
    assert "no pass yet" in capsys.readouterr().err
    holder["plan"] = PLAN
    assert main(["status", "--shadow", url + "/"]) == 0
    assert "would apply 2 actions" in capsys.readouterr().out


def test_an_operator_that_is_not_a_shadow_has_no_plan(capsys: pytest.CaptureFixture[str]) -> None:
    server = serve("127.0.0.1", 0, OperatorMetrics(), Health(60))
    try:
        assert main(["status", "--shadow", f"http://127.0.0.1:{server.server_address[1]}"]) == 1
        assert "answered 404: is it running in shadow mode" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://host:1", "http://host:1/plan", "http://"])
def test_bad_addresses_are_refused(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--shadow", url])
    assert exited.value.code == 2
    assert "give the operator's address as http://HOST:PORT" in capsys.readouterr().err


def test_an_operator_nobody_answers_for_is_said_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    [port] = allocate_ports(1)  # free: nothing listens there
    assert main(["status", "--shadow", f"http://127.0.0.1:{port}"]) == 1
    assert (
        capsys.readouterr().err
        == f"lyra status: cannot reach the operator at http://127.0.0.1:{port}: connection refused\n"
    )
