"""`lyra emulate`: stand in for the training programs on fake (KWOK) nodes, whose pods never finish by themselves.

Every ``--interval`` seconds it advances each running TrainingJob at the pace its workers would train at (the
policy core's speed model: slowest worker's GPU, scaling efficiency) and marks the workers of a finished job
Succeeded (:mod:`lyra.emulator`). Use it with the local cluster and in tests, never on real GPUs.
Exit codes: 0 stopped (Ctrl-C), 1 it could not run, 2 bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from typing import Any

from lyra.cli.arguments import add_kubeconfig_argument, seconds
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_OK


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
    parser.set_defaults(prog=parser.prog, run=run_emulate)


def run_emulate(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    if args.interval <= 0:
        print("lyra emulate: --interval must be > 0 seconds", file=sys.stderr)
        return EXIT_BAD_INPUT
    from lyra.apiserver_failures import describe_api_failure
    from lyra.cli.kube_client import KubeconfigError, api_client
    from lyra.core.gpus import GpuCatalog
    from lyra.emulator import Progress, advance, complete
    from lyra.operator.commit import Cluster

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("lyra.emulate")
    try:
        api = api_client(args.kubeconfig, one_shot=True)
    except KubeconfigError as error:
        print(f"lyra emulate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    cluster = Cluster(api)
    progress = Progress()
    gpus = GpuCatalog()
    stop = stop or threading.Event()
    log.info("emulating training programs every %g s", args.interval)
    while not stop.is_set():
        try:
            finished = advance(progress, cluster.observe(time.time()), gpus)
            if finished:
                jobs = sorted({p.owner or "" for p in finished})
                log.info("work done: %s; %d workers marked Succeeded", ", ".join(jobs), complete(api, finished))
        except Exception as error:  # the API server may be briefly unreachable: the next step retries
            log.warning("step failed: %s", describe_api_failure(error, api.configuration.host))
        stop.wait(args.interval)
    return EXIT_OK
