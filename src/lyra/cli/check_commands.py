"""`lyra check`: the invariants Lyra's operator keeps (:mod:`lyra.check.invariants`), checked against a cluster.

Lists every node, every pod and every TrainingJob (read-only, paged), checks them (Lyra's pods, told by their owner)
and prints the violations: a line each by default, a JSON document (:class:`lyra.cli.check_report.CheckReport`) with
``--json``. Exit codes: 0 no violation, 3 at least one violation, 1 the cluster could not be read, 2 bad input.

It shares no code with the operator it checks (an import-linter contract in ``pyproject.toml``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lyra.api import names
from lyra.check.invariants import DEFAULT_GANG_TIMEOUT_S, DEFAULT_RECLAIM_DEADLINE_S, Limits, Report, check
from lyra.cli.arguments import add_kubeconfig_argument, seconds
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_VIOLATIONS

if TYPE_CHECKING:
    from kubernetes import client

PAGE = 500


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra check`."""
    parser = commands.add_parser(
        "check",
        help="check the invariants Lyra keeps on a cluster (exit 3 on a violation)",
        description="Check that node labels, taints and loan states agree, every pod is where Lyra's rules allow, "
        "gangs are whole, workers within their target and maxWorkers and labelled as their owner says, every "
        "TrainingJob accounted for and no reclaim past its deadline. Read-only. Exit codes: 0 clean, 3 a "
        "violation, 1 the cluster could not be read, 2 bad input.",
    )
    add_kubeconfig_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--gang-timeout",
        type=seconds,
        default=DEFAULT_GANG_TIMEOUT_S,
        metavar="SECONDS",
        help=f"the operator's --gang-timeout (default {DEFAULT_GANG_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--reclaim-deadline",
        type=seconds,
        default=DEFAULT_RECLAIM_DEADLINE_S,
        metavar="SECONDS",
        help=f"the operator's --reclaim-deadline (default {DEFAULT_RECLAIM_DEADLINE_S:g})",
    )
    parser.set_defaults(prog=parser.prog, run=run_check)


def _pages(list_page: Callable[[str | None], Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Every item of a paged list (``limit`` and ``continue``)."""
    token: str | None = None
    while True:
        page = list_page(token)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return


def _raw(response: Any) -> Mapping[str, Any]:
    decoded: Mapping[str, Any] = json.loads(response.data)
    return decoded


def check_cluster(api: client.ApiClient, now: float, limits: Limits) -> Report:
    """List the cluster's nodes, pods, TrainingJobs, InferenceServices and PodDisruptionBudgets as raw JSON, and check
    them (Lyra's pods, told by owner)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    policy = client.PolicyV1Api(api)

    def more(token: str | None) -> dict[str, Any]:
        return {"limit": PAGE, **({"_continue": token} if token else {})}

    def node_page(token: str | None) -> Mapping[str, Any]:
        return _raw(core.list_node(_preload_content=False, **more(token)))

    def pod_page(token: str | None) -> Mapping[str, Any]:
        # Every pod, not those labelled as Lyra's: a worker is its job's by its owner, and a tenant may strip its
        # labels (the check judges such a worker, and leaves a tenant's pod labelled as Lyra's alone).
        return _raw(core.list_pod_for_all_namespaces(_preload_content=False, **more(token)))

    def custom_page(plural: str) -> Callable[[str | None], Mapping[str, Any]]:
        def page(token: str | None) -> Mapping[str, Any]:
            return _raw(
                custom.list_cluster_custom_object(
                    names.GROUP, names.VERSION, plural, _preload_content=False, **more(token)
                )
            )

        return page

    def budget_page(token: str | None) -> Mapping[str, Any]:
        return _raw(policy.list_pod_disruption_budget_for_all_namespaces(_preload_content=False, **more(token)))

    return check(
        nodes=list(_pages(node_page)),
        pods=list(_pages(pod_page)),
        jobs=list(_pages(custom_page(names.TRAINING_JOB_PLURAL))),
        services=list(_pages(custom_page(names.INFERENCE_SERVICE_PLURAL))),
        budgets=list(_pages(budget_page)),
        now=now,
        limits=limits,
    )


def render(report: Report) -> str:
    """The report for people: one summary line, then one line per violation."""
    checked = ", ".join(
        _counted(n, what)
        for n, what in (
            (report.nodes, "node"),
            (report.pods, "Lyra pod"),
            (report.jobs, "TrainingJob"),
            (report.services, "InferenceService"),
        )
    )
    if report.clean:
        return f"clean: {checked} checked"
    lines = [f"{_counted(len(report.violations), 'violation')} ({checked} checked):"]
    width = max(len(v.invariant.value) for v in report.violations)
    for v in report.violations:
        lines.append(f"  {v.invariant.value.ljust(width)}  {v.kind} {v.key}: {v.message}")
    return "\n".join(lines)


def _counted(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def run_check(args: argparse.Namespace) -> int:
    from lyra.apiserver_failures import describe_api_failure
    from lyra.cli.kube_client import KubeconfigError, api_client

    limits = Limits(gang_timeout_s=args.gang_timeout, reclaim_deadline_s=args.reclaim_deadline)
    now = time.time()
    try:
        api = api_client(args.kubeconfig, one_shot=True)
    except KubeconfigError as error:
        print(f"lyra check: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        report = check_cluster(api, now, limits)
    except Exception as error:  # an unreachable or refusing API server: reported, not a traceback
        why = describe_api_failure(error, api.configuration.host)
        print(f"lyra check: cannot read the cluster: {why}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        api.close()  # type: ignore[no-untyped-call]
    if args.json:
        from lyra.cli.check_report import report_of

        print(report_of(report, now, limits).model_dump_json(by_alias=True, indent=2))
    else:
        print(render(report))
    return EXIT_OK if report.clean else EXIT_VIOLATIONS
