"""`lyra plan`: JSON in, JSON out; bad input of any kind exits 2 with `lyra plan <verb>: <message>` and no stdout."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from lyra.cli import main
from lyra.snapshot import MAX_SNAPSHOT_BYTES

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "snapshot.json"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    """Run a command that argparse refuses; return (stdout, stderr)."""
    with pytest.raises(SystemExit) as caught:
        main(list(argv))
    assert caught.value.code == 2
    return capsys.readouterr()


def test_reclaim_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", str(EXAMPLE), "--servers", "2")
    assert code == 0
    # Both {t4-0, t4-1} and {t4-2, t4-3} cost two preemptions; the second loses less work (1200 vs 2640 GPU-s).
    assert plan == {
        "servers": ["t4-2", "t4-3"],
        "preempted": ["b", "c"],
        "alreadyPreempted": [],
        "scaledIn": {"p": 2},
        "lostGpuSeconds": 1200.0,
        "evictions": {"t4-2": {"b": 2}, "t4-3": {"c": 1, "p": 2}},
        "strategy": "lyra",
    }


def test_reclaim_of_one_server_loses_the_least_work(capsys: pytest.CaptureFixture[str]) -> None:
    # Every loaned server holds some base worker, so one preemption is the minimum; t4-3 costs job c
    # (4 GPUs x 60 s since its checkpoint = 240 GPU-s) and scales p in, t4-2 would cost b (8 x 120 = 960).
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", str(EXAMPLE), "--servers", "1")
    assert code == 0
    assert plan["servers"] == ["t4-3"]
    assert plan["preempted"] == ["c"]
    assert plan["scaledIn"] == {"p": 2}
    assert plan["lostGpuSeconds"] == 240.0


def test_allocate_places_every_job_that_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "allocate", "--snapshot", str(EXAMPLE))
    assert code == 0
    assert set(plan["workers"]) == {"a", "b", "c", "p", "q"}
    assert plan["capacityGpus"] == 40
    assert plan["started"] == ["q"]
    # Consistent: every job that runs is placed with exactly its workers, running jobs included.
    running = {job for job, workers in plan["workers"].items() if workers}
    assert set(plan["placement"]) == running == set(plan["gpuTypes"])
    assert {job: sum(servers.values()) for job, servers in plan["placement"].items()} == {
        job: plan["workers"][job] for job in running
    }
    # q needs 24 GiB per GPU: only the A100 has it.
    assert plan["placement"]["q"] == {"a100-0": 4}
    assert plan["gpuTypes"]["q"] == ["NVIDIA-A100-SXM4-80GB"]


FIVE_QUEUED = {
    "servers": [
        {"name": "big", "pool": "training", "gpuType": "V100", "gpus": 8},
        {"name": "small", "pool": "training", "gpuType": "V100", "gpus": 3},
    ],
    "jobs": [
        {"name": name, "gpusPerWorker": 1, "minWorkers": low, "maxWorkers": high, "remainingWork": work}
        for name, low, high, work in [
            ("j1", 2, 5, 12),
            ("j2", 3, 8, 104),
            ("j3", 2, 7, 111),
            ("j4", 1, 3, 318),
            ("j5", 1, 4, 359),
        ]
    ],
}


def test_allocate_starts_every_job_whose_base_fits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The issue's case: bases of 2+3+2+1+1 = 9 GPUs on 11; all five start."""
    path = tmp_path / "five.json"
    path.write_text(json.dumps(FIVE_QUEUED))
    code, plan, _ = run(capsys, "plan", "allocate", "--snapshot", str(path))
    assert code == 0
    assert all(workers > 0 for workers in plan["workers"].values()), plan["workers"]
    assert plan["gpusUsed"] <= 11


