"""Every command that talks to a cluster says in one line why it cannot: a kubeconfig that cannot be used is bad
input (exit 2) named with its file and fault; a server that cannot be reached, or refuses, exits 1 with what
happened (refused, no such host, the status and the server's own message), never a traceback or urllib3's retry
dump. The servers here are real sockets on loopback: a closed port, and an HTTP server answering as an API server
that refuses does."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from lyra.apiserver_failures import MAX_MESSAGE, describe_api_failure
from lyra.cli.kube_client import KubeconfigError, api_client, default_kubeconfigs, kubeconfig_problem
from tests.answering_server import Answer, answering_server
from tests.behaving_server import behaving_server, silent
from tests.unit.cli.running import exit_code, kubeconfig_text

#: Each command that reads a kubeconfig, as run with one.
COMMANDS = [
    ["check"],
    ["status"],
    ["nodes", "restore", "--dry-run"],
    ["emulate"],
    ["operator", "--once"],
    ["extender", "--port", "18888"],
    ["plan", "allocate", "--from-cluster"],
]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"", "not a kubeconfig: expected a mapping with clusters, contexts and users, got an empty document"),
        (b"root:x:0:0:root:/root:/bin/bash\n", "got a string"),
        (b"- a\n- b\n", "got a list"),
        (b"\xb0\x01binary", "not UTF-8: byte 0xb0 at line 1, column 1; save the file as UTF-8"),
        (b"a: [\n", "not valid YAML (line 2, column 1: expected the node content"),
        (b"apiVersion: v1\nkind: Config\n", "no current-context"),
        (b"current-context: x\ncontexts: []\n", "current-context 'x' is not among its contexts (none)"),
        (b"current-context: x\ncontexts: 5\n", "contexts: expected a list, got a int"),
        (b"current-context: x\ncontexts: [a]\n", "contexts[0]: expected a mapping with a name"),
        (b"current-context: x\ncontexts: [{name: x}]\n", "context 'x': expected a mapping under 'context'"),
        (
            b"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: d}]\n",
            "context 'x': its cluster 'c' is not among the clusters",
        ),
        (
            b"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {}}]\n",
            "cluster 'c': no server",
        ),
    ],
)
def test_a_file_that_is_no_kubeconfig_is_named_by_its_fault(raw: bytes, problem: str) -> None:
    found = kubeconfig_problem(raw)
    assert found is not None
    assert problem in found


def test_a_kubeconfig_kubectl_would_use_has_no_fault() -> None:
    assert kubeconfig_problem(kubeconfig_text("https://127.0.0.1:6443").encode()) is None


@pytest.mark.parametrize("command", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
@pytest.mark.parametrize(
    ("content", "fault"),
    [
        ("- a\n", "not a kubeconfig: expected a mapping with clusters, contexts and users, got a list"),
        ("clusters: [\n", "not valid YAML (line 2, column 1"),
        ("apiVersion: v1\nkind: Config\n", "no current-context"),
    ],
    ids=["list", "yaml", "context"],
)
def test_every_command_refuses_a_broken_kubeconfig_as_bad_input(
    command: list[str], content: str, fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    assert exit_code([*command, "--kubeconfig", str(path)]) == 2
    out, err = capsys.readouterr()
    name = " ".join(word for word in command[:2] if not word.startswith("-"))
    assert err.startswith(f"lyra {name}: --kubeconfig {path}: {fault}"), err
    assert err.count("\n") == 1, err
    assert out == ""


@pytest.mark.parametrize("command", [["check"], ["status"], ["emulate"], ["nodes", "restore", "--dry-run"]])
def test_a_directory_or_a_device_is_not_a_kubeconfig(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in (str(tmp_path), "/dev/null"):
        assert exit_code([*command, "--kubeconfig", path]) == 2
        assert f"{path}: not a regular file" in capsys.readouterr().err


def test_the_default_kubeconfigs_are_the_existing_files_kubeconfig_names(tmp_path: Path) -> None:
    first, second, home = tmp_path / "a", tmp_path / "b", tmp_path / "home-config"
    first.write_text("x")
    second.write_text("x")
    variable = f"{first}:{tmp_path / 'missing'}::{second}"
    assert default_kubeconfigs(variable, home) == [
        (f"$KUBECONFIG file {first}", first),
        (f"$KUBECONFIG file {second}", second),
    ]
    assert default_kubeconfigs(str(tmp_path / "missing"), home) == []
    assert default_kubeconfigs(None, home) == []
    home.write_text("x")
    assert default_kubeconfigs(None, home) == [("~/.kube/config", home)]
    assert default_kubeconfigs("", home) == [("~/.kube/config", home)]


def test_a_broken_default_kubeconfig_is_reported_not_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "config"
    broken.write_text("- a\n")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    with pytest.raises(KubeconfigError, match=rf"^\$KUBECONFIG file {broken}: not a kubeconfig"):
        api_client(None)


def test_no_kubeconfig_anywhere_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match=r"^no kubeconfig: --kubeconfig not given, none at \$KUBECONFIG"):
        api_client(None)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("command", [["check"], ["status"], ["plan", "allocate", "--from-cluster"]])
def test_a_server_nobody_listens_on_is_said_refused(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(server))
    assert exit_code([*command, "--kubeconfig", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err.endswith(f"cannot reach the API server at {server}: connection refused\n"), err
    assert err.count("\n") == 1
    assert "Retry" not in err
    assert "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    "command",
    [["check"], ["status"], ["plan", "allocate", "--from-cluster"], ["nodes", "restore", "--dry-run"]],
    ids=["check", "status", "plan", "nodes-restore"],
)
def test_a_server_that_never_answers_is_said_after_the_one_shot_timeout(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lyra check` waited for ever, `lyra status` 8 minutes (four tries of 120 s): now one try of the read timeout."""
    monkeypatch.setattr("lyra.cli.kube_client.ONE_SHOT_TIMEOUT_S", (5.0, 0.5))
    path = tmp_path / "kubeconfig"
    accepted: list[socket.socket] = []
    with behaving_server(silent, accepted) as server:
        path.write_text(kubeconfig_text(server))
        assert exit_code([*command, "--kubeconfig", str(path)]) == 1
        assert len(accepted) == 1  # a read that timed out is not tried again
    err = capsys.readouterr().err
    assert err.endswith(f"cannot reach the API server at {server}: timed out waiting for an answer\n"), err
    assert err.count("\n") == 1


