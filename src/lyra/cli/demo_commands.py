"""``lyra demo``: a compressed day on the local cluster, with Lyra on and then off, and the simulator held to it.

The day (:mod:`lyra.cli.demo_day`) is played twice on a fresh local control plane (:mod:`lyra.cli.demo_run`): with
the operator's loaning and elasticity on, then off (``--lending off --elasticity off``, the operator's own settings).
Each run has its own local Prometheus scraping the operator and the extender; after the run, the Grafana dashboards'
panels for its window are plotted into ``panels/<run>/`` and the operator's counts and durations are read from it
(:mod:`lyra.cli.demo_metrics`). The summary is read from the cluster, with Prometheus' figures beside it; the
simulator replays the same inputs for both runs and its figures are printed beside the live ones with their relative
errors (:mod:`lyra.cli.demo_summary`). Results, inputs and plots go to ``--out-dir``.

Ctrl-C, SIGTERM and SIGHUP stop everything the demo started (the extender, operator, emulator and Prometheus are
stopped, the control plane's processes die with it), remove the run's state directory and leave no process or port
behind (exit 130, 143, 129: :mod:`lyra.cli.stopping`); a second run works (tests/e2e/test_demo_interrupt.py). Killed
outright, what it started dies with it (``PR_SET_PDEATHSIG``). The demo refuses to start when a port it needs is
taken.
"""

from __future__ import annotations

import argparse
import errno
import json
import shutil
import socket
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lyra.cli.arguments import non_negative_int, port, positive_int
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.stopping import stopped_by, stopped_exit_code, stopped_like_ctrl_c

