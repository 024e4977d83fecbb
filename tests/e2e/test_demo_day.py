"""`lyra demo`, short: half a day (midnight to noon: a quiet night, a busy morning) of load and 20 Philly jobs in
60 s a run (speed-up 720), Lyra on then off, each on a fresh local control plane with the extender, the operator and
the workload emulator, and a local Prometheus scraping the operator and the extender.

Read from what the demo read from the cluster (its results.json): servers are lent while the load is low and
reclaimed when it is high; inference never waits on a reclaim longer than the reclaim deadline; the mean JCT is lower
with Lyra; the simulator is within its bounds for both runs (mean JCT, mean queueing and GPU-hours lent within 15 %,
preemptions within 15 % or 2 events: docs/evaluation.md, "The simulator held to the cluster"). Each run's Grafana
panels are PNGs with data (the loans panel shows the servers lent), and the operator's metrics in Prometheus agree
with the cluster's reading.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lyra.cli.demo_commands import port_taken
from lyra.dashboards.definitions import DASHBOARDS
from lyra.localcluster.ports import allocate_ports
from tests.operator_support import REPOSITORY

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

DURATION_S, SPEED_UP, JOBS = 60, 720, 20


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("demo")
    extender, operator, prometheus = allocate_ports(3)
    command = [
        sys.executable, "-m", "lyra", "demo", "--plain", "--out-dir", str(out),
        "--duration", str(DURATION_S), "--speed-up", str(SPEED_UP), "--jobs", str(JOBS),
        "--extender-port", str(extender), "--operator-port", str(operator), "--prometheus-port", str(prometheus),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=840, check=False)
    print(run.stdout[-6000:], run.stderr[-4000:])
    assert run.returncode == 0, run.stderr[-4000:]
    document: dict[str, object] = json.loads((out / "results.json").read_text())
    assert (out / "day.png").stat().st_size > 0
    document["ports"] = [extender, operator, prometheus]
    document["out"] = str(out)
    return document


def _timeline(results: dict[str, object], mode: str) -> list[dict[str, float]]:
    return results["timeline"][mode]  # type: ignore[index,no-any-return]


def test_servers_are_lent_at_low_load_and_reclaimed_at_high_load(results: dict[str, object]) -> None:
    samples = _timeline(results, "lyra")
    low = min(s["servers_needed"] for s in samples)
    high = max(s["servers_needed"] for s in samples)
    assert high > low
    lent_low = max(s.get("servers_loaned", 0) for s in samples if s["servers_needed"] == low)
    assert lent_low >= 1
    at_high = [s for s in samples if s["servers_needed"] == high]
    assert min(s.get("servers_loaned", 0) for s in at_high) < lent_low
    events = results["events"]["lyra"]  # type: ignore[index]
    assert events.get("Reclaiming", 0) >= 1
    assert all(s.get("servers_loaned", 0) == 0 for s in _timeline(results, "off"))


def test_inference_is_never_short_past_the_reclaim_deadline(results: dict[str, object]) -> None:
    deadline = float(results["reclaim_deadline_s"])  # type: ignore[arg-type]
    tick = 0.5 * SPEED_UP  # the observer's tick and a pass of the operator, in trace seconds
    waits = results["longest_reclaim_wait_s"]  # type: ignore[index]
    assert waits["lyra"] <= deadline + tick, waits
    assert waits["off"] == 0  # nothing lent, nothing reclaimed


def test_the_mean_jct_is_lower_with_lyra(results: dict[str, object]) -> None:
    jobs = results["jobs"]  # type: ignore[index]
    finished = {mode: {j["name"]: j for j in jobs[mode] if j["finished"] is not None} for mode in ("lyra", "off")}
    both = set(finished["lyra"]) & set(finished["off"])
    assert len(both) >= JOBS - 2  # the runs end once every job is done, or after twice the day

    def mean_jct(mode: str) -> float:
        return sum(finished[mode][n]["finished"] - finished[mode][n]["submitted"] for n in both) / len(both)

    assert mean_jct("lyra") < mean_jct("off")


def test_the_simulator_is_within_its_bounds_for_both_runs(results: dict[str, object]) -> None:
    for mode in ("lyra", "off"):
        rows = [row for row in results["comparison"][mode] if row["held"]]  # type: ignore[index]
        assert {row["figure"] for row in rows} == {"jct_mean_h", "queue_mean_h", "lent_gpu_h", "preemptions"}
        out = [(row["figure"], row["live"], row["simulated"]) for row in rows if not row["within"]]
        assert not out, f"{mode}: the simulator out of its bounds (figure, live, simulated): {out}"


def test_the_emulators_steps_are_reported_for_both_runs(results: dict[str, object]) -> None:
    """What the demo says of how the emulator kept its interval comes from the emulator's own report."""
    reports = results["emulator"]  # type: ignore[index]
    for mode in ("lyra", "off"):
        report = reports[mode]
        assert report is not None, mode
        assert report["interval_s"] == 0.2
        assert report["span_s"] >= DURATION_S  # it stepped through the whole day
        assert report["steps"] > 1
        assert report["late_steps"] <= report["steps"]


