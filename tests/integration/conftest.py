"""Fixtures for tests against a real local control plane (kube-apiserver, scheduler, controller-manager, KWOK).

``local_cluster`` starts one control plane per session from the cached binaries (``make binaries`` builds
them); ``kube_api`` is an admin client; ``namespace`` gives each test a fresh namespace. A failing test's report
carries what every component logged while the test ran.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from lyra.localcluster import populate
from lyra.localcluster.binaries import BinariesError
from lyra.localcluster.controlplane import ClusterStartError, ControlPlane
from lyra.localcluster.testing import (
    log_offsets,
    log_sections,
    session_control_plane,
    temporary_namespace,
)
from tests.operator_support import service_account_kubeconfig

REPOSITORY = Path(__file__).resolve().parents[2]

_CONTROL_PLANE = pytest.StashKey[ControlPlane]()
_LOG_OFFSETS = pytest.StashKey[dict[str, int]]()


@contextmanager
def _control_plane_with_crds(directory: Path) -> Iterator[ControlPlane]:
    """A control plane with Lyra's CRDs in ``directory``; one that cannot start fails the test with why."""
    try:
        with session_control_plane(directory, crd_dir=REPOSITORY / "manifests" / "crds") as control_plane:
            yield control_plane
    except (BinariesError, ClusterStartError) as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def local_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with _control_plane_with_crds(tmp_path_factory.mktemp("lyra-cluster")) as control_plane:
        request.config.stash[_CONTROL_PLANE] = control_plane
        yield control_plane


@pytest.fixture(scope="session")
def kube_api(local_cluster: ControlPlane) -> Iterator[client.ApiClient]:
    with populate.admin_api(local_cluster.kubeconfig) as api_client:
        yield api_client


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of the module's own, with Lyra's CRDs: for stories that run the operator, whose lending and
    reclaims would disturb other modules' nodes."""
    directory = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_"))
    with _control_plane_with_crds(directory) as control_plane:
        yield control_plane


@pytest.fixture(scope="module")
def api(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    """An admin client of the module's own control plane."""
    with populate.admin_api(cluster.kubeconfig) as api_client:
        yield api_client


@pytest.fixture(scope="module")
def operator_kubeconfig(cluster: ControlPlane, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig for the operator's ServiceAccount on the module's control plane (the chart's RBAC)."""
    return service_account_kubeconfig(cluster, api, tmp_path_factory.mktemp("operator-account"))


@pytest.fixture
def namespace(kube_api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    with temporary_namespace(kube_api, request.node.name) as name:
        yield name


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_LOG_OFFSETS] = log_offsets(item.config.stash.get(_CONTROL_PLANE, None))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    control_plane = item.config.stash.get(_CONTROL_PLANE, None)
    if report.failed and control_plane is not None:
        offsets = item.stash.get(_LOG_OFFSETS, {})
        for title, text in log_sections(control_plane, offsets):
            report.sections.append((title, text))
    return report
