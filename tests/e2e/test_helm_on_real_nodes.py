"""Lyra installed the way an admin installs it: ``helm install`` of helm/lyra on real nodes, from the built images.

The cluster: ``lyra cluster up --real-nodes 2`` (a T4 inference server and an A100 training server of the default
profile: kubelets, containerd, runc, the fake GPU device plugin) with the images of ``lyra image build`` (``lyra``,
Lyra's ``kube-scheduler``, ``pause``) on them; no Lyra process outside the cluster. ``helm install`` sets only what an
admin sets: the image repository, tag and pull policy, a node selector (the real nodes; the fake KWOK nodes run no
containers) and the replicas.

Asserted:

* the operator, the extender and the bundled kube-scheduler pods are Running and Ready on real nodes, by their own
  probes, under their ServiceAccounts (in-cluster credentials: a projected token, no kubeconfig);
* an operator pod holds the operator's Lease;
* the extender's threads carry their names for the kernel inside its container (``prctl`` allowed by the
  container's seccomp profile): its watch threads and its reclaim-rank thread, read from ``/proc`` on this machine
  for the processes in the container's cgroup;
* the bundled scheduler reaches the extender by its Service's DNS name (``https://lyra-extender.lyra-system.svc``,
  answered by the network process's DNS and relayed to a ready extender pod): a GPU pod of that scheduler is
  scheduled and the extender's ``prioritize`` counter moved;
* a Prometheus inside the cluster's network namespace scrapes all three from their pods' addresses (operator over
  HTTP, extender over HTTPS with the chart's CA, scheduler over HTTPS with a ServiceAccount token allowed
  ``/metrics``), every target up;
* ``helm upgrade`` to a changed image (the built image under a new tag on every node, as a registry would serve it)
  rolls the operator and the extender onto it, a new operator pod takes the Lease, and a TrainingJob running before
  (2 workers of 8 A100 GPUs) still exists with the same 2 worker pods Running and counted in its status.

Figures printed (``-s``): the time from ``helm install`` to every pod Ready, each pod's time to Ready, the time from
``helm upgrade`` to every pod Ready on the new image, and how many of the job's workers were kept through it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from lyra import __version__
from lyra.api import names
from lyra.extender.app import REQUESTS_METRIC
from lyra.images import build
from lyra.imagespec import recipe
from lyra.localcluster import populate
from lyra.localcluster.binaries import BinaryCache
from lyra.localcluster.realnodes.cluster import NETWORK_PROCESS, REAL_NODE_LABEL
from lyra.localcluster.realnodes.network import namespace_path
from lyra.localcluster.state import read_state
from lyra.localcluster.testing import real_node_cluster, temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.operator_support import A100, OPERATOR_NAMESPACE, REPOSITORY, create_job, lease_holder, running, workers
from tests.prometheus_support import Prometheus

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root (kubelet, containerd, runc, namespaces)"),
]

CHART = REPOSITORY / "helm" / "lyra"
RELEASE = "lyra"
READY_WITHIN_S = 300.0
COMPONENTS = ("operator", "extender", "scheduler")
SCHEDULER_NAME = "lyra-scheduler"
EXTENDER_PORT = 8888
OPERATOR_PORT = 8080
SCHEDULER_PORT = 10259


def admin_values() -> dict[str, Any]:
    """What an admin sets: where the images are, and where the pods go."""
    on_real_nodes = {"nodeSelector": {REAL_NODE_LABEL: "true"}}
    return {
        "image": {"repository": "lyra", "tag": __version__, "pullPolicy": "IfNotPresent"},
        "operator": {**on_real_nodes, "replicas": 2},
        "extender": {**on_real_nodes, "replicas": 1},
        "scheduler": {
            **on_real_nodes,
            "replicas": 1,
            "image": {"repository": recipe.SCHEDULER_REPOSITORY, "pullPolicy": "IfNotPresent"},
        },
    }


def helm(kubeconfig: Path, *arguments: str) -> str:
    binary = BinaryCache().binary_set().helm
    completed = subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, f"helm {' '.join(arguments)}:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


def release_pods(api: client.ApiClient) -> list[client.V1Pod]:
    selector = f"app.kubernetes.io/instance={RELEASE}"
    pods = client.CoreV1Api(api).list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=selector).items
    return [pod for pod in pods if pod.metadata.deletion_timestamp is None]


def component(pod: client.V1Pod) -> str:
    return str((pod.metadata.labels or {}).get("app.kubernetes.io/component", ""))


def is_ready(pod: client.V1Pod) -> bool:
    return pod.status.phase == "Running" and any(
        condition.type == "Ready" and condition.status == "True" for condition in pod.status.conditions or []
    )


#: The extender's threads that name themselves (:mod:`lyra.osthreads`), as ``top -H`` shows them.
EXTENDER_THREADS = frozenset({"watch-pods", "watch-nodes", "extender-ranks"})


def container_thread_names(pod: client.V1Pod) -> set[str]:
    """The names the kernel has for the threads of a pod's (first) container, read on this machine: the real nodes'
    kubelets use the cgroupfs driver, so each of the container's processes is in a cgroup whose path ends in the
    container's ID."""
    container_id = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    names: set[str] = set()
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            if not any(line.endswith(f"/{container_id}") for line in (process / "cgroup").read_text().splitlines()):
                continue
            names.update((task / "comm").read_text().strip() for task in (process / "task").iterdir())
        except OSError:  # a process that ended while it was read
            continue
    return names