DEFAULT_OUT = Path("out") / "demo"
MODES = ("lyra", "off")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"expected a number > 0 and < 1000000, got {text[:40]}")
    return value


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra demo`."""
    from lyra.cli.simulate_commands import DEFAULT_LOAD, DEFAULT_TRACE

    parser = commands.add_parser(
        "demo",
        help="a compressed day on the local cluster with Lyra on and off, and the simulator held to it",
        description="Play a day of ServeGen inference load and Philly training jobs on the local cluster, with "
        "Lyra's loaning and elasticity on and then off; summarise both from the cluster and replay the day in the "
        "simulator.",
    )
    parser.add_argument(
        "--duration", type=_positive_float, default=180.0, metavar="SECONDS",
        help="wall seconds the day lasts on the cluster (default 180: with --speed-up 480, one day in 3 minutes)",
    )  # fmt: skip
    parser.add_argument(
        "--speed-up", type=_positive_float, default=480.0,
        help="trace seconds per wall second (default 480); the day covers --duration x --speed-up trace seconds",
    )  # fmt: skip
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the sampled jobs (default 0)")
    parser.add_argument("--jobs", type=positive_int, default=40, help="training jobs in the day (default 40)")
    parser.add_argument("--profile", type=Path, help="cluster profile YAML (default: the built-in profile)")
    parser.add_argument("--trace", type=Path, help=f"Philly trace CSV (default: {DEFAULT_TRACE})")
    parser.add_argument("--load", type=Path, help=f"ServeGen load CSV (default: {DEFAULT_LOAD})")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help=f"results (default {DEFAULT_OUT})")
    parser.add_argument("--only", choices=MODES, help="play the day once, with Lyra on or off")
    parser.add_argument("--extender-port", type=port, default=8888, help="port of the extender (default 8888)")
    parser.add_argument(
        "--operator-port", type=port, default=8080, help="port of the operator's /metrics (default 8080)"
    )
    parser.add_argument(
        "--prometheus-port", type=port, default=9090, help="port of the demo's Prometheus (default 9090)"
    )
    parser.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    parser.set_defaults(prog=parser.prog, run=run_demo)


def port_taken(number: int) -> str | None:
    """Why ``number`` cannot be listened on (on loopback and every interface), or None when it is free."""
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As the servers do: a port whose last connections are in TIME_WAIT is free, one listened on is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, number))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    return f"port {number} is in use (on {host}): stop what listens there or pick another port"
                return f"port {number} cannot be used on {host}: {error.strerror}"
    return None


def run_demo(args: argparse.Namespace) -> int:
    from lyra.cli.demo_day import DayError, build_day, write_inputs
    from lyra.cli.simulate_commands import DEFAULT_LOAD, DEFAULT_TRACE, _default_input
    from lyra.localcluster.binaries import PROMETHEUS, BinariesError, BinaryCache
    from lyra.localcluster.profile import ProfileError, load_default_profile, load_profile
    from lyra.sim.load import LoadError
    from lyra.sim.scenario import ScenarioError
    from lyra.sim.traces import TraceError

    def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
        print(f"lyra demo: {message}", file=sys.stderr)
        return code

    seconds = args.duration * args.speed_up
    if seconds < 3600:
        return fail(f"--duration x --speed-up covers {seconds:g} trace seconds; the day needs at least an hour")
    if seconds > 7 * 86_400:
        return fail(f"--duration x --speed-up covers {seconds:g} trace seconds; at most a week")
    ports = {"--extender-port": args.extender_port, "--operator-port": args.operator_port,
             "--prometheus-port": args.prometheus_port}  # fmt: skip
    if len(set(ports.values())) < len(ports):
        return fail(f"{', '.join(ports)} must differ (got {', '.join(str(n) for n in ports.values())})")
    try:
        profile = load_profile(args.profile) if args.profile is not None else load_default_profile()
        day = build_day(
            profile=profile,
            trace_path=_default_input("trace", args.trace, DEFAULT_TRACE),
            load_path=_default_input("load", args.load, DEFAULT_LOAD),
            seconds=seconds,
            speed_up=args.speed_up,
            jobs=args.jobs,
            seed=args.seed,
        )
    except (FileNotFoundError, DayError, ProfileError, TraceError, LoadError, ScenarioError) as error:
        return fail(str(error))
    for number in ports.values():
        if (problem := port_taken(number)) is not None:
            return fail(problem, EXIT_FAILED)
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return fail(f"--out-dir {args.out_dir}: {error.strerror}")
    try:
        BinaryCache().binary_set()
        BinaryCache().tool(PROMETHEUS, "prometheus")
    except BinariesError as error:
        return fail(f"{error} (run `make binaries` once)", EXIT_FAILED)
    write_inputs(day, args.out_dir / "inputs")
    crd_dir = Path(__file__).resolve().parents[3] / "manifests" / "crds"
    if not crd_dir.is_dir():
        return fail(f"the CRDs are not at {crd_dir}: run lyra demo from a checkout of Lyra", EXIT_FAILED)
    print(
        f"lyra demo: {args.jobs} jobs over {seconds / 3600:g} trace hours in {args.duration:g} s a run "
        f"(speed-up {args.speed_up:g}); inference {day.inference_type}, training {day.training_type}; "
        f"inputs in {args.out_dir / 'inputs'}",
        flush=True,
    )
    try:
        with stopped_like_ctrl_c():
            return _play_and_report(args, day, profile, crd_dir)
    except KeyboardInterrupt as interrupt:
        print(f"\nlyra demo: interrupted ({stopped_by(interrupt)}); everything it started is stopped", file=sys.stderr)
        return stopped_exit_code(interrupt)


def _play_and_report(args: argparse.Namespace, day: Any, profile: Any, crd_dir: Path) -> int:
    from lyra.cli.demo_metrics import PanelFile, beside_table, decision_cost, pass_seconds
    from lyra.cli.demo_plots import plot_day
    from lyra.cli.demo_summary import (
        compare,
        comparison_table,
        emulator_steps,
        live_figures,
        markdown_table,
        side_by_side,
        sim_figures,
        simulate_day,
    )

    modes = (args.only,) if args.only else MODES
    live: dict[str, Any] = {}
    figures: dict[str, dict[str, float]] = {}
    measured: dict[str, dict[str, float | None]] = {}
    panels: dict[str, list[PanelFile]] = {}
    failed_panels: dict[str, list[str]] = {}
    for mode in modes:
        played = _play_one(args, day, profile, crd_dir, mode)
        if isinstance(played, int):
            return played
        live[mode], measured[mode], panels[mode], failed_panels[mode] = (
            played.result,
            played.measured,
            played.panels,
            played.failed_panels,
        )
        figures[mode] = live_figures(live[mode], day)
        print(f"[{mode}] the day took {live[mode].wall_s:.0f} s on the cluster", flush=True)
        steps, warning = emulator_steps(mode, live[mode].emulator, day.speed_up)
        print(steps, flush=True)
        if warning is not None:
            print(f"lyra demo: warning: {warning}", file=sys.stderr, flush=True)

    tables = {}
    simulated = {}
    for mode in modes:
        took = pass_seconds(measured[mode])
        if took is None:
            wait_s = day.scenario.scheduler.decision_delay_s
            print(f"lyra demo: warning: {mode}: {decision_cost(wait_s, day.speed_up, measured[mode])}", file=sys.stderr)
        simulated[mode] = sim_figures(simulate_day(day, mode, pass_s=took or 0.0))
        tables[mode] = compare(figures[mode], simulated[mode])
    if len(modes) == 2:
        print("\nThe day on the cluster (read from TrainingJob statuses, Events, nodes and the Deployment):")
        print(side_by_side(figures["lyra"], figures["off"]))
    print("\nThe operator's metrics in Prometheus beside the cluster's reading (trace hours, passes in wall time):")
    print(beside_table(figures, measured))
    costs = {
        mode: decision_cost(day.scenario.scheduler.decision_delay_s, day.speed_up, measured[mode]) for mode in modes
    }
    for mode in modes:
        print(f"\nThe simulator against the cluster ({mode}):")
        print(comparison_table(mode, tables[mode]))
        print(costs[mode])
    notes = "".join(f"\n{mode}: {cost}\n" for mode, cost in costs.items())
    (args.out_dir / "comparison.md").write_text(markdown_table(tables) + "\n" + notes)
    document = {
        "inputs": {"seconds": day.seconds, "speed_up": day.speed_up, "seed": day.seed, "jobs": len(day.jobs)},
        "live": figures,
        "simulated": simulated,
        "comparison": {mode: [asdict(row) for row in rows] for mode, rows in tables.items()},
        "jobs": {mode: [asdict(job) for job in result.jobs.values()] for mode, result in live.items()},
        "timeline": {
            mode: [
                {
                    "t": s.t,
                    "load": s.load,
                    "servers_needed": s.servers_needed,
                    "replicas": s.replicas,
                    "ready": s.ready,
                    "queued": s.queued,
                    **{f"servers_{k}": v for k, v in s.states.items()},
                }
                for s in result.samples
            ]
            for mode, result in live.items()
        },
        "inference_short": {mode: result.short for mode, result in live.items()},
        "longest_reclaim_wait_s": {mode: result.longest_reclaim_wait for mode, result in live.items()},
        "reclaim_deadline_s": day.timing.reclaim_deadline_s * day.speed_up,
        "events": {mode: dict(result.events) for mode, result in live.items()},
        "decisions": {
            mode: [
                {"t": t, "reason": reason, "object": subject, "message": message}
                for t, reason, subject, message in result.decisions
            ]
            for mode, result in live.items()
        },
        "prometheus": measured,
        "emulator": {
            mode: None
            if result.emulator is None
            else result.emulator.model_dump() | {"mean_period_s": result.emulator.mean_period_s}
            for mode, result in live.items()
        },
        "panels": {mode: [asdict(panel) for panel in files] for mode, files in panels.items()},
        "panel_failures": failed_panels,
    }
    (args.out_dir / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    plot_day(live, day, args.out_dir)
    for mode in modes:
        print(f"\nThe Grafana dashboards' panels of the {mode} run (lyra report), in {args.out_dir / 'panels' / mode}:")
        for panel in panels[mode]:
            data = f"{panel.series} series, {panel.points} points" if panel.points else "no data"
            print(f"  {panel.file} ({data})")
    print(f"\nresults, plots and logs in {args.out_dir}")
    failures = [f"{mode}: {failure}" for mode, listed in failed_panels.items() for failure in listed]
    for failure in failures:
        print(f"lyra demo: a panel failed: {failure}", file=sys.stderr)
    return EXIT_FAILED if failures else EXIT_OK


@dataclass(frozen=True, slots=True)
class _Played:
    """One run: what the cluster did, Prometheus' figures, the panels written and those that failed."""

    result: Any
    measured: dict[str, float | None]
    panels: list[Any]
    failed_panels: list[str]


def _play_one(args: argparse.Namespace, day: Any, profile: Any, crd_dir: Path, mode: str) -> _Played | int:
    """One run of the day with its own Prometheus, then its panels and Prometheus' figures; the run's logs are kept
    in ``--out-dir``, its state directory removed whatever happens. An exit code when the run failed."""
    from lyra.cli.demo_metrics import prometheus_figures, render_panels, scrape_targets, value_at
    from lyra.cli.demo_run import RunError, run_day
    from lyra.cli.demo_view import make_view
    from lyra.cli.report_panels import PrometheusApi, PrometheusError
    from lyra.localcluster.prometheus import LocalPrometheus, PrometheusStartError
    from lyra.localcluster.waiting import WaitTimeoutError

    state = Path(tempfile.mkdtemp(prefix=f"lyra-demo-{mode}-"))
    logs = args.out_dir / f"logs-{mode}"
    try:
        (state / "logs").mkdir()
        prometheus = LocalPrometheus(
            state / "prometheus",
            scrape_targets(args.extender_port, args.operator_port),
            port=args.prometheus_port,
            log=state / "logs" / "prometheus.log",
        )
        # Started before the cluster and stopped after the panels: it sees the whole run.
        with prometheus:
            view = make_view(day.inference_type, plain=args.plain)
            try:
                result = run_day(
                    day, mode, profile=profile, state_dir=state, crd_dir=crd_dir,
                    ports=(args.extender_port, args.operator_port), say=lambda m: print(m, flush=True), show=view,
                )  # fmt: skip
            finally:
                view.close()
            api = PrometheusApi(prometheus.url)
            # Two scrapes past the day's last tick: the operator's final counts, scraped before it stopped, are in.
            end = result.ended_at + 2
            shutil.rmtree(args.out_dir / "panels" / mode, ignore_errors=True)
            measured = prometheus_figures(
                value_at(api), start=result.started_at, end=end, day_wall_s=day.wall_s, speed_up=day.speed_up
            )
            files, failures = render_panels(
                api, args.out_dir / "panels" / mode, result.started_at, end, day.timing.reclaim_deadline_s
            )
    except (RunError, WaitTimeoutError, PrometheusStartError, PrometheusError, OSError) as error:
        _keep_logs(state, logs)
        print(f"lyra demo: the {mode} run failed: {error} (logs in {logs})", file=sys.stderr)
        return EXIT_FAILED
    else:
        _keep_logs(state, logs)
    finally:  # on Ctrl-C too: the run's processes are stopped, and its state (etcd's data, logs) goes
        shutil.rmtree(state, ignore_errors=True)
    return _Played(result, measured, files, failures)


def _keep_logs(state: Path, logs: Path) -> None:
    shutil.rmtree(logs, ignore_errors=True)
    shutil.copytree(state / "logs", logs, dirs_exist_ok=True)
