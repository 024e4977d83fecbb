"""The training worker (lyra/workloads/training_worker.py) as a plain process: SIGTERM writes the checkpoint and
exits 0, a second run resumes from it, a finished run says so, and bad input is refused with exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lyra.localcluster.waiting import wait_for
from lyra.workloads import training_worker

PROGRAM = Path(training_worker.__file__)


def start(checkpoint: Path, **env: str) -> subprocess.Popen[str]:
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "LYRA_CHECKPOINT_PATH": str(checkpoint),
        "LYRA_STEP_SECONDS": "0.01",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, str(PROGRAM)], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def read(checkpoint: Path) -> dict[str, object] | None:
    try:
        data: dict[str, object] = json.loads(checkpoint.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data


def test_sigterm_writes_the_checkpoint_and_a_second_run_resumes_from_it(tmp_path: Path) -> None:
    checkpoint = tmp_path / "state.json"
    worker = start(checkpoint, LYRA_CHECKPOINT_EVERY="5")
    assert worker.stdout is not None
    assert worker.stdout.readline().startswith("starting at step 0")
    periodic = wait_for(lambda: read(checkpoint), 30, "a periodic checkpoint")
    assert periodic["reason"] == "periodic"
    signalled = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert time.monotonic() - signalled < 5  # well inside Kubernetes' default grace period of 30 s
    state = read(checkpoint)
    assert state is not None
    assert state["reason"] == "sigterm"
    assert state["pid"] == worker.pid
    step = int(str(state["step"]))
    assert step >= int(str(periodic["step"])) >= 5
    assert f"checkpoint written at step {step}" in out

    resumed = start(checkpoint, LYRA_STEPS=str(step + 30))
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert f"resumed from {checkpoint} at step {step}" in out
    final = read(checkpoint)
    assert final is not None
    assert final["reason"] == "done"
    assert final["step"] == step + 30
    assert abs(float(str(final["w"])) - 3.0) < abs(float(str(state["w"])) - 3.0) + 1.0  # it keeps learning


def test_a_finished_run_stops_at_its_step_count_and_learns_the_line(tmp_path: Path) -> None:
    checkpoint = tmp_path / "state.json"
    worker = start(checkpoint, LYRA_STEPS="2000", LYRA_STEP_SECONDS="0")
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    state = read(checkpoint)
    assert state is not None
    assert (state["reason"], state["step"]) == ("done", 2000)
    assert abs(float(str(state["w"])) - 3.0) < 0.05
    assert abs(float(str(state["b"])) - 1.0) < 0.05
    assert "done at step 2000" in out


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LYRA_CHECKPOINT_PATH": ""}, "LYRA_CHECKPOINT_PATH is not set"),
        ({"LYRA_STEPS": "many"}, "LYRA_STEPS='many' is not a int"),
        ({"LYRA_STEPS": "-3"}, "must be a finite number >= 0"),
        ({"LYRA_STEP_SECONDS": "nan"}, "must be a finite number >= 0"),
        ({"LYRA_CHECKPOINT_EVERY": "1.5"}, "is not a int"),
    ],
)
def test_bad_settings_exit_2_with_a_message(tmp_path: Path, env: dict[str, str], message: str) -> None:
    worker = start(tmp_path / "state.json", **env)
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 2
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content", ["not json", "{}", '{"step": "x", "w": 0, "b": 0, "loss": 1}', '{"step": -1, "w": 0, "b": 0, "loss": 1}']
)
def test_a_checkpoint_of_something_else_is_refused_not_overwritten(tmp_path: Path, content: str) -> None:
    checkpoint = tmp_path / "state.json"
    checkpoint.write_text(content)
    worker = start(checkpoint)
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 2
    assert "checkpoint" in err or "step" in err
    assert "Traceback" not in err
    assert checkpoint.read_text() == content


def test_an_unwritable_checkpoint_path_is_an_error_without_a_traceback(tmp_path: Path) -> None:
    worker = start(tmp_path / "missing-directory" / "state.json", LYRA_STEPS="3", LYRA_STEP_SECONDS="0")
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 1
    assert "cannot write the checkpoint" in err
    assert "Traceback" not in err
