"""Argument types shared by the ``lyra`` commands: each refuses bad input with a message argparse prints (exit 2)."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lyra.api.object_names import dns_label_problem, dns_subdomain_problem
from lyra.settings import COUNT, HOST, OPTIONAL_OBJECT_NAME, PORT, POSITIVE_COUNT, SECONDS, SWITCH


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


def port(text: str) -> int:
    """A TCP port to listen on: 1 to 65535."""
    value = _whole(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port between 1 and 65535, got {value}")
    return value


#: A host name: dot-separated labels of letters, digits and inner hyphens (RFC 1123), 253 characters at most.
_HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_HOST_LABEL}(\.{_HOST_LABEL})*")


def listen_host(text: str) -> str:
    """An address to listen on: an IP address or a host name."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        if not _HOST_NAME.fullmatch(text):
            raise argparse.ArgumentTypeError(f"expected an IP address or a host name, got {text[:80]!r}") from None
    return text


def listen_host_or_all(text: str) -> str:
    """An address to listen on, or empty for every interface."""
    return text if text == "" else listen_host(text)


def optional_object_name(text: str) -> str:
    """The name of a Kubernetes object (a DNS subdomain), or empty for none."""
    problem = None if text == "" else dns_subdomain_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def namespace_name(text: str) -> str:
    """A namespace's name (a DNS label)."""
    problem = dns_label_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def seconds(text: str) -> float:
    """A duration in seconds: a finite number >= 0, at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text[:40]!r}") from None
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 86400, got {text[:40]}")
    return value


def switch(text: str) -> bool:
    """A feature switched ``on`` or ``off``."""
    value = text.strip().lower()
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text[:40]!r}")
    return value == "on"


def existing_file(text: str) -> Path:
    """A path to a regular file that exists (a kubeconfig, a snapshot)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text[:200]}: no such file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text[:200]}: not a regular file")
    return path


def add_kubeconfig_argument(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig``, as every command that talks to a cluster takes it (see :mod:`lyra.cli.kube_client`)."""
    parser.add_argument(
        "--kubeconfig", type=existing_file, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )


#: How a setting's flag reads its value, by the setting's kind (:mod:`lyra.settings`).
_READERS: dict[str, tuple[Callable[[str], Any], str | None]] = {
    SECONDS: (seconds, "SECONDS"),
    COUNT: (non_negative_int, None),
    POSITIVE_COUNT: (positive_int, None),
    HOST: (listen_host, "HOST"),
    OPTIONAL_OBJECT_NAME: (optional_object_name, "NAME"),
    PORT: (port, None),
    SWITCH: (switch, "on|off"),
}


def add_settings(parser: argparse.ArgumentParser, settings: type[Any], *, only: Sequence[str] = ()) -> None:
    """One flag for each field of the dataclass ``settings`` that declares one (``setting(...)``), or only for the
    fields named in ``only``: its default and its help are the field's, the value lands on the field's name."""
    for item in dataclasses.fields(settings):
        flag = item.metadata.get("flag")
        if flag is None or (only and item.name not in only):
            continue
        read, metavar = _READERS[item.metadata["kind"]]
        default = item.default
        if isinstance(default, bool):
            shown = "on" if default else "off"
        elif isinstance(default, float):
            shown = f"{default:g}"
        else:
            shown = repr(default) if default == "" else str(default)
        parser.add_argument(
            flag,
            type=read,
            default=default,
            metavar=metavar,
            dest=item.name,
            help=f"{item.metadata['help']} (default {shown})",
        )


def settings_given(args: argparse.Namespace, settings: type[Any]) -> dict[str, Any]:
    """The values of ``settings``' flags among ``args`` (those :func:`add_settings` added), by field name."""
    return {
        item.name: getattr(args, item.name)
        for item in dataclasses.fields(settings)
        if "flag" in item.metadata and hasattr(args, item.name)
    }
