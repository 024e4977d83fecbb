"""A real Kubernetes control plane as local processes, with KWOK playing the GPU nodes.

Start order: etcd, kube-apiserver (token authentication, Node,RBAC authorization), then the controller-manager,
the scheduler (optionally calling Lyra's scheduler extender for ``nvidia.com/gpu`` pods) and KWOK; then the
profile's nodes are created and the start is complete once every node is Ready and the controller-manager has
created the ``default`` service account. Each step polls for its condition with a deadline and fails with the
tail of the log of the component that is at fault.

The state file is updated after each process start, so ``stop_cluster`` can always find what was started.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api.scheduler_extender import ExtenderClientTls
from lyra.localcluster import componentconfig, populate
from lyra.localcluster.binaries import (
    CNI_PLUGINS,
    CONTAINERD,
    DEVICE_PLUGIN,
    KUBELET,
    REAL_NODE_COMPONENTS,
    RUNC,
    BinaryCache,
    BinarySet,
    Component,
)
from lyra.localcluster.componentconfig import DEFAULT_EXTENDER_URL, Layout, Ports
from lyra.localcluster.credentials import (
    SERVICE_IP,
    Credentials,
    append_users,
    generate_credentials,
    issue_client_certificate,
)
from lyra.localcluster.kubeconfig import write_kubeconfig
from lyra.localcluster.ports import LOOPBACK, allocate_ports
from lyra.localcluster.processes import ProcessRecord, is_running, launch, read_start_ticks, tail, terminate
from lyra.localcluster.profile import ClusterProfile
from lyra.localcluster.realnodes import cgroups
from lyra.localcluster.realnodes import cluster as realcluster
from lyra.localcluster.realnodes.network import NetworkConfig, egress_configuration
from lyra.localcluster.realnodes.nodeconfig import NodeSpec, write_json
from lyra.localcluster.state import (
    ClusterState,
    Liveness,
    Phase,
    StateError,
    liveness,
    read_state,
    remove_state_dir,
    write_state,
)
from lyra.localcluster.waiting import WaitTimeoutError, wait_for

Reporter = Callable[[str], None]

# Stop in reverse dependency order: nothing should find its API server gone while it still works.
# Real nodes (realnode-*, not listed) stop first, then the cluster's network namespace.
STOP_ORDER = (
    realcluster.NETWORK_PROCESS,
    "kwok",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
)
_NOT_YET = (OSError, ValueError, populate.ProbeError, ApiException, urllib3.exceptions.HTTPError)


class ClusterStartError(RuntimeError):
    """The control plane did not come up; the message includes the failing component's log tail."""


class ClusterExistsError(RuntimeError):
    """A cluster already runs (or is being started) in this state directory."""

    def __init__(self, message: str, state: ClusterState, status: Liveness) -> None:
        super().__init__(message)
        self.state = state
        self.liveness = status


@dataclass(frozen=True)
class ClusterOptions:
    state_dir: Path
    profile: ClusterProfile
    profile_source: str
    name: str = "default"
    extender_url: str | None = DEFAULT_EXTENDER_URL
    crd_dir: Path | None = None
    die_with_parent: bool = False
    step_timeout: float = 90.0
    #: Real nodes (kubelets with containerd) beside the KWOK ones, shaped by the profile's realNodeGroups.
    real_nodes: int = 0
    images_dir: Path = realcluster.DEFAULT_IMAGES_DIR
    real_node_timeout: float = 300.0