def test_allocate_and_migrate_leave_held_gpus_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``heldGpus`` (what ``--from-cluster`` reads off pods Lyra does not count and off cordoned nodes): with the
    big server's 8 GPUs held, only the small one's 3 are free, so j1 (base 2) and j4 (base 1) start and the others
    wait; without them, every base fits (the case above). Migration plans on the same free GPUs."""
    path = tmp_path / "held.json"
    path.write_text(json.dumps({**FIVE_QUEUED, "heldGpus": {"big": 8}}))
    code, plan, _ = run(capsys, "plan", "allocate", "--snapshot", str(path))
    assert code == 0
    assert plan["gpusUsed"] <= 3
    assert all(servers == {"small": plan["workers"][job]} for job, servers in plan["placement"].items())
    assert sorted(job for job, workers in plan["workers"].items() if workers) == ["j1", "j4"]
    code, moves, _ = run(capsys, "plan", "migrate", "--snapshot", str(path), "--restart-cost", "60")
    assert code == 0
    assert moves["allocation"] == plan
    path.write_text(json.dumps({**FIVE_QUEUED, "heldGpus": {"big": 9}}))
    code, _, err = run(capsys, "plan", "allocate", "--snapshot", str(path))
    assert code == 2
    assert "heldGpus.big: 9 GPUs held beside 0 used by the jobs' workers, on a server of 8" in err


def cordoned_example(tmp_path: Path, *names: str) -> str:
    document = json.loads(EXAMPLE.read_text())
    for server in document["servers"]:
        server["cordoned"] = server["name"] in names
    path = tmp_path / "cordoned.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_a_cordoned_server_is_planned_as_the_operator_treats_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The example's cheapest server to reclaim is t4-3 (above); cordoned, it is never reclaimed (it would give
    inference nothing), so t4-2 goes, preempting b. Its idle t4-5 is lent for a demand of 1; cordoned, it is not.
    q needs the A100 (24 GiB a GPU); with a100-0 cordoned it waits."""
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", cordoned_example(tmp_path, "t4-3"), "--servers", "1")
    assert code == 0
    assert plan["servers"] == ["t4-2"]
    assert plan["preempted"] == ["b"]
    code, plan, err = run(capsys, "plan", "reclaim", "--snapshot", cordoned_example(tmp_path, "t4-3"), "--servers", "4")
    assert code == 2
    assert "cannot reclaim 4 servers: only 3 are loaned (t4-0, t4-1, t4-2)" in err
    code, plan, _ = run(capsys, "plan", "loans", "--snapshot", cordoned_example(tmp_path), "--demand", "1")
    assert (code, plan["lend"]) == (0, ["t4-5"])
    code, plan, _ = run(capsys, "plan", "loans", "--snapshot", cordoned_example(tmp_path, "t4-5"), "--demand", "1")
    assert (code, plan["lend"], plan["heldServers"]) == (0, [], 1)
    code, plan, _ = run(capsys, "plan", "allocate", "--snapshot", cordoned_example(tmp_path, "a100-0"))
    assert code == 0
    assert plan["workers"]["q"] == 0
    assert "q" in plan["queued"]


def test_migrate_moves_jobs_to_faster_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "migrate", "--snapshot", str(EXAMPLE), "--restart-cost", "60")
    assert code == 0
    assert plan["migrations"]
    assert plan["declined"] is None
    assert plan["gainSeconds"] > 0
    assert plan["restartCostSeconds"] == 60.0
    for move in plan["migrations"]:
        assert move["fromGpuTypes"] == ["Tesla-T4"]
        assert move["toGpuTypes"] == ["NVIDIA-A100-SXM4-80GB"]
        assert plan["allocation"]["placement"][move["job"]] == move["to"]
    # b may only use T4s: it never moves.
    assert "b" not in {move["job"] for move in plan["migrations"]}


