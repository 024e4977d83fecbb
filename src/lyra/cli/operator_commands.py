"""`lyra operator`: lend idle inference nodes to training, reclaim them for inference, run TrainingJobs and
InferenceServices (docs/user-guide.md).

The kubeconfig comes from ``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config`` or, inside a pod, the service account.
``--dry-run`` decides and reports without writing anything (shadow mode); ``--once`` makes one pass and prints what it
did (or, with ``--dry-run``, would do) as JSON. ``--http-port`` serves ``/metrics``, ``/healthz`` and ``/readyz``
(docs/operations.md), and with ``--debug-endpoints`` ``/debug/caches`` too. Exit codes: 0 stopped cleanly, 1 it could
not run, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from lyra.cli.arguments import (
    add_kubeconfig_argument,
    add_settings,
    listen_host_or_all,
    namespace_name,
    non_negative_int,
    seconds,
    settings_given,
)
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.gpu_catalog_file import add_gpu_catalog_argument
from lyra.cli.inference_gpu_cap_flag import add_inference_gpu_cap_argument, inference_gpu_caps

if TYPE_CHECKING:
    from lyra.operator.leader import LeaseTiming

#: The environment variable that chooses the watch layer when ``--watch-layer`` is not given.
WATCH_LAYER_ENV = "LYRA_WATCH_LAYER"


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra operator`."""
    parser = commands.add_parser(
        "operator",
        help="run the operator: loan, reclaim, admit and scale training jobs, run inference services",
        description="Watch TrainingJobs, InferenceServices, pool nodes and Lyra's pods; decide with the policy "
        "core; write node states, pods, Deployments, statuses and Events.",
    )
    add_kubeconfig_argument(parser)
    parser.add_argument("--dry-run", action="store_true", help="shadow mode: decide and report, change nothing")
    parser.add_argument("--once", action="store_true", help="make one pass, print it as JSON and exit")
    from lyra.operator.config import LoopSettings, OperatorConfig

    add_settings(parser, OperatorConfig)
    add_settings(parser, LoopSettings, only=("resync_s",))
    parser.add_argument(
        "--lease-namespace",
        type=namespace_name,
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the leader Lease that keeps one operator active (default: $POD_NAMESPACE or default)",
    )
    add_settings(parser, LoopSettings, only=("lease_duration_s",))
    parser.add_argument(
        "--renew-deadline",
        type=seconds,
        metavar="SECONDS",
        help="a leader that could not renew for this long stops writing: shorter than --lease-duration (by 0.2%% of "
        "it), longer than 1.2 x --retry-period (default 2/3 of --lease-duration)",
    )
    parser.add_argument(
        "--retry-period",
        type=seconds,
        metavar="SECONDS",
        help="how often the leader renews and a standby tries (default 2/15 of --lease-duration)",
    )
    parser.add_argument(
        "--http-port",
        type=non_negative_int,
        default=8080,
        help="serve /metrics, /healthz and /readyz on this port (default 8080; 0: not at all)",
    )
    parser.add_argument(
        "--debug-endpoints",
        action="store_true",
        help="also serve /debug/caches on --http-port: each watch cache's keys and resourceVersions, as JSON "
        "(default: off)",
    )
    parser.add_argument(
        "--http-address",
        type=listen_host_or_all,
        default="",
        help="address the HTTP endpoints listen on: an IP address or a host name (default: every interface)",
    )
    add_inference_gpu_cap_argument(
        parser,
        purpose="the GPUs a namespace's InferenceServices may claim together; services past it get fewer replicas "
        "and Capped=True",
    )
    parser.add_argument(
        "--max-priority",
        action="append",
        default=[],
        metavar="NAMESPACE=PRIORITY",
        help="the highest spec.priority a namespace's TrainingJobs are queued at; jobs above it are ordered at it and "
        "carry PriorityBounded=True (repeatable; *=PRIORITY for every namespace not named, *=0 unless given)",
    )
    parser.add_argument(
        "--watch-layer",
        default=os.environ.get(WATCH_LAYER_ENV, "kubewatch"),
        metavar="LAYER",
        help="what keeps the caches a pass reads: kubewatch (Lyra's list-and-watch caches) or kopf (kopf's indexes; "
        "docs/architecture.md has the two measured side by side) (default: $LYRA_WATCH_LAYER or kubewatch)",
    )
    add_gpu_catalog_argument(parser)
    parser.set_defaults(prog=parser.prog, run=run_operator_command)


