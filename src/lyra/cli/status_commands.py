"""`lyra status`: the cluster as Lyra sees it, in four tables: servers per pool, GPU type and loan state (marked
cordoned or unhealthy when they take no new work), with their GPUs and the GPUs bound pods hold there; per inference
GPU type, the servers the InferenceServices need, those inference holds and those lent; the queue in admission order
with the reason each job waits; running jobs with their workers, GPU type and servers.

Read-only. Exit codes: 0 printed, 1 the cluster could not be read, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lyra.cli.arguments import add_kubeconfig_argument
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.inference_gpu_cap_flag import add_inference_gpu_cap_argument, inference_gpu_caps

if TYPE_CHECKING:
    from lyra.core.model import ClusterSnapshot
    from lyra.operator.sizing import InferenceGpuCaps
    from lyra.operator.world import JobRecord, World


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra status`."""
    parser = commands.add_parser(
        "status",
        help="pools, loan states, the training queue and running jobs, as tables",
        description="Show the cluster as Lyra's operator sees it (read-only).",
    )
    add_kubeconfig_argument(parser)
    add_inference_gpu_cap_argument(
        parser,
        purpose="the operator's own caps (the chart's inferenceGpuCaps), so SERVERS NEEDED is sized as its passes "
        "size it",
    )
    parser.add_argument(
        "--shadow",
        metavar="URL",
        type=shadow_url,
        help="instead, show what an operator in shadow mode (--dry-run, the chart's operator.mode=shadow) would do: "
        "its last pass's plan, from its HTTP port (e.g. http://127.0.0.1:8080 after `kubectl port-forward "
        "svc/lyra-operator 8080`)",
    )
    parser.set_defaults(prog=parser.prog, run=run_status)


def shadow_url(text: str) -> str:
    """An http(s) URL of the shadow operator's HTTP port, without a path."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise argparse.ArgumentTypeError(f"{text[:200]}: give the operator's address as http://HOST:PORT")
    return text.rstrip("/")


#: How long `lyra status --shadow` waits for the operator's answer.
SHADOW_TIMEOUT_S = 10.0
#: The largest plan read from a shadow operator (a busy pass at 5,000 nodes: some 14,000 actions, a short line each).
MAX_SHADOW_PLAN_BYTES = 64 * 1024 * 1024


def render_shadow(plan: Mapping[str, Any]) -> str:
    """The shadow operator's last plan: when, how many actions of each kind, and one line per action."""
    actions = [str(line) for line in plan.get("actions") or []]
    kinds = Counter(line.split(" ", 1)[0] for line in actions)
    head = (
        f"shadow mode: pass {plan.get('pass', '?')} at {plan.get('decidedAt', '?')} would apply {len(actions)} "
        f"actions" + (f" ({', '.join(f'{n} {kind}' for kind, n in sorted(kinds.items()))})" if actions else "")
    )
    summary = plan.get("summary") or {}
    lines = [head]
    if summary:
        lines.append("summary: " + ", ".join(f"{key}={value}" for key, value in sorted(summary.items()) if value))
    lines += [f"  {line}" for line in actions]
    if not actions:
        lines.append("  nothing: an active operator would leave the cluster as it is")
    return "\n".join(lines)