def test_migrate_below_the_minimum_gain_makes_no_move(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(
        capsys, "plan", "migrate", "--snapshot", str(EXAMPLE), "--restart-cost", "60", "--min-gain", "1e6"
    )
    assert code == 0
    assert plan["migrations"] == []
    assert "less than --min-gain 1e+06 s" in plan["declined"]
    _, allocation, _ = run(capsys, "plan", "allocate", "--snapshot", str(EXAMPLE))
    assert plan["allocation"] == allocation


def test_loans(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan, _ = run(capsys, "plan", "loans", "--snapshot", str(EXAMPLE), "--demand", "1")
    assert code == 0
    assert plan == {"lend": ["t4-5"], "reclaim": 0, "shortfall": 0, "neededServers": 1, "heldServers": 2}


A100 = "NVIDIA-A100-SXM4-80GB"


def two_type_pool(tmp_path: Path, **fields: Any) -> str:
    """The example with two A100 inference servers beside its six T4 ones: a100-i0 idle, a100-i1 serving."""
    document = json.loads(EXAMPLE.read_text())
    document["servers"] += [
        {"name": "a100-i0", "pool": "inference", "gpuType": A100, "gpus": 8, "state": "idle"},
        {"name": "a100-i1", "pool": "inference", "gpuType": A100, "gpus": 8, "state": "serving"},
    ]
    path = tmp_path / "two-types.json"
    path.write_text(json.dumps({**document, **fields}))
    return str(path)


def test_loans_balance_each_gpu_type_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A T4 server is no room for A100 replicas: the operator balances each type's pool alone, and so does the
    planner. The T4 pool holds 2 servers (t4-4 serving, t4-5 idle), the A100 pool 2 (a100-i1 serving, a100-i0 idle).
    One number for both is refused; per type, T4 needing 1 lends t4-5 and A100 needing 2 lends nothing; with a
    headroom of 1 (per type) T4 keeps t4-5 and A100 falls 1 short."""
    snapshot = two_type_pool(tmp_path)
    code, plan, err = run(capsys, "plan", "loans", "--snapshot", snapshot, "--demand", "1")
    assert (code, plan) == (2, None)
    assert f"the inference servers are of 2 GPU types ({A100}, Tesla-T4), each lent and reclaimed alone" in err
    assert f"--demand {A100}=1" in err
    code, plan, _ = run(
        capsys, "plan", "loans", "--snapshot", snapshot, "--demand", "Tesla-T4=1", "--demand", f"{A100}=2"
    )
    assert code == 0
    assert plan == {
        "gpuTypes": {
            A100: {"demandServers": 2, "lend": [], "reclaim": 0, "shortfall": 0, "neededServers": 2, "heldServers": 2},
            "Tesla-T4": {
                "demandServers": 1, "lend": ["t4-5"], "reclaim": 0, "shortfall": 0, "neededServers": 1, "heldServers": 2
            },
        }
    }  # fmt: skip
    code, plan, _ = run(
        capsys, "plan", "loans", "--snapshot", snapshot, "--demand", "Tesla-T4=1", "--demand", f"{A100}=2",
        "--headroom", "1",
    )  # fmt: skip
    assert code == 0
    assert plan["gpuTypes"]["Tesla-T4"]["lend"] == []
    assert (plan["gpuTypes"][A100]["neededServers"], plan["gpuTypes"][A100]["shortfall"]) == (3, 1)
    code, plan, _ = run(capsys, "plan", "loans", "--snapshot", snapshot, "--demand", f"{A100}=0")
    assert code == 0
    assert list(plan["gpuTypes"]) == [A100], "only the types named are planned"
    assert plan["gpuTypes"][A100]["lend"] == ["a100-i0"]


def test_loans_never_lend_an_unhealthy_server(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The example's idle t4-5 is lent for a demand of 1 (above); unhealthy, it is kept (the operator lends no
    unhealthy server: it would take no training work) and still counts as inference's room: held 2, nothing lent."""
    document = json.loads(EXAMPLE.read_text())
    for server in document["servers"]:
        server["unhealthy"] = server["name"] == "t4-5"
    path = tmp_path / "unhealthy.json"
    path.write_text(json.dumps(document))
    code, plan, _ = run(capsys, "plan", "loans", "--snapshot", str(path), "--demand", "1")
    assert code == 0
    assert plan == {"lend": [], "reclaim": 0, "shortfall": 0, "neededServers": 1, "heldServers": 2}


def test_reclaim_chooses_among_the_loaned_servers_of_one_gpu_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With an A100 inference server lent beside the four T4 ones, a reclaim must say which type the replicas need:
    T4 picks t4-3 as before (the cheapest), A100 its only loaned server; without --gpu-type it is refused."""
    document = json.loads(Path(two_type_pool(tmp_path)).read_text())
    document["servers"].append({"name": "a100-i2", "pool": "inference", "gpuType": A100, "gpus": 8, "state": "loaned"})
    path = tmp_path / "three-loaned-types.json"
    path.write_text(json.dumps(document))
    code, plan, err = run(capsys, "plan", "reclaim", "--snapshot", str(path), "--servers", "1")
    assert (code, plan) == (2, None)
    assert err.startswith(
        f"lyra plan reclaim: the loaned servers are of 2 GPU types ({A100}, Tesla-T4) and replicas need servers of "
        f"one: give --gpu-type, e.g. --gpu-type {A100}"
    )
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", str(path), "--servers", "1", "--gpu-type", "Tesla-T4")
    assert (code, plan["servers"], plan["preempted"]) == (0, ["t4-3"], ["c"])
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", str(path), "--servers", "1", "--gpu-type", A100)
    assert (code, plan["servers"], plan["preempted"]) == (0, ["a100-i2"], [])
    code, plan, err = run(capsys, "plan", "reclaim", "--snapshot", str(path), "--servers", "2", "--gpu-type", A100)
    assert code == 2
    assert f"cannot reclaim 2 {A100} servers: only 1 are loaned (a100-i2)" in err
    code, plan, err = run(capsys, "plan", "reclaim", "--snapshot", str(path), "--servers", "1", "--gpu-type", "T4")
    assert code == 2
    assert "--gpu-type T4: no inference server is of that GPU type (they are of: " in err
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", str(path), "--servers", "0")
    assert (code, plan["servers"]) == (0, [])


def test_loans_plan_for_the_snapshots_inference_demand(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Without --demand, the document's ``inferenceDemand`` (what ``--from-cluster`` reads off the services): T4
    needs 3 of its 2 servers, so 1 loaned one is reclaimed; A100 is not named, so it needs none and lends a100-i0."""
    snapshot = two_type_pool(tmp_path, inferenceDemand={"Tesla-T4": 3})
    code, plan, _ = run(capsys, "plan", "loans", "--snapshot", snapshot)
    assert code == 0
    assert plan["gpuTypes"]["Tesla-T4"] == {
        "demandServers": 3, "lend": [], "reclaim": 1, "shortfall": 0, "neededServers": 3, "heldServers": 2
    }  # fmt: skip
    assert plan["gpuTypes"][A100]["demandServers"] == 0
    assert plan["gpuTypes"][A100]["lend"] == ["a100-i0"]
    code, pooled, _ = run(capsys, "plan", "loans", "--snapshot", snapshot, "--demand", "Tesla-T4=3")
    assert (code, list(pooled["gpuTypes"])) == (0, ["Tesla-T4"])
    code, plan, err = run(capsys, "plan", "loans", "--snapshot", two_type_pool(tmp_path))
    assert (code, plan) == (2, None)
    assert "no demand: give --demand SERVERS (or GPU_TYPE=SERVERS per type)" in err
    assert "carries no inferenceDemand" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--demand", "T4=1"], "--demand T4=...: no inference server is of GPU type 'T4' (they are of: Tesla-T4)"),
        (["--demand", "Tesla-T4=1", "--demand", "Tesla-T4=2"], "--demand names GPU type 'Tesla-T4' twice"),
        (["--demand", "1", "--demand", "Tesla-T4=1"], "give --demand once as SERVERS, or as GPU_TYPE=SERVERS"),
        (["--demand", "1", "--demand", "2"], "give --demand once as SERVERS, or as GPU_TYPE=SERVERS"),
    ],
)
def test_a_bad_demand_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, plan, err = run(capsys, "plan", "loans", "--snapshot", str(EXAMPLE), *argv)
    assert (code, plan) == (2, None)
    assert err.startswith(f"lyra plan loans: {message}")


