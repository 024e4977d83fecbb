"""Argument types shared by the ``lyra`` commands: each refuses bad input with a message argparse prints (exit 2)."""

from __future__ import annotations

import argparse
from pathlib import Path


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


def add_kubeconfig_argument(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig``, as every command that talks to a cluster takes it (see :mod:`lyra.cli.kube_client`)."""
    parser.add_argument(
        "--kubeconfig", type=existing_file, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
