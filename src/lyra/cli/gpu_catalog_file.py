"""``--gpu-catalog FILE``, as ``lyra operator`` and ``lyra plan --from-cluster`` take it: read and checked while the
arguments are parsed, so a bad file exits 2 naming the file, the entry and the field (docs/operations.md, "GPU
types"). Apart from :mod:`lyra.cli.arguments`, which the invariant checker's command shares and which must not reach
the snapshot's readers."""

from __future__ import annotations

import argparse
from pathlib import Path

from lyra.core.gpus import GpuCatalog


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
