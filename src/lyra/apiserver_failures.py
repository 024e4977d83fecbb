"""A failed call to the API server, said in one line a user can act on: by the commands, the operator's log and
health, and the watch caches' log.

The client library's exceptions carry urllib3's connection pool and retry counts (``MaxRetryError:
HTTPSConnectionPool(host=..., port=...): Max retries exceeded with url: ... (Caused by NewConnectionError(...))``) or
an answer's headers over several lines. The commands print what the user needs instead: whether the server could be
reached at all (refused, no such host, timed out, its certificate refused) or what it answered (the status, and the
message of its ``Status`` body, which names the verb and resource RBAC refused).
"""

from __future__ import annotations

import json
import ssl
from http import HTTPStatus

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

#: The longest message a failure is cut to.
MAX_MESSAGE = 300

#: What a status code means to the user of a command, said after the server's own message.
_MEANINGS = {
    401: "the kubeconfig's credentials were not accepted",
    404: (
        "it does not serve the resource: are Lyra's CRDs installed (the chart installs them), "
        "and is it a Kubernetes API server?"
    ),
    429: "it is overloaded; try again",
}


def describe_api_failure(error: BaseException, server: str | None) -> str:
    """One line for ``error``, raised by a call to the API server at ``server`` (its URL, when known)."""
    at = f" at {server}" if server else ""
    if isinstance(error, MaxRetryError) and error.reason is not None:
        error = error.reason
    if isinstance(error, ApiException):
        return _cut(f"the API server{at} answered {_status(error.status, error.reason, error.body)}")
    status = getattr(error, "status", None)
    if isinstance(status, int) and not isinstance(status, bool):  # a watch cache's refusal: "<status>: <message>"
        text = str(error).partition(": ")[2]
        reason = _phrase(status)
        detail = None if text == reason else text
        return _cut(f"the API server{at} answered {_status(status, reason, None, detail)}")
    reached = unreachable_reason(error)
    if reached is not None:
        return _cut(f"cannot reach the API server{at}: {reached}")
    lines = str(error).strip().splitlines()
    return _cut(f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__)


def _status(code: int | None, reason: str | None, body: object, detail: str | None = None) -> str:
    """``403 Forbidden: <the Status body's message>``, then what the code means to the user, if it says more."""
    head = " ".join(str(part) for part in (code, reason) if part) or "an error"
    message = detail or _status_message(body)
    if message and reason and message.strip().lower() == reason.lower():
        message = None  # "Unauthorized" again
    said = [part for part in (message, _MEANINGS.get(code or 0)) if part]
    return f"{head}: {'; '.join(said)}" if said else head


def _phrase(code: int) -> str | None:
    """HTTP's reason phrase for ``code`` (``Not Found``), if it has one."""
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return None


def _status_message(body: object) -> str | None:
    """The ``message`` of a ``Status`` answer's body, if it has one."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body.strip():
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None  # a text body ("404 page not found") says no more than the status line
    message = document.get("message") if isinstance(document, dict) else None
    return message if isinstance(message, str) and message else None


def unreachable_reason(error: BaseException) -> str | None:
    """Why a server could not be reached, when ``error`` says it could not (``None`` otherwise): urllib3's errors,
    and the socket errors a ``urllib`` request raises (Prometheus, the operator's HTTP port) too."""
    if isinstance(error, NameResolutionError):
        return f"cannot resolve the host name {error.conn.host if error.conn else ''}".rstrip()
    if isinstance(error, NewConnectionError):  # before ConnectTimeoutError, of which urllib3 makes it a kind
        return _socket_reason(error)
    if isinstance(error, ConnectTimeoutError):
        return "timed out connecting"
    if isinstance(error, ReadTimeoutError):
        return "timed out waiting for an answer"
    if isinstance(error, SSLError):
        cause = error.args[0] if error.args else error
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"its TLS certificate was not accepted ({cause.verify_message or cause.reason})"
        return f"TLS failed ({_first_words(cause)})"
    if isinstance(error, ProtocolError):
        return f"the connection broke ({_first_words(error.args[1] if len(error.args) > 1 else error)})"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return None


def _socket_reason(error: BaseException) -> str:
    """Why a connection could not be opened: the socket's own words (``connection refused``)."""
    cause = error.__cause__ or error.__context__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    text = str(error)
    if "] " in text:  # urllib3 keeps only the text: "...: [Errno 111] Connection refused"
        return text.rsplit("] ", 1)[1].lower()
    return _first_words(error)


def _first_words(error: object) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
