"""The commands that read a cluster, run as commands against the real kube-apiserver with credentials it refuses: a
ServiceAccount with no role (403, whose Status message names the verb, the resource and the account) and a token
it does not know (401). Each command exits 1 with one line that quotes the server, never a traceback or the
client's dump of the answer's headers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.kubeconfig import write_kubeconfig
from tests.operator_support import token_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: Each command that reads the cluster, as run with a kubeconfig.
COMMANDS = [["check"], ["status"], ["plan", "allocate", "--from-cluster"], ["nodes", "restore", "--dry-run"]]


def lyra(argv: list[str], kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lyra", *argv, "--kubeconfig", str(kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy())


def _said(result: subprocess.CompletedProcess[str], argv: list[str]) -> str:
    """The line a refused command ended with, checked for its shape."""
    name = " ".join(word for word in argv[:2] if not word.startswith("-"))
    assert result.returncode == 1, f"lyra {name} exited {result.returncode}: {result.stderr}"
    assert result.stdout == ""
    *notes, last = result.stderr.splitlines()
    # `nodes restore` notes first that it could not read the operator's Lease (it goes on without it).
    assert all(note.startswith(f"lyra {name}: note: ") for note in notes), result.stderr
    assert last.startswith(f"lyra {name}: "), result.stderr
    assert "Traceback" not in result.stderr
    assert "HTTP response headers" not in result.stderr
    return last + "\n"


def test_an_account_without_a_role_is_told_what_it_may_not_do(
    local_cluster: ControlPlane, kube_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody"))
    )
    kubeconfig = token_kubeconfig(local_cluster, kube_api, "nobody", namespace, tmp_path / "kubeconfig")
    server = local_cluster.state.api_server
    for argv in COMMANDS:
        said = _said(lyra(argv, kubeconfig), argv)
        assert f"the API server at {server} answered 403 Forbidden: " in said, said
        assert f'is forbidden: User "system:serviceaccount:{namespace}:nobody" cannot ' in said, said


def test_a_token_the_server_does_not_know_is_said_unauthorized(local_cluster: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig",
        cluster_name="pytest",
        server=local_cluster.state.api_server,
        ca_cert=local_cluster.credentials.ca_cert,
        user="stranger",
        token="not-a-token-the-server-issued",
    )
    for argv in COMMANDS:
        said = _said(lyra(argv, kubeconfig), argv)
        assert said.endswith(
            f"the API server at {local_cluster.state.api_server} answered 401 Unauthorized: "
            "the kubeconfig's credentials were not accepted\n"
        ), said
