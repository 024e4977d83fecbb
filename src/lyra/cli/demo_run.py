"""One live run of the demo's day: the local control plane, Lyra's extender, operator and workload emulator, the
day's load on the InferenceService and its jobs submitted on time; what the cluster did, read from the cluster.

Everything is read from the API server while the day runs (TrainingJob statuses, InferenceService and Deployment
status, node loan states, Events), every ``tick_s`` wall seconds, and expressed in trace seconds: ``(wall - start)
x speed_up``. Phase changes are timed by this observer (the statuses' timestamps have whole-second precision, which
is minutes of trace time), so every time is known to a tick.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from lyra.api import conditions, names
from lyra.cli.demo_day import SERVICE, Day, inference_service, training_job
from lyra.emulator import StepReport
from lyra.localcluster import populate
from lyra.localcluster.binaries import BinaryCache
from lyra.localcluster.controlplane import ClusterOptions, ControlPlane
from lyra.localcluster.processes import ProcessStartError, launch
from lyra.localcluster.profile import ClusterProfile
from lyra.localcluster.waiting import wait_for

NAMESPACE = "demo"
TICK_S = 0.1
#: Wall seconds the jobs still running at the end of the day may take to finish, as a share of the day (the run ends
#: as soon as they have).
TAIL_SHARE = 1.0
READY_S = 120.0


#: The emulator's report of its steps, among the run's logs.
STEP_REPORT = "emulate-steps.json"


class RunError(RuntimeError):
    """A part of the run did not start or stopped; the message names it and its log."""


@dataclass
class JobSeen:
    name: str
    submitted: float
    gpus_per_worker: int
    started: float | None = None
    finished: float | None = None
    phase: str = "Queued"
    preemptions: int = 0
    scale_ins: int = 0
    base: int = 0
    flexible: int = 0
    gpu_type: str | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at trace time ``t``."""

    t: float
    load: float
    replicas: int
    ready: int
    servers_needed: int
    states: dict[str, int]
    queued: int
    running: int
    base_workers: int
    flexible_workers: int
    #: GPUs training uses, per GPU type.
    busy: dict[str, int]


@dataclass
class LiveResult:
    mode: str
    speed_up: float
    gpus_per_server: int
    jobs: dict[str, JobSeen] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    events: collections.Counter[str] = field(default_factory=collections.Counter)
    decisions: list[tuple[float, str, str, str]] = field(default_factory=list)
    #: (start, end) trace seconds of each stretch with fewer ready replicas than wanted.
    short: list[tuple[float, float]] = field(default_factory=list)
    #: Trace seconds each reclaim took (a server's ``Reclaiming`` to its ``Returned`` Event; the Events' times are whole
    #: wall seconds, so each is a multiple of the speed-up: the operator's own histogram in Prometheus is finer).
    reclaim_durations: list[float] = field(default_factory=list)
    #: The longest time, in trace seconds, the service's replicas waited on a reclaim (its ``status.reclaim``, which
    #: the operator keeps from the first pass that finds replicas waiting for reclaimed servers until they all run).
    longest_reclaim_wait: float = 0.0
    day_s: float = 0.0
    wall_s: float = 0.0
    #: When the day began and the run ended (Unix seconds): the window of its Prometheus figures and panels.
    started_at: float = 0.0
    ended_at: float = 0.0
    #: How the workload emulator kept its interval (None: it left no report).
    emulator: StepReport | None = None


