"""Workload emulation for clusters of fake nodes (KWOK), where worker pods never finish by themselves.

``lyra emulate`` stands in for the training programs, not for Lyra: it watches running TrainingJobs, advances
each one's progress at the pace its live workers would train at under the policy core's speed model (workers x the
slowest worker's GPU speed x scaling efficiency, :class:`lyra.core.model.TrainingJob`), and when a job's work
(``expectedDuration`` seconds at ``minWorkers`` on a reference GPU) is done, marks its workers Succeeded, as torchrun
would exit. The operator then sees a finished job like any other. Elastic speed-ups are therefore real in tests
and in the demo: a job with twice the workers finishes in half the time.

Progress lives in this process (a real program's lives in its checkpoints): it starts from the job's
``status.workDone`` the first time a job is seen, and work is kept across a preemption (the grace period is the
checkpoint). It is a separate process, never a branch in the operator.

It keeps torchrun's rendezvous contract too (docs/user-guide.md, "Elastic training with torchrun"): when a running
job's workers change, training stops while the agents meet again. A worker that left (a scale-in) is found dead
only when its keep-alives have been missing for ``keep_alive_interval`` x ``keep_alive_max_attempt`` seconds; then,
unless ``maxWorkers`` agents are back, the round waits ``last_call_timeout`` for latecomers. The settings are those
the operator gives the workers, or those the job's template sets in ``PET_RDZV_CONF`` (keys it leaves out take
torch's defaults, as under torchrun).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field

from lyra.api import names
from lyra.api.convert import training_job
from lyra.api.resources import JobPhase
from lyra.core.gpus import GpuCatalog
from lyra.core.model import TrainingJob
from lyra.core.placement import WORKER_ROLES
from lyra.operator import manifests
from lyra.operator.world import JobRecord, PodRecord, World

log = logging.getLogger("lyra.emulate")


class StepReport(BaseModel):
    """How a run of ``lyra emulate`` kept its interval (``--report``; read by ``lyra demo``): a step that starts late
    delays the progress and the ends it emulates past what a simulation of the run charges."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: float = Field(gt=0)
    steps: int = Field(ge=0)
    #: Steps that took longer than the interval (the next one then started late).
    late_steps: int = Field(ge=0)
    longest_step_s: float = Field(ge=0)
    #: Seconds from the first step's start to the last one's (a mean period over ``steps - 1``).
    span_s: float = Field(ge=0)

    @property
    def mean_period_s(self) -> float | None:
        """Seconds between the starts of two steps, on average (None: fewer than two steps)."""
        return self.span_s / (self.steps - 1) if self.steps > 1 else None


#: Seconds to connect, then to read the answer, of each worker's completion: a silent API server fails the step, the
#: next step tries again.
COMPLETE_TIMEOUT_S = (10.0, 30.0)

#: torch's own values of the rendezvous settings the emulator models, for a ``PET_RDZV_CONF`` that omits them.
TORCH_RDZV_DEFAULTS = {"keep_alive_interval": 5.0, "keep_alive_max_attempt": 3.0, "last_call_timeout": 30.0}


@dataclass
class Progress:
    """Reference worker-seconds each job has done, as of ``as_of`` (seconds since the epoch); the workers each job
    trained with since then and their pace, and until when it re-rendezvouses after they changed."""

    done: dict[str, float] = field(default_factory=dict)
    as_of: float | None = None
    members: dict[str, frozenset[str]] = field(default_factory=dict)
    paces: dict[str, float] = field(default_factory=dict)
    paused_until: dict[str, float] = field(default_factory=dict)


def rendezvous_settings(job: JobRecord) -> dict[str, float]:
    """The rendezvous timings of ``job``'s workers: the template's ``PET_RDZV_CONF`` if it sets one, else Lyra's."""
    containers = job.spec.template.spec.containers
    given = next((e.value for e in containers[0].env or [] if e.name == names.ENV_TORCHRUN_RDZV_CONF), None)
    if given is None:
        given = manifests.rendezvous_conf(is_host=False)
        settings: dict[str, float] = {}
    else:
        settings = dict(TORCH_RDZV_DEFAULTS)
    for pair in given.split(","):
        key, _, value = pair.partition("=")
        if key.strip() in TORCH_RDZV_DEFAULTS:
            try:
                settings[key.strip()] = float(value)
            except ValueError:
                continue  # torchrun would refuse it; the emulator keeps the default
    return settings


