"""`lyra demo`: its day (built once, the same for the cluster and the simulator), its refusals, and the rule that holds
the simulator to the cluster."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lyra.cli import main
from lyra.cli.demo_commands import port_taken
from lyra.cli.demo_day import SIZES, Timing, base_only, build_day, inference_service, training_job, write_inputs
from lyra.cli.demo_summary import compare, sim_figures, simulate_day
from lyra.emulator import rendezvous_pause
from lyra.localcluster.profile import load_default_profile
from lyra.sim.load import read_load
from lyra.sim.scenario import load_scenario
from lyra.sim.traces import read_trace
from tests.unit.operator.fake_cluster import A100, FakeCluster, node
from tests.unit.operator.fake_cluster import training_job as fake_training_job

PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    """A small Philly trace (jobs of every size, one to six hours) and two days of load, low at night."""
    rows = []
    for i in range(60):
        size = SIZES[i % len(SIZES)]
        rows.append(f"2017-10-0{1 + i % 3} {i % 24:02d}:{i % 60:02d}:00,{3600 + 300 * i},{size},0,c{i}\n")
    rows.append("2017-10-01 00:00:00,60,1,60,short\n")  # too short: never drawn
    trace = tmp_path / "philly.csv"
    trace.write_text(PHILLY + "".join(rows))
    load = tmp_path / "load.csv"
    load.write_text(
        "t_sec,total_req_per_s\n" + "".join(f"{600 * i},{1000 + 2000 * (i % 144 >= 54)}\n" for i in range(288))
    )
    return trace, load


def day_of(inputs: tuple[Path, Path], **options: float) -> object:
    trace, load = inputs
    return build_day(
        profile=load_default_profile(),
        trace_path=trace,
        load_path=load,
        seconds=options.get("seconds", 86_400.0),
        speed_up=options.get("speed_up", 360.0),
        jobs=int(options.get("jobs", 20)),
        seed=int(options.get("seed", 0)),
    )


def test_the_day_is_the_same_for_a_seed_and_its_jobs_come_from_the_trace(inputs: tuple[Path, Path]) -> None:
    day, again, other = day_of(inputs), day_of(inputs), day_of(inputs, seed=1)
    assert day.jobs == again.jobs  # type: ignore[attr-defined]
    assert day.jobs != other.jobs  # type: ignore[attr-defined]
    jobs = day.jobs  # type: ignore[attr-defined]
    assert len(jobs) == 20
    assert all(0 <= j.submit_s < 86_400 * 0.9 + 1 for j in jobs)
    assert {j.num_gpus for j in jobs} <= set(SIZES)
    assert [j.submit_s for j in jobs] == sorted(j.submit_s for j in jobs)


def test_a_job_on_the_cluster_is_its_simulated_work_at_the_speed_up(inputs: tuple[Path, Path]) -> None:
    day = day_of(inputs)
    for spec in day.jobs:  # type: ignore[attr-defined]
        body = training_job(day, spec)  # type: ignore[arg-type]
        s = body["spec"]
        assert (s["minWorkers"], s["maxWorkers"], s["gpusPerWorker"]) == (
            spec.elastic_min,
            spec.elastic_max,
            spec.gpus_per_worker,
        )
        assert s["expectedDuration"] == pytest.approx(spec.work / spec.elastic_min / 360.0, rel=1e-6)
        assert ("Tesla-T4" in s["gpuTypes"]) is spec.fits_inference_gpu
        assert s["template"]["spec"]["containers"][0]["env"][0]["value"] == Timing().rendezvous_conf
    off = base_only(day.jobs)  # type: ignore[attr-defined]
    assert all(j.workers == j.elastic_min == j.elastic_max for j in off)


def test_the_simulator_charges_a_resize_what_the_emulator_pauses_the_job(inputs: tuple[Path, Path]) -> None:
    # The live side: the emulator's pause for a job made from the demo's template (its PET_RDZV_CONF), in wall
    # seconds; the simulator's: the day's scenario, in trace seconds (the speed-up apart).
    day = day_of(inputs)
    spec = next(s for s in day.jobs if s.elastic_max > s.elastic_min)  # type: ignore[attr-defined]
    template = training_job(day, spec)["spec"]["template"]  # type: ignore[arg-type]
    cluster = FakeCluster([node("n0", "training", A100)])
    cluster.add_job(fake_training_job("j", 1, 4, duration=1000, template=template))
    [job] = cluster.world().jobs
    costs = day.scenario.preemption  # type: ignore[attr-defined]
    k = day.speed_up  # type: ignore[attr-defined]
    assert costs.resize_cost_s == 0
    scale_in = rendezvous_pause(job, 3, someone_left=True) * k
    assert scale_in == pytest.approx(costs.rendezvous.leave_detection_s + costs.rendezvous.last_call_s)
    assert scale_in > 0
    assert rendezvous_pause(job, 3, someone_left=False) * k == pytest.approx(costs.rendezvous.last_call_s)
    assert rendezvous_pause(job, 4, someone_left=False) == 0.0, "a round that reaches maxWorkers closes at once"


def test_the_simulator_charges_a_decision_the_pass_the_run_measured(inputs: tuple[Path, Path]) -> None:
    """The first job comes to an idle cluster: it starts the wait for a pass after it (half the pass interval, 45 s at
    360x), and with passes of 0.5 s measured, 180 trace seconds later still."""
    day = day_of(inputs)
    waits = []
    for pass_s in (0.0, 0.5):
        first = min(simulate_day(day, "lyra", pass_s=pass_s).records, key=lambda r: r.submit_s)  # type: ignore[arg-type]
        waits.append(first.first_start_s - first.submit_s)
    assert waits == [pytest.approx(0.25 / 2 * 360), pytest.approx(0.25 / 2 * 360 + 0.5 * 360)]


def test_inference_needs_the_simulators_servers(inputs: tuple[Path, Path]) -> None:
    day = day_of(inputs)
    for t in range(0, 86_400, 600):
        replicas, servers = day.replicas_at(t), day.servers_at(t)  # type: ignore[attr-defined]
        assert -(-replicas // 8) == servers
    assert max(day.servers_at(t) for t in range(0, 86_400, 600)) == 7  # type: ignore[attr-defined]
    assert inference_service(day)["spec"]["replicas"] == day.replicas_at(0)  # type: ignore[arg-type,attr-defined]


def test_the_inputs_written_are_what_lyra_simulate_reads(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    day = day_of(inputs)
    write_inputs(day, tmp_path / "inputs")  # type: ignore[arg-type]
    trace = read_trace(tmp_path / "inputs" / "jobs.csv")
    assert [(j.submit_s, j.num_gpus) for j in trace.jobs] == [
        (j.submit_s, j.num_gpus)
        for j in day.trace.jobs  # type: ignore[attr-defined]
    ]
    assert read_load(tmp_path / "inputs" / "load.csv").rates == pytest.approx(day.load.rates)  # type: ignore[attr-defined]
    assert load_scenario(tmp_path / "inputs" / "scenario.yaml") == day.scenario  # type: ignore[attr-defined]


def test_lyra_shortens_the_simulated_day(inputs: tuple[Path, Path]) -> None:
    day = day_of(inputs, jobs=30)
    on, off = sim_figures(simulate_day(day, "lyra")), sim_figures(simulate_day(day, "off"))  # type: ignore[arg-type]
    assert off["lent_gpu_h"] == 0
    assert on["lent_gpu_h"] > 0
    assert on["jct_mean_h"] <= off["jct_mean_h"]


@pytest.mark.parametrize(
    ("live", "simulated", "within"),
    [
        ({"jct_mean_h": 2.0}, {"jct_mean_h": 2.29}, True),
        ({"jct_mean_h": 2.0}, {"jct_mean_h": 2.4}, False),
        ({"preemptions": 1}, {"preemptions": 3}, True),  # small counts: 2 events
        ({"preemptions": 1}, {"preemptions": 4}, False),
        ({"preemptions": 30}, {"preemptions": 34}, True),  # large counts: 15 %
        ({"lent_gpu_h": 0.0}, {"lent_gpu_h": 0.0}, True),
        ({"lent_gpu_h": 0.0}, {"lent_gpu_h": 1.0}, False),
    ],
)
def test_the_simulator_is_held_to_15_percent_or_2_events(
    live: dict[str, float], simulated: dict[str, float], within: bool
) -> None:
    (row,) = compare(live, simulated)
    assert row.held
    assert row.within is within


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--duration", "0"], "expected a number > 0"),
        (["--duration", "5", "--speed-up", "10"], "the day needs at least an hour"),
        (["--speed-up", "fast"], "expected a number"),
        (["--jobs", "0"], "expected a number >= 1"),
        (["--extender-port", "9000", "--operator-port", "9000"], "must differ"),
        (["--prometheus-port", "8080"], "--prometheus-port must differ (got 8888, 8080, 8080)"),
        (["--prometheus-port", "0"], "expected a port between 1 and 65535"),
        (["--prometheus-port", "prometheus"], "--prometheus-port"),
        (["--profile", "/nonexistent/profile.yaml"], "/nonexistent/profile.yaml"),
        (["--trace", "/nonexistent/trace.csv"], "/nonexistent/trace.csv"),
        (["--trace", "{trace}"], "{trace}:2: not UTF-8: byte 0xe9 at column 3; save the file as UTF-8"),
        (["--profile", "{trace}"], "{trace}: not UTF-8: byte 0xe9 at line 2, column 3; save the file as UTF-8"),
        (["--load", "{load}"], "{load}:2: not UTF-8: byte 0xe9 at column 3; save the file as UTF-8"),
    ],
)
def test_bad_input_is_refused_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Files saved in Latin-1 (a spreadsheet's default CSV): not UTF-8.
    files = {"trace": "submit_time,duration,num_gpus\n0,\u00e9,1\n", "load": "t_sec,req_per_s\n0,\u00e9\n"}
    paths = {name: tmp_path / f"{name}.csv" for name in files}
    for name, text in files.items():
        paths[name].write_bytes(text.encode("latin-1"))
    argv = [argument.format_map(paths) for argument in argv]
    message = message.format_map(paths)
    code = 2
    try:
        assert main(["demo", "--out-dir", str(tmp_path / "out"), *argv]) == 2
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--extender-port", "--prometheus-port"])
def test_a_port_taken_is_refused_before_anything_starts(
    flag: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        assert port_taken(taken) is not None
        assert main(["demo", flag, str(taken), "--out-dir", str(tmp_path / "out")]) == 1
    assert f"port {taken} is in use" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["--lending", "--elasticity"])
def test_the_operators_switches_take_on_or_off(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["operator", flag, "maybe"])
    assert exit_.value.code == 2
    assert "expected on or off" in capsys.readouterr().err