def test_the_demo_left_no_port_behind(results: dict[str, object]) -> None:
    for number in results["ports"]:  # type: ignore[attr-defined]
        assert port_taken(number) is None


def test_each_runs_dashboard_panels_are_plotted_with_data(results: dict[str, object]) -> None:
    out = Path(str(results["out"]))
    panels = sum(len(dashboard.panels) for dashboard in DASHBOARDS)
    listed = results["panels"]  # type: ignore[index]
    assert results["panel_failures"] == {"lyra": [], "off": []}
    for mode in ("lyra", "off"):
        assert len(listed[mode]) == panels, listed[mode]
        for panel in listed[mode]:
            png = (out / "panels" / mode / panel["file"]).read_bytes()
            assert png.startswith(b"\x89PNG"), panel
            assert len(png) > 1000, panel
    lyra = {panel["panel"]: panel for panel in listed["lyra"]}
    off = {panel["panel"]: panel for panel in listed["off"]}
    # The loans panel has the run's points, and shows GPUs lent with Lyra on and none with it off.
    assert lyra["GPUs lent now"]["points"] > 0, lyra["GPUs lent now"]
    assert lyra["GPUs lent now"]["peak"] > 0, lyra["GPUs lent now"]
    assert (off["GPUs lent now"]["peak"] or 0) == 0, off["GPUs lent now"]
    assert lyra["Servers by state per GPU type"]["points"] > 0
    assert lyra["Jobs by phase"]["points"] > 0
    assert off["Jobs by phase"]["points"] > 0


def test_the_operators_metrics_agree_with_the_clusters_reading(results: dict[str, object]) -> None:
    measured = results["prometheus"]  # type: ignore[index]
    live = results["live"]  # type: ignore[index]
    on, off = measured["lyra"], measured["off"]
    assert on["lent_gpu_h"] == pytest.approx(live["lyra"]["lent_gpu_h"], rel=0.15), (on, live["lyra"])
    assert on["reclaims"] >= 1
    assert abs(on["reclaims"] - live["lyra"]["reclaims"]) <= 1, (on, live["lyra"])
    assert on["preemptions"] == live["lyra"]["preemptions"], (on, live["lyra"])
    assert on["reclaim_mean_h"] is not None
    assert on["reclaim_mean_h"] > 0
    assert (off["lent_gpu_h"], off["reclaims"], off["preemptions"]) == (0, 0, 0)
    for mode in (on, off):  # the operator's passes, set beside the simulator's decision delay in comparison.md
        assert mode["passes"] > 0, mode
        assert mode["pass_mean_ms"] is not None, mode
        assert mode["pass_mean_ms"] > 0, mode
