"""The API client of the commands that talk to a cluster: ``--kubeconfig``, else ``$KUBECONFIG`` or
``~/.kube/config``, else the pod's service account."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes import client


class KubeconfigError(Exception):
    """No usable kubeconfig; the message says why."""


def api_client(kubeconfig: Path | None) -> client.ApiClient:
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig is not None and not kubeconfig.is_file():
        raise KubeconfigError(f"--kubeconfig {kubeconfig}: no such file")
    try:
        if kubeconfig is not None:
            made: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
            return made
        try:
            found: client.ApiClient = config.new_client_from_config()  # type: ignore[no-untyped-call]
            return found
        except ConfigException:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return client.ApiClient()
    except Exception as error:  # a kubeconfig can be broken in many ways (YAML, keys, files): all mean the same
        raise KubeconfigError(f"no usable kubeconfig: {type(error).__name__}: {error}") from error
