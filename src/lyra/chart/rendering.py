"""``manifests/``, rendered from the chart with its default values (one source): ``helm template``'s output split by
the template each object came from, so ``helm/lyra/templates/operator/rbac.yaml`` becomes
``manifests/operator/rbac.yaml``. The CRDs are not written here: ``manifests/crds`` is what ``lyra api crds``
generates, and the chart's CRD templates hold the same documents (a test compares them). Nor is the extender's
generated certificate (``extender/tls-secret.yaml``): a key pair made at each render belongs in no repository, so
who applies ``manifests/`` creates the Secret ``lyra-extender-tls`` first (docs/operations.md, "Extender TLS")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from lyra.child_processes import run_to_end

RELEASE = "lyra"
NAMESPACE = "lyra-system"
SOURCE_PREFIX = "# Source: lyra/templates/"
HEADER = (
    "# Rendered by `lyra chart manifests` from helm/lyra (release {release}, namespace {namespace}, default values):\n"
    "# do not edit by hand. The namespace must exist: kubectl create namespace {namespace}\n"
)
#: Rendered but not written to manifests/ (see the module docstring).
SKIPPED = ("crds/", "extender/tls-secret.yaml")


class RenderError(RuntimeError):
    """helm refused the chart or the values (its message says why)."""


def helm_template(
    helm: Path,
    chart: Path,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    values_files: Sequence[Path] = (),
    settings: Sequence[str] = (),
) -> str:
    """``helm template``'s output; raises :class:`RenderError` with helm's message when it fails."""
    command = [str(helm), "template", release, str(chart), "--namespace", namespace]
    for path in values_files:
        command += ["--values", str(path)]
    for setting in settings:
        command += ["--set", setting]
    result = run_to_end(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RenderError(result.stderr.strip() or f"helm template exited {result.returncode}")
    return result.stdout


def by_template(rendered: str) -> dict[str, list[str]]:
    """The rendered documents (as text) by the path of their template inside ``templates/``."""
    documents: dict[str, list[str]] = {}
    for chunk in rendered.split("\n---\n"):
        text = chunk.removeprefix("---\n").strip("\n")
        lines = text.splitlines()
        if not lines or not lines[0].startswith(SOURCE_PREFIX):
            continue
        body = "\n".join(lines[1:]).strip("\n")
        if yaml.safe_load(body) is None:
            continue  # a template whose condition is off renders comments only
        documents.setdefault(lines[0].removeprefix(SOURCE_PREFIX), []).append(body + "\n")
    return documents


def manifest_files(rendered: str, *, release: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    """The files of ``manifests/`` (path relative to it -> text)."""
    header = HEADER.format(release=release, namespace=namespace)
    return {
        path: header + "---\n".join(documents)
        for path, documents in sorted(by_template(rendered).items())
        if not path.startswith(SKIPPED)
    }
