"""Support for tests that run against the local control plane (used by ``tests/integration/conftest.py``).

One control plane per test session, started in a temporary state directory on free ports so it never meets a
developer's ``lyra cluster up``; its processes are tied to the test process, so even a test run that is killed
outright leaves nothing behind. Failing tests get the component logs written while they ran.
"""

from __future__ import annotations

import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from lyra.api import names
from lyra.localcluster import populate
from lyra.localcluster.binaries import BinaryCache
from lyra.localcluster.controlplane import ClusterOptions, ControlPlane
from lyra.localcluster.processes import log_size, read_from
from lyra.localcluster.profile import ClusterProfile, load_default_profile
from lyra.localcluster.waiting import wait_for

LOG_LINES_PER_COMPONENT = 150
#: ``make image`` writes the images here (the repository's dist/images).
REPOSITORY_IMAGES = Path(__file__).resolve().parents[3] / "dist" / "images"
NAMESPACE_READY_SECONDS = 30.0


@contextmanager
def session_control_plane(
    state_dir: Path,
    *,
    profile: ClusterProfile | None = None,
    extender_url: str | None = None,
    crd_dir: Path | None = None,
    step_timeout: float | None = None,
) -> Iterator[ControlPlane]:
    """Start a control plane from the cached binaries, yield it, and always stop it. ``step_timeout``: how long each
    start step may take (default :class:`ClusterOptions`'; a profile of a thousand nodes needs longer for its nodes to
    turn Ready).

    Raises BinariesError (telling to run ``make binaries``) when the cache is incomplete: a cold build takes
    minutes and belongs before the test run, not inside a fixture with a per-test timeout.
    """
    binaries = BinaryCache().binary_set()
    control_plane = ControlPlane(
        binaries,
        ClusterOptions(
            state_dir=state_dir,
            profile=profile if profile is not None else load_default_profile(),
            profile_source="default profile" if profile is None else profile.name,
            name="pytest",
            extender_url=extender_url,
            crd_dir=crd_dir,
            die_with_parent=True,
            step_timeout=ClusterOptions.step_timeout if step_timeout is None else step_timeout,
        ),
    )
    try:
        control_plane.start(lambda _message: None)
        yield control_plane
    finally:
        control_plane.stop(lambda _message: None, keep_state=True)


@dataclass(frozen=True)
class RealNodeCluster:
    """What :func:`real_node_cluster` yields: the admin kubeconfig, the real nodes' names (in profile order: one
    T4 inference node, one A100 training node, ... with the default profile) and the control plane itself."""

    kubeconfig: Path
    real_node_names: tuple[str, ...]
    control_plane: ControlPlane


@contextmanager
def real_node_cluster(
    state_dir: Path,
    *,
    real_nodes: int = 2,
    images_dir: Path | None = None,
    profile: ClusterProfile | None = None,
    extender_url: str | None = None,
    crd_dir: Path | None = None,
    keep_state: bool = True,
) -> Iterator[RealNodeCluster]:
    """A local cluster with ``real_nodes`` real nodes (kubelet, containerd, runc, Lyra's fake GPU device plugin)
    beside the profile's KWOK nodes, always stopped afterwards (every process, cgroup, mount and the network
    namespace; see :func:`lyra.localcluster.controlplane.stop_cluster`). ``keep_state`` keeps the state directory
    (logs, configurations) for a post-mortem, without containerd's data; without it the directory goes.

    The images in ``images_dir`` (default: the repository's ``dist/images``, from ``make image``) are imported into
    every node and listed in its status; pods use them with ``imagePullPolicy: Never`` or ``IfNotPresent``. Nodes
    carry the GPU labels of real clusters (``nvidia.com/gpu.product``, ``.count``, ``.memory``), Lyra's pool label
    and ``localcluster.lyra.dev/real-node=true``; ``nvidia.com/gpu`` is allocatable through the device plugin.
    Pods reach the API server through the ``kubernetes`` Service (10.96.0.1:443). Needs root and the cached
    binaries of ``make binaries`` (kubelet, containerd, runc, CNI plugins, device plugin).
    """
    binaries = BinaryCache().binary_set()
    control_plane = ControlPlane(
        binaries,
        ClusterOptions(
            state_dir=state_dir,
            profile=profile if profile is not None else load_default_profile(),
            profile_source="default profile" if profile is None else profile.name,
            name="pytest-real",
            extender_url=extender_url,
            crd_dir=crd_dir,
            die_with_parent=True,
            real_nodes=real_nodes,
            images_dir=images_dir if images_dir is not None else REPOSITORY_IMAGES,
        ),
    )
    try:
        control_plane.start(lambda _message: None)
        yield RealNodeCluster(
            kubeconfig=control_plane.kubeconfig,
            real_node_names=tuple(node.name for node in control_plane.real_nodes),
            control_plane=control_plane,
        )
    finally:
        control_plane.stop(lambda _message: None, keep_state=keep_state)
        if keep_state:
            # Logs and configurations stay for a post-mortem; containerd's data (about 250 MB a node) does not.
            for node_dir in (state_dir / "nodes").glob("*"):
                for data in ("containerd-root", "containerd-state"):
                    shutil.rmtree(node_dir / data, ignore_errors=True)


def log_offsets(control_plane: ControlPlane | None) -> dict[str, int]:
    """Current size of each component log, to show a failing test only what was logged while it ran."""
    if control_plane is None:
        return {}
    return {name: log_size(path) for name, path in control_plane.log_paths().items()}


def log_sections(
    control_plane: ControlPlane, offsets: dict[str, int], lines: int = LOG_LINES_PER_COMPONENT
) -> list[tuple[str, str]]:
    """(title, text) report sections with the last ``lines`` lines each component logged since ``offsets``."""
    sections = []
    for name, path in control_plane.log_paths().items():
        text = read_from(path, offsets.get(name, 0))
        kept = text.splitlines()[-lines:]
        if kept:
            sections.append((f"{name} log ({path})", "\n".join(kept)))
    return sections


def namespace_name(test_name: str) -> str:
    """A valid, unique namespace name derived from a test name."""
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{slug}-{secrets.token_hex(3)}"


@contextmanager
def temporary_namespace(api_client: client.ApiClient, test_name: str) -> Iterator[str]:
    """Create a namespace, wait for its default service account (pods need it), delete it afterwards."""
    name = namespace_name(test_name)
    core = client.CoreV1Api(api_client)
    core.create_namespace(cast(Any, {"metadata": {"name": name, "labels": {names.TEST_NAMESPACE_LABEL: "true"}}}))
    try:
        wait_for(
            lambda: populate.service_account_exists(api_client, name),
            NAMESPACE_READY_SECONDS,
            f"the default service account of namespace {name}",
        )
        yield name
    finally:
        core.delete_namespace(name)


@contextmanager
def client_with_token(control_plane: ControlPlane, token: str) -> Iterator[client.ApiClient]:
    """An ApiClient that authenticates with ``token`` instead of the admin's (to test what others may do)."""
    configuration = client.Configuration()
    configuration.host = control_plane.state.api_server
    configuration.ssl_ca_cert = str(control_plane.credentials.ca_cert)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    api_client = client.ApiClient(configuration)
    try:
        yield api_client
    finally:
        api_client.close()  # type: ignore[no-untyped-call]