def ready_at(pod: client.V1Pod) -> datetime:
    [condition] = [c for c in pod.status.conditions or [] if c.type == "Ready"]
    return cast(datetime, condition.last_transition_time)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, client.ApiClient, int, Path]]:
    """Two real nodes with the chart's images built now on them: (admin kubeconfig, API client, network pid, state
    directory)."""
    images = tmp_path_factory.mktemp("images")
    try:
        build.ImageBuilder(REPOSITORY, images, print).build(only=("pause", "lyra", "kube-scheduler"))
    except build.ImageBuildError as error:
        pytest.fail(str(error), pytrace=False)
    state = tmp_path_factory.mktemp("helm-real") / "cluster"
    with ExitStack() as stack:
        control_plane = stack.enter_context(real_node_cluster(state, real_nodes=2, images_dir=images)).control_plane
        api = stack.enter_context(populate.admin_api(control_plane.kubeconfig))
        cluster_state = read_state(state)
        assert cluster_state is not None
        [network] = [r for r in cluster_state.processes if r.name == NETWORK_PROCESS]
        yield control_plane.kubeconfig, api, network.pid, state


def prometheus_token(api: client.ApiClient) -> str:
    """A ServiceAccount allowed ``GET /metrics`` (what an admin's Prometheus gets), and a token of it."""
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    core.create_namespaced_service_account(OPERATOR_NAMESPACE, cast(Any, {"metadata": {"name": "prometheus"}}))
    rbac.create_cluster_role(
        cast(
            Any,
            {"metadata": {"name": "test-prometheus"}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        )
    )
    rbac.create_cluster_role_binding(
        cast(
            Any,
            {
                "metadata": {"name": "test-prometheus"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "test-prometheus"},
                "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": OPERATOR_NAMESPACE}],
            },
        )
    )
    request = core.create_namespaced_service_account_token(
        "prometheus", OPERATOR_NAMESPACE, cast(Any, {"spec": {"expirationSeconds": 3600}})
    )
    return str(request.status.token)


def scrape_configs(pods: list[client.V1Pod], directory: Path, api: client.ApiClient) -> list[dict[str, Any]]:
    secret = client.CoreV1Api(api).read_namespaced_secret(f"{RELEASE}-extender-tls", OPERATOR_NAMESPACE)
    ca = directory / "extender-ca.crt"
    ca.write_bytes(base64.b64decode(secret.data["ca.crt"]))
    token = directory / "token"
    token.write_text(prometheus_token(api))

    def targets(kind: str, port: int) -> list[dict[str, Any]]:
        return [{"targets": [f"{pod.status.pod_ip}:{port}" for pod in pods if component(pod) == kind]}]

    return [
        {"job_name": "operator", "static_configs": targets("operator", OPERATOR_PORT)},
        {
            "job_name": "extender",
            "scheme": "https",
            "tls_config": {"ca_file": str(ca), "server_name": f"{RELEASE}-extender.{OPERATOR_NAMESPACE}.svc"},
            "static_configs": targets("extender", EXTENDER_PORT),
        },
        {
            "job_name": "scheduler",
            "scheme": "https",
            # kube-scheduler serves a self-signed certificate; the token is what it checks.
            "tls_config": {"insecure_skip_verify": True},
            "authorization": {"credentials_file": str(token)},
            "static_configs": targets("scheduler", SCHEDULER_PORT),
        },
    ]


