"""A component that dies during start: the error carries its log, and nothing is left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from lyra.localcluster.binaries import BinarySet
from lyra.localcluster.controlplane import ClusterOptions, ClusterStartError, ControlPlane
from lyra.localcluster.processes import is_running
from lyra.localcluster.profile import load_default_profile
from lyra.localcluster.state import Liveness, Phase, liveness, read_state


def script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_component_that_exits_fails_the_start_with_its_log_tail(tmp_path: Path) -> None:
    crashing_etcd = script(tmp_path / "etcd", "echo 'listen tcp 127.0.0.1: bind: address already in use' >&2; exit 3")
    unused = script(tmp_path / "unused", "exit 99")
    binaries = BinarySet(crashing_etcd, unused, unused, unused, unused, unused, unused)
    state_dir = tmp_path / "state"
    control_plane = ControlPlane(
        binaries,
        ClusterOptions(state_dir=state_dir, profile=load_default_profile(), profile_source="test", step_timeout=20),
    )

    with pytest.raises(ClusterStartError) as error:
        control_plane.start(lambda _message: None)

    assert "etcd exited with code 3" in str(error.value)
    assert "bind: address already in use" in str(error.value)
    state = read_state(state_dir)
    assert state is not None
    assert state.phase is Phase.FAILED
    assert [record.name for record in state.processes] == ["etcd"]
    assert not any(is_running(record) for record in state.processes)
    assert liveness(state) is Liveness.STALE
    assert (state_dir / "logs" / "etcd.log").exists()  # kept for the post-mortem