class Child:
    """A ``lyra`` command as a child process in its own process group, its output in a log. It dies with the demo
    (``PR_SET_PDEATHSIG``) even when the demo is killed outright; it held the demo's ports after a SIGTERM."""

    def __init__(self, log: Path, *argv: str) -> None:
        self.log = log
        self.name = argv[0]
        try:
            self.process, _ = launch(
                f"lyra {self.name}", [sys.executable, "-m", "lyra", *argv], log, die_with_parent=True
            )
        except ProcessStartError as error:
            raise RunError(str(error)) from None

    def check(self) -> None:
        if self.process.poll() is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
            raise RunError(f"lyra {self.name} stopped (exit {self.process.returncode}); {self.log}:\n{tail}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


@contextmanager
def running_cluster(
    state_dir: Path, profile: ClusterProfile, extender_port: int, crd_dir: Path, say: Callable[[str], None]
) -> Iterator[ControlPlane]:
    """The local control plane (its processes die with this one), stopped again whatever happens."""
    plane = ControlPlane(
        BinaryCache().binary_set(),
        ClusterOptions(
            state_dir=state_dir,
            profile=profile,
            profile_source=profile.name,
            name="demo",
            extender_url=f"http://127.0.0.1:{extender_port}",
            crd_dir=crd_dir,
            die_with_parent=True,
        ),
    )
    try:
        plane.start(say)
        yield plane
    finally:
        plane.stop(lambda _message: None)


def _custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def reclaim_durations(pending: dict[str, float], batch: list[tuple[float, str, str]]) -> list[float]:
    """The reclaims a batch of Events ``(when, reason, server)`` ends, as durations, ``pending`` holding each server's
    ``Reclaiming`` not yet ended (updated). A list returns Events in no set order, and both of a short reclaim's
    Events carry the same whole second: the batch is read in time order, ``Reclaiming`` first, so a ``Returned``
    listed before its own ``Reclaiming`` is not left unpaired (the ``Reclaiming`` then paired with the server's next
    return, hours later). A ``Returned`` with no reclaim under way (training left a lent server) ends none."""
    ended = []
    for when, reason, server in sorted(batch, key=lambda item: (item[0], item[1] != conditions.RECLAIMING, item[2])):
        if reason == conditions.RECLAIMING:
            pending.setdefault(server, when)
        elif reason == conditions.RETURNED and server in pending:
            ended.append(max(when - pending.pop(server), 0.0))
    return ended


def _ready(deployment: client.V1Deployment) -> int:
    return int((deployment.status.ready_replicas if deployment.status else None) or 0)


def _epoch(timestamp: Any) -> float:
    return float(timestamp.timestamp()) if timestamp is not None else 0.0


class Observer:
    """Reads the cluster and keeps :class:`LiveResult` up to date; ``t`` maps wall time to trace time."""

    def __init__(self, api: client.ApiClient, result: LiveResult, t: Callable[[float], float]) -> None:
        self.api = api
        self.result = result
        self.t = t
        self.core = client.CoreV1Api(api)
        self.seen_events: set[str] = set()
        self.reclaiming_since: dict[str, float] = {}
        self.short_since: float | None = None

    def jobs(self, now: float) -> None:
        listed = cast(
            dict[str, Any],
            _custom(self.api).list_namespaced_custom_object(
                names.GROUP, names.VERSION, NAMESPACE, names.TRAINING_JOB_PLURAL
            ),
        )
        items = listed["items"]
        for item in items:
            seen = self.result.jobs.get(item["metadata"]["name"])
            if seen is None:
                continue
            status = item.get("status") or {}
            phase = status.get("phase", "Queued")
            workers = status.get("workers") or {}
            seen.base, seen.flexible = int(workers.get("base", 0)), int(workers.get("flexible", 0))
            seen.preemptions = int(status.get("preemptions", 0))
            seen.scale_ins = int(status.get("scaleIns", 0))
            seen.gpu_type = status.get("gpuType") or seen.gpu_type
            if phase == "Running" and seen.started is None:
                seen.started = self.t(now)
            if phase in ("Succeeded", "Failed") and seen.finished is None:
                seen.finished = self.t(now)
                if seen.started is None:
                    seen.started = seen.finished
            seen.phase = phase

    def events(self) -> None:
        batch: list[tuple[float, str, str]] = []
        for event in self.core.list_event_for_all_namespaces().items:
            uid = event.metadata.uid if event.metadata is not None else None
            if uid is None or uid in self.seen_events:
                continue
            self.seen_events.add(uid)
            reason = event.reason or ""
            self.result.events[reason] += 1
            when = self.t(_epoch(event.event_time or event.last_timestamp or event.metadata.creation_timestamp))
            subject = event.involved_object.name or ""
            self.result.decisions.append((when, reason, subject, (event.message or "")[:160]))
            batch.append((when, reason, subject))
        self.result.reclaim_durations += reclaim_durations(self.reclaiming_since, batch)

    def reclaim_wait(self, now: float) -> None:
        service = cast(
            dict[str, Any],
            _custom(self.api).get_namespaced_custom_object(
                names.GROUP, names.VERSION, NAMESPACE, names.INFERENCE_SERVICE_PLURAL, SERVICE
            ),
        )
        began = ((service.get("status") or {}).get("reclaim") or {}).get("startedAt")
        if began:
            waited = (now - datetime.fromisoformat(began.replace("Z", "+00:00")).timestamp()) * self.result.speed_up
            self.result.longest_reclaim_wait = max(self.result.longest_reclaim_wait, waited)

    def sample(self, now: float, load: float, wanted: int, servers: int) -> None:
        nodes = self.core.list_node(label_selector=f"{names.POOL_LABEL}={names.POOL_INFERENCE}").items
        states = collections.Counter(
            ((n.metadata.labels if n.metadata else None) or {}).get(names.STATE_LABEL, "idle") for n in nodes
        )
        try:
            deployment = client.AppsV1Api(self.api).read_namespaced_deployment(SERVICE, NAMESPACE)
            ready = _ready(deployment)
        except ApiException as error:
            if error.status != 404:
                raise
            ready = 0
        jobs = self.result.jobs.values()
        running = [j for j in jobs if j.phase == "Running"]
        t = self.t(now)
        busy: collections.Counter[str] = collections.Counter()
        for job in running:
            busy[job.gpu_type or ""] += (job.base + job.flexible) * job.gpus_per_worker
        self.result.samples.append(
            Sample(
                t, load, wanted, ready, servers, dict(states),
                sum(1 for j in jobs if j.phase == "Queued"), len(running),
                sum(j.base for j in running), sum(j.flexible for j in running), dict(busy),
            )
        )  # fmt: skip
        if ready < wanted and self.short_since is None:
            self.short_since = t
        elif ready >= wanted and self.short_since is not None:
            self.result.short.append((self.short_since, t))
            self.short_since = None

    def close(self, now: float) -> None:
        if self.short_since is not None:
            self.result.short.append((self.short_since, self.t(now)))
            self.short_since = None


def operator_flags(day: Day, mode: str, http_port: int) -> list[str]:
    """The operator's settings for the run: the day's timing, and loaning and elasticity on (``lyra``) or off."""
    timing = day.timing
    switch = "on" if mode == "lyra" else "off"
    return [
        "--lend-delay", f"{timing.lend_delay_s:g}", "--reclaim-deadline", f"{timing.reclaim_deadline_s:g}",
        "--resync", f"{timing.resync_s:g}", "--lease-duration", "2", "--lease-namespace", "default",
        "--http-port", str(http_port), "--gang-timeout", "30", "--start-timeout", "30",
        "--lending", switch, "--elasticity", switch, "--inference-gpu-cap", "*=4096",
    ]  # fmt: skip


def run_day(
    day: Day,
    mode: str,
    *,
    profile: ClusterProfile,
    state_dir: Path,
    crd_dir: Path,
    ports: tuple[int, int],
    say: Callable[[str], None],
    show: Callable[[LiveResult, float], None],
) -> LiveResult:
    """Play ``day`` on a fresh local cluster with Lyra ``mode`` (``lyra`` or ``off``) and return what it did."""
    extender_port, operator_port = ports
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result = LiveResult(mode, day.speed_up, day.inference_gpus_per_server)
    with ExitStack() as stack:
        say(f"[{mode}] starting the local control plane ({profile.name}: {len(profile.node_names())} nodes)")
        plane = stack.enter_context(running_cluster(state_dir / "cluster", profile, extender_port, crd_dir, say))
        api = stack.enter_context(populate.admin_api(plane.kubeconfig))
        kubeconfig = str(plane.kubeconfig)
        children = []
        for child in (
            Child(logs / "extender.log", "extender", "--kubeconfig", kubeconfig, "--port", str(extender_port)),
            Child(logs / "operator.log", "operator", "--kubeconfig", kubeconfig,
                  *operator_flags(day, mode, operator_port)),
            Child(logs / "emulate.log", "emulate", "--kubeconfig", kubeconfig,
                  "--interval", f"{day.timing.emulate_interval_s:g}", "--report", str(logs / STEP_REPORT)),
        ):  # fmt: skip
            stack.callback(child.stop)
            children.append(child)
        core = client.CoreV1Api(api)
        core.create_namespace(cast(Any, {"metadata": {"name": NAMESPACE}}))
        wait_for(lambda: populate.service_account_exists(api, NAMESPACE), READY_S, "the demo namespace")
        custom = _custom(api)
        custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, NAMESPACE, names.INFERENCE_SERVICE_PLURAL, inference_service(day)
        )
        first = day.replicas_at(0.0)

        def settled() -> bool:
            for child in children:
                child.check()
            try:
                deployment = client.AppsV1Api(api).read_namespaced_deployment(SERVICE, NAMESPACE)
            except ApiException:
                return False
            return _ready(deployment) >= first

        say(f"[{mode}] waiting for the operator and the first {first} inference replicas")
        wait_for(settled, READY_S, f"{first} inference replicas ready")
        _play(day, api, result, children, show)
    result.emulator = read_step_report(logs / STEP_REPORT)  # written when it stopped, with the stack above
    return result


