"""Component flags and configs: the extender contract, loopback-only listeners, real authn/authz."""

from __future__ import annotations

from pathlib import Path

from lyra.api.scheduler_extender import ExtenderClientTls
from lyra.localcluster.binaries import BinarySet
from lyra.localcluster.componentconfig import (
    Layout,
    Ports,
    api_server_command,
    audit_policy,
    controller_manager_command,
    etcd_command,
    kwok_command,
    scheduler_command,
    scheduler_config,
)
from lyra.localcluster.credentials import Credentials, generate_credentials

BINARIES = BinarySet(
    *(Path(f"/cache/{name}") for name in ("etcd", "apiserver", "kcm", "scheduler", "kwok", "kubectl", "helm"))
)
PORTS = Ports(2379, 2380, 6443, 10257, 10259, 10247)


def test_the_scheduler_calls_the_extender_for_gpu_pods_only() -> None:
    config = scheduler_config(Path("/state/scheduler.kubeconfig"), "http://127.0.0.1:8888")

    assert config["clientConnection"] == {"kubeconfig": "/state/scheduler.kubeconfig", "qps": 500, "burst": 1000}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["extenders"] == [
        {
            "urlPrefix": "http://127.0.0.1:8888",
            "prioritizeVerb": "prioritize",
            "preemptVerb": "preempt",
            "weight": 1,
            "nodeCacheCapable": True,
            "ignorable": True,
            "httpTimeout": "5s",
            "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
        }
    ]


def test_an_https_extender_is_called_with_the_clusters_ca_and_a_client_certificate() -> None:
    tls = ExtenderClientTls(Path("/pki/ca.crt"), Path("/pki/client.crt"), Path("/pki/client.key"))
    (extender,) = scheduler_config(Path("/k"), "https://127.0.0.1:8888", tls)["extenders"]
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "caFile": "/pki/ca.crt",
        "certFile": "/pki/client.crt",
        "keyFile": "/pki/client.key",
    }


def test_every_write_but_kwoks_is_audited() -> None:
    policy = audit_policy()
    assert policy["rules"][0] == {"level": "None", "users": ["lyra-kwok"]}
    assert set(policy["rules"][1]["verbs"]) == {"create", "update", "patch", "delete", "deletecollection"}
    assert policy["rules"][1]["level"] == "Metadata"
    assert policy["rules"][-1] == {"level": "None"}


def test_without_an_extender_the_scheduler_config_has_none() -> None:
    assert "extenders" not in scheduler_config(Path("/k"), None)


def test_every_listener_is_bound_to_loopback(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    credentials = generate_credentials(tmp_path / "pki")
    commands = [
        etcd_command(BINARIES, layout, PORTS),
        api_server_command(BINARIES, layout, PORTS, credentials),
        controller_manager_command(BINARIES, layout, PORTS, credentials, "lyra-test"),
        scheduler_command(BINARIES, layout, PORTS, credentials),
        kwok_command(BINARIES, layout, PORTS),
    ]
    address_flags = ("--bind-address=", "--listen-client-urls=", "--listen-peer-urls=", "--server-address=")

    addresses = [arg for command in commands for arg in command if arg.startswith(address_flags)]

    assert len(addresses) == 6
    assert all("127.0.0.1" in arg for arg in addresses)
    assert not any("0.0.0.0" in arg for command in commands for arg in command)


def test_the_api_server_uses_tokens_and_node_rbac_authorization(tmp_path: Path) -> None:
    credentials = generate_credentials(tmp_path)
    command = api_server_command(BINARIES, Layout(tmp_path), PORTS, credentials)

    assert "--authorization-mode=Node,RBAC" in command
    assert f"--token-auth-file={credentials.token_file}" in command
    assert f"--service-account-signing-key-file={credentials.service_account_key}" in command
    assert "--secure-port=6443" in command


def test_the_token_file_gives_only_the_admin_and_kwok_cluster_admin_rights(tmp_path: Path) -> None:
    credentials: Credentials = generate_credentials(tmp_path)
    lines = credentials.token_file.read_text().splitlines()

    users = {line.split(",")[1]: line.split(",", 3)[3:] for line in lines}
    assert users == {
        "lyra-admin": ['"system:masters"'],
        "system:kube-controller-manager": [],
        "system:kube-scheduler": [],
        "lyra-kwok": ['"system:masters"'],
    }
    assert len({line.split(",")[0] for line in lines}) == 4  # four distinct tokens
    assert credentials.token_file.stat().st_mode & 0o777 == 0o600
    assert credentials.ca_key.stat().st_mode & 0o777 == 0o600
