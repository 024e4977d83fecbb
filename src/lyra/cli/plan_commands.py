"""`lyra plan`: the admin's what-if planner. A snapshot document in, a plan as JSON out; nothing is changed.

    lyra plan reclaim  --snapshot FILE --servers K [--gpu-type TYPE] [--strategy lyra|poster|least-gpus-used|random]
                       [--seed N]
    lyra plan allocate --snapshot FILE
    lyra plan migrate  --snapshot FILE --restart-cost SECONDS [--min-gain SECONDS]
    lyra plan loans    --snapshot FILE [--demand SERVERS | --demand GPU_TYPE=SERVERS ...] [--headroom SERVERS]
    lyra plan schema   (prints the snapshot document's JSON Schema)

``--snapshot -`` reads standard input. The snapshot format is documented in ``docs/snapshot.md``. Instead of a
file, ``--from-cluster`` reads the live cluster (``--kubeconfig``, else the usual search) the way the operator
does (with ``--gpu-catalog FILE``, as an operator given that catalogue does), and ``--save-snapshot FILE`` keeps that
snapshot as a document to replay later.

One error convention for every verb: success exits 0 with the plan as JSON on standard output; bad input (a
flag, the snapshot, a request the cluster cannot meet) exits 2 with ``lyra plan <verb>: <message>`` on standard
error and nothing on standard output; a cluster that cannot be read (``--from-cluster``) exits 1 the same way.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from lyra.cli.arguments import non_negative_int, seconds
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED
from lyra.cli.gpu_catalog_file import add_gpu_catalog_argument
from lyra.cli.inference_gpu_cap_flag import add_inference_gpu_cap_argument, inference_gpu_caps
from lyra.settings import DEFAULT_LEND_DELAY_S

if TYPE_CHECKING:
    from lyra.snapshot import PlannerInput

#: The largest restart cost the allocator accepts (``allocate_workers``'s ``restart_cost_s``).
MAX_RESTART_COST_S = 1e9


class _PlanParser(argparse.ArgumentParser):
    """A verb's parser: a bad flag exits 2 with ``lyra plan <verb>: <message>`` first, then the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message}\n{self.format_usage()}")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Unknown flags are the verb's to report (argparse would leave them to ``lyra``'s own parser)."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _seconds_up_to(limit: float) -> Callable[[str], float]:
    """A flag in seconds: a finite number in [0, limit]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text[:40]!r}") from None
        if not math.isfinite(value) or not 0 <= value <= limit:
            raise argparse.ArgumentTypeError(f"expected seconds in [0, {limit:g}], got {text[:40]}")
        return value

    return parse


def _demand(text: str) -> tuple[str | None, int]:
    """A ``--demand``: ``SERVERS``, or ``GPU_TYPE=SERVERS``."""
    gpu_type, equals, count = text.rpartition("=")
    if equals and not gpu_type:
        raise argparse.ArgumentTypeError(f"expected GPU_TYPE=SERVERS, got {text[:80]!r} (no GPU type before '=')")
    try:
        servers = non_negative_int(count)
    except argparse.ArgumentTypeError as error:
        if not equals:
            raise
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: {error}") from None
    return (gpu_type or None), servers


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the `plan` command group."""
    from lyra.core import ReclaimStrategy

    plan = commands.add_parser(
        "plan",
        help="what-if planner: reclaim, allocation, migration and loan plans for a cluster snapshot (JSON in and out)",
        description="Compute Lyra's plans for a cluster snapshot without changing anything.",
    )
    verbs = plan.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=_PlanParser)

    def snapshot_argument(parser: argparse.ArgumentParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--snapshot", metavar="FILE", help="snapshot document (JSON); '-' reads standard input")
        source.add_argument("--from-cluster", action="store_true", help="read the live cluster instead of a file")
        parser.add_argument("--kubeconfig", type=Path, help="with --from-cluster: the kubeconfig to use")
        parser.add_argument(
            "--save-snapshot", type=Path, metavar="FILE", help="with --from-cluster: also write the snapshot there"
        )
        add_gpu_catalog_argument(parser, also="with --from-cluster: ")
        add_inference_gpu_cap_argument(
            parser,
            purpose="with --from-cluster: the operator's own caps (the chart's inferenceGpuCaps), so the services' "
            "demand (inferenceDemand) is sized as its passes size it",
        )

    reclaim = verbs.add_parser("reclaim", help="which loaned servers to return, with the fewest preemptions")
    snapshot_argument(reclaim)
    reclaim.add_argument(
        "--servers", required=True, type=non_negative_int, metavar="K", help="how many servers to reclaim"
    )
    reclaim.add_argument(
        "--strategy",
        choices=[s.value for s in ReclaimStrategy],
        default=ReclaimStrategy.LYRA.value,
        help="reclaim strategy (default: lyra); the others exist for comparison",
    )
    reclaim.add_argument("--seed", type=int, default=0, help="seed of the 'random' strategy (default: 0)")
    reclaim.add_argument(
        "--gpu-type",
        metavar="TYPE",
        help="reclaim servers of this GPU type (the one the replicas need); required when the loaned servers are of "
        "several types",
    )
    reclaim.set_defaults(prog=reclaim.prog, run=_run_reclaim)

    allocate = verbs.add_parser(
        "allocate", help="which jobs run, on which GPU types and servers, with how many workers (0 = waits)"
    )
    snapshot_argument(allocate)
    allocate.set_defaults(prog=allocate.prog, run=_run_allocate)

    migrate = verbs.add_parser("migrate", help="which running jobs to move to a GPU type faster for them")
    snapshot_argument(migrate)
    migrate.add_argument(
        "--restart-cost",
        required=True,
        type=_seconds_up_to(MAX_RESTART_COST_S),
        metavar="SECONDS",
        help="seconds a move costs the job without progress (checkpoint and restart)",
    )
    migrate.add_argument(
        "--min-gain",
        type=_seconds_up_to(1e12),
        default=0.0,
        metavar="SECONDS",
        help="make the moves only if they save at least this much completion time in all (default: 0)",
    )
    migrate.set_defaults(prog=migrate.prog, run=_run_migrate)

    loans = verbs.add_parser("loans", help="how many idle inference servers to lend, or loaned ones to reclaim")
    snapshot_argument(loans)
    loans.add_argument(
        "--demand",
        action="append",
        type=_demand,
        metavar="[GPU_TYPE=]SERVERS",
        help="servers inference needs now: one number for an inference pool of one GPU type, or GPU_TYPE=SERVERS "
        "for each type to plan (repeated); default: the snapshot's inferenceDemand (with --from-cluster: as the "
        "operator sizes the InferenceServices)",
    )
    loans.add_argument(
        "--headroom",
        type=non_negative_int,
        default=0,
        metavar="SERVERS",
        help="spare servers kept (per GPU type when the plan is per type; default: 0)",
    )
    loans.add_argument(
        "--lend-delay",
        type=seconds,
        default=DEFAULT_LEND_DELAY_S,
        metavar="SECONDS",
        help="the operator's --lend-delay: an idle server is lent once idle this long, by its idleSeconds in the "
        f"snapshot (a server without one has been idle long enough; default: {DEFAULT_LEND_DELAY_S:g})",
    )
    loans.set_defaults(prog=loans.prog, run=_run_loans)

    schema = verbs.add_parser("schema", help="print the JSON Schema of the snapshot document")
    schema.set_defaults(prog=schema.prog, run=_run_schema)


class _BadInputError(Exception):
    pass


class _ClusterError(Exception):
    """The cluster could not be read, or the snapshot read from it not saved (exit 1: the command ran and failed)."""


def _read(source: str) -> str | bytes:
    """The snapshot's bytes, at most one past the size limit (the parser reports an oversized document)."""
    from lyra.snapshot import MAX_SNAPSHOT_BYTES

    most = MAX_SNAPSHOT_BYTES + 1
    if source == "-":
        if sys.stdin is None:  # `<&-`: Python has no standard input
            raise _BadInputError("snapshot -: standard input is closed")
        binary = getattr(sys.stdin, "buffer", None)
        try:
            return binary.read(most) if binary is not None else sys.stdin.read(most)
        except OSError as error:
            raise _BadInputError(f"snapshot -: cannot read standard input ({error.strerror or error})") from None
    try:
        with Path(source).open("rb") as file:
            return file.read(most)
    except FileNotFoundError:
        raise _BadInputError(f"snapshot {source}: no such file") from None
    except OSError as error:
        raise _BadInputError(f"snapshot {source}: cannot read it ({error.strerror or error})") from None


def _from_cluster(args: argparse.Namespace) -> PlannerInput:
    import time
    from dataclasses import replace

    from lyra.apiserver_failures import describe_api_failure
    from lyra.cli.kube_client import KubeconfigError, api_client
    from lyra.cli.output_paths import OutputError, check_file, write_text
    from lyra.core import InvalidClusterError
    from lyra.operator.commit import Cluster
    from lyra.operator.decide import OperatorConfig, live_view
    from lyra.snapshot import PlannerInput, SnapshotDocument

    try:
        caps = inference_gpu_caps(args.inference_gpu_cap)
    except ValueError as error:
        raise _BadInputError(f"--inference-gpu-cap: {error}") from None
    try:
        if args.save_snapshot is not None:  # before reading the cluster, which takes seconds at thousands of nodes
            check_file(args.save_snapshot, "--save-snapshot")
        api = api_client(args.kubeconfig, one_shot=True)
    except (KubeconfigError, OutputError) as error:
        raise _BadInputError(str(error)) from None
    try:
        world = Cluster(api).observe(time.time())
    except Exception as error:  # unreachable or refusing API server: reported, not a traceback
        raise _ClusterError(f"cannot read the cluster: {describe_api_failure(error, api.configuration.host)}") from None
    finally:
        api.close()  # type: ignore[no-untyped-call]
    config = OperatorConfig(inference_gpu_caps=caps)
    if args.gpu_catalog is not None:
        config = replace(config, gpus=args.gpu_catalog)
    live = live_view(world, config, allocating=args.verb in _ALLOCATING_VERBS)
    try:
        given = PlannerInput(live.snapshot, live.held, live.cordoned, live.demand, live.unhealthy, live.idle_seconds)
    except InvalidClusterError as error:  # pods on a node hold more GPUs than it reports: the operator sees it too
        raise _ClusterError(f"the cluster as read is inconsistent: {error}") from None
    if args.save_snapshot is not None:
        document = SnapshotDocument.from_core(
            live.snapshot,
            live.held,
            live.cordoned,
            demand=live.demand,
            unhealthy=live.unhealthy,
            idle_seconds=live.idle_seconds,
        )
        text = document.model_dump_json(by_alias=True, indent=2)
        try:
            write_text(args.save_snapshot, text + "\n", "--save-snapshot")
        except OutputError as error:
            raise _ClusterError(str(error)) from None
    return given


#: The verbs that decide an allocation, which the operator makes on its allocation's view of the cluster (a job whose
#: workers are still leaving waits for them, its GPUs held); the others see every job where it runs.
_ALLOCATING_VERBS = frozenset({"allocate", "migrate"})


def _load(args: argparse.Namespace) -> PlannerInput:
    """The :class:`lyra.snapshot.PlannerInput` the verb decides on: the document's, or the live cluster's."""
    from lyra.snapshot import SnapshotError, parse_planner_input

    if args.from_cluster:
        return _from_cluster(args)
    if args.kubeconfig is not None or args.save_snapshot is not None:
        raise _BadInputError("--kubeconfig and --save-snapshot go with --from-cluster")
    if args.gpu_catalog is not None:
        raise _BadInputError("--gpu-catalog goes with --from-cluster (a snapshot document carries its own gpuCatalog)")
    if args.inference_gpu_cap:
        raise _BadInputError(
            "--inference-gpu-cap goes with --from-cluster (a snapshot document carries the demand it was sized to: "
            "inferenceDemand)"
        )
    data = _read(args.snapshot)
    try:
        return parse_planner_input(data)
    except SnapshotError as error:
        raise _BadInputError(f"snapshot {args.snapshot}: {error}") from None


def _emit(document: dict[str, Any]) -> int:
    text = json.dumps(document, indent=2, allow_nan=False)
    sys.stdout.write(text + "\n")
    return 0


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapper(args: argparse.Namespace) -> int:
        from lyra.core import InvalidClusterError

        try:
            return run(args)
        except (_BadInputError, InvalidClusterError) as error:
            print(f"lyra plan {args.verb}: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except _ClusterError as error:
            print(f"lyra plan {args.verb}: {error}", file=sys.stderr)
            return EXIT_FAILED

    return wrapper


@_guarded
def _run_reclaim(args: argparse.Namespace) -> int:
    from lyra.core import LoanState, Pool, ReclaimStrategy, plan_reclaim
    from lyra.snapshot import reclaim_plan_document

    given = _load(args)
    among = given.loan_cycle()
    loaned_types = sorted(
        {s.gpu_type for s in given.snapshot.servers_in(LoanState.LOANED) if among is None or s.name in among}
    )
    if args.gpu_type is not None:
        inference_types = sorted({s.gpu_type for s in given.snapshot.servers if s.pool is Pool.INFERENCE})
        if args.gpu_type not in inference_types:
            raise _BadInputError(
                f"--gpu-type {args.gpu_type[:80]}: no inference server is of that GPU type (they are of: "
                f"{', '.join(inference_types) or 'none'})"
            )
    elif args.servers and len(loaned_types) > 1:
        raise _BadInputError(
            f"the loaned servers are of {len(loaned_types)} GPU types ({', '.join(loaned_types)}) and replicas need "
            f"servers of one: give --gpu-type, e.g. --gpu-type {loaned_types[0]}"
        )
    plan = plan_reclaim(
        given.snapshot,
        args.servers,
        strategy=ReclaimStrategy(args.strategy),
        seed=args.seed,
        gpu_type=args.gpu_type,
        among=among,
    )
    return _emit(reclaim_plan_document(plan))


@_guarded
def _run_allocate(args: argparse.Namespace) -> int:
    from lyra.core import allocate_workers
    from lyra.snapshot import allocation_plan_document

    given = _load(args)
    return _emit(allocation_plan_document(allocate_workers(given.snapshot, held=given.allocation_held())))


@_guarded
def _run_migrate(args: argparse.Namespace) -> int:
    from lyra.core import allocate_workers
    from lyra.snapshot import migration_plan_document

    given = _load(args)
    held = given.allocation_held()
    staying = allocate_workers(given.snapshot, held=held)
    moving = allocate_workers(given.snapshot, held=held, restart_cost_s=args.restart_cost)
    document = migration_plan_document(
        given.snapshot, moving, staying, restart_cost_s=args.restart_cost, min_gain_s=args.min_gain
    )
    return _emit(document)


@_guarded
def _run_loans(args: argparse.Namespace) -> int:
    """One number: the pool balanced as one (it must be of one GPU type). Per GPU type (``--demand TYPE=N``, or the
    snapshot's ``inferenceDemand``): each type balanced alone, as the operator does; a type with inference servers
    that the snapshot's demand leaves out needs none."""
    from lyra.core import InferenceDemand, Pool, plan_loans
    from lyra.snapshot import loan_plan_document, loan_plans_document

    demands: list[tuple[str | None, int]] = args.demand or []
    pooled = [servers for gpu_type, servers in demands if gpu_type is None]
    if pooled and len(demands) > 1:
        raise _BadInputError("give --demand once as SERVERS, or as GPU_TYPE=SERVERS for each GPU type, not both")
    typed: dict[str, int] = {}
    for gpu_type, servers in demands:
        if gpu_type is not None:
            if gpu_type in typed:
                raise _BadInputError(f"--demand names GPU type {gpu_type[:80]!r} twice")
            typed[gpu_type] = servers
    given = _load(args)
    among = given.loan_cycle()
    pool_types = sorted(
        {s.gpu_type for s in given.snapshot.servers if s.pool is Pool.INFERENCE and (among is None or s.name in among)}
    )
    if pooled:
        if len(pool_types) > 1:
            raise _BadInputError(
                f"the inference servers are of {len(pool_types)} GPU types ({', '.join(pool_types)}), each lent and "
                f"reclaimed alone: give the demand of each as --demand GPU_TYPE=SERVERS, e.g. "
                f"--demand {pool_types[0]}={pooled[0]}"
            )
        plan = plan_loans(
            given.snapshot,
            InferenceDemand(pooled[0]),
            headroom=args.headroom,
            among=among,
            unlendable=given.unlendable(args.lend_delay),
        )
        return _emit(loan_plan_document(plan))
    inference_types = {s.gpu_type for s in given.snapshot.servers if s.pool is Pool.INFERENCE}
    for gpu_type in sorted(typed):
        if gpu_type not in inference_types:
            raise _BadInputError(
                f"--demand {gpu_type[:80]}=...: no inference server is of GPU type {gpu_type[:80]!r} "
                f"(they are of: {', '.join(sorted(inference_types)) or 'none'})"
            )
    if not typed:
        if given.demand is None:
            raise _BadInputError(
                "no demand: give --demand SERVERS (or GPU_TYPE=SERVERS per type); "
                f"snapshot {args.snapshot} carries no inferenceDemand"
            )
        typed = {gpu_type: given.demand.get(gpu_type, 0) for gpu_type in {*pool_types, *given.demand}}
    plans = {
        gpu_type: (
            servers,
            plan_loans(
                given.snapshot,
                InferenceDemand(servers),
                headroom=args.headroom,
                gpu_type=gpu_type,
                among=among,
                unlendable=given.unlendable(args.lend_delay),
            ),
        )
        for gpu_type, servers in typed.items()
    }
    return _emit(loan_plans_document(plans))


def _run_schema(args: argparse.Namespace) -> int:
    from lyra.snapshot import snapshot_json_schema

    return _emit(snapshot_json_schema())