def test_a_snapshot_that_cannot_be_saved_is_refused_before_the_cluster_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nobody listens at the server: had the cluster been read first, the error would be "connection refused"
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(f"http://127.0.0.1:{_closed_port()}"))
    saved = ["--save-snapshot", "/proc/lyra-test/snapshot.json"]
    assert exit_code(["plan", "allocate", "--from-cluster", "--kubeconfig", str(path), *saved]) == 2
    err = capsys.readouterr().err
    assert err == (
        "lyra plan allocate: --save-snapshot /proc/lyra-test/snapshot.json: its directory /proc/lyra-test is not "
        "writable: /proc takes no new directory (No such file or directory)\n"
    )


FORBIDDEN = 'nodes is forbidden: User "system:serviceaccount:ml:bob" cannot list resource "nodes" at the cluster scope'


def _status_body(code: int, reason: str, message: str) -> bytes:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    return json.dumps(status | {"code": code}).encode()


@pytest.mark.parametrize("command", [["check"], ["status"]])
@pytest.mark.parametrize(
    "case",
    [
        ((403, _status_body(403, "Forbidden", FORBIDDEN), "application/json"), f"answered 403 Forbidden: {FORBIDDEN}"),
        (
            (401, _status_body(401, "Unauthorized", "Unauthorized"), "application/json"),
            "answered 401 Unauthorized: the kubeconfig's credentials were not accepted",
        ),
        (
            (404, b"404 page not found", "text/plain"),
            "answered 404 Not Found: it does not serve the resource: are Lyra's CRDs installed",
        ),
    ],
    ids=["403", "401", "404"],
)
def test_a_refusing_server_is_quoted_in_one_line(
    command: list[str],
    case: tuple[Answer, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    answer, said = case
    path = tmp_path / "kubeconfig"
    with answering_server(lambda _method, _path: answer) as server:
        path.write_text(kubeconfig_text(server))
        assert exit_code([*command, "--kubeconfig", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lyra {command[0]}: cannot read the cluster: the API server at {server} {said}"), err
    assert err.count("\n") == 1
    assert "HTTP response headers" not in err


def test_a_failure_of_no_known_kind_keeps_its_first_line_and_is_cut() -> None:
    assert describe_api_failure(RuntimeError("first\nsecond"), None) == "RuntimeError: first"
    long = describe_api_failure(RuntimeError("x" * 1000), "https://h")
    assert len(long) == MAX_MESSAGE
    assert long.endswith("...")


def test_kubeconfig_files_merged_by_kubeconfig_may_each_hold_a_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As kubectl merges them: the current context in one file, the cluster and user in another, an empty third.
    Each file alone would be refused; merged, they make one client."""
    context, rest, empty = tmp_path / "context", tmp_path / "rest", tmp_path / "empty"
    whole = kubeconfig_text("https://127.0.0.1:6443")
    context.write_text("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n")
    rest.write_text("\n".join(line for line in whole.splitlines() if "context" not in line) + "\n")
    empty.write_text("")
    for part in (context, rest, empty):
        assert kubeconfig_problem(part.read_bytes()) is not None
        assert kubeconfig_problem(part.read_bytes(), alone=False) is None
    monkeypatch.setenv("KUBECONFIG", f"{context}:{rest}:{empty}")
    api = api_client(None)
    try:
        assert api.configuration.host == "https://127.0.0.1:6443"
    finally:
        api.close()  # type: ignore[no-untyped-call]
    (tmp_path / "broken").write_text("- a\n")
    monkeypatch.setenv("KUBECONFIG", f"{context}:{tmp_path / 'broken'}")
    with pytest.raises(KubeconfigError, match=rf"^\$KUBECONFIG file {tmp_path / 'broken'}: not a kubeconfig"):
        api_client(None)
    monkeypatch.setenv("KUBECONFIG", f"{empty}:{empty}")
    with pytest.raises(KubeconfigError, match=r"^\$KUBECONFIG: every file it names is empty$"):
        api_client(None)