@pytest.mark.parametrize(
    "stdin",
    [io.StringIO(EXAMPLE.read_text()), io.TextIOWrapper(io.BytesIO(EXAMPLE.read_bytes()), encoding="utf-8")],
    ids=["text", "binary"],
)
def test_snapshot_from_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, stdin: io.TextIOBase
) -> None:
    monkeypatch.setattr("sys.stdin", stdin)
    code, plan, _ = run(capsys, "plan", "reclaim", "--snapshot", "-", "--servers", "0")
    assert code == 0
    assert plan["servers"] == []


@pytest.mark.parametrize(
    ("snapshot", "servers", "message"),
    [
        (str(EXAMPLE), "5", "lyra plan reclaim: cannot reclaim 5 servers: only 4 are loaned (t4-0, t4-1, t4-2, t4-3)"),
        ("does-not-exist.json", "1", "lyra plan reclaim: snapshot does-not-exist.json: no such file"),
        (".", "1", "lyra plan reclaim: snapshot .: cannot read it (Is a directory)"),
    ],
    ids=["too-many-servers", "missing-file", "a-directory"],
)
def test_bad_requests_exit_2(capsys: pytest.CaptureFixture[str], snapshot: str, servers: str, message: str) -> None:
    code, out, err = run(capsys, "plan", "reclaim", "--snapshot", snapshot, "--servers", servers)
    assert code == 2
    assert out is None
    assert err == message + "\n"