class ControlPlane:
    """One control plane started (and owned) by this process."""

    def __init__(self, binaries: BinarySet, options: ClusterOptions) -> None:
        self.binaries = binaries
        self.options = options
        self.layout = Layout(options.state_dir)
        self._popens: dict[str, subprocess.Popen[bytes]] = {}
        self._state: ClusterState | None = None
        self._credentials: Credentials | None = None
        self.real_nodes: list[realcluster.PlannedNode] = []

    @property
    def state(self) -> ClusterState:
        if self._state is None:
            raise RuntimeError("the control plane has not been started")
        return self._state

    @property
    def kubeconfig(self) -> Path:
        return self.layout.admin_kubeconfig

    @property
    def credentials(self) -> Credentials:
        if self._credentials is None:
            raise RuntimeError("the control plane has not been started")
        return self._credentials

    def log_paths(self) -> dict[str, Path]:
        """Log file of every component started so far (none before ``start``)."""
        if self._state is None:
            return {}
        return {record.name: record.log_path for record in self._state.processes}

    def start(self, report: Reporter) -> ClusterState:
        """Start every component and the fake nodes; on any failure stop what was started and re-raise."""
        started = time.monotonic()
        try:
            self._start(report, started)
        except (*_NOT_YET, subprocess.SubprocessError) as error:
            # An API call or kubectl failed outright (a rejected node, a broken CRD file): same treatment.
            self._abort()
            raise ClusterStartError(f"{type(error).__name__}: {error}") from error
        except BaseException:
            self._abort()
            raise
        self._save(replace(self.state, phase=Phase.RUNNING, start_seconds=round(time.monotonic() - started, 2)))
        return self.state

    def stop(self, report: Reporter, *, keep_state: bool = False) -> None:
        """Stop every started process (reaping our children), then remove the state directory.

        ``keep_state`` leaves the directory (logs, kubeconfigs) for a post-mortem, as test sessions do.
        """
        if self._state is not None:
            _terminate_all(self._state, report, self._popens)
            self._popens.clear()
        if not keep_state:
            remove_state_dir(self.options.state_dir)

    def _start(self, report: Reporter, started: float) -> None:
        options, layout = self.options, self.layout
        for directory in (options.state_dir, layout.pki, layout.logs, layout.etcd_data, layout.kubeconfig_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        ports = Ports.from_list(allocate_ports(Ports.count()))
        api_server = f"https://{LOOPBACK}:{ports.api_server}"
        self._save(
            ClusterState(
                name=options.name,
                state_dir=options.state_dir,
                phase=Phase.STARTING,
                owner_pid=os.getpid(),
                owner_start_ticks=read_start_ticks(os.getpid()) or -1,
                kubeconfig=layout.admin_kubeconfig,
                api_server=api_server,
                profile=options.profile_source,
                extender_url=options.extender_url,
                started_at=time.time(),
            )
        )
        credentials = self._credentials = generate_credentials(layout.pki)
        cluster = f"lyra-{options.name}"
        write_kubeconfig(
            layout.admin_kubeconfig,
            cluster_name=cluster,
            server=api_server,
            ca_cert=credentials.ca_cert,
            user=credentials.admin.name,
            token=credentials.admin.token,
        )
        for component, user in (
            ("kube-controller-manager", credentials.controller_manager),
            ("kube-scheduler", credentials.scheduler),
            ("kwok", credentials.kwok),
        ):
            write_kubeconfig(
                layout.component_kubeconfig(component),
                cluster_name=cluster,
                server=api_server,
                ca_cert=credentials.ca_cert,
                user=user.name,
                token=user.token,
            )
        tls = None
        if options.extender_url is not None and options.extender_url.startswith("https:"):
            tls = ExtenderClientTls(
                credentials.ca_cert, credentials.scheduler_client_cert, credentials.scheduler_client_key
            )
        scheduler_config = componentconfig.scheduler_config(
            layout.component_kubeconfig("kube-scheduler"), options.extender_url, tls
        )
        layout.scheduler_config.write_text(yaml.safe_dump(scheduler_config, sort_keys=False), encoding="utf-8")
        layout.kwok_config.write_text(yaml.safe_dump(componentconfig.kwok_config()), encoding="utf-8")
        audit = yaml.safe_dump(componentconfig.audit_policy(), sort_keys=False)
        layout.audit_policy.write_text(audit, encoding="utf-8")

        etcd_url = f"http://{LOOPBACK}:{ports.etcd_client}"
        self._launch("etcd", componentconfig.etcd_command(self.binaries, layout, ports), etcd_url)
        self._wait("etcd", "etcd to report healthy", lambda: populate.etcd_healthy(etcd_url))
        report(f"  etcd ready at {etcd_url} ({_since(started)})")

        api_server_argv = componentconfig.api_server_command(self.binaries, layout, ports, credentials)
        if options.real_nodes:
            api_server_argv += self._prepare_real_nodes(credentials)
        self._launch("kube-apiserver", api_server_argv, api_server)
        self._wait(
            "kube-apiserver",
            "kube-apiserver /readyz to answer ok",
            lambda: populate.https_get(f"{api_server}/readyz", credentials.ca_cert, credentials.admin.token) == "ok",
        )
        report(f"  kube-apiserver ready at {api_server} ({_since(started)})")
        if options.real_nodes:
            self._start_network(ports.api_server)
            report(f"  cluster network namespace ready ({_since(started)})")

        controller_manager = f"https://{LOOPBACK}:{ports.controller_manager}"
        scheduler = f"https://{LOOPBACK}:{ports.scheduler}"
        kwok = f"http://{LOOPBACK}:{ports.kwok}"
        self._launch(
            "kube-controller-manager",
            componentconfig.controller_manager_command(self.binaries, layout, ports, credentials, cluster),
            controller_manager,
        )
        self._launch(
            "kube-scheduler",
            componentconfig.scheduler_command(self.binaries, layout, ports, credentials),
            scheduler,
        )
        self._launch("kwok", componentconfig.kwok_command(self.binaries, layout, ports), kwok)
        for name, url in (("kube-controller-manager", controller_manager), ("kube-scheduler", scheduler)):
            self._wait(name, f"{name} /healthz to answer ok", _healthz(url, credentials.ca_cert))
        self._wait("kwok", "kwok /healthz to answer ok", _healthz(kwok, None))
        extender = options.extender_url or "no extender"
        report(f"  controller-manager, scheduler ({extender}) and kwok ready ({_since(started)})")

        node_names = options.profile.node_names()
        with populate.admin_api(layout.admin_kubeconfig) as api_client:
            populate.create_nodes(api_client, options.profile, layout.nodes_manifest)
            if options.crd_dir is not None and options.crd_dir.is_dir():
                applied = populate.apply_crds(
                    self.binaries.kubectl,
                    layout.admin_kubeconfig,
                    options.crd_dir,
                    layout.log("kubectl-apply"),
                    options.step_timeout,
                )
                report(f"  applied {len(applied)} objects from {options.crd_dir}")
            self._wait(
                "kwok",
                f"all {len(node_names)} fake nodes to be Ready and schedulable",
                lambda: len(populate.schedulable_nodes(api_client, node_names)) == len(node_names),
            )
            report(f"  {len(node_names)} fake nodes Ready ({_since(started)})")
            self._wait(
                "kube-controller-manager",
                "the default service account of namespace default",
                lambda: populate.service_account_exists(api_client, "default"),
            )
            if self.real_nodes:
                self._start_real_nodes(api_client, report, started)

    def _prepare_real_nodes(self, credentials: Credentials) -> list[str]:
        """Plan the real nodes, give their kubelets identities, and return the API server's extra flags."""
        options, layout = self.options, self.layout
        images = realcluster.image_archives(options.images_dir)
        self._real_images = images
        self.real_nodes = realcluster.plan(options.profile.real_node_plan(options.real_nodes))
        append_users(credentials, [node.user for node in self.real_nodes])
        client_cert, client_key = layout.pki / "kubelet-client.crt", layout.pki / "kubelet-client.key"
        issue_client_certificate(credentials, "kube-apiserver-kubelet-client", client_cert, client_key)
        egress = layout.state_dir / "egress-selector.yaml"
        egress.write_text(yaml.safe_dump(egress_configuration(self._egress_socket)), encoding="utf-8")
        return [
            # Node names resolve nowhere; the kubelets' addresses are in the cluster's network namespace, reached
            # through the egress proxy.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={client_cert}",
            f"--kubelet-client-key={client_key}",
            f"--egress-selector-config-file={egress}",
        ]

    @property
    def _egress_socket(self) -> Path:
        return self.layout.state_dir / "egress.sock"

    def _start_network(self, api_server_port: int) -> None:
        layout = self.layout
        ready = layout.state_dir / "network.ready"
        config = NetworkConfig(
            api_server_port=api_server_port,
            service_ip=SERVICE_IP,
            node_ips=tuple(node.node_ip for node in self.real_nodes),
            egress_socket=self._egress_socket,
            ready_file=ready,
            ca_cert=self.credentials.ca_cert,
            token=self.credentials.admin.token,
        )
        config_path = layout.state_dir / "network.json"
        config_path.touch(mode=0o600)
        write_json(config_path, config.to_json())
        config_path.chmod(0o600)
        self._launch(realcluster.NETWORK_PROCESS, realcluster.network_command(config_path), str(self._egress_socket))
        self._wait(realcluster.NETWORK_PROCESS, "the cluster network namespace", ready.exists)

    def _start_real_nodes(self, api_client: client.ApiClient, report: Reporter, started: float) -> None:
        options, layout = self.options, self.layout
        cache = BinaryCache()
        for component in REAL_NODE_COMPONENTS:
            if not cache.is_cached(component):
                raise ClusterStartError(
                    f"{component.key} is not cached; run `make binaries` (or `lyra cluster binaries --real-nodes`)"
                )

        def tool(component: Component, name: str) -> Path:
            return cache.component_dir(component) / name

        parent = realcluster.cgroup_parent(options.name, options.state_dir)
        network_pid = next(r.pid for r in self.state.processes if r.name == realcluster.NETWORK_PROCESS)
        references = realcluster.image_references(self._real_images)
        for node in self.real_nodes:
            directory = layout.state_dir / "nodes" / node.name
            directory.mkdir(parents=True, exist_ok=True)
            spec = NodeSpec(
                name=node.name,
                directory=directory,
                node_ip=node.node_ip,
                pod_cidr=node.pod_cidr,
                gateway=node.gateway,
                bridge=node.bridge,
                cgroup_parent=f"{parent}/{node.name}",
                api_server=realcluster.api_server_url(),
                ca_cert=self.credentials.ca_cert,
                token=node.token,
                kubelet=tool(KUBELET, "kubelet"),
                containerd=tool(CONTAINERD, "containerd"),
                ctr=tool(CONTAINERD, "ctr"),
                runc=tool(RUNC, "runc"),
                cni_bin=cache.component_dir(CNI_PLUGINS),
                device_plugin=tool(DEVICE_PLUGIN, "lyra-fake-gpu"),
                gpu_count=node.gpu_count,
                labels=node.labels(),
                taints=tuple(
                    {"key": taint.key, "value": taint.value, "effect": taint.effect} for taint in node.group.taints
                ),
                max_pods=node.group.pods,
                images=self._real_images,
                log_dir=layout.logs,
            )
            for sub in ("runtime", "pods"):
                cgroups.create(f"{spec.cgroup_parent}/{sub}")
            spec_path = directory / "node.json"
            write_json(spec_path, spec.to_json())
            spec_path.chmod(0o600)
            self._launch(
                f"{realcluster.NODE_PROCESS_PREFIX}{node.name}",
                realcluster.node_command(network_pid, spec_path),
                node.node_ip,
            )
        for node in self.real_nodes:
            wait_for_node = replace(self.options, step_timeout=options.real_node_timeout)
            self._wait(
                f"{realcluster.NODE_PROCESS_PREFIX}{node.name}",
                f"real node {node.name} to be Ready with {node.gpu_count} GPUs and {len(references)} images",
                lambda node=node: realcluster.node_ready(api_client, node, references),  # type: ignore[misc]
                timeout=wait_for_node.step_timeout,
            )
        report(f"  {len(self.real_nodes)} real nodes Ready ({_since(started)})")

    def _launch(self, name: str, argv: list[str], endpoint: str) -> None:
        environment = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
        popen, record = launch(
            name,
            argv,
            self.layout.log(name),
            env=environment,
            cwd=self.options.state_dir,
            die_with_parent=self.options.die_with_parent,
        )
        self._popens[name] = popen
        self._save(self.state.with_process(record, endpoint))

    def _wait(self, component: str, what: str, condition: Callable[[], bool], timeout: float | None = None) -> None:
        """Poll ``condition``; fail at once if any started process has exited, with its log tail."""

        def check() -> bool:
            for record in self.state.processes:
                popen = self._popens.get(record.name)
                if (popen is not None and popen.poll() is not None) or not is_running(record):
                    raise ClusterStartError(_exited_message(record, popen))
            return condition()

        try:
            wait_for(check, self.options.step_timeout if timeout is None else timeout, what, retry_on=_NOT_YET)
        except WaitTimeoutError as error:
            log_path = self.layout.log(component)
            raise ClusterStartError(f"{error}. Last lines of {log_path}:\n{tail(log_path, 40)}") from error

    def _save(self, state: ClusterState) -> None:
        self._state = state
        write_state(state)

    def _abort(self) -> None:
        if self._state is None:
            return
        _terminate_all(self._state, lambda _message: None, self._popens)
        self._popens.clear()
        with contextlib.suppress(OSError):  # keep the original error, not one about the state file
            self._save(replace(self._state, phase=Phase.FAILED))


def check_state_dir(state_dir: Path, report: Reporter) -> None:
    """Make ``state_dir`` usable for a new cluster: refuse a live one, clean up after a crashed one."""
    state = read_state(state_dir)
    if state is None:
        remove_state_dir(state_dir)  # only an empty directory is accepted here; anything else is refused
        return
    status = liveness(state)
    if status is Liveness.RUNNING:
        raise ClusterExistsError(f"cluster {state.name!r} is already running (state: {state_dir})", state, status)
    if status is Liveness.STARTING:
        raise ClusterExistsError(
            f"cluster {state.name!r} is being started by process {state.owner_pid}; wait for it or run "
            "`lyra cluster down`",
            state,
            status,
        )
    if status is Liveness.PARTIAL:
        alive = ", ".join(record.name for record in state.processes if is_running(record))
        raise ClusterExistsError(
            f"cluster {state.name!r} is only partly running ({alive} still alive, the rest exited); "
            "run `lyra cluster down` first",
            state,
            status,
        )
    report(f"removing the state of a cluster that is no longer running ({state_dir})")
    remove_state_dir(state_dir)


def stop_cluster(state_dir: Path, report: Reporter) -> bool:
    """Stop every process recorded in ``state_dir`` and delete it. Return False when there was nothing."""
    state = read_state(state_dir)
    if state is None:
        if state_dir.exists():
            remove_state_dir(state_dir)
        return False
    _terminate_all(state, report, {})
    remove_state_dir(state_dir)
    return True


def describe_nodes(state: ClusterState) -> str:
    """ "N/M Ready" for a running cluster, or why the API server could not say."""
    try:
        with populate.admin_api(state.kubeconfig) as api_client:
            ready, total = populate.node_readiness(api_client)
    except _NOT_YET as error:
        return f"unknown (the API server did not answer: {error})"
    return f"{ready}/{total} Ready"


def _terminate_all(state: ClusterState, report: Reporter, popens: dict[str, subprocess.Popen[bytes]]) -> None:
    records = sorted(
        state.processes,
        key=lambda record: STOP_ORDER.index(record.name) if record.name in STOP_ORDER else -1,
    )
    nodes = [record for record in records if record.name.startswith(realcluster.NODE_PROCESS_PREFIX)]
    for record in nodes:
        if terminate(record, popens.get(record.name)):
            report(f"  stopped {record.name} (pid {record.pid})")
    # Containers and shims outlive their node's runner by design; the node's cgroups hold them all.
    left = realcluster.remove_leftovers(state.name, state.state_dir)
    if left:
        raise StateError(f"could not remove the real nodes' cgroups {', '.join(left)}")
    for record in records:
        if record not in nodes and terminate(record, popens.get(record.name)):
            report(f"  stopped {record.name} (pid {record.pid})")
    survivors = [record.name for record in state.processes if is_running(record)]
    if survivors:
        raise StateError(f"could not stop {', '.join(survivors)}; see {state.state_dir}")


def _exited_message(record: ProcessRecord, popen: subprocess.Popen[bytes] | None) -> str:
    code = None
    if popen is not None:
        try:  # reap it: the exit code is known only once the process is waited for
            code = popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
    how = f"exited with code {code}" if code is not None else "is no longer running"
    return f"{record.name} {how}. Last lines of {record.log_path}:\n{tail(record.log_path, 40)}"


def _healthz(url: str, ca_cert: Path | None) -> Callable[[], bool]:
    def healthy() -> bool:
        if ca_cert is None:
            return populate.http_get(f"{url}/healthz").strip() == "ok"
        return populate.https_get(f"{url}/healthz", ca_cert).strip() == "ok"

    return healthy


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f}s"
