"""The state file: atomic round trip, liveness of what it records, and safe removal of its directory."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lyra.localcluster.controlplane import ClusterExistsError, check_state_dir, stop_cluster
from lyra.localcluster.processes import ProcessRecord, launch, read_start_ticks, terminate
from lyra.localcluster.state import (
    STATE_FILE,
    ClusterState,
    Liveness,
    Phase,
    StateError,
    liveness,
    read_state,
    remove_state_dir,
    write_state,
)


def make_state(state_dir: Path, *records: ProcessRecord, phase: Phase = Phase.RUNNING, owner: int = 1) -> ClusterState:
    state = ClusterState(
        name="unit",
        state_dir=state_dir,
        phase=phase,
        owner_pid=owner,
        owner_start_ticks=read_start_ticks(owner) or -1,
        kubeconfig=state_dir / "kubeconfig",
        api_server="https://127.0.0.1:6443",
        profile="default profile",
        extender_url=None,
        started_at=1700000000.0,
    )
    for record in records:
        state = state.with_process(record, f"http://127.0.0.1:{record.pid}")
    return state


def dead_record(tmp_path: Path, name: str = "etcd") -> ProcessRecord:
    finished = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return ProcessRecord(name, int(finished.stdout), 12345, ("etcd",), tmp_path / f"{name}.log")


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[ProcessRecord]:
    popen, record = launch("kube-apiserver", ["sleep", "60"], tmp_path / "sleep.log")
    yield record
    terminate(record, popen, grace=5)


def test_the_state_file_round_trips(tmp_path: Path, sleeper: ProcessRecord) -> None:
    state = make_state(tmp_path / "cluster", sleeper)
    write_state(state)

    assert read_state(tmp_path / "cluster") == state
    assert [path.name for path in (tmp_path / "cluster").iterdir()] == [STATE_FILE]


def test_no_state_file_means_no_cluster(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None


@pytest.mark.parametrize("content", ["{not json", "[]", json.dumps({"version": 99})])
def test_an_unreadable_state_file_is_an_error_that_says_what_to_do(tmp_path: Path, content: str) -> None:
    (tmp_path / STATE_FILE).write_text(content)

    with pytest.raises(StateError, match="not a readable Lyra cluster state file"):
        read_state(tmp_path)


def test_liveness_running_partial_stale_and_starting(tmp_path: Path, sleeper: ProcessRecord) -> None:
    dead = dead_record(tmp_path)

    assert liveness(make_state(tmp_path, sleeper)) is Liveness.RUNNING
    assert liveness(make_state(tmp_path, sleeper, dead)) is Liveness.PARTIAL
    assert liveness(make_state(tmp_path, dead)) is Liveness.STALE
    assert liveness(make_state(tmp_path, phase=Phase.STARTING, owner=os.getpid())) is Liveness.STARTING
    # A start whose owner died is no longer "starting": what it left running needs `down`.
    assert liveness(make_state(tmp_path, sleeper, phase=Phase.STARTING, owner=dead.pid)) is Liveness.PARTIAL


def test_a_stale_state_dir_from_a_crashed_run_is_cleaned_before_a_new_start(tmp_path: Path) -> None:
    state_dir = tmp_path / "cluster"
    write_state(make_state(state_dir, dead_record(tmp_path)))
    (state_dir / "logs").mkdir()
    messages: list[str] = []

    check_state_dir(state_dir, messages.append)

    assert not state_dir.exists()
    assert messages == [f"removing the state of a cluster that is no longer running ({state_dir})"]


def test_a_running_cluster_is_not_started_twice(tmp_path: Path, sleeper: ProcessRecord) -> None:
    write_state(make_state(tmp_path / "cluster", sleeper))

    with pytest.raises(ClusterExistsError, match="already running") as error:
        check_state_dir(tmp_path / "cluster", lambda _message: None)

    assert error.value.liveness is Liveness.RUNNING
    assert (tmp_path / "cluster" / STATE_FILE).exists()


def test_a_partly_running_cluster_asks_for_down(tmp_path: Path, sleeper: ProcessRecord) -> None:
    write_state(make_state(tmp_path / "cluster", sleeper, dead_record(tmp_path)))

    with pytest.raises(ClusterExistsError, match=r"only partly running \(kube-apiserver still alive"):
        check_state_dir(tmp_path / "cluster", lambda _message: None)


def test_down_stops_exactly_the_recorded_processes_and_removes_the_directory(tmp_path: Path) -> None:
    popen, record = launch("kwok", ["sleep", "60"], tmp_path / "kwok.log")
    bystander, _ = launch("bystander", ["sleep", "60"], tmp_path / "other.log")
    try:
        write_state(make_state(tmp_path / "cluster", record))
        messages: list[str] = []

        assert stop_cluster(tmp_path / "cluster", messages.append)

        assert popen.wait(timeout=5) == -15
        assert bystander.poll() is None
        assert not (tmp_path / "cluster").exists()
        assert messages == [f"  stopped kwok (pid {record.pid})"]
        assert not stop_cluster(tmp_path / "cluster", messages.append)
    finally:
        bystander.kill()
        bystander.wait()


def test_a_foreign_directory_is_never_removed(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")

    with pytest.raises(StateError, match="not a Lyra cluster state directory"):
        remove_state_dir(tmp_path)
    with pytest.raises(StateError, match="not a Lyra cluster state directory"):
        check_state_dir(tmp_path, lambda _message: None)
    assert (tmp_path / "thesis.tex").exists()


def test_an_empty_directory_is_usable(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    check_state_dir(tmp_path / "empty", lambda _message: None)

    assert not (tmp_path / "empty").exists()
