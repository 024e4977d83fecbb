"""What the operator makes of the demo examples, run as real containers: containerd and runc, no kubelet.

``examples/real-nodes/demo-worker-trainingjob.yaml`` and ``demo-replica-inferenceservice.yaml`` are read as the
operator reads them, their pods built by :mod:`lyra.operator.manifests` exactly as a pass builds them, and each
pod's first container run from the project's workload images (built by ``lyra image build``, imported into a
containerd of the test's own) the way a kubelet runs it: the environment with ``$(NAME)`` expanded to earlier
variables, hostPath volumes bind-mounted, SIGTERM on deletion and SIGKILL once ``terminationGracePeriodSeconds`` is
over, the readiness probe's HTTP GET made from inside the container's own network namespace (nothing is exposed on
the machine's). What is asserted comes from what the containers wrote: their checkpoint files and their output.

The volume that outlives the pod is a directory this test owns (the example's hostPath, rewritten); a real cluster
uses a PersistentVolumeClaim (the example says so). The same scenario on real kubelets is tests/e2e's
test_real_containers. Needs root (runc), apt and gcc (the image build, cached).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from lyra.api import names
from lyra.api.resources import InferenceServiceSpec, TrainingJobSpec
from lyra.images import build, verify
from lyra.imagespec import recipe
from lyra.localcluster.waiting import wait_for
from lyra.operator import manifests

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="running containers needs root (containerd and runc)"),
]

REPOSITORY = Path(__file__).resolve().parents[2]
TRAINING_EXAMPLE = REPOSITORY / "examples" / "real-nodes" / "demo-worker-trainingjob.yaml"
SERVICE_EXAMPLE = REPOSITORY / "examples" / "real-nodes" / "demo-replica-inferenceservice.yaml"
DEFAULT_GRACE_SECONDS = 30  # Kubernetes' terminationGracePeriodSeconds when a pod sets none
UID, GID = (int(part) for part in recipe.USER.split(":"))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[verify.Containerd]:
    out = tmp_path_factory.mktemp("images")
    try:
        images = build.ImageBuilder(REPOSITORY, out, print).build(
            only=(recipe.TRAINING_WORKER.image, recipe.INFERENCE_REPLICA.image)
        )
    except build.ImageBuildError as error:
        pytest.fail(str(error), pytrace=False)
    with verify.running_containerd(print) as running:
        for image in images:
            base = image.reference.rpartition(":")[0]
            running.ctr("image", "import", "--base-name", base, str(image.archive), timeout=300)
        yield running


# -- the kubelet's part, as far as these pods need it ----------------------------------------------------------------


def expand(value: str, defined: Mapping[str, str]) -> str:
    """The kubelet's ``$(NAME)`` expansion: a name defined earlier is replaced, ``$$`` is ``$``, the rest kept."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
        lambda m: "$" if m.group(0) == "$$" else defined.get(m.group(1), m.group(0)),
        value,
    )


