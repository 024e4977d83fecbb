"""The configuration files of one real node: containerd's, the CNI network's, the kubelet's and its kubeconfig.

Each node has its own containerd (root, state, sockets, runc root, ``/opt``), its own kubelet directories and a
bridge and pod subnet of its own; every setting below that departs from a default was needed on these machines
(see docs/development.md, "Real nodes"): no CAP_SYS_RESOURCE (``restrict_oom_score_adj``), cgroup v1 with the
cgroupfs driver, no AppArmor, no iptables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyra.imagespec import recipe
from lyra.localcluster.realnodes import dns

#: The kubelet's own sysctl writes land on files bind-mounted over these entries, inside the node's mount namespace.
KUBELET_SYSCTLS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
SANDBOX_IMAGE = f"{recipe.PAUSE_REPOSITORY}:{recipe.PAUSE_TAG}"
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248


@dataclass(frozen=True)
class ImageArchive:
    path: Path
    base_name: str  # ``ctr image import --base-name``: the reference without its tag


@dataclass(frozen=True)
class NodeSpec:
    """One real node; written as JSON by the cluster for the node's runner process."""

    name: str
    directory: Path
    node_ip: str
    pod_cidr: str
    gateway: str
    bridge: str
    cgroup_parent: str  # relative to each cgroup hierarchy's root
    api_server: str
    ca_cert: Path
    token: str
    kubelet: Path
    containerd: Path
    ctr: Path
    runc: Path
    cni_bin: Path
    device_plugin: Path
    gpu_count: int
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]
    max_pods: int
    images: tuple[ImageArchive, ...]
    log_dir: Path

    # Unix socket paths are limited to 108 bytes, so sockets live under the short paths the node's mount namespace
    # maps onto its own directories (/run is ``run``, /var/lib is ``var-lib``), not under the state directory.
    @property
    def containerd_socket(self) -> Path:
        return Path("/run/containerd/containerd.sock")

    @property
    def kubelet_dir(self) -> Path:
        """/var/lib/kubelet inside the node (``var-lib/kubelet`` of its directory)."""
        return Path("/var/lib/kubelet")

    @property
    def var_lib(self) -> Path:
        """Bind-mounted over /var/lib in the node: /var/lib/kubelet/device-plugins, /var/lib/cni."""
        return self.directory / "var-lib"

    @property
    def var_log(self) -> Path:
        """Bind-mounted over /var/log in the node: /var/log/pods and /var/log/containers."""
        return self.directory / "var-log"

    @property
    def run(self) -> Path:
        """Bind-mounted over /run in the node: containerd's shim sockets under /run/containerd."""
        return self.directory / "run"

    def log(self, component: str) -> Path:
        return self.log_dir / f"{self.name}-{component}.log"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if isinstance(value, Path):
                data[key] = str(value)
            elif key == "images":
                data[key] = [{"path": str(image.path), "base_name": image.base_name} for image in value]
            elif key == "taints":
                data[key] = [dict(taint) for taint in value]
            else:
                data[key] = value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeSpec:
        paths = {"directory", "ca_cert", "kubelet", "containerd", "ctr", "runc", "cni_bin", "device_plugin", "log_dir"}
        values: dict[str, Any] = {}
        for key in cls.__dataclass_fields__:
            raw = data[key]
            if key in paths:
                values[key] = Path(raw)
            elif key == "images":
                values[key] = tuple(ImageArchive(Path(item["path"]), str(item["base_name"])) for item in raw)
            elif key == "taints":
                values[key] = tuple(dict(item) for item in raw)
            else:
                values[key] = raw
        return cls(**values)


def containerd_config(node: NodeSpec) -> str:
    directory = node.directory
    return "\n".join(
        [
            "version = 2",
            f'root = "{directory / "containerd-root"}"',
            f'state = "{directory / "containerd-state"}"',
            'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", '
            '"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", '
            '"io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
            "[grpc]",
            f'  address = "{node.containerd_socket}"',
            "[ttrpc]",
            '  address = "/run/containerd/containerd-ttrpc.sock"',
            "[debug]",
            '  address = ""',
            "[metrics]",
            '  address = ""',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{directory / "opt"}"',
            '[plugins."io.containerd.grpc.v1.cri"]',
            f'  sandbox_image = "{SANDBOX_IMAGE}"',
            # No CAP_SYS_RESOURCE here: without it every sandbox fails in runc's nsexec (oom_score_adj).
            "  restrict_oom_score_adj = true",
            "  disable_apparmor = true",
            "  netns_mounts_under_state_dir = true",
            '  stream_server_address = "127.0.0.1"',
            "  enable_selinux = false",
            '[plugins."io.containerd.grpc.v1.cri".containerd]',
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
            '  runtime_type = "io.containerd.runc.v2"',
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
            f'  BinaryName = "{node.runc}"',
            f'  Root = "{directory / "runc"}"',
            "  SystemdCgroup = false",
            '[plugins."io.containerd.grpc.v1.cri".cni]',
            f'  bin_dir = "{node.cni_bin}"',
            f'  conf_dir = "{directory / "cni-conf"}"',
            "",
        ]
    )


def cni_config(node: NodeSpec) -> dict[str, Any]:
    """A bridge per node with the node's pod subnet; the gateway on the bridge routes between nodes' subnets."""
    return {
        "cniVersion": "0.4.0",
        "name": "lyra",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "isDefaultGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_cidr, "gateway": node.gateway}]],
                    "dataDir": str(node.directory / "cni-ipam"),
                },
            }
        ],
    }


def kubelet_config(node: NodeSpec) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": node.node_ip,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        # The API server presents a client certificate signed by the cluster's CA (logs, exec).
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(node.ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{node.cgroup_parent}/pods",
        "failSwapOn": False,
        "failCgroupV1": False,
        "makeIPTablesUtilChains": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "resolvConf": "",
        # The network process's DNS (lyra.localcluster.realnodes.services): pods resolve Service names.
        "clusterDNS": [dns.DNS_IP],
        "clusterDomain": dns.CLUSTER_DOMAIN,
        "maxPods": node.max_pods,
        "registerWithTaints": list(node.taints),
        # The machine's disk is shared: eviction and image garbage collection would act on its fill level, not on
        # this node's, and could remove the imported images (nothing can pull them again).
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusMaxImages": 50,
        "serializeImagePulls": False,
        "staticPodPath": "",
    }


def kubeconfig(node: NodeSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "lyra", "cluster": {"server": node.api_server, "certificate-authority": str(node.ca_cert)}}
        ],
        "users": [{"name": node.name, "user": {"token": node.token}}],
        "contexts": [{"name": "lyra", "context": {"cluster": "lyra", "user": node.name}}],
        "current-context": "lyra",
    }


def kubelet_command(node: NodeSpec, config_path: Path, kubeconfig_path: Path) -> list[str]:
    labels = ",".join(f"{key}={value}" for key, value in sorted(node.labels.items()))
    return [
        str(node.kubelet),
        f"--config={config_path}",
        f"--kubeconfig={kubeconfig_path}",
        f"--root-dir={node.kubelet_dir}",
        f"--cert-dir={node.directory / 'pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.node_ip}",
        f"--node-labels={labels}",
        "--v=1",
    ]


def write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
