"""`lyra nodes restore`: return every node to its state before Lyra (labels, taints and annotations the operator
wrote removed), after `helm uninstall` or before removing Lyra by hand. The plan is :mod:`lyra.cli.node_restore`;
this module reads the cluster, refuses what is unsafe, and writes.

Exit codes: 0 done (or, with ``--dry-run``, the plan printed), 1 refused (an operator still leads, training runs on
lent servers without ``--drain``) or the cluster could not be read or written, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lyra.api import names
from lyra.cli.arguments import add_kubeconfig_argument, namespace_name, seconds
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.node_restore import NodeRestore, RestorePlan, TrainingPod, plan_restore, restore_node

if TYPE_CHECKING:
    from kubernetes import client

PAGE = 500
#: How often a node whose patch found it changed is read and planned again.
PATCH_ATTEMPTS = 5
DEFAULT_DRAIN_TIMEOUT_S = 600.0


class RefusedError(Exception):
    """The restore would be unsafe; the message says why and what to do."""


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra nodes`."""
    parser = commands.add_parser("nodes", help="what Lyra wrote on the cluster's nodes")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    restore = verbs.add_parser(
        "restore",
        help="remove the labels, taints and annotations Lyra wrote on nodes (after uninstalling it)",
        description="Return every node to its state before Lyra: remove the loan state label and taint "
        f"({names.STATE_LABEL}) and the annotations {names.RECLAIM_STARTED_ANNOTATION} and "
        f"{names.IDLE_SINCE_ANNOTATION}; with --pool-labels also the admin's {names.POOL_LABEL}. Refuses while an "
        "operator holds the leader Lease, and while training runs on lent servers unless --drain. Exit codes: 0 "
        "done, 1 refused or the cluster could not be read or written, 2 bad input.",
    )
    add_kubeconfig_argument(restore)
    restore.add_argument("--dry-run", action="store_true", help="print what would change and change nothing")
    restore.add_argument(
        "--drain",
        action="store_true",
        help="delete the training pods on lent servers first (each with its own grace period) and wait for them",
    )
    restore.add_argument(
        "--pool-labels", action="store_true", help=f"also remove the pool label {names.POOL_LABEL} the admin set"
    )
    restore.add_argument(
        "--lease-namespace",
        type=namespace_name,
        default="lyra-system",
        help="namespace of the operator's leader Lease, checked so no running operator writes the keys again "
        "(default lyra-system)",
    )
    restore.add_argument(
        "--ignore-leader", action="store_true", help="restore even though an operator still holds its Lease"
    )
    restore.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_DRAIN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long --drain waits for the training pods to go (default {DEFAULT_DRAIN_TIMEOUT_S:g})",
    )
    restore.set_defaults(prog=restore.prog, run=run_restore)


def _items(list_page: Callable[[str | None], Any]) -> Iterator[Mapping[str, Any]]:
    token: str | None = None
    while True:
        page: Mapping[str, Any] = json.loads(list_page(token).data)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return


def _more(token: str | None) -> dict[str, Any]:
    return {"limit": PAGE, "_preload_content": False, **({"_continue": token} if token else {})}


def read_plan(api: client.ApiClient, *, pool_labels: bool) -> RestorePlan:
    from kubernetes import client

    core = client.CoreV1Api(api)
    nodes = list(_items(lambda token: core.list_node(**_more(token))))
    pods = _items(lambda token: core.list_pod_for_all_namespaces(**_more(token)))
    return plan_restore(nodes, pods, pool_labels=pool_labels)