def container_options(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str, ...]:
    """``ctr run`` options for a container of a pod: its environment and its hostPath volumes."""
    assert "command" not in container, "the demo pods run their image's entrypoint"
    assert "args" not in container, "the demo pods run their image's entrypoint"
    defined: dict[str, str] = {}
    for entry in container.get("env") or []:
        assert "valueFrom" not in entry, entry
        defined[entry["name"]] = expand(str(entry.get("value", "")), defined)
    options = [option for name, value in defined.items() for option in ("--env", f"{name}={value}")]
    volumes = {volume["name"]: volume for volume in pod_spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        source = Path(volumes[mount["name"]]["hostPath"]["path"])
        assert source.is_dir(), f"hostPath {source} (type Directory) must exist"
        options += ["--mount", f"type=bind,src={source},dst={mount['mountPath']},options=rbind:rw"]
    return tuple(options)


def start(daemon: verify.Containerd, pod: Mapping[str, Any]) -> verify.Running:
    spec = pod["spec"]
    container = spec["containers"][0]
    return daemon.start(container["image"], pod["metadata"]["name"], options=container_options(spec, container))


def stop_like_the_kubelet(daemon: verify.Containerd, run: verify.Running, name: str, grace: float) -> tuple[int, float]:
    """SIGTERM, then SIGKILL if the container is still running after ``grace`` seconds: its exit code and how long
    it took (a SIGKILLed container fails the caller's assertions by its code)."""
    signalled = time.monotonic()
    daemon.ctr("task", "kill", "-s", "SIGTERM", name)
    try:
        run.process.wait(timeout=grace)
    except subprocess.TimeoutExpired:  # the grace period is over
        daemon.ctr("task", "kill", "-s", "SIGKILL", name, check=False)
    code = run.finish(30)
    return code, time.monotonic() - signalled


def http_probe(daemon: verify.Containerd, name: str, *, port: int, path: str, attempt: int, timeout: float) -> int:
    """The readiness probe's GET, from inside the container's network namespace: the HTTP status (0: no answer)."""
    script = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n"
        f"    code = urllib.request.urlopen('http://127.0.0.1:{port}{path}', timeout={timeout}).status\n"
        "except urllib.error.HTTPError as error:\n"
        "    code = error.code\n"
        "except OSError:\n"
        "    code = 0\n"
        "print('probe', code)\n"
    )
    said = daemon.ctr("task", "exec", "--exec-id", f"probe-{attempt}", name, "/usr/bin/python3", "-c", script)
    found = re.search(r"probe (\d+)", said)
    assert found, said
    return int(found.group(1))


# -- the pods the operator makes ---------------------------------------------------------------------------------


def training_spec(checkpoints: Path) -> TrainingJobSpec:
    """The example's spec with its hostPath pointed at ``checkpoints`` (a directory of the test's, uid 65532's)."""
    body = yaml.safe_load(TRAINING_EXAMPLE.read_text(encoding="utf-8"))
    [volume] = body["spec"]["template"]["spec"]["volumes"]
    volume["hostPath"]["path"] = str(checkpoints)
    checkpoints.mkdir(exist_ok=True)
    os.chown(checkpoints, UID, GID)
    return TrainingJobSpec.model_validate(body["spec"])


def worker(spec: TrainingJobSpec, index: int) -> dict[str, Any]:
    return manifests.worker_pod(
        namespace="demo", job="demo-train", job_uid="uid-demo", index=index,
        role=names.ROLE_BASE if index < spec.min_workers else names.ROLE_FLEXIBLE, template=spec.template.body(),
        gpus_per_worker=spec.gpus_per_worker, gpu_type=spec.gpu_types[0], planned_node=None,
        grace_seconds=spec.preemption.grace_period_seconds, min_workers=spec.min_workers,
        max_workers=spec.max_workers,
    )  # fmt: skip


