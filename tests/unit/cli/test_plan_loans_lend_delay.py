"""``lyra plan loans`` on a snapshot whose idle servers say how long they have been idle (``idleSeconds``) lends as
the operator's loan cycle does with its lend delay (``--lend-delay``): an idle server is lent only once idle that long,
and the headroom is kept among those that are.

The oracle is the cycle itself (:func:`lyra.core.loan_cycle.plan_loan_cycle`, given each server's ``idle_since``);
the planner is reached through its entry point, from a document written here as JSON, not through the code that
writes snapshot documents."""

from __future__ import annotations

import copy
import functools
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from lyra.cli import main
from lyra.core import ClusterSnapshot, GpuCatalog, LoanState, Pool, Server
from lyra.core.loan_cycle import InferenceServer, LoanSettings, plan_loan_cycle

T4 = "Tesla-T4"
NOW = 100_000.0


def planned(capsys: pytest.CaptureFixture[str], tmp_path: Path, document: dict[str, Any], *flags: str) -> Any:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document))
    code = main(["plan", "loans", "--snapshot", str(path), *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_the_what_if_lends_as_the_cycle_does_with_its_lend_delay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """300 random pools of serving (with replicas), idle (idle for 0 s to 10 min, some unhealthy), loaned and
    reclaiming servers of two sizes, lend delays of 0 s to 5 min, demands 0 to 8, headrooms 0 to 2: the what-if lends
    the servers the cycle lends, reclaims as many, and reports the same shortfall."""
    rng = random.Random(7)
    recent_kept = 0  # pools where the delay kept back a server that would have been lent otherwise
    for _ in range(300):
        servers: list[InferenceServer] = []
        rows: list[dict[str, Any]] = []
        for i in range(rng.randint(1, 9)):
            state = rng.choice([LoanState.SERVING, LoanState.IDLE, LoanState.LOANED, LoanState.RECLAIMING])
            gpus, healthy = rng.choice([4, 8]), rng.random() > 0.2
            idle_for = rng.choice([0.0, 5.0, 59.0, 60.0, 61.0, 299.0, 600.0]) if state is LoanState.IDLE else None
            servers.append(
                InferenceServer(
                    f"n{i}",
                    T4,
                    gpus,
                    state,
                    idle_since=None if idle_for is None else NOW - idle_for,
                    replicas=rng.randint(1, 3) if state is LoanState.SERVING else 0,
                    healthy=healthy,
                )
            )
            row: dict[str, Any] = {"name": f"n{i}", "pool": "inference", "gpuType": T4, "gpus": gpus,
                                   "state": state.value, "unhealthy": not healthy}  # fmt: skip
            if idle_for is not None:
                row["idleSeconds"] = idle_for
            rows.append(row)
        demand, headroom = rng.randint(0, 8), rng.randint(0, 2)
        delay = rng.choice([0.0, 30.0, 60.0, 300.0])
        training = ClusterSnapshot(
            tuple(Server(s.name, Pool.INFERENCE, T4, s.gpus, s.state) for s in servers), (), GpuCatalog()
        )
        settings = LoanSettings(headroom=headroom, lend_delay_s=delay, reclaim_deadline_s=math.inf)
        cycle = (
            plan_loan_cycle(servers, {T4: demand}, functools.partial(copy.copy, training), now=NOW, settings=settings)
            .balances[T4]
            .loans
        )
        document = {"servers": rows, "gpuCatalog": {T4: {"speed": 0.4}}}
        flags = ("--demand", f"{T4}={demand}", "--headroom", str(headroom), "--lend-delay", f"{delay:g}")
        plan = planned(capsys, tmp_path, document, *flags)["gpuTypes"][T4]
        assert (plan["lend"], plan["reclaim"], plan["shortfall"]) == (
            list(cycle.lend), cycle.reclaim, cycle.shortfall
        ), (rows, demand, headroom, delay)  # fmt: skip
        without_delay = planned(capsys, tmp_path, document, *flags[:-1], "0")["gpuTypes"][T4]
        recent_kept += without_delay["lend"] != plan["lend"]
    assert recent_kept >= 15, f"the delay mattered in only {recent_kept} pools: the test would not see it"


def test_a_server_idle_for_less_than_the_delay_is_kept(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Two idle servers and no demand: idle for 30 s and for 2 min, a delay of 60 s lends the second alone; a document
    without idleSeconds (written before them, or by hand) lends both, as before."""
    rows = [
        {"name": "t0", "pool": "inference", "gpuType": T4, "gpus": 8, "state": "idle", "idleSeconds": 30},
        {"name": "t1", "pool": "inference", "gpuType": T4, "gpus": 8, "state": "idle", "idleSeconds": 120},
    ]
    plan = planned(capsys, tmp_path, {"servers": rows}, "--demand", "0", "--lend-delay", "60")
    assert plan["lend"] == ["t1"]
    assert planned(capsys, tmp_path, {"servers": rows}, "--demand", "0")["lend"] == ["t1"], "60 s by default"
    assert planned(capsys, tmp_path, {"servers": rows}, "--demand", "0", "--lend-delay", "0")["lend"] == ["t0", "t1"]
    bare = [{k: v for k, v in row.items() if k != "idleSeconds"} for row in rows]
    assert planned(capsys, tmp_path, {"servers": bare}, "--demand", "0", "--lend-delay", "600")["lend"] == ["t0", "t1"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"state": "serving", "idleSeconds": 5}, "idleSeconds: only an idle inference server has been idle"),
        ({"state": "idle", "idleSeconds": -1}, "idleSeconds"),
        ({"state": "idle", "idleSeconds": "5"}, "idleSeconds"),
        ({"state": "idle", "idleSeconds": True}, "idleSeconds"),
        ({"pool": "training", "state": None, "idleSeconds": 5}, "only an idle inference server"),
    ],
)
def test_bad_idle_times_are_refused_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    server = {"name": "t0", "pool": "inference", "gpuType": T4, "gpus": 8, **row}
    server = {k: v for k, v in server.items() if v is not None}
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"servers": [server]}))
    assert main(["plan", "loans", "--snapshot", str(path), "--demand", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert message in err
    assert "servers[0]" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("delay", ["-1", "x", "nan", "86401"])
def test_a_bad_lend_delay_is_refused(capsys: pytest.CaptureFixture[str], delay: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", "loans", "--snapshot", "-", "--demand", "0", "--lend-delay", delay])
    assert caught.value.code == 2
    assert "argument --lend-delay" in capsys.readouterr().err
