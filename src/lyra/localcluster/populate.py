"""Talking to the fresh API server: readiness probes, the fake nodes, Lyra's CRDs.

Probes use the standard library (they run while the server boots, often before the Kubernetes client could
connect); objects are created with the official ``kubernetes`` client; CRD files are applied with the cached
kubectl, which understands any mix of documents in a directory.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client, config

from lyra.child_processes import run_to_end
from lyra.localcluster.fakenodes import node_manifests
from lyra.localcluster.profile import ClusterProfile

PROBE_TIMEOUT = 2.0
NODE_LIFECYCLE_TAINT_PREFIX = "node.kubernetes.io/"


class ProbeError(RuntimeError):
    """An endpoint answered, but not with what readiness requires."""


def https_get(url: str, ca_cert: Path, token: str | None = None, timeout: float = PROBE_TIMEOUT) -> str:
    """GET over verified TLS without proxies (a proxy from the environment must not see loopback traffic)."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    return _get(url, timeout, token, urllib.request.HTTPSHandler(context=context))


def http_get(url: str, timeout: float = PROBE_TIMEOUT) -> str:
    return _get(url, timeout, None, urllib.request.HTTPHandler())


def _get(url: str, timeout: float, token: str | None, handler: urllib.request.BaseHandler) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), handler)
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with opener.open(request, timeout=timeout) as response:
            body: bytes = response.read()
    except urllib.error.HTTPError as error:
        error.close()  # it holds the open connection
        raise ProbeError(f"{url} answered {error.code}") from None
    return body.decode("utf-8", errors="replace")


def etcd_healthy(url: str) -> bool:
    data = json.loads(http_get(f"{url}/health"))
    return isinstance(data, dict) and data.get("health") == "true"


@contextmanager
def admin_api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    """An ApiClient for the admin kubeconfig, closed afterwards (it owns a thread pool)."""
    api_client: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        yield api_client
    finally:
        api_client.close()  # type: ignore[no-untyped-call]


def create_nodes(api_client: client.ApiClient, profile: ClusterProfile, manifest_path: Path) -> int:
    """Create the profile's nodes (also written to ``manifest_path`` for reference) and return their count."""
    manifests = node_manifests(profile)
    manifest_path.write_text(yaml.safe_dump_all(manifests, sort_keys=False), encoding="utf-8")
    core = client.CoreV1Api(api_client)
    for manifest in manifests:
        # The client serialises plain dicts as they are; building V1Node models would only add a copy.
        core.create_node(body=cast(Any, manifest))
    return len(manifests)


def schedulable_nodes(api_client: client.ApiClient, names: list[str]) -> list[str]:
    """The names (among ``names``) of nodes that are Ready and carry no node-lifecycle taint.

    The node lifecycle controller taints a new node ``node.kubernetes.io/not-ready`` until it has seen it
    Ready, so Ready alone does not yet mean that the scheduler will place pods there.
    """
    wanted = set(names)
    return [
        str(node["metadata"]["name"])
        for node in _listed_nodes(api_client)
        if node["metadata"].get("name") in wanted and _is_schedulable(node)
    ]


def node_readiness(api_client: client.ApiClient, timeout: float = PROBE_TIMEOUT) -> tuple[int, int]:
    """(Ready nodes, all nodes) of the cluster."""
    nodes = _listed_nodes(api_client, timeout)
    return sum(1 for node in nodes if _is_ready(node)), len(nodes)


def _listed_nodes(api_client: client.ApiClient, timeout: float | None = None) -> list[dict[str, Any]]:
    """Every node as JSON. Read raw: the client's models take seconds of CPU to build for thousands of nodes, and
    the start polls this while the control plane it shares the cores with brings those nodes up."""
    response: Any = client.CoreV1Api(api_client).list_node(_preload_content=False, _request_timeout=timeout)
    items = json.loads(response.data).get("items") or []
    return [node for node in items if isinstance(node, dict) and isinstance(node.get("metadata"), dict)]


def _is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(condition.get("type") == "Ready" and condition.get("status") == "True" for condition in conditions)


def _is_schedulable(node: dict[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    lifecycle = [taint for taint in taints if str(taint.get("key", "")).startswith(NODE_LIFECYCLE_TAINT_PREFIX)]
    return _is_ready(node) and not lifecycle


def service_account_exists(api_client: client.ApiClient, namespace: str, name: str = "default") -> bool:
    accounts = client.CoreV1Api(api_client).list_namespaced_service_account(
        namespace, field_selector=f"metadata.name={name}"
    )
    return bool(accounts.items)


def crd_files(crd_dir: Path) -> list[Path]:
    return sorted(path for path in crd_dir.iterdir() if path.suffix in (".yaml", ".yml") and path.is_file())


def apply_crds(kubectl: Path, kubeconfig: Path, crd_dir: Path, log_path: Path, timeout: float) -> list[str]:
    """Apply every YAML file of ``crd_dir`` (server-side) and wait until the CRDs are Established."""
    files = crd_files(crd_dir)
    if not files:
        return []
    argv = [str(kubectl), f"--kubeconfig={kubeconfig}", "apply", "--server-side", "-o", "name"]
    for path in files:
        argv += ["-f", str(path)]
    applied = _kubectl(argv, log_path, timeout).split()
    crds = [name for name in applied if name.startswith("customresourcedefinition")]
    if crds:
        _kubectl(
            [
                str(kubectl),
                f"--kubeconfig={kubeconfig}",
                "wait",
                "--for=condition=Established",
                f"--timeout={int(timeout)}s",
                *crds,
            ],
            log_path,
            timeout + 10,
        )
    return applied


def _kubectl(argv: list[str], log_path: Path, timeout: float) -> str:
    completed = run_to_end(argv, capture_output=True, text=True, timeout=timeout, check=False)
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(argv)}\n{completed.stdout}{completed.stderr}")
    if completed.returncode != 0:
        raise ProbeError(f"`kubectl {' '.join(argv[2:4])}` failed: {completed.stderr.strip()[-2000:]}")
    return completed.stdout