def checkpoint_of(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def test_a_worker_checkpoints_inside_its_grace_period_and_its_successor_resumes(
    daemon: verify.Containerd, tmp_path: Path
) -> None:
    spec = training_spec(tmp_path / "checkpoints")
    grace = spec.preemption.grace_period_seconds
    base, flexible = worker(spec, 0), worker(spec, 1)
    assert flexible["spec"]["terminationGracePeriodSeconds"] == grace
    files = {index: tmp_path / "checkpoints" / f"demo-train-w{index}.json" for index in (0, 1)}
    runs = {0: start(daemon, base), 1: start(daemon, flexible)}
    for index, run in runs.items():
        run.wait_for_line(f"checkpoints go to /checkpoints/demo-train-w{index}.json", 60)

    def checkpointed() -> bool:
        return all(path.is_file() for path in files.values())

    wait_for(checkpointed, 60, "each worker's first periodic checkpoint, in its own file")

    # The scale-in: the flexible worker's pod is deleted.
    signalled_at = time.time()
    code, took = stop_like_the_kubelet(daemon, runs[1], "demo-train-w1", grace)
    written = checkpoint_of(files[1])
    print(f"scale-in: SIGTERM at step {written['step']}, checkpoint after {written['written_at'] - signalled_at:.2f}s, "
          f"exit {code} after {took:.2f}s of a {grace}s grace period")  # fmt: skip
    assert code == 0, runs[1].output()
    assert written["reason"] == "sigterm"
    assert 0 <= written["written_at"] - signalled_at < grace
    assert took < grace
    assert checkpoint_of(files[0])["reason"] == "periodic", "the other worker's file is its own"

    # The job preempted: its base worker stops too, then both start again under the same names.
    code, took = stop_like_the_kubelet(daemon, runs[0], "demo-train-w0", grace)
    assert code == 0, runs[0].output()
    assert took < grace
    stopped = {index: int(checkpoint_of(path)["step"]) for index, path in files.items()}
    runs = {0: start(daemon, worker(spec, 0)), 1: start(daemon, worker(spec, 1))}
    for index, run in runs.items():
        run.wait_for_line(f"resumed from /checkpoints/demo-train-w{index}.json at step {stopped[index]}", 60)

    def trained_on() -> bool:
        return all(checkpoint_of(path)["step"] > stopped[index] for index, path in files.items())

    wait_for(trained_on, 60, "both workers' step counters to go on from their checkpoints")
    for index, run in runs.items():
        code, took = stop_like_the_kubelet(daemon, run, f"demo-train-w{index}", grace)
        assert code == 0, run.output()
        assert took < grace
        assert checkpoint_of(files[index])["reason"] == "sigterm"


def test_a_replica_is_ready_by_its_readiness_probe(daemon: verify.Containerd) -> None:
    body = yaml.safe_load(SERVICE_EXAMPLE.read_text(encoding="utf-8"))
    spec = InferenceServiceSpec.model_validate(body["spec"])
    made = manifests.deployment(
        namespace="demo", service="demo-serve", service_uid="uid-demo", replicas=spec.replicas,
        template=spec.template.body(), gpus_per_replica=spec.gpus_per_replica, gpu_type=spec.gpu_type,
    )  # fmt: skip
    pod = {"metadata": {"name": "demo-serve-0"}, "spec": made["spec"]["template"]["spec"]}
    container = pod["spec"]["containers"][0]
    probe = container["readinessProbe"]
    assert probe == body["spec"]["template"]["spec"]["containers"][0]["readinessProbe"], "the probe is kept as written"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    port = probe["httpGet"]["port"]
    port = ports[port] if isinstance(port, str) else int(port)
    warmup = float(next(e["value"] for e in container["env"] if e["name"] == "LYRA_WARMUP_SECONDS"))

    run = start(daemon, pod)
    started = time.monotonic()
    run.wait_for_line(f"listening on 0.0.0.0:{port}", 60)
    statuses: list[tuple[float, int]] = []

    def ready() -> bool:
        status = http_probe(
            daemon, "demo-serve-0", port=port, path=probe["httpGet"]["path"], attempt=len(statuses), timeout=1.0
        )
        statuses.append((time.monotonic() - started, status))
        return status == 200

    period = float(probe["periodSeconds"])  # probed at the probe's own period, as the kubelet probes
    wait_for(ready, 30, "the readiness probe to pass", interval=period, max_interval=period)
    seconds = statuses[-1][0]
    print(f"replica: Ready by its probe {seconds:.1f}s after its container started (warm-up {warmup:g}s): {statuses}")
    assert all(status in (0, 503) for _, status in statuses[:-1]), statuses
    assert warmup <= seconds < 10
    code, took = stop_like_the_kubelet(daemon, run, "demo-serve-0", DEFAULT_GRACE_SECONDS)
    assert code == 0, run.output()
    assert took < DEFAULT_GRACE_SECONDS
