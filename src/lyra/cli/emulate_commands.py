"""`lyra emulate`: stand in for the training programs on fake (KWOK) nodes, whose pods never finish by themselves.

Every ``--interval`` seconds it advances each running TrainingJob at the pace its workers would train at (the
policy core's speed model: slowest worker's GPU, scaling efficiency) and marks the workers of a finished job
Succeeded (:mod:`lyra.emulator`). Steps start on that beat, and a step reads watch caches (the operator's) instead
of listing, so the steps keep their interval on a busy API server. Use it with the local cluster and in tests,
never on real GPUs.
Exit codes: 130 or 143 stopped by Ctrl-C or SIGTERM (its watches closed), 2 bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lyra.cli.arguments import add_kubeconfig_argument, seconds
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_OK

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra emulate`."""
    parser = commands.add_parser(
        "emulate",
        help="finish training jobs' worker pods on fake nodes when their work is done (for KWOK clusters)",
        description="Emulate the training programs of TrainingJobs on fake nodes: progress at the pace of the "
        "live workers, workers marked Succeeded when the job's work is done.",
    )
    add_kubeconfig_argument(parser)
    parser.add_argument(
        "--interval", type=seconds, default=1.0, metavar="SECONDS", help="seconds between steps (default 1)"
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="when stopped, write here as JSON how the steps kept their interval (steps, late steps, the longest)",
    )
    parser.set_defaults(prog=parser.prog, run=run_emulate)


def run_emulate(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    if args.interval <= 0:
        print("lyra emulate: --interval must be > 0 seconds", file=sys.stderr)
        return EXIT_BAD_INPUT
    from lyra.cli.kube_client import KubeconfigError, api_client
    from lyra.cli.output_paths import OutputError, check_file
    from lyra.cli.stopping import stopped_like_ctrl_c

    if args.report is not None:
        try:
            check_file(args.report, "--report")
        except OutputError as error:
            print(f"lyra emulate: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        # Not one-shot: the watch caches' requests are long, and they retry on their own.
        api = api_client(args.kubeconfig)
    except KubeconfigError as error:
        print(f"lyra emulate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with stopped_like_ctrl_c():  # SIGTERM too closes the watches and says how the steps kept their interval
        _emulate(api, args.interval, stop or threading.Event(), args.report)
    return EXIT_OK


def _emulate(api: ApiClient, interval: float, stop: threading.Event, report: Path | None) -> None:
    from lyra.apiserver_failures import describe_api_failure
    from lyra.cli.output_paths import OutputError, write_text
    from lyra.core.gpus import GpuCatalog
    from lyra.emulator import Progress, StepReport, advance, complete
    from lyra.operator.caches import ClusterCaches
    from lyra.operator.commit import Cluster

    log = logging.getLogger("lyra.emulate")
    # A step reads the operator's watch caches instead of listing every kind: the steps stay on their interval on a
    # busy API server, and add no load to it.
    caches = ClusterCaches.on_api(api)
    cluster = Cluster(api, caches=caches)
    progress = Progress()
    gpus = GpuCatalog()
    steps = late = 0
    longest = 0.0
    first = last = 0.0
    caches.start()
    try:
        if not caches.wait_synced(1.0):
            log.info("waiting for the watch caches to list every kind once")
            while not caches.wait_synced(1.0):
                if stop.is_set():
                    return
        log.info("emulating training programs every %g s", interval)
        due = time.monotonic()
        while not stop.is_set():
            began = time.monotonic()
            first, last = (first if steps else began), began
            try:
                finished = advance(progress, cluster.observe(time.time()), gpus)
                if finished:
                    jobs = sorted({p.owner or "" for p in finished})
                    versions = complete(api, finished)
                    for version in versions:
                        caches.wrote("Pod", version)  # the next step reads them Succeeded, never completes them twice
                    log.info("work done: %s; %d workers marked Succeeded", ", ".join(jobs), len(versions))
            except Exception as error:  # the API server may be briefly unreachable: the next step retries
                log.warning("step failed: %s", describe_api_failure(error, api.configuration.host))
            # Steps start every interval (a late step starts the next one at once), so a slow step does not
            # stretch the time the workers' progress and ends wait for.
            took = time.monotonic() - began
            steps, late, longest = steps + 1, late + (took > interval), max(longest, took)
            due = max(due + interval, time.monotonic())
            stop.wait(due - time.monotonic())
    finally:
        caches.stop()
        # A step longer than the interval delays the progress and the ends it emulates: said, so that a run's timings
        # can be judged.
        if steps:
            log.info(
                "stopped after %d steps; %d took longer than the interval (the longest %.3f s)", steps, late, longest
            )
        if report is not None:
            times = StepReport(
                interval_s=interval, steps=steps, late_steps=late, longest_step_s=longest, span_s=last - first
            )
            try:
                write_text(report, times.model_dump_json(indent=1) + "\n", "--report")
            except OutputError as error:
                log.error("%s", error)
