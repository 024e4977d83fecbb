"""`lyra report`: the panels of Lyra's Grafana dashboards as PNG plots, for people without Grafana.

Asks Prometheus (``--prometheus``) the same PromQL as the dashboards over the last ``--since`` (query_range) and
writes one PNG per panel into ``--out-dir``, printing each as it goes.
Exit codes: 0 every panel written, 1 Prometheus unreachable or a query refused (the other panels are still written),
2 bad input."""

from __future__ import annotations

import argparse
import re
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.output_paths import OutputError, check_directory
from lyra.cli.plotting import missing_plotting

DEFAULT_SINCE = "1h"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
MAX_SINCE_S = 90 * 86_400


def duration(text: str) -> float:
    """``30m``, ``6h``, ``2d`` (or plain seconds): more than a minute, at most 90 days."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a duration such as 30m, 6h or 2d, got {text[:40]!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not 60 <= seconds <= MAX_SINCE_S:
        raise argparse.ArgumentTypeError(f"expected a duration between 1m and 90d, got {text[:40]}")
    return seconds


def prometheus_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text[:200]!r}")
    return text


def seconds_up_to(limit: float) -> Callable[[str], float]:
    """An argument type: seconds, more than 0 and at most ``limit``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text[:40]!r}") from None
        if not 0 < value <= limit:
            raise argparse.ArgumentTypeError(f"expected seconds between 0 and {limit:g}, got {text[:40]}")
        return value

    return parse


def label_regex(text: str) -> str:
    """A label value regex for a dashboard variable (RE2, as Prometheus reads it; Python's re checks the syntax)."""
    import re

    if not text or len(text) > 256 or '"' in text or "\\" in text:
        raise argparse.ArgumentTypeError(f"{text[:60]!r}: a regex of at most 256 characters, without quotes")
    try:
        re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a regex: {error}") from None
    return text


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the `report` command."""
    from lyra.dashboards.definitions import DASHBOARDS, RECLAIM_DEADLINE

    report = commands.add_parser(
        "report", help="plot the Grafana dashboards' panels to PNG files from Prometheus", description=__doc__
    )
    report.add_argument(
        "--prometheus", required=True, type=prometheus_url, help="Prometheus' URL, e.g. http://127.0.0.1:9090"
    )
    report.add_argument("--out-dir", required=True, type=Path, help="where the PNG files go (created if missing)")
    report.add_argument(
        "--since",
        type=duration,
        default=duration(DEFAULT_SINCE),
        help=f"the range to plot, up to now (default {DEFAULT_SINCE})",
    )
    report.add_argument(
        "--dashboard",
        action="append",
        choices=[dashboard.uid for dashboard in DASHBOARDS],
        help="only this dashboard (repeatable; default: all)",
    )
    for variable in ("cluster", "namespace", "job"):
        report.add_argument(
            f"--{variable}",
            type=label_regex,
            metavar="REGEX",
            help=f"only the series of this {variable} (a PromQL regex, like the dashboards' variable; default: all)",
        )
    report.add_argument(
        "--timeout",
        type=seconds_up_to(600),
        default=30.0,
        metavar="SECONDS",
        help="seconds each query to Prometheus may take, its whole answer included (default 30)",
    )
    report.add_argument(
        "--reclaim-deadline",
        type=seconds_up_to(86_400),
        default=RECLAIM_DEADLINE.default,
        metavar="SECONDS",
        help=f"the operator's --reclaim-deadline, drawn on the reclaim panel (default {RECLAIM_DEADLINE.default:g})",
    )
    report.set_defaults(prog=report.prog, run=run_report)


def run_report(args: argparse.Namespace) -> int:
    from lyra.cli.report_panels import PrometheusApi, PrometheusError, Window, write_report
    from lyra.dashboards.definitions import DASHBOARDS, RECLAIM_DEADLINE

    if missing := missing_plotting("lyra report"):
        print(f"lyra report: {missing}", file=sys.stderr)
        return EXIT_FAILED
    out: Path = args.out_dir
    try:  # before the queries: a report that cannot be written is refused first
        check_directory(out, "--out-dir")
    except OutputError as error:
        print(f"lyra report: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    chosen = [d for d in DASHBOARDS if args.dashboard is None or d.uid in args.dashboard]
    api = PrometheusApi(args.prometheus, timeout_s=args.timeout)
    window = Window.ending(time.time(), args.since)
    try:
        version = api.version()
        print(f"Prometheus {version} at {api.url}; the last {args.since:g} s, a point every {window.step:g} s")
        values = {RECLAIM_DEADLINE.path: args.reclaim_deadline}
        choices = {name: getattr(args, name) for name in ("cluster", "namespace", "job") if getattr(args, name)}
        plots, failures = write_report(
            api, chosen, out, window, lambda line: print(line, flush=True), values=values, choices=choices
        )
    except PrometheusError as error:
        print(f"lyra report: {error}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as error:
        print(f"lyra report: cannot write into {out}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {len(plots)} plots into {out}")
    if failures:
        for failure in failures:
            print(f"lyra report: {failure.dashboard.title}: {failure.panel.title}: {failure.message}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
