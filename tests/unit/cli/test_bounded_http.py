"""A GET to a server a user names is bounded as a whole: a server that trickles its headers or its body, or never ends
its body, is refused with one line, in the time and memory given, where urllib alone waited for ever or read until
the memory ran out; an answer that is not whole HTTP is said, where it was a traceback. Each server here is a real
socket in the test's process behaving as the case says."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from lyra.cli import main
from lyra.cli.bounded_http import AnswerBrokenError, AnswerTooLargeError, AnswerTooSlowError, bounded_get
from tests.behaving_server import Behaviour, behaving_server, silent

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


def whole(body: bytes, status: str = "200 OK") -> Behaviour:
    def behaviour(connection: socket.socket, _stop: threading.Event) -> None:
        connection.sendall(f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)

    return behaviour


def trickled_body(connection: socket.socket, stop: threading.Event) -> None:
    """Headers at once, then a byte of body every tenth of a second: each wait on the socket is short."""
    connection.sendall(HEAD + b"\r\n")
    while not stop.wait(0.1):
        connection.sendall(b" ")


def trickled_handshake(connection: socket.socket, stop: threading.Event) -> None:
    """The start of a TLS record of 16 KiB, then a byte of it every tenth of a second."""
    connection.sendall(b"\x16\x03\x03\x40\x00")
    while not stop.wait(0.1):
        connection.sendall(b"\x00")


def trickled_headers(connection: socket.socket, stop: threading.Event) -> None:
    """The status line, then a header's byte every tenth of a second: the headers never end."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not stop.wait(0.1):
        connection.sendall(b"a")


def endless_body(connection: socket.socket, stop: threading.Event) -> None:
    """A body sent as fast as it is read, never ending."""
    connection.sendall(HEAD + b"\r\n" + b'{"status":"success","data":{"result":[')
    chunk = b'{"metric":{},"values":[]},' * 4096
    while not stop.is_set():
        connection.sendall(chunk)


def test_a_whole_answer_is_read_with_its_status() -> None:
    with behaving_server(whole(b'{"ok": true}')) as url:
        answer = bounded_get(url, within_s=5, limit_bytes=1024)
    assert (answer.status, answer.body) == (200, b'{"ok": true}')


def test_an_error_status_is_an_answer_with_its_body() -> None:
    with behaving_server(whole(b"no pass yet", "503 Service Unavailable")) as url:
        answer = bounded_get(url, within_s=5, limit_bytes=1024)
    assert (answer.status, answer.body) == (503, b"no pass yet")


def test_a_body_of_exactly_the_limit_is_read() -> None:
    with behaving_server(whole(b"x" * 1000)) as url:
        assert bounded_get(url, within_s=5, limit_bytes=1000).body == b"x" * 1000


@pytest.mark.parametrize(
    ("behaviour", "scheme"),
    [(trickled_body, "http"), (trickled_headers, "http"), (trickled_handshake, "https"), (silent, "http")],
    ids=["the-body", "the-headers", "the-tls-handshake", "nothing-at-all"],
)
def test_a_trickled_answer_ends_at_the_deadline(behaviour: Behaviour, scheme: str) -> None:
    started = time.monotonic()
    with behaving_server(behaviour) as url, pytest.raises(AnswerTooSlowError, match=r"^no whole answer within 0\.5 s$"):
        bounded_get(url.replace("http", scheme, 1), within_s=0.5, limit_bytes=1024 * 1024)
    assert time.monotonic() - started < 5  # bounded by the deadline, not by the server


def test_a_body_that_never_ends_stops_at_the_limit() -> None:
    with (
        behaving_server(endless_body) as url,
        pytest.raises(AnswerTooLargeError, match=r"^an answer larger than 1 MiB$"),
    ):
        bounded_get(url, within_s=60, limit_bytes=1024 * 1024)


def test_a_body_one_byte_over_the_limit_is_refused() -> None:
    with behaving_server(whole(b"x" * 1001)) as url, pytest.raises(AnswerTooLargeError, match="larger than 1000 bytes"):
        bounded_get(url, within_s=5, limit_bytes=1000)


def test_the_watchdog_ends_with_the_exchange() -> None:
    with behaving_server(whole(b"{}")) as url:
        bounded_get(url, within_s=5, limit_bytes=1024)
    assert "lyra-http-deadline" not in {thread.name for thread in threading.enumerate()}


def sent(data: bytes) -> Behaviour:
    def behaviour(connection: socket.socket, _stop: threading.Event) -> None:
        connection.sendall(data)

    return behaviour


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (sent(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"),
         "a broken HTTP answer (cut short: 3 of its 100 bytes)"),
        (sent(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n"),
         "a broken HTTP answer (LineTooLong: got more than 65536 bytes when reading header line)"),
        (sent(b"SSH-2.0-OpenSSH_9.2\r\n"), "a broken HTTP answer (BadStatusLine: SSH-2.0-OpenSSH_9.2)"),
        (sent(b"\x1b[2J\x1b[31mHTTP\r\n"), "a broken HTTP answer (BadStatusLine: \\x1b[2J\\x1b[31mHTTP)"),
    ],
    ids=["cut-short", "a-header-line-too-long", "not-http", "terminal-escapes"],
)  # fmt: skip
def test_an_answer_that_is_not_whole_http_is_said(behaviour: Behaviour, said: str) -> None:
    with behaving_server(behaviour) as url, pytest.raises(AnswerBrokenError) as raised:
        bounded_get(url, within_s=5, limit_bytes=1024 * 1024)
    assert str(raised.value) == said


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (trickled_body, "lyra report: Prometheus at {url} gave no whole answer within 1 s (--timeout)\n"),
        (endless_body, "lyra report: {url}/api/v1/status/buildinfo gave an answer larger than 1 MiB\n"),
        (
            sent(b"SSH-2.0-OpenSSH_9.2\r\n"),
            "lyra report: {url}/api/v1/status/buildinfo gave a broken HTTP answer "
            "(BadStatusLine: SSH-2.0-OpenSSH_9.2): is it Prometheus?\n",
        ),
    ],
    ids=["trickled", "endless", "not-http"],
)
def test_lyra_report_against_such_a_server_is_one_line_and_exit_1(
    behaviour: Behaviour, said: str, monkeypatch: pytest.MonkeyPatch, tmp_path: object,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setattr("lyra.cli.report_panels.MAX_ANSWER_BYTES", 1024 * 1024)
    with behaving_server(behaviour) as url:
        code = main(["report", "--prometheus", url, "--out-dir", f"{tmp_path}/out", "--timeout", "1"])
    assert (code, capsys.readouterr().err) == (1, said.format(url=url))


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (trickled_body, "lyra status: {url}/plan gave no whole answer within 0.5 s: is it Lyra's operator?\n"),
        (endless_body, "lyra status: {url}/plan gave an answer larger than 1 MiB: is it Lyra's operator?\n"),
        (
            sent(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"),
            "lyra status: {url}/plan gave a broken HTTP answer (cut short: 3 of its 100 bytes): "
            "is it Lyra's operator?\n",
        ),
    ],
    ids=["trickled", "endless", "cut-short"],
)
def test_lyra_status_shadow_against_such_a_server_is_one_line_and_exit_1(
    behaviour: Behaviour, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("lyra.cli.status_commands.MAX_SHADOW_PLAN_BYTES", 1024 * 1024)
    monkeypatch.setattr("lyra.cli.status_commands.SHADOW_TIMEOUT_S", 0.5)
    with behaving_server(behaviour) as url:
        code = main(["status", "--shadow", url])
    assert (code, capsys.readouterr().err) == (1, said.format(url=url))
