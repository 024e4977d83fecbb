"""`lyra plan`: the admin's what-if planner. A snapshot document in, a plan as JSON out; nothing is changed.

    lyra plan reclaim  --snapshot FILE --servers K [--strategy lyra|poster|least-gpus-used|random]
    lyra plan allocate --snapshot FILE [--capacity GPUS]
    lyra plan loans    --snapshot FILE --demand SERVERS [--headroom SERVERS]
    lyra plan schema   (prints the snapshot document's JSON Schema)

``--snapshot -`` reads standard input. The snapshot format is documented in ``docs/snapshot.md``.
A malformed snapshot or a request the cluster cannot meet exits with code 2 and a message naming the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the `plan` command group."""
    from lyra.core.reclaim import ReclaimStrategy

    plan = commands.add_parser(
        "plan",
        help="what-if planner: reclaim, allocation and loan plans for a cluster snapshot (JSON in, JSON out)",
        description="Compute Lyra's plans for a cluster snapshot without changing anything.",
    )
    verbs = plan.add_subparsers(dest="verb", metavar="VERB", required=True)

    def snapshot_argument(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--snapshot", required=True, metavar="FILE", help="snapshot document (JSON); '-' reads standard input"
        )

    reclaim = verbs.add_parser("reclaim", help="which loaned servers to return, with the fewest preemptions")
    snapshot_argument(reclaim)
    reclaim.add_argument(
        "--servers", required=True, type=_non_negative_int, metavar="K", help="how many servers to reclaim"
    )
    reclaim.add_argument(
        "--strategy",
        choices=[s.value for s in ReclaimStrategy],
        default=ReclaimStrategy.LYRA.value,
        help="reclaim strategy (default: lyra); the others exist for comparison",
    )
    reclaim.add_argument("--seed", type=int, default=0, help="seed of the 'random' strategy (default: 0)")
    reclaim.set_defaults(run=_run_reclaim)

    allocate = verbs.add_parser("allocate", help="which jobs run, with how many workers (0 = stays queued)")
    snapshot_argument(allocate)
    allocate.add_argument(
        "--capacity",
        type=_non_negative_int,
        metavar="GPUS",
        help="GPUs training may use (default: training servers plus loaned servers in the snapshot)",
    )
    allocate.set_defaults(run=_run_allocate)

    loans = verbs.add_parser("loans", help="how many idle inference servers to lend, or loaned ones to reclaim")
    snapshot_argument(loans)
    loans.add_argument(
        "--demand", required=True, type=_non_negative_int, metavar="SERVERS", help="servers inference needs now"
    )
    loans.add_argument(
        "--headroom", type=_non_negative_int, default=0, metavar="SERVERS", help="spare servers kept (default: 0)"
    )
    loans.set_defaults(run=_run_loans)

    schema = verbs.add_parser("schema", help="print the JSON Schema of the snapshot document")
    schema.set_defaults(run=_run_schema)


def _read(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _BadInputError(f"snapshot {source}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise _BadInputError(f"snapshot {source}: cannot read it ({error})") from None


class _BadInputError(Exception):
    pass


def _load(args: argparse.Namespace) -> Any:
    from lyra.snapshot import SnapshotError, parse_snapshot

    text = _read(args.snapshot)
    try:
        return parse_snapshot(text)
    except SnapshotError as error:
        raise _BadInputError(f"snapshot {args.snapshot}: {error}") from None


def _emit(document: dict[str, Any]) -> int:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _guarded(run: Any) -> Any:
    def wrapper(args: argparse.Namespace) -> int:
        from lyra.core.model import InvalidClusterError

        try:
            code: int = run(args)
        except _BadInputError as error:
            print(f"lyra plan {args.verb}: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except InvalidClusterError as error:
            print(f"lyra plan {args.verb}: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return code

    return wrapper


@_guarded
def _run_reclaim(args: argparse.Namespace) -> int:
    from lyra.core.reclaim import ReclaimStrategy, plan_reclaim
    from lyra.snapshot import reclaim_plan_document

    snapshot = _load(args)
    plan = plan_reclaim(snapshot, args.servers, strategy=ReclaimStrategy(args.strategy), seed=args.seed)
    return _emit(reclaim_plan_document(plan))


@_guarded
def _run_allocate(args: argparse.Namespace) -> int:
    from lyra.core.allocation import allocate_workers
    from lyra.snapshot import allocation_plan_document

    snapshot = _load(args)
    capacity = snapshot.training_capacity() if args.capacity is None else args.capacity
    plan = allocate_workers(snapshot.jobs, capacity)
    return _emit(allocation_plan_document(plan))


@_guarded
def _run_loans(args: argparse.Namespace) -> int:
    from lyra.core.loaning import plan_loans
    from lyra.core.model import InferenceDemand
    from lyra.snapshot import loan_plan_document

    snapshot = _load(args)
    plan = plan_loans(snapshot, InferenceDemand(args.demand), headroom=args.headroom)
    return _emit(loan_plan_document(plan))


def _run_schema(args: argparse.Namespace) -> int:
    from lyra.snapshot import snapshot_json_schema

    return _emit(snapshot_json_schema())