def gpu_pod(namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-probe", "namespace": namespace},
        "spec": {
            # Any GPU node will do: with more than one feasible node kube-scheduler scores them, and so calls the
            # extender's prioritize (with one it binds without scoring).
            "schedulerName": SCHEDULER_NAME,
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "imagePullPolicy": "Never",
                    "resources": {"limits": {names.GPU_RESOURCE: "1"}},
                }
            ],
        },
    }


def test_helm_install_from_the_built_images_runs_lyra_ready_on_real_nodes(
    cluster: tuple[Path, client.ApiClient, int, Path], tmp_path: Path
) -> None:
    kubeconfig, api, network_pid, state = cluster
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(admin_values()))
    installed = time.time()
    helm(kubeconfig, "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
         "--values", str(values))  # fmt: skip

    def all_ready(tag: str = __version__) -> bool:
        pods = release_pods(api)
        kinds = sorted(component(pod) for pod in pods)
        images = {pod.spec.containers[0].image for pod in pods if component(pod) != "scheduler"}
        return (
            kinds == ["extender", "operator", "operator", "scheduler"]
            and images == {f"lyra:{tag}"}
            and all(is_ready(pod) for pod in pods)
        )

    wait_for(all_ready, READY_WITHIN_S, "the operator, extender and scheduler pods Running and Ready")
    all_ready_s = time.time() - installed
    pods = release_pods(api)
    print(f"\nhelm install -> every pod Ready: {all_ready_s:.1f} s")
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        since_created = (ready_at(pod) - pod.metadata.creation_timestamp).total_seconds()
        print(f"  {pod.metadata.name} on {pod.spec.node_name}: Ready {since_created:.0f} s after it was created")

    nodes = {node.metadata.name: node for node in client.CoreV1Api(api).list_node().items}
    for pod in pods:
        assert (nodes[pod.spec.node_name].metadata.labels or {}).get(REAL_NODE_LABEL) == "true", pod.metadata.name
        assert pod.spec.service_account_name == f"{RELEASE}-{component(pod)}", pod.metadata.name
        projected = [volume for volume in pod.spec.volumes or [] if volume.projected is not None]
        assert any(
            source.service_account_token is not None for volume in projected for source in volume.projected.sources
        ), f"{pod.metadata.name} has no ServiceAccount token"
        [container] = pod.spec.containers
        assert container.readiness_probe is not None, pod.metadata.name
        assert pod.status.container_statuses[0].restart_count == 0, pod.metadata.name

    [extender] = [pod for pod in pods if component(pod) == "extender"]
    threads = container_thread_names(extender)
    print(f"  the extender container's threads: {', '.join(sorted(threads))}")
    assert threads >= EXTENDER_THREADS, f"the extender container's threads are {sorted(threads)}"

    operators = [pod.metadata.name for pod in pods if component(pod) == "operator"]
    wait_for(
        lambda: any(lease_holder(api).startswith(f"{name}-") for name in operators),
        60,
        f"an operator pod ({', '.join(operators)}) holding the operator's Lease",
    )

    prometheus_dir = tmp_path / "prometheus"
    prometheus_dir.mkdir()
    with ExitStack() as stack:
        prometheus = stack.enter_context(
            Prometheus(
                prometheus_dir,
                {},
                scrape_configs=scrape_configs(pods, tmp_path, api),
                network_namespace=namespace_path(network_pid),
            )
        )

        def every_target_up() -> bool:
            up = {(s["metric"]["job"], s["metric"]["instance"]): s["value"][1] for s in prometheus.query("up")}
            return len(up) == len(pods) and all(value == "1" for value in up.values())

        try:
            wait_for(every_target_up, 60, "Prometheus scraping every operator, extender and scheduler pod")
        finally:
            print(f"  up: {sorted((s['metric']['job'], s['value'][1]) for s in prometheus.query('up'))}")

        prioritized = f'sum({REQUESTS_METRIC}{{job="extender",verb="prioritize"}})'
        before = prometheus.value(prioritized) or 0.0
        namespace = stack.enter_context(temporary_namespace(api, "helm-real"))
        client.CoreV1Api(api).create_namespaced_pod(namespace, cast(Any, gpu_pod(namespace)))

        def scheduled() -> bool:
            pod = client.CoreV1Api(api).read_namespaced_pod("gpu-probe", namespace)
            return bool(pod.spec.node_name)

        wait_for(scheduled, 60, f"the GPU pod scheduled by {SCHEDULER_NAME}")
        wait_for(
            lambda: (prometheus.value(prioritized) or 0.0) > before,
            30,
            "the extender's prioritize counter to move (the scheduler reached it by its Service name)",
        )
        print(f"  extender prioritize requests: {before:.0f} -> {prometheus.value(prioritized):.0f}")
        upgrade_keeps_the_jobs_workers(kubeconfig, api, state, namespace, all_ready)


