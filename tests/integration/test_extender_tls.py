"""kube-scheduler calls the extender over HTTPS and presents a client certificate; the extender serves only clients
that present one signed by the cluster's CA.

The local control plane with an ``https`` extender URL configures kube-scheduler's extender ``tlsConfig`` (CA, client
certificate and key from the cluster's PKI); ``lyra extender`` runs with ``--tls-cert-file``, ``--tls-key-file`` and
``--client-ca-file``. A GPU pod is then scored over TLS (the extender counts the request) and bound; a client
without a certificate is refused during the handshake.
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lyra.localcluster import populate
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.testing import session_control_plane, temporary_namespace
from lyra.localcluster.waiting import wait_for

pytestmark = pytest.mark.integration


def https_get(port: int, path: str, context: ssl.SSLContext) -> str:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        body = answer.read().decode()
        return body if answer.status == 200 else ""
    finally:
        connection.close()


def gpu_pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "scored-over-tls"},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/app:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def test_the_scheduler_calls_the_extender_over_tls_with_a_client_certificate(tmp_path: Path) -> None:
    port = allocate_ports(1)[0]
    with (
        session_control_plane(tmp_path / "cluster", extender_url=f"https://127.0.0.1:{port}") as cluster,
        populate.admin_api(cluster.kubeconfig) as api,
        temporary_namespace(api, "extender-tls") as namespace,
    ):
        pki = cluster.credentials
        log = tmp_path / "extender.log"
        with log.open("wb") as out:
            extender = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lyra",
                    "extender",
                    "--kubeconfig",
                    str(cluster.kubeconfig),
                    "--port",
                    str(port),
                    "--tls-cert-file",
                    str(pki.extender_cert),
                    "--tls-key-file",
                    str(pki.extender_key),
                    "--client-ca-file",
                    str(pki.ca_cert),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            trusted = ssl.create_default_context(cafile=str(pki.ca_cert))
            trusted.load_cert_chain(pki.scheduler_client_cert, pki.scheduler_client_key)
            wait_for(
                lambda: https_get(port, "/readyz", trusted),
                60,
                "the extender to serve HTTPS and sync",
                retry_on=(OSError,),
            )

            anonymous = ssl.create_default_context(cafile=str(pki.ca_cert))
            with pytest.raises((ssl.SSLError, ConnectionError)):
                https_get(port, "/healthz", anonymous)

            core = client.CoreV1Api(api)
            core.create_namespaced_pod(namespace, gpu_pod())
            wait_for(
                lambda: core.read_namespaced_pod("scored-over-tls", namespace).spec.node_name,
                60,
                "the GPU pod to be bound",
            )

            def prioritized() -> bool:
                metrics = https_get(port, "/metrics", trusted)
                return 'lyra_extender_requests_total{outcome="ok",verb="prioritize"}' in metrics

            wait_for(prioritized, 30, "the extender to have scored the pod over TLS")
        except BaseException:
            print(log.read_text(errors="replace")[-4000:])
            raise
        finally:
            extender.terminate()
            extender.wait(timeout=30)