def test_malformed_snapshot_exits_2_naming_the_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    document = json.loads(EXAMPLE.read_text())
    document["jobs"][2]["minWorkers"] = -1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    code, out, err = run(capsys, "plan", "allocate", "--snapshot", str(path))
    assert code == 2
    assert out is None
    assert f"lyra plan allocate: snapshot {path}: jobs[2].minWorkers (job 'c')" in err


_JOB = '{"name": "j", "gpusPerWorker": 1, "minWorkers": 1, "maxWorkers": %s, "remainingWork": 1}'
HOSTILE: list[tuple[str, bytes, str]] = [
    ("nested", b"[" * 100_000, "nested too deeply"),
    ("huge-number", b'{"servers": [], "x": 1e999}', "the number 1e999 is too large"),
    ("nan", b'{"servers": [], "x": NaN}', "NaN is not a JSON number"),
    ("infinity", ('{"servers": [], "jobs": [' + _JOB % "Infinity" + "]}").encode(), "Infinity is not a JSON number"),
    ("max-workers-1e9", ('{"servers": [], "jobs": [' + _JOB % "1e9" + "]}").encode(), "jobs[0].maxWorkers (job 'j')"),
    ("not-utf-8", b'{"servers": [\xff]}', "not UTF-8: byte 0xff at line 1, column 14"),
    ("speed-factors", b'{"servers": [], "speedFactors": {"T4": 0.4}}', "'speedFactors' was replaced by 'gpuCatalog'"),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in HOSTILE], ids=[i for i, _, _ in HOSTILE])
def test_hostile_snapshots_exit_2_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data: bytes, message: str
) -> None:
    path = tmp_path / "hostile.json"
    path.write_bytes(data)
    code, out, err = run(capsys, "plan", "allocate", "--snapshot", str(path))
    assert code == 2
    assert out is None
    assert err.startswith(f"lyra plan allocate: snapshot {path}: ")
    assert message in err
    assert "Traceback" not in err


TRIM = "trim it (or split the cluster)"


def test_an_oversized_snapshot_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as file:
        file.truncate(MAX_SNAPSHOT_BYTES + 1)  # sparse: no 64 MiB written
    code, out, err = run(capsys, "plan", "reclaim", "--snapshot", str(path), "--servers", "0")
    assert code == 2
    assert out is None
    assert err == f"lyra plan reclaim: snapshot {path}: the document is larger than the limit of 64 MiB; {TRIM}\n"