def read_step_report(path: Path) -> StepReport | None:
    """The emulator's report of its steps (None: it wrote none, or none this version reads)."""
    try:
        return StepReport.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def _play(
    day: Day,
    api: client.ApiClient,
    result: LiveResult,
    children: list[Child],
    show: Callable[[LiveResult, float], None],
) -> None:
    custom = _custom(api)
    start = time.monotonic()
    epoch_start = time.time()
    observer = Observer(api, result, lambda wall: (wall - epoch_start) * day.speed_up)
    pending = list(day.jobs)
    replicas = day.replicas_at(0.0)
    deadline = day.wall_s * (1 + TAIL_SHARE)
    last_events = 0.0
    while True:
        elapsed = time.monotonic() - start
        now = epoch_start + elapsed
        t = elapsed * day.speed_up
        for child in children:
            child.check()
        if t < day.seconds:
            wanted = day.replicas_at(t)
            if wanted != replicas:
                custom.patch_namespaced_custom_object_scale(
                    names.GROUP, names.VERSION, NAMESPACE, names.INFERENCE_SERVICE_PLURAL, SERVICE,
                    {"spec": {"replicas": wanted}},
                )  # fmt: skip
                replicas = wanted
        while pending and pending[0].submit_s <= t:
            job = pending.pop(0)
            custom.create_namespaced_custom_object(
                names.GROUP, names.VERSION, NAMESPACE, names.TRAINING_JOB_PLURAL, training_job(day, job)
            )
            result.jobs[job.name] = JobSeen(job.name, t, job.gpus_per_worker)
        observer.jobs(now)
        observer.reclaim_wait(now)
        load = day.load.rate_at(min(t, day.seconds - 1))
        observer.sample(now, load, replicas, day.servers_at(min(t, day.seconds - 1)))
        if elapsed - last_events >= 1.0:
            observer.events()
            last_events = elapsed
        show(result, min(t / day.seconds, 1.0))
        finished = not pending and all(j.finished is not None for j in result.jobs.values())
        if (t >= day.seconds and finished) or elapsed >= deadline:
            break
        # The day's clock: one tick of wall time per step of the compressed day (the load it drives is paced by it),
        # not a wait for a state.
        time.sleep(max(TICK_S - (time.monotonic() - start - elapsed), 0.0))
    observer.events()
    observer.close(epoch_start + time.monotonic() - start)
    result.day_s = day.seconds
    result.wall_s = time.monotonic() - start
    result.started_at, result.ended_at = epoch_start, epoch_start + result.wall_s