def retag_on_every_node(state: Path, source: str, target: str) -> None:
    """The changed image on every real node, as a registry would serve it: the built image under a new tag."""
    for spec_path in sorted((state / "nodes").glob("*/node.json")):
        spec = json.loads(spec_path.read_text())
        socket = spec_path.parent / "run" / "containerd" / "containerd.sock"  # the node's /run, seen from outside
        completed = subprocess.run(
            [spec["ctr"], "--address", str(socket), "--namespace", "k8s.io", "image", "tag", "--force", source, target],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.returncode == 0, f"ctr image tag on {spec_path.parent.name}: {completed.stderr}"


def upgrade_keeps_the_jobs_workers(
    kubeconfig: Path, api: client.ApiClient, state: Path, namespace: str, all_ready: Callable[[str], bool]
) -> None:
    """``helm upgrade`` to a changed image tag rolls the operator and the extender; a running TrainingJob is not
    lost: it still exists and its workers are back (Running, counted in its status) under the new operator."""
    create_job(
        api, namespace, "survivor", minWorkers=2, maxWorkers=2, gpusPerWorker=8, gpuTypes=[A100],
        template={"spec": {"containers": [
            {"name": "trainer", "image": "registry.k8s.io/pause:3.10", "imagePullPolicy": "IfNotPresent"}
        ]}},
    )  # fmt: skip
    wait_for(lambda: running(api, namespace, "survivor", 2), 120, "the TrainingJob's 2 workers Running")
    before = {pod.metadata.uid for pod in workers(api, namespace, "survivor")}
    old_operators = {pod.metadata.name for pod in release_pods(api) if component(pod) == "operator"}
    new_tag = f"{__version__}-upgrade"
    retag_on_every_node(state, f"docker.io/library/lyra:{__version__}", f"docker.io/library/lyra:{new_tag}")
    upgraded = time.time()
    helm(kubeconfig, "upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--reuse-values",
         "--set", f"image.tag={new_tag}")  # fmt: skip
    wait_for(lambda: all_ready(new_tag), READY_WITHIN_S, f"every pod of the release Ready on lyra:{new_tag}")
    print(f"helm upgrade -> every pod Ready on the new image: {time.time() - upgraded:.1f} s")
    operators = [pod.metadata.name for pod in release_pods(api) if component(pod) == "operator"]
    assert not old_operators & set(operators), "the operator pods were not replaced"
    wait_for(
        lambda: any(lease_holder(api).startswith(f"{name}-") for name in operators),
        60,
        f"a new operator pod ({', '.join(operators)}) holding the operator's Lease",
    )
    wait_for(lambda: running(api, namespace, "survivor", 2), 120, "the TrainingJob's 2 workers Running after it")
    after = {pod.metadata.uid for pod in workers(api, namespace, "survivor")}
    print(f"  the job's workers: {len(before & after)} of {len(before)} kept through the upgrade")
    assert after == before, "the upgrade replaced the job's workers"
