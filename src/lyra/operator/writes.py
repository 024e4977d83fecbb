"""The commit step's API calls, each one lean HTTP request over kept-alive connections.

A busy pass at 5,000 nodes makes thousands of writes, and through the kubernetes client each cost about 0.4 ms of
the operator's CPU before the API server saw it (docs/benchmarks.md, "The pass with its writes"): the client checks
every argument with pydantic, walks every body to "sanitize" it, builds the request through several layers and, for
calls without ``_preload_content=False``, turns the answer into its models. Here a body is serialised once
(:func:`serialised`), sent with the client's own configuration (server, CA, client certificate, bearer token refreshed
as the client refreshes it, user agent, proxy; the header lines built and checked once per set of values), and its
answer kept as bytes, from which the commit step reads only
metadata (the resourceVersion; after a 409 on a create, the pod's uid and owners). So every request asks for the
object's metadata alone (:data:`lyra.api.names.METADATA_ANSWER`): kube-apiserver then answers with the metadata
(managed fields included) without spec and status, a pod of 30 environment variables in 2.6 KB instead of 5.9, and
each write has less to read, decrypt and parse. The answer is read straight off the socket
(:mod:`lyra.operator.http_answers`), not through ``http.client``'s response. An error answer raises the client's
:class:`ApiException` with its status, reason and body, as the kubernetes client would, so the commit step's handling
is the same.

The methods are named, and take their arguments, as the kubernetes client's ``CoreV1Api``, ``AppsV1Api`` and
``CustomObjectsApi`` do (only those the commit step calls), so a test may stand in for them alike.

The fence is asked as each request is about to be sent (after a connection was taken and the body serialised), so
the pause between the question and the write is as short as in :class:`lyra.operator.commit.FencedPool`. Each
connection serves one request at a time; parallel writers take one each from an idle list (none is opened before
it is needed). A request on a kept-alive connection that the server had already closed is sent again once, on a
new connection, and only when nothing of an answer came back.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import should_bypass_proxies

from lyra.api.names import APPLY_PATCH, MERGE_PATCH, METADATA_ANSWER, OPERATOR_NAME, STRATEGIC_MERGE_PATCH
from lyra.operator.http_answers import read_answer
from lyra.operator.leader import LeadershipLostError

#: Seconds a request may wait on the server (connecting, or for any byte of the answer).
TIMEOUT_S = 60.0
JSON = "application/json"
_BREAKS = re.compile(r"[\r\n\0]")
#: Header blocks kept by :meth:`ApiWrites._headers`; past these, all are dropped and built again as needed.
_BLOCKS_KEPT = 16
#: Errors of a kept-alive connection the server closed meanwhile: the request is sent again on a new one.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer as the kubernetes client's raw response (``_preload_content=False``) gives it: ``data`` bytes."""

    status: int
    reason: str
    data: bytes


def _plain(value: object) -> object:
    """``json.dumps``'s fallback: a read-only mapping (a frozen action's) as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


#: What ``urllib.parse.quote(part, safe="")`` leaves as it is (every Kubernetes name and namespace): such a part is
#: sent unchanged without the quoting's cost.
_UNQUOTED = re.compile(r"[A-Za-z0-9_.~-]+")


def _q(part: str) -> str:
    """A name or namespace as one path segment."""
    return part if _UNQUOTED.fullmatch(part) else urllib.parse.quote(part, safe="")


def serialised(body: object) -> bytes:
    """``body`` as JSON: by orjson (a pod's manifest in about a fifteenth of ``json.dumps``' CPU), and by ``json``
    for what orjson refuses and ``json`` takes (keys that are not strings, integers past 64 bits)."""
    try:
        return orjson.dumps(body, default=_plain)
    except TypeError:
        return json.dumps(body, separators=(",", ":"), default=_plain).encode()


class _NamedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection whose TLS server name may differ from the host it connects to (``tls_server_name``)."""

    def __init__(self, host: str, port: int | None, *, context: ssl.SSLContext, server_name: str, timeout: float):
        super().__init__(host, port, context=context, timeout=timeout)
        self.server_name = server_name
        self.tls = context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.server_name)


