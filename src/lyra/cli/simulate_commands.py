"""`lyra simulate`: replay a training trace and an inference load through every scheme and print the table."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from lyra.cli.arguments import positive_int
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.output_paths import OutputError, check_directory, check_file, write_text, writing_into
from lyra.cli.plotting import missing_plotting

#: Where the shipped traces live, relative to the repository root, and where to get them otherwise.
SHARED_TRACES = Path("..") / "shared" / "traces"
DEFAULT_TRACE = SHARED_TRACES / "philly" / "philly.csv"
DEFAULT_LOAD = SHARED_TRACES / "servegen" / "derived_language_total_rate_10min.csv"
WHERE_TO_GET = {
    "trace": "Philly trace as pre-processed by the Pollux artifact (CC-BY-4.0): "
    "curl -LO https://raw.githubusercontent.com/petuum/adaptdl/"
    "de25dcc90c350b8ade3a710e437a651a8d2efae6/simulator/traces/philly.csv",
    "load": "ServeGen (Apache-2.0), https://github.com/alibaba/ServeGen: sum the per-client rates of "
    "data/language/* per 600 s window into t_sec,...,total_req_per_s, or pass any t_sec,req_per_s CSV",
}


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra simulate`."""
    parser = commands.add_parser(
        "simulate",
        help="compare schemes on a training trace and an inference load (the poster's table)",
        description=(
            "Trace-driven simulation of baseline, basic, lyra, lyra's two ablations (lyra-no-loaning, "
            "lyra-no-elasticity), lyra-exact-free and the context policies fifo, sjf, las. Prints the poster's table "
            "with ratios to baseline and where the gain comes from; writes JSON, a per-job CSV and PNG plots."
        ),
    )
    parser.add_argument("--trace", type=Path, help=f"training trace CSV (default: {DEFAULT_TRACE} if present)")
    parser.add_argument("--load", type=Path, help=f"inference load CSV (default: {DEFAULT_LOAD} if present)")
    parser.add_argument("--scenario", type=Path, help="scenario YAML (default: the one shipped in lyra.sim)")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="size the clusters first: baseline training usage 0.72, inference utilisation 0.40",
    )
    parser.add_argument("--scheme", default="all", help="scheme name, comma-separated names, or all")
    parser.add_argument(
        "--start", help="window start: YYYY-MM-DD[ HH:MM:SS] (UTC) or seconds on the trace clock (default: first job)"
    )
    parser.add_argument("--days", type=float, help="window length in days (default: through the last job)")
    parser.add_argument("--seed", type=int, help="override the scenario's seed")
    parser.add_argument("--json", type=Path, help="write every figure as JSON here")
    parser.add_argument(
        "--out-dir", type=Path, default=Path("out/simulate"), help="per-job CSV and PNG plots (default: %(default)s)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--sweep",
        action="append",
        nargs="?",
        const="",
        metavar="KNOB[=V1,V2,...]",
        help="sensitivity sweep instead of the table: vary one assumption at a time (inference-speed, "
        "elastic-share, scaling-overhead, fit-share, fit-size-exponent; repeat the flag to choose several; bare "
        "--sweep: all, with their default values) and report where lyra's gain holds",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=max(1, os.cpu_count() or 1),
        metavar="N",
        help="simulations run in parallel processes during a sweep (default: the CPUs, %(default)s)",
    )
    parser.add_argument(
        "--loaning-pays",
        action="store_true",
        help="instead of the table: does loaning pay beyond elasticity on these inputs? lyra against "
        "lyra-no-loaning (same elasticity), the mean-JCT gain, and yes where it is 10%% or more",
    )
    parser.add_argument(
        "--loaning-pays-map",
        action="store_true",
        help="with the inputs' trace, load and window: the gain at every combination of the regimes that decide it "
        "(inference idle share, share of jobs a T4 fits, training offered load, T4 speed; see --regime)",
    )
    parser.add_argument(
        "--regime",
        action="append",
        default=[],
        metavar="AXIS=V1,V2,...",
        help="values of one axis of --loaning-pays-map (idle-share, fit-share, offered-load, inference-speed; "
        "default 0.1,0.5 / 0.25,0.75 / 1.2,2.4 / 0.3,0.5)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(prog=parser.prog, run=run_simulate)


def _default_input(kind: str, given: Path | None, default: Path) -> Path:
    if given is not None:
        return given
    repo_root = Path(__file__).resolve().parents[3]
    for candidate in (default, repo_root / default):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(
        f"no --{kind} given and {default} does not exist (relative to the repository root {repo_root}). "
        f"Get it from: {WHERE_TO_GET[kind]}"
    )


def check_outputs(*, json_path: Path | None, out_dir: Path | None) -> None:
    """Refuse, before any work, outputs that could not be written after it (``--json``, ``--out-dir``).
    ``out_dir=None``: the run writes nothing there."""
    if json_path is not None:
        check_file(json_path, "--json")
    if out_dir is not None:
        check_directory(out_dir, "--out-dir")


def parse_start(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"--start must be a finite number of seconds, got {text!r}")
        return value
    for pattern in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise ValueError(f"--start must be YYYY-MM-DD[ HH:MM:SS] or seconds, got {text!r}")


class ProgressBar:
    """Progress on stderr: a bar redrawn in place on a terminal; in a log (CI, a pipe), a line every 25%."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty()
        self.shown = -1
        self.started = time.perf_counter()

    def __call__(self, fraction: float) -> None:
        percent = min(100, math.floor(fraction * 100))
        if not self.interactive:
            percent -= percent % 25
        if percent == self.shown:
            return
        self.shown = percent
        filled = percent // 4
        elapsed = time.perf_counter() - self.started
        line = f"{self.label:<9} [{'#' * filled}{'.' * (25 - filled)}] {percent:3d}% {elapsed:6.1f} s"
        if self.interactive:
            self.stream.write(f"\r{line}" + ("\n" if percent == 100 else ""))
        else:
            self.stream.write(f"{line}\n")
        self.stream.flush()


def run_simulate(args: argparse.Namespace) -> int:
    try:
        return _simulate(args)
    except OutputError as error:  # checked before the run, yet the write failed (the disk filled meanwhile)
        print(f"lyra simulate: {error} (the results printed above are the run's)", file=sys.stderr)
        return EXIT_FAILED


def _simulate(args: argparse.Namespace) -> int:
    from lyra.sim.bursts import BurstError, with_bursts
    from lyra.sim.calibration import CalibrationError, calibrate, check_calibratable, check_load_calibratable
    from lyra.sim.comparison import compare
    from lyra.sim.load import LoadError, read_load
    from lyra.sim.report import format_table, results_json, write_jobs_csv
    from lyra.sim.scenario import ScenarioError, load_scenario
    from lyra.sim.schemes import resolve
    from lyra.sim.sweep import SweepError, parse_knobs
    from lyra.sim.traces import TraceError, read_trace
    from lyra.sim.workload import Window

    if not args.no_plots and (missing := missing_plotting("lyra simulate")):
        print(f"lyra simulate: {missing}; or pass --no-plots", file=sys.stderr)
        return EXIT_FAILED
    from lyra.sim.loaning_pays import LoaningPaysError, check_mappable, parse_axes

    try:
        schemes = resolve(args.scheme)
        knobs = parse_knobs([s for s in args.sweep if s]) if args.sweep is not None else None
        loaning_pays = args.loaning_pays or args.loaning_pays_map
        if args.loaning_pays and args.loaning_pays_map:
            raise LoaningPaysError("give --loaning-pays or --loaning-pays-map, not both")
        if loaning_pays and knobs is not None:
            raise LoaningPaysError("--loaning-pays and --loaning-pays-map do not combine with --sweep")
        if args.regime and not args.loaning_pays_map:
            raise LoaningPaysError("--regime sets an axis of --loaning-pays-map; give that flag too")
        grid = parse_axes(args.regime) if args.loaning_pays_map else None
        writes_out_dir = knobs is None or not args.no_plots
        check_outputs(json_path=args.json, out_dir=args.out_dir if writes_out_dir else None)
        trace = read_trace(_default_input("trace", args.trace, DEFAULT_TRACE))
        load = read_load(_default_input("load", args.load, DEFAULT_LOAD))
        scenario = load_scenario(args.scenario)
        if args.seed is not None:
            scenario = scenario.model_copy(update={"seed": args.seed})
        recorded = load
        load = with_bursts(recorded, scenario.bursts, scenario.seed)
        window = Window.of(trace, parse_start(args.start), args.days)
        if args.calibrate:
            check_calibratable(scenario)
            check_load_calibratable(load, scenario.calibration.inference_utilisation)
        if loaning_pays:
            check_mappable(scenario)
    except (
        LoaningPaysError,
        FileNotFoundError,
        CalibrationError,
        TraceError,
        LoadError,
        ScenarioError,
        SweepError,
        OutputError,
        BurstError,
        ValueError,
    ) as error:
        print(f"lyra simulate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not any(window.start_s <= j.submit_s < window.start_s + window.length_s for j in trace.jobs):
        print(f"lyra simulate: no job of {trace.path} is submitted inside the window", file=sys.stderr)
        return EXIT_BAD_INPUT

    skipped = sum(trace.skipped.values())
    print(
        f"trace {trace.path} ({trace.format.value}): {len(trace.jobs)} jobs"
        + (f", {skipped} rows skipped {dict(trace.skipped)}" if skipped else "")
        + f"; load {load.path}: {len(load.rates)} steps of {load.step_s:g} s, {load.gaps_filled} gap cells filled",
        file=sys.stderr,
    )
    report = None
    if args.calibrate:

        def tried(servers: int, usage: float) -> None:
            if not args.quiet:
                print(f"calibrating: {servers} training servers -> baseline usage {usage:.3f}", file=sys.stderr)

        scenario, report = calibrate(trace, load, scenario, window, on_try=tried)
        (training,), (inference,) = scenario.training.groups, scenario.inference.groups
        print(
            f"calibrated: {report.training_servers} training servers x {training.gpus_per_server} "
            f"{training.gpu_type} (baseline usage {report.training_usage:.3f}), "
            f"{report.inference_servers} inference servers x {inference.gpus_per_server} "
            f"{inference.gpu_type}, {report.req_per_server:g} req/s per server "
            f"(inference utilisation {report.inference_utilisation:.3f}; demand beyond the whole pool "
            f"{report.inference_short_server_s:.0f} server-seconds a period, {report.inference_short_share:.3%})"
        )
        for problem in report.problems:
            print(f"warning: calibration missed its target: {problem}", file=sys.stderr)
        for flag in report.flags:
            print(f"WARNING: calibration result in doubt: {flag}")

    seen = _describe_load(recorded, load, scenario)

    if knobs is not None:
        return _run_sweep(args, (trace, load, scenario, window), knobs)
    if loaning_pays:
        return _run_loaning_pays(args, (trace, load, scenario, window), grid)

    started = time.perf_counter()
    comparison = compare(
        trace, load, scenario, window, schemes, calibration=report, progress=None if args.quiet else ProgressBar
    )
    for result in comparison.results:
        print(f"{result.scheme}: simulated in {result.wall_seconds:.1f} s", file=sys.stderr)
    print(
        f"window: {window.length_s / 86_400:.2f} days from {datetime.fromtimestamp(window.start_s, UTC):%Y-%m-%d %H:%M}"
        f" UTC, {comparison.context['inputs']['jobs_in_window']} jobs; training {scenario.training.describe()}, "
        f"inference {scenario.inference.describe()}"
    )
    print(format_table(comparison.metrics, bound_s=comparison.bound.mean_jct_s))
    bound = comparison.bound
    print(
        f"bound: no scheme's mean JCT can be below {bound.mean_jct_s:.0f} s on this workload (each job alone at its "
        f"best pace: {bound.alone_mean_s:.0f} s; the work on one machine of the cluster's "
        f"{bound.capacity_gpus:g} V100-equivalent GPUs, shortest first: {bound.capacity_mean_s:.0f} s; combined: "
        f'docs/evaluation.md, "A lower bound on mean JCT")'
    )
    if args.json is not None:
        context = {**comparison.context, "inference_load": seen}
        write_text(args.json, results_json(comparison.metrics, context), "--json")
        print(f"wrote {args.json}", file=sys.stderr)
    with writing_into(args.out_dir, "--out-dir"):
        write_jobs_csv(args.out_dir / "jobs.csv", comparison.results)
        print(f"wrote {args.out_dir / 'jobs.csv'}", file=sys.stderr)
        if not args.no_plots:
            from lyra.sim.plots import write_plots

            for path in write_plots(args.out_dir, comparison.results):
                print(f"wrote {path}", file=sys.stderr)
    print(f"total {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return EXIT_OK


def _describe_load(recorded: Any, load: Any, scenario: Any) -> dict[str, float]:
    """Print and return what the lender faces: the time in bursts and its forecast's error (lyra.sim.bursts)."""
    from lyra.sim.bursts import burst_share, forecast_error

    error = forecast_error(
        load,
        servers=scenario.inference.servers,
        req_per_server=scenario.inference.req_per_server,
        hysteresis_s=scenario.loaning.lend_hysteresis_s,
        headroom_servers=scenario.inference.headroom_servers,
    )
    seen = {
        "burst_share": burst_share(recorded, load) if load is not recorded else 0.0,
        "forecast_surprise_share": error.surprise_share,
        "forecast_mean_surprise_servers": error.mean_surprise_servers,
        "forecast_mean_abs_error_servers": error.mean_abs_error_servers,
    }
    print(
        f"inference load: bursts {seen['burst_share']:.1%} of the time; the lender's forecast (recent peak) is off "
        f"by {error.mean_abs_error_servers:.2f} servers on average, short in {error.surprise_share:.1%} of the "
        f"{load.step_s:g}-s steps (by {error.mean_surprise_servers:.2f} servers then)",
        file=sys.stderr,
    )
    return seen


def _run_sweep(args: argparse.Namespace, inputs: tuple[Any, Any, Any, Any], knobs: Any) -> int:
    from lyra.sim.sweep import SWEPT_SCHEMES, SweepError, format_sweep, run_sweep

    trace, load, scenario, window = inputs
    started = time.perf_counter()
    total = sum(len(values) for values in knobs.values()) * len(SWEPT_SCHEMES) + 1
    done = 0

    def finished(knob: str, value: float, scheme: str) -> None:
        nonlocal done
        done += 1
        if not args.quiet:
            where = f"{knob}={value:g}" if knob else "as given"
            print(
                f"sweep {done}/{total}: {scheme} ({where}) after {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )

    try:
        result = run_sweep(trace, load, scenario, window, knobs, workers=args.jobs, on_done=finished)
    except SweepError as error:
        print(f"lyra simulate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(format_sweep(result))
    if args.json is not None:
        import json

        write_text(args.json, json.dumps(result.as_dict(), indent=2) + "\n", "--json")
        print(f"wrote {args.json}", file=sys.stderr)
    if not args.no_plots:
        from lyra.sim.plots import write_sweep_plot

        with writing_into(args.out_dir, "--out-dir"):
            path = write_sweep_plot(args.out_dir / "sweep.png", result)
        print(f"wrote {path}", file=sys.stderr)
    print(f"total {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return EXIT_OK


def _run_loaning_pays(args: argparse.Namespace, inputs: tuple[Any, Any, Any, Any], grid: Any) -> int:
    """`--loaning-pays` (the inputs as they are) or `--loaning-pays-map` (every combination of ``grid``)."""
    import json
    from dataclasses import asdict

    from lyra.sim.loaning_pays import PAYS, answer, format_answers, grid_regimes, measure, shortfall_warning

    trace, load, scenario, window = inputs
    started = time.perf_counter()
    measured = measure(trace, load, scenario, window)
    print(f"these inputs: {measured.describe()}")
    regimes = [None] if grid is None else grid_regimes(grid)

    def finished(done: int, total: int, scheme: str, regime: str) -> None:
        if not args.quiet:
            print(
                f"loaning-pays {done}/{total}: {scheme} ({regime}) after {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )

    answers = answer(trace, load, scenario, window, regimes, workers=args.jobs, on_done=finished)
    print(format_answers(answers))
    if grid is None:
        (only,) = answers
        verdict = "pays" if only.pays else "does not pay"
        direction = "lower" if only.gain >= 0 else "higher"
        print(
            f"loaning {verdict} here: lyra's mean JCT is {abs(only.gain):.1%} {direction} than lyra-no-loaning's "
            f"({only.jct_lyra_s:.0f} s against {only.jct_no_loaning_s:.0f} s; it pays from {PAYS:.0%} lower)"
        )
    else:
        paying = [a for a in answers if a.pays]
        print(f"loaning pays (>= {PAYS:.0%} beyond elasticity) at {len(paying)} of {len(answers)} regimes")
    warning = shortfall_warning(answers)
    if warning is not None:
        print(warning)
    if args.json is not None:
        document = {"measured": asdict(measured), "pays_from": PAYS, "answers": [a.as_dict() for a in answers]}
        write_text(args.json, json.dumps(document, indent=2) + "\n", "--json")
        print(f"wrote {args.json}", file=sys.stderr)
    print(f"total {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return EXIT_OK