BAD_FLAGS = [
    (["migrate", "--restart-cost", "-1"], "argument --restart-cost: expected seconds in [0, 1e+09], got -1"),
    (["migrate", "--restart-cost", "nan"], "argument --restart-cost: expected seconds in [0, 1e+09], got nan"),
    (["migrate", "--restart-cost", "inf"], "argument --restart-cost: expected seconds in [0, 1e+09], got inf"),
    (["migrate", "--restart-cost", "1e10"], "argument --restart-cost: expected seconds in [0, 1e+09], got 1e10"),
    (["migrate", "--restart-cost", "soon"], "argument --restart-cost: expected a number of seconds, got 'soon'"),
    (["migrate", "--restart-cost", "60", "--min-gain", "-5"], "argument --min-gain: expected seconds in [0, 1e+12]"),
    (["migrate"], "the following arguments are required: --restart-cost"),
    (["reclaim", "--servers", "-1"], "argument --servers: expected a number >= 0, got -1"),
    (["reclaim", "--servers", "two"], "argument --servers: expected a whole number, got 'two'"),
    (["loans", "--demand", "1.5"], "argument --demand: expected a whole number, got '1.5'"),
    (["loans", "--demand", "=2"], "argument --demand: expected GPU_TYPE=SERVERS, got '=2' (no GPU type before '=')"),
    (["loans", "--demand", "Tesla-T4=-1"], "argument --demand: 'Tesla-T4=-1': expected a number >= 0, got -1"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_a_bad_flag_exits_2_with_the_verb_and_a_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    verb = argv[0]
    out, err = usage_error(capsys, "plan", verb, "--snapshot", str(EXAMPLE), *argv[1:])
    assert out == ""
    first, usage, *_ = err.splitlines()
    assert first.startswith(f"lyra plan {verb}: ")
    assert message in first
    assert usage.startswith(f"usage: lyra plan {verb} ")


def test_the_capacity_flag_is_gone(capsys: pytest.CaptureFixture[str]) -> None:
    """Capacity is the servers' free GPUs now; argparse refuses the old flag."""
    out, err = usage_error(capsys, "plan", "allocate", "--snapshot", str(EXAMPLE), "--capacity", "20")
    assert out == ""
    assert err.startswith("lyra plan allocate: unrecognized arguments: --capacity 20\n")


def test_schema_prints_the_document_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, schema, _ = run(capsys, "plan", "schema")
    assert code == 0
    assert schema["title"] == "Lyra cluster snapshot"


def test_a_gpu_catalogue_goes_with_from_cluster_and_a_bad_one_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    catalog = tmp_path / "gpus.yaml"
    catalog.write_text("gpuCatalog:\n  Tesla-T4: {speed: 0.4}\n")
    code, _, err = run(capsys, "plan", "allocate", "--snapshot", str(EXAMPLE), "--gpu-catalog", str(catalog))
    assert code == 2
    assert "--gpu-catalog goes with --from-cluster" in err
    catalog.write_text("gpuCatalog:\n  Tesla-T4: {speed: fast}\n")
    out, err = usage_error(capsys, "plan", "allocate", "--from-cluster", "--gpu-catalog", str(catalog))
    assert out == ""
    assert f"argument --gpu-catalog: {catalog}: gpuCatalog.Tesla-T4.speed: Input should be a valid number" in err


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["serve"], "--inference-gpu-cap: 'serve' is not NAMESPACE=GPUS (a whole number of GPUs)"),
        (["serve=-1"], "--inference-gpu-cap: 'serve=-1' is not NAMESPACE=GPUS"),
        (["serve=1", "serve=2"], "--inference-gpu-cap: a namespace is capped twice: serve"),
        (["Serve=1"], "--inference-gpu-cap: 'Serve' is not a namespace name (nor * for all others)"),
    ],
)
def test_inference_gpu_caps_go_with_from_cluster_and_bad_ones_are_refused_before_reading_it(
    capsys: pytest.CaptureFixture[str], settings: list[str], message: str
) -> None:
    """The operator's caps size the services' demand as its passes do; a snapshot document carries its demand, so
    they go with --from-cluster only; bad ones exit 2 before the cluster is read (no kubeconfig is looked for)."""
    flags = [part for setting in settings for part in ("--inference-gpu-cap", setting)]
    code, out, err = run(capsys, "plan", "loans", "--snapshot", str(EXAMPLE), "--demand", "1", *flags)
    assert (code, out) == (2, None)
    assert "--inference-gpu-cap goes with --from-cluster" in err
    code, out, err = run(capsys, "plan", "loans", "--from-cluster", "--kubeconfig", "/nonexistent/kubeconfig", *flags)
    assert (code, out) == (2, None)
    assert err == f"lyra plan loans: {message}" + err.split(message, 1)[1]
    assert "kubeconfig" not in err
