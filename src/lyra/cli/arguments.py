"""Argument types shared by the ``lyra`` commands: each refuses bad input with a message argparse prints (exit 2)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lyra.core.gpus import GpuCatalog


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None


def positive_int(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds: a finite number >= 0, at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text[:40]!r}") from None
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 86400, got {text[:40]}")
    return value


def existing_file(text: str) -> Path:
    """A path to a file that exists (a kubeconfig, a snapshot)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text[:200]}: no such file")
    return path


def gpu_catalog_file(text: str) -> GpuCatalog:
    """A GPU catalogue file (YAML or JSON, docs/operations.md "GPU types"), read and checked: a refusal names the
    file, the entry and the field."""
    from lyra.snapshot import MAX_GPU_CATALOG_BYTES, SnapshotError, parse_gpu_catalog

    try:
        with Path(text).open("rb") as file:
            return parse_gpu_catalog(file.read(MAX_GPU_CATALOG_BYTES + 1))
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{text[:200]}: {error.strerror or error}") from None
    except SnapshotError as error:
        raise argparse.ArgumentTypeError(f"{text[:200]}: {error}") from None


def add_gpu_catalog_argument(parser: argparse.ArgumentParser, *, also: str = "") -> None:
    """``--gpu-catalog FILE``, as the operator and the planner take it."""
    parser.add_argument(
        "--gpu-catalog",
        type=gpu_catalog_file,
        metavar="FILE",
        help=f"{also}a GPU catalogue (YAML or JSON: gpuCatalog: {{TYPE: {{speed: S, memoryGiB: M}}}}): how fast each "
        "GPU type trains relative to a reference GPU and its memory; it wins over nodes' nvidia.com/gpu.memory "
        "labels, which win over the family defaults (docs/operations.md; default: labels and defaults only)",
    )


def add_kubeconfig_argument(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig``, as every command that talks to a cluster takes it (see :mod:`lyra.cli.kube_client`)."""
    parser.add_argument(
        "--kubeconfig", type=existing_file, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
