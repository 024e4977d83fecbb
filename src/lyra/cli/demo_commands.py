"""``lyra demo``: a compressed day on the local cluster, with Lyra on and then off, and the simulator held to it.

The day (:mod:`lyra.cli.demo_day`) is played twice on a fresh local control plane (:mod:`lyra.cli.demo_run`): with
the operator's loaning and elasticity on, then off (``--lending off --elasticity off``, the operator's own settings).
The summary is read from the cluster; the simulator replays the same inputs for both runs and its figures are printed
beside the live ones with their relative errors (:mod:`lyra.cli.demo_summary`). Results, inputs and plots go to
``--out-dir``.

Ctrl-C stops everything the demo started (the control plane's processes die with it; the extender, operator and
emulator are stopped), removes the run's state directory and leaves no process or port behind (exit 130); a second
run works (tests/e2e/test_demo_interrupt.py). The demo refuses to start when a port it needs is taken.
"""

from __future__ import annotations

import argparse
import errno
import json
import shutil
import socket
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lyra.cli.arguments import non_negative_int, port, positive_int
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

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
    parser.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    parser.set_defaults(run=run_demo)


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
    from lyra.localcluster.binaries import BinariesError, BinaryCache
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
    if args.extender_port == args.operator_port:
        return fail("--extender-port and --operator-port must differ")
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
    for number in (args.extender_port, args.operator_port):
        if (problem := port_taken(number)) is not None:
            return fail(problem, EXIT_FAILED)
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return fail(f"--out-dir {args.out_dir}: {error.strerror}")
    try:
        BinaryCache().binary_set()
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
        return _play_and_report(args, day, profile, crd_dir)
    except KeyboardInterrupt:
        print("\nlyra demo: interrupted; everything it started is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


def _play_and_report(args: argparse.Namespace, day: Any, profile: Any, crd_dir: Path) -> int:
    from lyra.cli.demo_plots import plot_day
    from lyra.cli.demo_run import RunError, run_day
    from lyra.cli.demo_summary import (
        compare,
        comparison_table,
        live_figures,
        markdown_table,
        side_by_side,
        sim_figures,
        simulate_day,
    )
    from lyra.cli.demo_view import make_view
    from lyra.localcluster.waiting import WaitTimeoutError

    modes = (args.only,) if args.only else MODES
    live: dict[str, Any] = {}
    figures: dict[str, dict[str, float]] = {}
    for mode in modes:
        view = make_view(day.inference_type, plain=args.plain)
        state = Path(tempfile.mkdtemp(prefix=f"lyra-demo-{mode}-"))
        try:
            live[mode] = run_day(
                day, mode, profile=profile, state_dir=state, crd_dir=crd_dir,
                ports=(args.extender_port, args.operator_port), say=lambda m: print(m, flush=True), show=view,
            )  # fmt: skip
        except KeyboardInterrupt:  # the run's processes are stopped; its state (etcd's data, logs) goes too
            view.close()
            shutil.rmtree(state, ignore_errors=True)
            raise
        except (RunError, WaitTimeoutError) as error:
            view.close()
            logs = args.out_dir / f"logs-{mode}"
            shutil.rmtree(logs, ignore_errors=True)
            shutil.copytree(state / "logs", logs, dirs_exist_ok=True)
            shutil.rmtree(state, ignore_errors=True)
            print(f"lyra demo: the {mode} run failed: {error} (logs in {logs})", file=sys.stderr)
            return EXIT_FAILED
        view.close()
        logs = args.out_dir / f"logs-{mode}"
        shutil.rmtree(logs, ignore_errors=True)
        shutil.copytree(state / "logs", logs)
        shutil.rmtree(state, ignore_errors=True)
        figures[mode] = live_figures(live[mode], day)
        print(f"[{mode}] the day took {live[mode].wall_s:.0f} s on the cluster", flush=True)

    tables = {}
    simulated = {}
    for mode in modes:
        simulated[mode] = sim_figures(simulate_day(day, mode))
        tables[mode] = compare(figures[mode], simulated[mode])
    if len(modes) == 2:
        print("\nThe day on the cluster (read from TrainingJob statuses, Events, nodes and the Deployment):")
        print(side_by_side(figures["lyra"], figures["off"]))
    for mode in modes:
        print(f"\nThe simulator against the cluster ({mode}):")
        print(comparison_table(mode, tables[mode]))
    (args.out_dir / "comparison.md").write_text(markdown_table(tables) + "\n")
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
    }
    (args.out_dir / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    plot_day(live, day, args.out_dir)
    print(f"\nresults, plots and logs in {args.out_dir}")
    return EXIT_OK