def check_no_leader(api: client.ApiClient, namespace: str, now: float) -> str | None:
    """Refuse while an operator holds its Lease (renewed within its duration); a note when the Lease cannot be read."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(names.OPERATOR_NAME, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        where = f"{namespace}/{names.OPERATOR_NAME}"
        return f"could not read the Lease {where} ({error.status} {error.reason}): make sure no operator runs"
    spec = lease.spec
    renewed = spec.renew_time.timestamp() if spec and spec.renew_time else None
    duration = float(spec.lease_duration_seconds or 0) if spec else 0.0
    if spec and spec.holder_identity and renewed is not None and now - renewed < duration:
        raise RefusedError(
            f"an operator still leads (Lease {namespace}/{names.OPERATOR_NAME} held by {spec.holder_identity}, renewed "
            f"{max(now - renewed, 0):.0f}s ago): it would write the keys again. Uninstall Lyra (helm uninstall) or "
            "scale the operator's Deployment to 0 first, or pass --ignore-leader"
        )
    return None


def drain(api: client.ApiClient, pods: tuple[TrainingPod, ...], timeout_s: float) -> None:
    """Delete each training pod on a lent server (by UID, with its own grace period) and wait until all are gone."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from lyra.localcluster.waiting import wait_for

    core = client.CoreV1Api(api)
    for pod in pods:
        print(f"  deleting {pod.namespace}/{pod.name} on {pod.node} (TrainingJob {pod.job})")
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod.uid))
        try:
            core.delete_namespaced_pod(pod.name, pod.namespace, body=body)
        except ApiException as error:
            if error.status not in (404, 409):  # gone already, or a new pod of the same name (not ours to delete)
                raise

    def remaining() -> list[TrainingPod]:
        left = []
        for pod in pods:
            try:
                found = core.read_namespaced_pod(pod.name, pod.namespace)
            except ApiException as error:
                if error.status == 404:
                    continue
                raise
            if found.metadata is not None and found.metadata.uid == pod.uid:
                left.append(pod)
        return left

    started = time.monotonic()
    last: list[int] = [-1]

    def drained() -> bool:
        left = remaining()
        if len(left) != last[0]:
            print(f"  {len(left)} of {len(pods)} training pods still terminating ({time.monotonic() - started:.0f}s)")
            last[0] = len(left)
        return not left

    wait_for(drained, timeout_s, f"{len(pods)} training pods on lent servers to terminate")


def apply(api: client.ApiClient, restore: NodeRestore, *, pool_labels: bool) -> bool:
    """Patch one node; a node changed since it was read is read and planned again. False: nothing left to remove."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    current: NodeRestore | None = restore
    for _ in range(PATCH_ATTEMPTS):
        if current is None:
            return False
        try:
            core.patch_node(current.node, body=[dict(op) for op in current.patch])
            return True
        except ApiException as error:
            if error.status == 404:
                return False
            if error.status not in (409, 422):  # 422: the resourceVersion test failed
                raise
        response: Any = core.read_node(restore.node, _preload_content=False)
        raw = json.loads(response.data)
        current = restore_node(raw, pool_labels=pool_labels)
    raise RuntimeError(f"node {restore.node} kept changing under the restore ({PATCH_ATTEMPTS} attempts)")


def run_restore(args: argparse.Namespace) -> int:
    from lyra.apiserver_failures import describe_api_failure
    from lyra.cli.kube_client import KubeconfigError, api_client

    try:
        api = api_client(args.kubeconfig, one_shot=True)
    except KubeconfigError as error:
        print(f"lyra nodes restore: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return _restore(api, args)
    except RefusedError as error:
        print(f"lyra nodes restore: refused: {error}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as error:  # an unreachable or refusing API server, a drain that timed out: no traceback
        print(f"lyra nodes restore: {describe_api_failure(error, api.configuration.host)}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _restore(api: client.ApiClient, args: argparse.Namespace) -> int:
    if not args.ignore_leader:
        note = check_no_leader(api, args.lease_namespace, time.time())
        if note is not None:
            print(f"lyra nodes restore: note: {note}", file=sys.stderr)
    plan = read_plan(api, pool_labels=args.pool_labels)
    if plan.blockers and not args.drain:
        lines = "\n".join(f"  {p.namespace}/{p.name} on {p.node} (TrainingJob {p.job})" for p in plan.blockers)
        raise RefusedError(
            f"{len(plan.blockers)} training pods run on lent inference servers; with the state taint gone inference "
            f"would be placed beside them:\n{lines}\nrerun with --drain to delete them first (each with its grace "
            "period), or wait for them to finish"
        )
    verb = "would" if args.dry_run else "will"
    if plan.blockers:
        print(f"{verb} drain {len(plan.blockers)} training pods on lent servers first")
    if not plan.nodes:
        print("nothing to restore: no node carries a key Lyra wrote")
        return EXIT_OK
    for restore in plan.nodes:
        print(f"{verb} {restore.describe()}")
    if args.dry_run:
        return EXIT_OK
    if plan.blockers:
        drain(api, plan.blockers, args.timeout)
    restored = sum(apply(api, restore, pool_labels=args.pool_labels) for restore in plan.nodes)
    print(f"restored {restored} nodes")
    return EXIT_OK
