"""The whole system for e2e tests, one per test module (:class:`tests.e2e.system_support.System`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from lyra.localcluster import populate
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.testing import session_control_plane
from tests.e2e.system_support import System
from tests.operator_support import REPOSITORY, service_account_kubeconfig


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """A control plane whose scheduler calls an extender on a free port, with the extender running there."""
    port = allocate_ports(1)[0]
    state = tmp_path_factory.mktemp("whole-system")
    with ExitStack() as stack:
        cluster = stack.enter_context(
            session_control_plane(
                state / "cluster", extender_url=f"http://127.0.0.1:{port}", crd_dir=REPOSITORY / "manifests" / "crds"
            )
        )
        api = stack.enter_context(populate.admin_api(cluster.kubeconfig))
        logs = state / "logs"
        logs.mkdir()
        system = System(cluster, api, service_account_kubeconfig(cluster, api, state), logs, port)
        system.start_extender()
        stack.callback(system.stop_extender)
        yield system
