"""Kubeconfig files for the local control plane: one for the user, one per component.

The CA certificate is embedded so a kubeconfig keeps working when copied elsewhere; files are written with mode
0600 because they hold bearer tokens.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def write_kubeconfig(path: Path, *, cluster_name: str, server: str, ca_cert: Path, user: str, token: str) -> Path:
    ca_data = base64.b64encode(ca_cert.read_bytes()).decode("ascii")
    context = f"{user}@{cluster_name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": context,
        "preferences": {},
    }
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        yaml.safe_dump(config, out, sort_keys=False)
    return path
