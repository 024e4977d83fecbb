"""`lyra report` against a tiny fake Prometheus (an HTTP server in the test answering the two API paths the command
uses): one PNG per panel of every dashboard, the range asked as the flags say, progress printed; a query Prometheus
refuses fails only its panel (exit 1, its reason printed); an unreachable Prometheus and bad flags are clear errors."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lyra.cli import main
from lyra.cli.report_panels import PrometheusApi, Window, write_report
from lyra.dashboards.definitions import DASHBOARDS
from lyra.dashboards.grafana import concrete
from lyra.localcluster.ports import allocate_ports

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REFUSED_METRIC = "lyra_leader"


@dataclass
class FakePrometheus:
    """Answers ``/api/v1/status/buildinfo`` and ``/api/v1/query_range``: each query gets two series labelled with
    the labels it groups by, over the asked range; a query naming ``refuse`` gets Prometheus' 400 bad_data."""

    refuse: str | None = None
    asked: list[dict[str, str]] = field(default_factory=list)

    def answer(self, path: str, parameters: dict[str, str]) -> tuple[int, dict[str, Any] | str]:
        if path == "/api/v1/status/buildinfo":
            return 200, {"status": "success", "data": {"version": "2.53.0-fake"}}
        if path != "/api/v1/query_range":
            return 404, "404 page not found\n"
        self.asked.append(parameters)
        expr = parameters["query"]
        if self.refuse is not None and self.refuse in expr:
            return 400, {"status": "error", "errorType": "bad_data", "error": f'1:1: parse error: unexpected "{expr}"'}
        start, end, step = (float(parameters[key]) for key in ("start", "end", "step"))
        times = [start + i * step for i in range(int((end - start) // step) + 1)]
        grouped = re.findall(r"by \(([^)]*)\)", expr)
        labels = [label.strip() for label in grouped[-1].split(",")] if grouped else []
        result = [
            {
                "metric": {label: f"{label}-{n}" for label in labels if label != "le"},
                "values": [[t, "NaN" if i % 7 == 0 else str(n + i % 5)] for i, t in enumerate(times)],
            }
            for n in range(2)
        ]
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}


@pytest.fixture
def prometheus() -> Iterator[tuple[str, FakePrometheus]]:
    fake = FakePrometheus()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            status, body = fake.answer(parts.path, dict(urllib.parse.parse_qsl(parts.query)))
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def panel_count() -> int:
    return sum(len(dashboard.panels) for dashboard in DASHBOARDS)


def test_one_png_per_panel_over_the_asked_range(
    prometheus: tuple[str, FakePrometheus], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, fake = prometheus
    out = tmp_path / "report"

    code = main(["report", "--prometheus", url, "--out-dir", str(out), "--since", "2h"])

    printed = capsys.readouterr()
    assert code == 0, printed.err
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == panel_count()
    assert all(path.read_bytes().startswith(PNG_SIGNATURE) for path in pngs)
    assert {path.name.split("-0")[0] for path in pngs} == {"lyra-loans", "lyra-training", "lyra-internals"}
    assert (out / "lyra-loans-01-gpus-lent-now.png").is_file()
    queries = [
        concrete(query.expr, dashboard.variables)
        for dashboard in DASHBOARDS
        for panel in dashboard.panels
        for query in panel.queries
    ]
    assert [asked["query"] for asked in fake.asked] == queries
    for asked in fake.asked:
        assert float(asked["end"]) - float(asked["start"]) == pytest.approx(7200)
        assert float(asked["step"]) == 24  # 2 h over 300 points
    assert "Prometheus 2.53.0-fake" in printed.out
    assert f"[1/{panel_count()}] Lyra / Loans: GPUs lent now: 2 series" in printed.out
    assert f"wrote {panel_count()} plots" in printed.out


def test_the_reclaim_deadline_line_follows_the_flag(prometheus: tuple[str, FakePrometheus], tmp_path: Path) -> None:
    url, _ = prometheus
    loans = next(d for d in DASHBOARDS if d.uid == "lyra-loans")
    api = PrometheusApi(url)
    window = Window.ending(time.time(), 600)

    default, _ = write_report(api, [loans], tmp_path / "default", window, lambda _: None)
    chosen, _ = write_report(
        api, [loans], tmp_path / "chosen", window, lambda _: None, values={"operator.reclaimDeadlineSeconds": 45}
    )

    assert [(p.panel.title, p.threshold) for p in default if p.threshold is not None] == [
        ("p95 reclaim time against the deadline", 300)
    ]
    assert [p.threshold for p in chosen if p.threshold is not None] == [45]
    # Each plot records the largest value it drew (the fake's series reach 1 + 4), NaN gaps left out.
    assert {p.peak for p in default} == {5.0}
    assert main(["report", "--prometheus", url, "--out-dir", str(tmp_path), "--reclaim-deadline", "45"]) == 0


def test_a_refused_query_fails_its_panel_only_with_prometheus_reason(
    prometheus: tuple[str, FakePrometheus], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, fake = prometheus
    fake.refuse = REFUSED_METRIC
    out = tmp_path / "report"

    code = main(["report", "--prometheus", url, "--out-dir", str(out), "--dashboard", "lyra-internals"])

    printed = capsys.readouterr()
    assert code == 1
    internals = next(d for d in DASHBOARDS if d.uid == "lyra-internals")
    assert len(list(out.glob("*.png"))) == len(internals.panels) - 1
    assert not list(out.glob("*-leader.png"))
    assert "Lyra / Internals: Leader: FAILED" in printed.out
    leader = 'sum(lyra_leader{cluster=~".*", namespace=~".*", job=~".*"})'
    assert f"lyra report: Lyra / Internals: Leader: query '{leader}' failed: bad_data: 1:1: parse error" in printed.err
    assert "Traceback" not in printed.err


def test_an_unreachable_prometheus_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [port] = allocate_ports(1)  # free: nothing listens there

    code = main(["report", "--prometheus", f"http://127.0.0.1:{port}", "--out-dir", str(tmp_path / "out")])

    printed = capsys.readouterr()
    assert code == 1
    assert printed.err == f"lyra report: cannot reach Prometheus at http://127.0.0.1:{port}: connection refused\n"
    assert "Traceback" not in printed.err
    assert not (tmp_path / "out").exists()


def test_a_server_that_is_not_prometheus_is_named(
    prometheus: tuple[str, FakePrometheus], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = prometheus
    code = main(["report", "--prometheus", f"{url}/not-prometheus", "--out-dir", str(tmp_path)])
    assert code == 1
    assert "answered HTTP 404" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--prometheus", "localhost:9090"], "expected an http:// or https:// URL"),
        (["--prometheus", "http://127.0.0.1:9090", "--since", "an hour"], "expected a duration such as 30m"),
        (["--prometheus", "http://127.0.0.1:9090", "--since", "10s"], "between 1m and 90d"),
        (["--prometheus", "http://127.0.0.1:9090", "--dashboard", "lyra-gpus"], "invalid choice: 'lyra-gpus'"),
        (["--prometheus", "http://127.0.0.1:9090", "--timeout", "0"], "between 0 and 600"),
        (["--prometheus", "http://127.0.0.1:9090", "--reclaim-deadline", "-5"], "between 0 and 86400"),
    ],
)
def test_bad_flags_are_refused_with_exit_2(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["report", *flags, "--out-dir", str(tmp_path)])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_an_out_dir_that_is_a_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.png"
    target.write_bytes(b"")
    assert main(["report", "--prometheus", "http://127.0.0.1:1", "--out-dir", str(target)]) == 2
    assert f"--out-dir {target} is not writable: {target} is a file, not a directory" in capsys.readouterr().err


def test_an_out_dir_that_cannot_be_made_is_refused_before_any_query(
    prometheus: tuple[str, FakePrometheus], capsys: pytest.CaptureFixture[str]
) -> None:
    url, fake = prometheus
    # /proc takes no new directory, even from root: found by trying before the queries, not after them
    assert main(["report", "--prometheus", url, "--out-dir", "/proc/lyra-test"]) == 2
    assert "lyra report: --out-dir /proc/lyra-test is not writable: /proc takes no new directory" in (
        capsys.readouterr().err
    )
    assert fake.asked == []


def test_the_variables_narrow_every_query_to_the_chosen_release(
    prometheus: tuple[str, FakePrometheus], tmp_path: Path
) -> None:
    url, fake = prometheus
    code = main(
        ["report", "--prometheus", url, "--out-dir", str(tmp_path), "--namespace", "team-a", "--job", "lyra-.*"]
    )
    assert code == 0
    assert fake.asked
    for asked in fake.asked:
        assert 'namespace=~"team-a"' in asked["query"]
        assert 'job=~"lyra-.*"' in asked["query"]
        assert 'cluster=~".*"' in asked["query"]
        assert "$" not in asked["query"]


@pytest.mark.parametrize("regex", ["", 'a"b', "(unclosed", "x" * 300])
def test_a_bad_variable_regex_is_refused(regex: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["report", "--prometheus", "http://127.0.0.1:9", "--out-dir", str(tmp_path), "--namespace", regex])
    assert exited.value.code == 2
    assert "--namespace" in capsys.readouterr().err