class Connections:
    """Kept-alive connections to the API server named by a kubernetes client's configuration, opened when needed."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.configuration = configuration
        url = urllib.parse.urlsplit(configuration.host)
        self.https = url.scheme == "https"
        self.host = url.hostname or "localhost"
        self.port = url.port
        self.base = url.path.rstrip("/")
        self.authority = url.netloc.rpartition("@")[2]
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None

    def _tls(self) -> ssl.SSLContext:
        if self._context is None:
            c = self.configuration
            context = ssl.create_default_context(cafile=c.ssl_ca_cert or None)
            if not c.verify_ssl:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif c.assert_hostname is False:
                context.check_hostname = False
            if c.cert_file:
                context.load_cert_chain(c.cert_file, c.key_file or None)
            self._context = context
        return self._context

    def _open(self) -> http.client.HTTPConnection:
        c = self.configuration
        proxy = (
            urllib.parse.urlsplit(c.proxy) if c.proxy and not should_bypass_proxies(c.host, c.no_proxy or "") else None
        )
        host, port = (proxy.hostname or "", proxy.port) if proxy is not None else (self.host, self.port)
        made: http.client.HTTPConnection
        if self.https:
            name = c.tls_server_name or self.host
            made = _NamedHTTPSConnection(host, port, context=self._tls(), server_name=name, timeout=TIMEOUT_S)
        else:
            made = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
        if proxy is not None:
            made.set_tunnel(self.host, self.port, headers=dict(c.proxy_headers or {}))
        return made

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection and whether it was used before (then the server may have closed it meanwhile)."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._open(), False

    def take_new(self) -> http.client.HTTPConnection:
        return self._open()

    def give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.append(connection)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class ApiWrites:
    """The commit step's calls (see the module docstring), on the connection settings of ``api`` and its default
    headers (the user agent the runner sets names the Lease identity); ``fence`` is asked before each write."""

    def __init__(self, api: client.ApiClient, fence: Callable[[], Callable[[], bool] | None] = lambda: None) -> None:
        self.api = api
        self.fence = fence
        self.connections = Connections(api.configuration)
        self._blocks: dict[tuple[object, ...], bytes] = {}
        #: Told of each request the API refused (its method, path and status) or that got no answer (status None):
        #: :func:`lyra.operator.api_errors.count_write_errors` counts them.
        self.refused: Callable[[str, str, int | None], None] | None = None
        # Kept-alive connections are closed with their writer, not left to the collector (which warns of each).
        weakref.finalize(self, Connections.close, self.connections)

    # -- the calls, named as the kubernetes client's ----------------------------------------------------------------

    def patch_node(self, name: str, body: object, **_: Any) -> Answer:
        return self._call("PATCH", f"/api/v1/nodes/{_q(name)}", body, STRATEGIC_MERGE_PATCH)

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> Answer:
        return self._call("GET", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}")

    def patch_namespaced_pod(self, name: str, namespace: str, body: object, **_: Any) -> Answer:
        return self._call("PATCH", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}", body, STRATEGIC_MERGE_PATCH)

    def create_namespaced_pod(self, namespace: str, body: object, **_: Any) -> Answer:
        return self._call("POST", f"/api/v1/namespaces/{_q(namespace)}/pods", body)

    def delete_namespaced_pod(
        self, name: str, namespace: str, grace_period_seconds: int | None = None, body: object = None, **_: Any
    ) -> Answer:
        query = f"?gracePeriodSeconds={int(grace_period_seconds)}" if grace_period_seconds is not None else ""
        return self._call("DELETE", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}{query}", body)

    def create_namespaced_service(self, namespace: str, body: object, **_: Any) -> Answer:
        return self._call("POST", f"/api/v1/namespaces/{_q(namespace)}/services", body)

    def create_namespaced_event(self, namespace: str, body: object, **_: Any) -> Answer:
        return self._call("POST", f"/api/v1/namespaces/{_q(namespace)}/events", body)

    def create_namespaced_deployment(self, namespace: str, body: object, **_: Any) -> Answer:
        return self._call("POST", f"/apis/apps/v1/namespaces/{_q(namespace)}/deployments", body)

    def patch_namespaced_deployment(self, name: str, namespace: str, body: object, **_: Any) -> Answer:
        path = f"/apis/apps/v1/namespaces/{_q(namespace)}/deployments/{_q(name)}"
        return self._call("PATCH", path, body, STRATEGIC_MERGE_PATCH)

    def apply_namespaced_pod_disruption_budget(self, name: str, namespace: str, body: object, **_: Any) -> Answer:
        """Server-side apply, as the operator's field manager (forced: the fields are the operator's to keep)."""
        path = f"/apis/policy/v1/namespaces/{_q(namespace)}/poddisruptionbudgets/{_q(name)}"
        query = f"?fieldManager={_q(OPERATOR_NAME)}&force=true"
        return self._call("PATCH", path + query, body, APPLY_PATCH)

    def delete_namespaced_pod_disruption_budget(
        self, name: str, namespace: str, body: object = None, **_: Any
    ) -> Answer:
        path = f"/apis/policy/v1/namespaces/{_q(namespace)}/poddisruptionbudgets/{_q(name)}"
        return self._call("DELETE", path, body)

    def patch_namespaced_custom_object_status(  # noqa: PLR0917 - the kubernetes client's signature
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: object,
        _content_type: str = MERGE_PATCH,
        **_: Any,
    ) -> Answer:
        path = f"/apis/{group}/{version}/namespaces/{_q(namespace)}/{plural}/{_q(name)}/status"
        return self._call("PATCH", path, body, _content_type)

    # -- one request --------------------------------------------------------------------------------------------------

    def _headers(self, content_type: str | None) -> bytes:
        """The request's header lines after its request line, each ending in CRLF, ``Content-Length`` excepted: the
        API client's default headers (user agent), its credentials as it gives them now (a refreshed token is taken
        at the next request), ``Accept`` and the body's ``Content-Type``. Built and checked once for each set of
        values and kept (a block per content type and token, the few there are)."""
        credentials = tuple(
            (str(setting["key"]), str(setting["value"]))
            for setting in self.api.configuration.auth_settings().values()
            if setting.get("in") == "header" and setting.get("value")
        )
        key = (tuple(self.api.default_headers.items()), credentials, content_type)
        block = self._blocks.get(key)
        if block is None:
            headers = {"Host": self.connections.authority, **self.api.default_headers, "Accept": METADATA_ANSWER}
            headers.update(credentials)
            if content_type is not None:
                headers["Content-Type"] = content_type
            for name, value in headers.items():
                if _BREAKS.search(name) or _BREAKS.search(value):
                    raise ValueError(f"the API client's header {name!r} holds a line break")
            block = "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode("latin-1")
            if len(self._blocks) >= _BLOCKS_KEPT:
                self._blocks.clear()  # tokens refreshed over a long run: their old blocks are not kept
            self._blocks[key] = block
        return block

    def _call(self, method: str, path: str, body: object = None, content_type: str = JSON) -> Answer:
        payload = serialised(body) if body is not None else None
        headers = self._headers(content_type if payload is not None else None)
        connection, reused = self.connections.take()
        try:
            try:
                return self._send(connection, method, path, payload, headers)
            except _STALE:
                if not reused:
                    raise
            # The server had closed the kept-alive connection while it was idle: nothing was written; once more, anew.
            return self._send(self.connections.take_new(), method, path, payload, headers)
        except (OSError, http.client.HTTPException):
            if self.refused is not None:
                self.refused(method, path, None)
            raise

    def _send(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        path: str,
        payload: bytes | None,
        headers: bytes,
    ) -> Answer:
        fence = self.fence() if method != "GET" else None
        if fence is not None and not fence():
            self.connections.give_back(connection)
            raise LeadershipLostError(f"lost the lease: {method} {path} not sent")
        try:
            if connection.sock is None:
                connection.connect()  # TCP, the proxy's tunnel if any, TLS
            target = f"{method} {self.connections.base}{path} HTTP/1.1\r\n".encode("latin-1")
            body = payload or b""
            request = b"%s%sContent-Length: %d\r\n\r\n%s" % (target, headers, len(body), body)
            connection.sock.sendall(request)  # one write: headers and body in one TLS record, one system call
            response = read_answer(connection.sock, method)
        except BaseException:
            connection.close()
            raise
        if response.will_close:
            connection.close()
        else:
            self.connections.give_back(connection)
        if response.status >= 400:
            if self.refused is not None:
                self.refused(method, path, response.status)
            error = ApiException(status=response.status, reason=response.reason)
            error.body = response.data.decode("utf-8", "replace")
            error.headers = dict(response.headers)
            raise error
        return Answer(response.status, response.reason, response.data)

    def close(self) -> None:
        self.connections.close()
