"""`lyra extender`: the scheduler extender that kube-scheduler calls to score nodes for GPU pods.

It serves ``prioritize`` and ``preempt`` (it refuses no node: Lyra's hard rules are the state taints and the pods'
node affinity, which kube-scheduler checks itself) on ``--host``:``--port`` (default 127.0.0.1:8888, where the
local cluster's kube-scheduler calls it), with ``/healthz``, ``/readyz`` (ready once its node and pod cache has
synced) and ``/metrics``. The kubeconfig comes from ``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config`` or, inside
a pod, the service account. Exit codes: 0 stopped cleanly, 1 it could not start, 2 bad input.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from pathlib import Path
from typing import Any

from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8888


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra extender`."""
    parser = commands.add_parser(
        "extender",
        help="run the scheduler extender (prioritize, preempt) for kube-scheduler",
        description="Serve kube-scheduler's extender protocol from a watched cache of nodes and pods: score nodes "
        "so inference packs onto serving servers, jobs pack onto few servers away from the next reclaim, and "
        "preemption never takes inference or base workers for lesser pods.",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument(
        "--max-body-mib", type=int, default=32, help="largest request body accepted, in MiB (default 32)"
    )
    parser.add_argument(
        "--capture-dir",
        type=Path,
        metavar="DIR",
        help="write the first 50 request bodies of each verb to DIR as JSON (for debugging and test fixtures)",
    )
    parser.add_argument(
        "--preempt-across-namespaces",
        action="store_true",
        help="let a pod's preemption evict Lyra's pods in other namespaces (default: only in its own namespace)",
    )
    parser.set_defaults(run=run_extender)


def _bad(message: str) -> int:
    print(f"lyra extender: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run_extender(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        return _bad(f"--port must be between 1 and 65535, got {args.port}")
    try:
        ipaddress.ip_address(args.host)
    except ValueError:
        if not args.host or len(args.host) > 253:
            return _bad(f"--host must be an IP address or a host name, got {args.host!r}")
    if not 1 <= args.max_body_mib <= 1024:
        return _bad(f"--max-body-mib must be between 1 and 1024, got {args.max_body_mib}")
    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        return _bad(f"--kubeconfig {args.kubeconfig}: no such file")  # bad input (2), before any connection

    import uvicorn

    from lyra.cli.kube_client import KubeconfigError, api_client
    from lyra.extender.app import BodyRecorder, create_app
    from lyra.extender.watch import WatchedView

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        api = api_client(args.kubeconfig)
    except KubeconfigError as error:
        print(f"lyra extender: {error}", file=sys.stderr)
        return EXIT_FAILED
    try:
        recorder = BodyRecorder(args.capture_dir) if args.capture_dir is not None else None
    except OSError as error:
        return _bad(f"--capture-dir {args.capture_dir}: {error}")
    source = WatchedView(api)
    source.start()
    app = create_app(
        source,
        max_body_bytes=args.max_body_mib * 1024 * 1024,
        recorder=recorder,
        preempt_across_namespaces=args.preempt_across_namespaces,
    )
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    except OSError as error:
        print(f"lyra extender: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        source.stop()
    return EXIT_OK