def lease_flags(args: argparse.Namespace, timing: LeaseTiming) -> str:
    """The three lease flags as the operator would take them, defaults said as such."""
    deadline = "" if args.renew_deadline is not None else " (default: 2/3 of --lease-duration)"
    retry = "" if args.retry_period is not None else " (default: 2/15 of --lease-duration)"
    return (
        f"--lease-duration {timing.duration_s:g}, --renew-deadline {timing.renew_deadline_s:g}{deadline}, "
        f"--retry-period {timing.retry_period_s:g}{retry}"
    )


def run_operator_command(args: argparse.Namespace) -> int:
    from lyra.operator.leader import LeaseTiming

    timing = LeaseTiming.from_duration(args.lease_duration_s, args.renew_deadline, args.retry_period)
    problem = timing.problem()
    if problem is not None:  # refused in shadow mode too (it takes no lease): the same flags must run a leader
        print(f"lyra operator: {lease_flags(args, timing)}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.http_port > 65535:
        print(f"lyra operator: --http-port {args.http_port} is not a port (0 to 65535)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.resync_s <= 0:
        print("lyra operator: --resync must be > 0 seconds", file=sys.stderr)
        return EXIT_BAD_INPUT
    from lyra.operator.caches import WATCH_LAYERS

    if args.watch_layer not in WATCH_LAYERS:
        print(
            f"lyra operator: --watch-layer (or ${WATCH_LAYER_ENV}) {args.watch_layer!r}: not a watch layer (one of "
            f"{', '.join(WATCH_LAYERS)})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    from lyra.operator.priority_bounds import DEFAULT_MAX_PRIORITY, PriorityBounds

    try:
        caps = inference_gpu_caps(args.inference_gpu_cap)
    except ValueError as error:
        print(f"lyra operator: --inference-gpu-cap: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        bounds = PriorityBounds.parse(args.max_priority, default=DEFAULT_MAX_PRIORITY)
    except ValueError as error:
        print(f"lyra operator: --max-priority: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT

    from lyra.apiserver_failures import describe_api_failure
    from lyra.cli.kube_client import KubeconfigError, api_client
    from lyra.core.gpus import GpuCatalog
    from lyra.listening import ListenError
    from lyra.operator.commit import Cluster
    from lyra.operator.config import LoopSettings, OperatorConfig
    from lyra.operator.runner import Reconciler, RunOptions, describe, leader_lease, run_operator

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        api = api_client(args.kubeconfig)
    except KubeconfigError as error:
        print(f"lyra operator: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = OperatorConfig(
        **settings_given(args, OperatorConfig),
        inference_gpu_caps=caps,
        priority_bounds=bounds,
        gpus=args.gpu_catalog if args.gpu_catalog is not None else GpuCatalog(),
    )
    options = RunOptions(
        config=config,
        dry_run=args.dry_run,
        **settings_given(args, LoopSettings),
        lease_namespace=args.lease_namespace,
        renew_deadline_s=args.renew_deadline,
        retry_period_s=args.retry_period,
        http_address=args.http_address,
        http_port=args.http_port,
        debug_endpoints=args.debug_endpoints,
        watch_layer=args.watch_layer,
    )
    cluster = Cluster(api)
    if args.once:
        try:
            lease = leader_lease(cluster, options)
            reconciler = Reconciler(cluster, options, lease=lease)
            if not args.dry_run:  # a Lease nobody renews is taken only after watching it for a lease duration
                lease.try_lead_within(lease.timing.written_duration_s + lease.timing.retry_period_s)
            decision = reconciler.pass_once()
            lease.release()
        except Exception as error:  # an unreachable API server, RBAC refusals: reported, not a traceback
            why = describe_api_failure(error, api.configuration.host)
            print(f"lyra operator: the pass failed: {why}", file=sys.stderr)
            return EXIT_FAILED
        report = {"dryRun": args.dry_run, "actions": describe(decision), "summary": decision.report.as_json()}
        print(json.dumps(report, indent=2, default=str))
        return EXIT_OK
    try:
        run_operator(cluster, options)
    except ListenError as error:  # the port taken, the address not this host's: said, not a traceback
        print(f"lyra operator: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
