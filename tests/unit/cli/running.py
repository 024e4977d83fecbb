"""Running ``lyra`` in the test's process as a shell would: the exit code, whether the command returned it or
argparse exited with it; a kubeconfig for a server the test names; a port something else listens on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from lyra.cli import main


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def kubeconfig_text(server: str) -> str:
    """A kubeconfig whose one context points at ``server`` with a token."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )


@contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on while the block runs."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]