def run_shadow(url: str) -> int:
    import json
    import urllib.error

    from lyra.apiserver_failures import unreachable_reason
    from lyra.cli.bounded_http import AnswerError, bounded_get

    try:
        got = bounded_get(f"{url}/plan", within_s=SHADOW_TIMEOUT_S, limit_bytes=MAX_SHADOW_PLAN_BYTES)
    except AnswerError as error:
        print(f"lyra status: {url}/plan gave {error}: is it Lyra's operator?", file=sys.stderr)
        return EXIT_FAILED
    except urllib.error.URLError as error:  # nothing answered
        cause = error.reason
        reason = unreachable_reason(cause) if isinstance(cause, BaseException) else None
        print(f"lyra status: cannot reach the operator at {url}: {reason or cause}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as error:
        print(f"lyra status: cannot read {url}/plan: {type(error).__name__}: {str(error)[:300]}", file=sys.stderr)
        return EXIT_FAILED
    if got.status >= 400:
        why = "it has made no pass yet" if got.status == 503 else "is it running in shadow mode (--dry-run)?"
        print(f"lyra status: {url}/plan answered {got.status}: {why}", file=sys.stderr)
        return EXIT_FAILED
    try:
        plan = json.loads(got.body)
    except ValueError as error:
        print(f"lyra status: cannot read {url}/plan: {type(error).__name__}: {str(error)[:300]}", file=sys.stderr)
        return EXIT_FAILED
    if not isinstance(plan, dict):
        print(f"lyra status: {url}/plan did not answer a plan", file=sys.stderr)
        return EXIT_FAILED
    print(render_shadow(plan))
    return EXIT_OK


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, as kubectl prints them."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def render(world: World, caps: InferenceGpuCaps | None = None) -> str:
    """The tables of `lyra status`; ``caps``: the operator's per-namespace inference GPU caps (none: uncapped)."""
    from lyra.api.conditions import RUNNING
    from lyra.api.resources import JobPhase
    from lyra.core.model import LoanState, Pool
    from lyra.operator.decide import OperatorConfig, live_view

    view = live_view(world, OperatorConfig(inference_gpu_caps=caps) if caps is not None else None, allocating=False)

    in_use: Counter[str] = Counter()
    for pod in world.pods:
        if pod.holds_gpus:  # bound and not finished: terminating ones too, until they are gone
            in_use[pod.node] += pod.gpus
    pools: dict[tuple[str, str, str], list[int]] = {}
    for node in world.nodes:
        state = node.state.value if node.state is not None else ("-" if node.pool is Pool.TRAINING else "new")
        if node.unschedulable:  # kubectl cordon: Lyra plans no new work there, and neither lends nor reclaims it
            state = f"{state}, cordoned"
        if not node.healthy:  # NotReady, not heard from, GPUs gone: no new work either (docs/reliability.md)
            state = f"{state}, unhealthy"
        counts = pools.setdefault((node.pool.value, node.gpu_type, state), [0, 0, 0])
        counts[0] += 1
        counts[1] += node.gpus
        counts[2] += in_use[node.name]
    server_rows = [(pool, gpu, state, *counts) for (pool, gpu, state), counts in sorted(pools.items())]
    # Per inference GPU type: the servers the services need now (as a pass sizes them), those inference holds
    # (serving, idle, or on their way back) and those lent to training.
    inference = [n for n in world.nodes if n.pool is Pool.INFERENCE]
    held_states = (LoanState.SERVING, LoanState.IDLE, LoanState.RECLAIMING)
    inference_rows = [
        (
            gpu_type,
            view.demand.get(gpu_type, 0),
            sum(1 for n in inference if n.gpu_type == gpu_type and n.state in held_states),
            sum(1 for n in inference if n.gpu_type == gpu_type and n.state is LoanState.LOANED),
        )
        for gpu_type in sorted({*view.demand, *(n.gpu_type for n in inference)})
    ]
    queued = admission_order(world, view.snapshot)
    queue_rows = []
    for position, job in enumerate(queued, start=1):
        reason = next((c.message for c in job.status.conditions if c.type == RUNNING), "not decided yet")
        queue_rows.append((position, job.ref.key, job.spec.min_workers, job.spec.gpus_per_worker, reason[:90]))
    running_rows = []
    for job in world.jobs:
        if job.status.phase is not JobPhase.RUNNING:
            continue
        workers = job.status.workers
        servers = _shortened(", ".join(f"{n}:{c}" for n, c in sorted(job.status.placements.items())))
        running_rows.append(
            (job.ref.key, f"{workers.current}/{workers.target}", job.status.gpu_type or "-", job.status.preemptions,
             servers)
        )  # fmt: skip
    parts = [
        table(("POOL", "GPU TYPE", "STATE", "SERVERS", "GPUS", "IN USE"), server_rows),
        "",
        table(("INFERENCE", "SERVERS NEEDED", "HELD", "LENT"), inference_rows)
        if inference_rows
        else "inference: no inference server",
        "",
        table(("QUEUE", "JOB", "BASE WORKERS", "GPU/WORKER", "WAITING BECAUSE"), queue_rows)
        if queue_rows
        else "queue: empty",
        "",
        table(("RUNNING", "WORKERS", "GPU TYPE", "PREEMPTIONS", "SERVERS"), running_rows)
        if running_rows
        else "running: none",
    ]
    problems = problem_rows(world)
    if problems:
        parts += ["", table(("PROBLEM", "OBJECT", "REASON", "MESSAGE"), problems)]
    return "\n".join(parts)


def admission_order(world: World, snapshot: ClusterSnapshot) -> list[JobRecord]:
    """The queued jobs in the order the operator's allocator admits them (:func:`lyra.core.ordering.admission_order`
    over ``snapshot``, the one a pass would decide on); queued jobs the snapshot leaves out (refused, held back)
    follow, by name."""
    from lyra.api.resources import JobPhase
    from lyra.core.ordering import admission_order as core_admission_order

    queued = {j.ref.key: j for j in world.jobs if j.status.phase is JobPhase.QUEUED}
    ordered = [queued.pop(name) for name in core_admission_order(snapshot) if name in queued]
    return ordered + [queued[key] for key in sorted(queued)]


def problem_rows(world: World) -> list[tuple[str, str, str, str]]:
    """Objects the operator cannot read, cannot build, or whose writes the API refuses (isolation per object):
    each is stopped alone and says why, in its status; this lists them in one place."""
    from lyra.api.conditions import APPLIED, INVALID_SPEC
    from lyra.api.resources import ConditionStatus

    rows = [(item.ref.kind, item.ref.key, "Unreadable", item.reason[:90]) for item in world.unreadable]
    records = [
        *((j.ref, j.status.conditions) for j in world.jobs),
        *((s.ref, s.status.conditions) for s in world.services),
    ]
    for ref, conditions in records:
        for condition in conditions:
            refused = condition.type == APPLIED and condition.status is not ConditionStatus.TRUE
            if refused or condition.reason == INVALID_SPEC:
                rows.append((ref.kind, ref.key, condition.reason, condition.message[:90]))
    return rows


def _shortened(text: str, limit: int = 90) -> str:
    """``text`` cut at the last item that fits, with how many items were left out."""
    if len(text) <= limit:
        return text
    head = text[:limit].rsplit(", ", 1)[0]
    return f"{head}, ... ({text.count(', ') - head.count(', ')} more)"


def run_status(args: argparse.Namespace) -> int:
    from lyra.apiserver_failures import describe_api_failure
    from lyra.cli.kube_client import KubeconfigError, api_client
    from lyra.operator.commit import Cluster

    if args.shadow is not None:
        if args.inference_gpu_cap:
            print("lyra status: --inference-gpu-cap does not go with --shadow (the operator sized its plan)",
                  file=sys.stderr)  # fmt: skip
            return EXIT_BAD_INPUT
        return run_shadow(args.shadow)
    try:
        caps = inference_gpu_caps(args.inference_gpu_cap)
    except ValueError as error:
        print(f"lyra status: --inference-gpu-cap: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        api = api_client(args.kubeconfig, one_shot=True)
    except KubeconfigError as error:
        print(f"lyra status: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        world = Cluster(api).observe(time.time())
    except Exception as error:  # an unreachable or refusing API server: reported, not a traceback
        why = describe_api_failure(error, api.configuration.host)
        print(f"lyra status: cannot read the cluster: {why}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        api.close()  # type: ignore[no-untyped-call]
    print(render(world, caps))
    return EXIT_OK