def rendezvous_pause(job: JobRecord, members: int, *, someone_left: bool) -> float:
    """Seconds ``job`` stops training after its workers changed to ``members``: finding a leaver dead, then the
    last call unless the round is full."""
    settings = rendezvous_settings(job)
    pause = 0.0
    if someone_left:
        pause += settings["keep_alive_interval"] * settings["keep_alive_max_attempt"]
    if members < job.spec.max_workers:
        pause += settings["last_call_timeout"]
    return pause


def _model(job: JobRecord) -> TrainingJob:
    return training_job(job.ref.key, job.spec)


def total_work(job: JobRecord) -> float:
    """The job's work in reference worker-seconds: ``expectedDuration`` at ``minWorkers`` on a speed-1.0 GPU."""
    return job.spec.expected_duration * _model(job).pace(job.spec.min_workers, 1.0)


def pace(job: JobRecord, workers: list[PodRecord], node_types: Mapping[str, str], gpus: GpuCatalog) -> float:
    """Reference worker-seconds per second of ``job`` with ``workers`` bound: the slowest worker sets the pace."""
    if not workers:
        return 0.0
    model = _model(job)
    slowest = min(model.speed_on(gpus[node_types[p.node]]) for p in workers if p.node in node_types)
    return model.pace(len(workers), slowest)


def advance(progress: Progress, world: World, gpus: GpuCatalog) -> list[PodRecord]:
    """Advance every running job to ``world.now``; return the workers of jobs whose work is done."""
    elapsed = 0.0 if progress.as_of is None else max(world.now - progress.as_of, 0.0)
    progress.as_of = world.now
    node_types = {n.name: n.gpu_type for n in world.nodes}
    finished: list[PodRecord] = []
    for job in world.jobs:
        if job.status.phase is not JobPhase.RUNNING:
            continue
        workers = [
            p
            for p in world.pods_of(job.ref.key)
            if p.role in WORKER_ROLES and p.is_live and p.node and p.phase == names.POD_RUNNING
        ]
        key = job.ref.key
        done = progress.done.setdefault(key, job.status.work_done)
        resumed = progress.paused_until.get(key)
        training = elapsed if resumed is None else max(min(elapsed, world.now - resumed), 0.0)
        now_pace = pace(job, workers, node_types, gpus)
        done += progress.paces.get(key, now_pace) * training  # the time since the last step ran at its pace
        progress.done[key] = done
        progress.paces[key] = now_pace
        members = frozenset(p.ref.name for p in workers)
        before = progress.members.get(key)
        if before and members and members != before:
            pause = rendezvous_pause(job, len(members), someone_left=bool(before - members))
            progress.paused_until[key] = world.now + pause
        progress.members[key] = members
        if workers and done >= total_work(job) - 1e-9:
            finished.extend(workers)
    return finished


def complete(api: client.ApiClient, pods: list[PodRecord]) -> list[str]:
    """Mark ``pods`` Succeeded (their containers exited 0); returns the resourceVersion of each pod marked."""
    core = client.CoreV1Api(api)
    versions: list[str] = []
    for pod in pods:
        body = {"status": {"phase": names.POD_SUCCEEDED, "conditions": [{"type": "Ready", "status": "False"}]}}
        try:
            marked = core.patch_namespaced_pod_status(
                pod.ref.name, pod.ref.namespace, body, _request_timeout=COMPLETE_TIMEOUT_S
            )
        except ApiException as error:
            if error.status != 404:
                log.warning("could not complete %s: %s", pod.ref.key, error.reason)
            continue
        versions.append((marked.metadata.resource_version if marked.metadata is not None else None) or "")
    return versions
