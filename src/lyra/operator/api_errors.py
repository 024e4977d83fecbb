"""The API server's refusals and the network's failures, counted as they happen: every request the operator's clients
send (its watch caches' lists and watches, its Lease's reads and renewals) goes through the client's connection pool,
where :class:`CountingPool` tells each answer of status 400 or more, and each request that got no answer at all, to
``record(verb, code)`` (:meth:`lyra.operator.metrics.OperatorMetrics.api_error`). The commit step's writes go
through :class:`lyra.operator.writes.ApiWrites` instead, which tells the same of each of its requests
(:func:`count_write_errors`).

The verb is the Kubernetes verb the request stands for, from its method and query (every list Lyra makes is paged,
so a ``GET`` with ``limit`` is a list; with ``watch`` a watch); the code is the HTTP status, or ``network`` for a
request that got no answer (refused, reset, timed out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import urllib3

from lyra.operator.commit import FencedPool
from lyra.operator.writes import ApiWrites

if TYPE_CHECKING:
    from kubernetes import client

#: The verbs a request is counted under, and the codes every verb's counter is created with (at zero), so the first
#: occurrence of each is visible to ``rate()``: the refusals the operator handles (404, 409, 410, 422), the ones that
#: end a pass (401, 429), the ones that say its rights or the server are wrong (403, 5xx), and no answer at all.
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
NETWORK = "network"
CODES = ("400", "401", "403", "404", "409", "410", "422", "429", "500", "503", "504", NETWORK)
_WRITES = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

Record = Callable[[str, str], None]


def verb_of(method: str, url: str) -> str:
    """The Kubernetes verb of a request (``get`` for any other read: HEAD, OPTIONS)."""
    method = method.upper()
    if method in _WRITES:
        return _WRITES[method]
    query = parse_qs(urlsplit(url).query)
    if query.get("watch", [""])[0] in {"true", "1"}:
        return "watch"
    return "list" if "limit" in query else "get"


def code_of(status: int) -> str | None:
    """The code an answer is counted under: its status when the API refused (400 or more), else None."""
    return str(status) if status >= 400 else None


class CountingPool:
    """A connection pool that counts the API's refusals and the requests that got no answer, then answers as the
    pool it wraps (the client raises its ApiException from the same response, as before)."""

    def __init__(self, pool: Any, record: Record) -> None:
        self.pool = pool
        self.record = record

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        try:
            response = self.pool.request(method, url, *args, **kwargs)
        except urllib3.exceptions.HTTPError:
            self.record(verb_of(method, url), NETWORK)
            raise
        code = code_of(int(getattr(response, "status", 0) or 0))
        if code is not None:
            self.record(verb_of(method, url), code)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


def count_api_errors(api: client.ApiClient, record: Record) -> None:
    """Count ``api``'s refusals and failed requests with ``record``. Under the write fence when there is one
    (:class:`lyra.operator.commit.FencedPool`, which keeps the pool it wraps when the fence changes): a write the
    fence stops is not sent, so it is no API error. Installed once per client."""
    rest: Any = api.rest_client
    fenced = rest.pool_manager if isinstance(rest.pool_manager, FencedPool) else None
    pool = fenced.pool if fenced is not None else rest.pool_manager
    if isinstance(pool, CountingPool):
        return
    if fenced is not None:
        fenced.pool = CountingPool(pool, record)
    else:
        rest.pool_manager = CountingPool(pool, record)


def count_write_errors(writes: ApiWrites, record: Record) -> None:
    """Count the refusals and failed requests of the commit step's writes with ``record``, as
    :func:`count_api_errors` counts a client's (a write the fence stops is not sent, so it is not counted)."""

    def refused(method: str, path: str, status: int | None) -> None:
        code = NETWORK if status is None else code_of(status)
        if code is not None:
            record(verb_of(method, path), code)

    writes.refused = refused
