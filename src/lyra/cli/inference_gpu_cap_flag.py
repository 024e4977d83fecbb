"""``--inference-gpu-cap NAMESPACE=GPUS``: the operator's per-namespace inference GPU caps, as the operator takes them
and as the commands that size the InferenceServices the way its passes do (`lyra plan --from-cluster`, `lyra status`)
take the same settings."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lyra.settings import DEFAULT_INFERENCE_GPU_CAP

if TYPE_CHECKING:
    from lyra.operator.sizing import InferenceGpuCaps


def add_inference_gpu_cap_argument(parser: argparse.ArgumentParser, *, purpose: str) -> None:
    """``--inference-gpu-cap NAMESPACE=GPUS`` (repeatable), as the operator takes it and the commands that size the
    InferenceServices as it does (``purpose`` says what the caps do there); read with :func:`inference_gpu_caps`."""
    parser.add_argument(
        "--inference-gpu-cap",
        action="append",
        default=[],
        metavar="NAMESPACE=GPUS",
        help=f"{purpose} (repeatable; *=GPUS for every namespace not named, *={DEFAULT_INFERENCE_GPU_CAP} unless "
        "given; docs/security.md)",
    )


def inference_gpu_caps(settings: Sequence[str]) -> InferenceGpuCaps:
    """The caps of ``--inference-gpu-cap`` settings, ``*`` at the operator's default unless given; ValueError says
    which setting is wrong and why."""
    from lyra.operator.sizing import InferenceGpuCaps  # here: `lyra --help` stays quick

    return InferenceGpuCaps.parse(settings, default=DEFAULT_INFERENCE_GPU_CAP)
