"""The newcomer's path of docs/operations.md, end to end: hack/newcomer.sh (whose commands the doc shows) clones this
repository's working tree as it is, committed or not, into a temporary directory, installs the chart onto a local
control plane of its own (its own state directory, free ports), runs the operator and the extender as the chart's
ServiceAccounts and a local Prometheus through a loan and a reclaim. It must exit 0 with every check of Prometheus'
answers passed, and leave nothing listening and no cluster behind.

It takes minutes (docs/operations.md, "The whole path, run and checked"); the binaries must be cached already
(``make binaries``), as for every e2e test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lyra.localcluster.ports import allocate_ports, is_listening

REPOSITORY = Path(__file__).resolve().parents[2]
SCRIPT = REPOSITORY / "hack" / "newcomer.sh"
#: How long the script may take; it stops itself earlier when a step's own deadline passes.
SCRIPT_TIMEOUT_S = 1500
#: How long its cleanup may take once it is told to stop (SIGTERM), before the test kills what is left.
CLEANUP_TIMEOUT_S = 180
CHECKS = (
    "the operator's target is up",
    "the extender's target is up",
    "the operator's build",
    "the extender answered the scheduler",
    "servers lent",
    "4 T4 servers serving inference",
    "the reclaims the 32 replicas needed counted (4 T4 servers, less those not on loan before)",
)
PASSED = re.compile(r"newcomer path: passed in (\d+) s: Prometheus answered Lyra's metrics")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(SCRIPT_TIMEOUT_S + CLEANUP_TIMEOUT_S + 60)]


def working_tree_commit(scratch: Path) -> str:
    """A commit of the working tree as it is (changed and new files, .gitignore respected), made through a temporary
    index like ``git stash create``: the branch, HEAD and the index stay as they are."""
    env = {
        **os.environ,
        "GIT_INDEX_FILE": str(scratch / "index"),
        "GIT_AUTHOR_NAME": "lyra tests",
        "GIT_AUTHOR_EMAIL": "tests@lyra.invalid",
        "GIT_COMMITTER_NAME": "lyra tests",
        "GIT_COMMITTER_EMAIL": "tests@lyra.invalid",
    }

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(REPOSITORY), *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
        return result.stdout.strip()

    git("read-tree", "HEAD")
    git("add", "--all")
    return git("commit-tree", git("write-tree"), "-p", "HEAD", "-m", "the working tree, for the newcomer path's test")


def run_script(env: dict[str, str], output: Path) -> int:
    """Run the script in its own process group; past :data:`SCRIPT_TIMEOUT_S`, SIGTERM it (its cleanup runs), then
    kill the group if the cleanup outlives :data:`CLEANUP_TIMEOUT_S`."""
    with output.open("wb") as out:
        process = subprocess.Popen(
            ["bash", str(SCRIPT)], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return process.wait(timeout=SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=CLEANUP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=60)
            raise AssertionError(f"hack/newcomer.sh took more than {SCRIPT_TIMEOUT_S} s:\n{tail(output)}") from None


def tail(output: Path, lines: int = 60) -> str:
    """The script's progress and failure lines, then its last ``lines`` lines (the logs' last lines when it failed)."""
    text = output.read_text(errors="replace").splitlines()
    progress = [line for line in text if line.startswith(("== ", "gave up", "FAILED", "newcomer path:"))]
    return "\n".join([*progress, f"-- the last {lines} lines of {output}:", *text[-lines:]])


def test_a_newcomer_following_the_docs_sees_lyras_metrics_in_a_local_prometheus(tmp_path: Path) -> None:
    ports = allocate_ports(3)
    env = {name: value for name, value in os.environ.items() if name not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    env |= {
        "NEWCOMER_DIR": str(tmp_path / "newcomer"),
        "LYRA_REPOSITORY": str(REPOSITORY),
        "LYRA_REVISION": working_tree_commit(tmp_path),
        "LYRA_STATE_DIR": str(tmp_path / "state"),
        "OPERATOR_PORT": str(ports[0]),
        "EXTENDER_PORT": str(ports[1]),
        "PROMETHEUS_PORT": str(ports[2]),
    }
    output = tmp_path / "newcomer.out"
    started = time.monotonic()
    code = run_script(env, output)
    took = time.monotonic() - started
    text = output.read_text(errors="replace")
    assert code == 0, f"hack/newcomer.sh exited {code} after {took:.0f} s:\n{tail(output)}"
    for check in CHECKS:
        assert f"\nok: {check}: " in text, check
    assert re.search(r"\nok: lyra report wrote \d+ plots into out/report\n", text)
    assert PASSED.fullmatch(text.splitlines()[-1]), tail(output)
    assert not any(is_listening(port) for port in ports), "something the script started still listens"
    assert not (tmp_path / "state" / "cluster" / "default").exists(), "the local cluster's state was not removed"
    print(f"hack/newcomer.sh passed in {took:.0f} s")
