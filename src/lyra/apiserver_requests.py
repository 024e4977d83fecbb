"""How long a client waits on the API server, for the clients that must not wait for ever: the one-shot commands
(``lyra status``, ``lyra check``, ...) and the operator's Lease.

The kubernetes client names no timeout unless a call does, and urllib3 then waits on a silent server (a hung API
server, a stale port-forward, a connection a network partition left open) without end. urllib3 also tries a read
that timed out again, up to three times, for the methods it takes as idempotent (a GET, not a PATCH), which makes a
30 s bound two minutes. The clients here do not: a read that timed out fails at once, and the caller decides
whether and when to ask again. A refused or broken connection is still tried again, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import client


def no_read_retries(api: client.ApiClient) -> None:
    """A request through ``api`` that timed out while reading is not sent again: the client's connection pools, made
    at their first request, take their retries from the pool manager's settings: urllib3's default (three of any
    kind) without any of a read that timed out."""
    from urllib3.util.retry import Retry  # noqa: PLC0415 - a command that never asks the API server loads no urllib3

    api.rest_client.pool_manager.connection_pool_kw["retries"] = Retry(total=3, read=0)


def bound_each_request(api: client.ApiClient, timeout: tuple[float, float]) -> None:
    """Every request through ``api`` waits at most ``timeout`` (to connect, then for each read of the answer), whatever
    timeout its call names, and is not sent again after a read timed out: the client library's calls all pass
    through its REST client's ``request``."""
    rest = api.rest_client
    request: Callable[..., Any] = rest.request

    def bounded(*arguments: Any, _request_timeout: Any = None, **keywords: Any) -> Any:
        return request(*arguments, _request_timeout=timeout, **keywords)

    rest.request = bounded  # type: ignore[method-assign]
    no_read_retries(api)
