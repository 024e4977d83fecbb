"""The HTTP face of the scheduler extender: ``prioritize`` and ``preempt`` for kube-scheduler, plus ``/healthz``,
``/readyz`` and ``/metrics``.

The extender scores and never refuses a node (docs/architecture.md, "Where a pod lands"). Lyra's hard rules (which
loan states a pod may run in, which GPU type a worker needs) are in what the operator writes, the state taints and
the pods' node affinity, which kube-scheduler's own plugins check and re-check on every node change. A refusal by an
extender names no plugin, so kube-scheduler would retry such a pod only at its periodic flush of unschedulable pods
(five minutes); a refusal made on a view a fraction of a second old (a node that has just returned to ``serving``)
would leave inference waiting that long. So the extender has no ``filter`` verb, and kube-scheduler is configured
with it ``ignorable``: when it is down, pods are still placed correctly, only less well packed.

Every verb reads the current :class:`~lyra.extender.view.ClusterView` (never the API server) and asks the policy
core (:func:`lyra.core.placement.score_nodes`). Both modes of the protocol are served: with ``nodeCacheCapable`` the
request names the nodes and the view supplies them; without it the request carries the Node objects.

Bad bodies get a 4xx with a message and never a 500: a body over ``max_body_bytes`` is refused (413) while it
streams in, chunked or not, JSON that does not parse or does not match the protocol gets 400 or 422, and a body that
does not arrive within ``body_timeout_s`` gets 408. Memory stays bounded across requests too: the bytes of all the
bodies being read or answered at once may not exceed ``max_held_bytes`` (503 past it, as kube-scheduler's
``ignorable`` extender is then skipped for that pod). Parsing happens on the event loop, bounded in time by the body
cap: the largest body parses in a fraction of a second (docs/security.md, "The extender's memory and time"). Error
answers close the connection, so a body left unread is never read. Until the view has synced, ``/readyz`` says 503
and ``prioritize`` scores nothing (no preference is better than one from an empty view).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from lyra.api.convert import PodFacts, node_view
from lyra.api.objects import MAX_NODES, Node
from lyra.core.model import LoanState
from lyra.core.placement import NodeView, PodRequest, PodRole, score_nodes
from lyra.exposition import exporter_registry
from lyra.extender.scores import encode
from lyra.extender.view import ClusterView
from lyra.extender.wire import (
    ExtenderArgs,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    MetaPod,
    MetaVictims,
)

MIB = 1024 * 1024
#: What kube-scheduler sends with ``nodeCacheCapable`` (how Lyra configures it): the pod, and node names only. A pod
#: is at most what an API server stores, etcd's default request limit (``--max-request-bytes``, 1.5 MiB).
POD_ALLOWANCE_BYTES = 1536 * 1024
#: One entry of ``NodeNames``: a name of at most 253 characters, its quotes and a comma. ``preempt`` sends at most
#: max(100, 10%) of the nodes as candidates (kube-scheduler's MinCandidateNodes defaults), each with its victims'
#: UIDs (47 bytes each): 1,500 candidates at ``MAX_NODES`` fit with 48 victims each.
NODE_ENTRY_BYTES = 256
#: Largest body accepted by default: the pod and ``MAX_NODES`` (15,000) names, 5.2 MB, rounded up to whole MiB.
#: A real request at 5,000 nodes with 40-character names is about 220 KiB. Without ``nodeCacheCapable`` the full
#: Node objects (a few KiB each) need ``--max-body-mib`` raised.
DEFAULT_MAX_BODY_MIB = math.ceil((POD_ALLOWANCE_BYTES + MAX_NODES * NODE_ENTRY_BYTES) / MIB)
DEFAULT_MAX_BODY_BYTES = DEFAULT_MAX_BODY_MIB * MIB
#: Body bytes held at once across all requests: two largest bodies. kube-scheduler sends one request at a time per
#: active scheduler, so only a flood reaches it.
DEFAULT_MAX_HELD_MIB = 2 * DEFAULT_MAX_BODY_MIB
#: Seconds a client has to send a request's headers, and again its body (kube-scheduler's ``httpTimeout`` is 5 s).
DEFAULT_CLIENT_TIMEOUT_S = 10
NOT_SYNCED = "the Lyra extender has not synced its node and pod cache yet"


class ViewSource(Protocol):
    """Where the current view comes from (the watcher, or a fixed view in tests)."""

    @property
    def synced(self) -> bool: ...

    def current(self) -> ClusterView: ...


class FixedView:
    """A view that never changes: for tests, benchmarks and ``--from-file`` runs."""

    def __init__(self, view: ClusterView, *, synced: bool = True) -> None:
        self._view = view
        self._synced = synced

    @property
    def synced(self) -> bool:
        return self._synced

    def current(self) -> ClusterView:
        return self._view


#: The extender's metric names as exposed (the dashboards' queries use these).
REQUESTS_METRIC = "lyra_extender_requests_total"
REQUEST_SECONDS_METRIC = "lyra_extender_request_seconds"


class Verb(StrEnum):
    """The extender's verbs, as kube-scheduler calls them and as the metrics label them."""

    PRIORITIZE = "prioritize"
    PREEMPT = "preempt"


class Outcome(StrEnum):
    """How a request ended: answered; a bad body (400, 408, 413, 422); refused for lack of room (503)."""

    OK = "ok"
    BAD_REQUEST = "bad-request"
    REFUSED = "refused"


#: kube-scheduler's default extender timeout (``httpTimeout: 5s``): the latency buckets reach it, so a slow extender's
#: answers are told apart up to where the scheduler gives up on them.
SCHEDULER_TIMEOUT_S = 5.0
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, SCHEDULER_TIMEOUT_S)


class ExtenderMetrics:
    """The extender's request counter and latency histogram; every (verb, outcome) exists at zero from the start, so
    the first refusal of each kind shows in ``rate()``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            REQUESTS_METRIC.removesuffix("_total"),
            "Extender requests by verb and outcome",
            ["verb", "outcome"],
            registry=registry,
        )
        self.latency = Histogram(
            REQUEST_SECONDS_METRIC,
            "Time to answer an extender request, by verb",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        for verb in Verb:
            self.latency.labels(verb.value)
            for outcome in Outcome:
                self.requests.labels(verb.value, outcome.value)


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's HTTP answer: status, JSON body, and whether the connection is closed after it."""

    status: int
    body: bytes
    close: bool = False

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(self.body))]
        if self.close:
            headers.append((b"connection", b"close"))
        return headers


@dataclass(frozen=True, slots=True)
class DirectVerb:
    """One verb: ``answer`` turns a whole request body (and when the request began, for the latency metric) into
    the answer, counting it in the metrics; ``asgi`` serves it as an ASGI app, reading the body within the limits
    first. The HTTP protocol (:mod:`lyra.extender.serving`) calls ``answer`` itself for a small body that arrived
    whole, after taking its declared size from ``held``."""

    answer: Callable[[bytes, float], Answer]
    asgi: ASGIApp
    held: HeldBytes
    max_body_bytes: int


class BadBodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HeldBytes:
    """The request body bytes held at once, across requests: each request takes what it reads (or what its
    ``Content-Length`` declares, before reading) and gives it back when answered. Used from the event loop only;
    ``peak`` is the most ever held."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        self.peak = max(self.peak, self.held)
        return True

    def give(self, size: int) -> None:
        self.held -= size


class _Taken:
    """What one request has taken from :class:`HeldBytes`, given back once in ``finally``."""

    def __init__(self, held: HeldBytes) -> None:
        self.held = held
        self.size = 0

    def take(self, size: int) -> None:
        if not self.held.take(size):
            raise BadBodyError(
                503, f"the extender holds {self.held.held} bytes of other requests (at most {self.held.limit}): retry"
            )
        self.size += size

    def release(self) -> None:
        self.held.give(self.size)
        self.size = 0


class ClientGoneError(Exception):
    """The client closed its connection before its body arrived: nobody is left to answer."""


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """A request's body as the ASGI server delivers it."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _read_body(declared: str | None, chunks: AsyncIterator[bytes], limit: int, taken: _Taken) -> bytes:
    """The body, refused (413) as soon as it is over ``limit``, declared (``Content-Length``) or streamed, chunked
    or not."""
    reserved = 0
    if declared is not None:
        if not declared.isdigit():
            raise BadBodyError(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise BadBodyError(413, f"request body of {declared} bytes is over the limit of {limit} bytes")
        reserved = int(declared)
        taken.take(reserved)
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise BadBodyError(413, f"request body is over the limit of {limit} bytes")
        if size > reserved:
            taken.take(size - max(reserved, size - len(chunk)))
        parts.append(chunk)
    body = b"".join(parts)
    parts.clear()
    return body


async def _read_body_within(scope: Scope, receive: Receive, limit: int, taken: _Taken, timeout_s: float) -> bytes:
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(_header(scope, b"content-length"), _chunks(receive), limit, taken)
    except TimeoutError:
        raise BadBodyError(408, f"request body not received within {timeout_s:g} s") from None


def _bad_body(error: ValidationError) -> BadBodyError:
    """The answer to a body the wire models refused: 400 when it is not JSON or not an object (the models parse the
    bytes themselves, in one pass: no ``dict`` is built first), else 422 naming the fields."""
    errors = error.errors(include_url=False, include_context=False, include_input=False)  # listed once
    first = errors[0]
    if first["type"] == "json_invalid":
        return BadBodyError(400, f"request body is not JSON: {first['msg'].removeprefix('Invalid JSON: ')}")
    if not first["loc"] and first["type"] == "model_type":
        return BadBodyError(400, "request body must be a JSON object")
    problems = [f"{'.'.join(str(part) for part in item['loc']) or 'body'}: {item['msg']}" for item in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return BadBodyError(422, "; ".join(problems) + more)


def _candidates(args: ExtenderArgs, view: ClusterView) -> list[NodeView]:
    """The nodes to score as core views, in request order: by name from the view (``nodeCacheCapable``), or from
    the Node objects sent. A node the view does not know (not Lyra's, or not seen yet) is left out: it scores 0."""
    if args.NodeNames is not None:
        known = view.nodes  # looked up once per name: the view may change between two lookups
        return [node for node in map(known.get, args.NodeNames) if node is not None]
    if args.Nodes is not None:
        return [judged for node in args.Nodes.items if (judged := _from_request(node, view)) is not None]
    return []


def _from_request(node: Node, view: ClusterView) -> NodeView | None:
    """A node sent in full: its labels and GPUs as sent, its usage and reclaim rank from the view."""
    used = view.used_gpus.get(node.metadata.name, 0)
    judged = node_view(node, used)
    known = view.nodes.get(node.metadata.name)
    if judged is not None and known is not None and judged.state is LoanState.LOANED:
        return NodeView(
            judged.name, judged.pool, judged.state, judged.gpus, judged.free_gpus, known.reclaim_rank, judged.gpu_type
        )
    return judged


class EncodedJson(bytes):
    """An answer already encoded as JSON (the hot path's own encoding), sent as it is."""


def prioritize_answer(args: ExtenderArgs, view: ClusterView) -> EncodedJson:
    """``HostPriorityList`` in request order, relative to the lowest score among the nodes named
    (:func:`~lyra.extender.scores.relative`): kube-scheduler adds the extender's score of each host it lists and
    nothing for the others, and picks the highest total, so taking the lowest score off every node changes no
    choice, and the nodes at it (at 0 when any node named scores nothing) are left out; the answer stays small.
    Encoded here: this is the hot path, the core keeps scores within 0..10 (see
    :class:`~lyra.extender.wire.HostPriority`). With ``nodeCacheCapable`` (how Lyra configures kube-scheduler) the
    view's :class:`~lyra.extender.scores.ScoreTables` hold every node's score already; otherwise the nodes sent are
    scored here."""
    pod = view.request_for(args.Pod)
    if args.NodeNames is not None and view.scores is not None:
        return EncodedJson(view.scores.answer(pod, args.NodeNames))  # kept current per event: a lookup per name
    scores = dict(score_nodes(pod, _candidates(args, view), view.last_rank()))
    named = _named(args)
    return EncodedJson(encode(named, [scores.get(name, 0) for name in named]))  # a node not known scores 0


def _named(args: ExtenderArgs) -> list[str]:
    """The names of the nodes a request lists, in its order."""
    if args.NodeNames is not None:
        return list(args.NodeNames)
    return [node.metadata.name for node in args.Nodes.items] if args.Nodes is not None else []


def _preempt(
    args: ExtenderPreemptionArgs, view: ClusterView, *, across_namespaces: bool = False
) -> ExtenderPreemptionResult:
    """Keep the nodes where every proposed victim may be evicted for this pod: never inference pods for training,
    never base workers for flexible ones, and never a pod Lyra runs in another namespace than the preemptor's unless
    the admin allows it (``across_namespaces``): one tenant's pod must not evict another tenant's work. Which nodes
    the pod may use at all is not judged here: kube-scheduler's own plugins (node affinity, the state taints)
    already left out the nodes no eviction can open."""
    pod = view.request_for(args.Pod)
    namespace = None if across_namespaces else args.Pod.metadata.namespace
    proposals: dict[str, list[str]] = {}
    if args.NodeNameToMetaVictims is not None:
        for node, meta in args.NodeNameToMetaVictims.items():
            proposals[node] = [victim.UID for victim in meta.Pods]
    elif args.NodeNameToVictims is not None:
        for node, victims in args.NodeNameToVictims.items():
            proposals[node] = [victim.metadata.uid for victim in victims.Pods]
    meta_victims = args.NodeNameToMetaVictims or {}
    allowed: dict[str, MetaVictims] = {}
    for node, uids in proposals.items():
        if all(_may_evict(pod, view.pods.get(uid), namespace) for uid in uids):
            pdb = meta_victims[node].NumPDBViolations if node in meta_victims else 0
            allowed[node] = MetaVictims(Pods=[MetaPod(UID=uid) for uid in uids], NumPDBViolations=pdb)
    return ExtenderPreemptionResult(NodeNameToMetaVictims=allowed)


def _may_evict(pod: PodRequest, victim: PodFacts | None, namespace: str | None) -> bool:
    """``namespace``: the only namespace whose Lyra pods the preemptor may evict (``None``: any)."""
    if victim is None:
        return pod.role is PodRole.UNMANAGED  # unknown pods: only a pod Lyra does not manage may evict them
    role = victim.role
    if namespace is not None and role is not PodRole.UNMANAGED and victim.namespace != namespace:
        return False
    if role is PodRole.INFERENCE:
        return pod.role is PodRole.INFERENCE
    if role is PodRole.TRAINING_BASE:
        return pod.role in (PodRole.INFERENCE, PodRole.TRAINING_BASE)
    return True


class BodyRecorder:
    """Writes the first ``limit`` request bodies of each verb to ``directory`` as ``<verb>-<n>.json`` (the unit tests'
    fixtures were captured this way from the real kube-scheduler: ``lyra extender --capture-dir DIR``)."""

    def __init__(self, directory: Path, limit: int = 50) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.limit = limit
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, verb: str, raw: bytes) -> None:
        """Write ``raw`` when it is a JSON object and fewer than ``limit`` of ``verb`` were written (anything else
        is answered 400 and not kept). Once ``limit`` are written, nothing is parsed."""
        with self._lock:
            if self._counts.get(verb, 0) >= self.limit:
                return
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return
        if not isinstance(body, dict):
            return
        with self._lock:
            count = self._counts.get(verb, 0)
            if count >= self.limit:
                return
            self._counts[verb] = count + 1
        path = self.directory / f"{verb}-{count:03d}.json"
        path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


_ERROR_SCHEMA = {
    "type": "object",
    "properties": {"Error": {"type": "string"}},
    "required": ["Error"],
}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document with the verbs' bodies described by the wire models (the routes read raw JSON so that
    the size limit applies before parsing, so FastAPI cannot infer them)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    verbs: dict[str, tuple[type[BaseModel], str]] = {
        "prioritize": (ExtenderArgs, "HostPriorityList"),
        "preempt": (ExtenderPreemptionArgs, "ExtenderPreemptionResult"),
    }
    for model in (ExtenderArgs, ExtenderPreemptionArgs, ExtenderPreemptionResult):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    host_priority = HostPriority.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas["HostPriority"] = host_priority
    schemas["HostPriorityList"] = {"type": "array", "items": {"$ref": "#/components/schemas/HostPriority"}}
    schemas["ExtenderError"] = _ERROR_SCHEMA
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ExtenderError"}}}}
    for verb, (body, answer) in verbs.items():
        operation = document["paths"][f"/{verb}"]["post"]
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body.__name__}"}}},
        }
        operation["responses"] = {
            "200": {
                "description": "the answer kube-scheduler expects",
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{answer}"}}},
            },
            "400": {"description": "not JSON, or not a JSON object", **error},
            "408": {"description": "body not received in time", **error},
            "413": {"description": "body over the size limit", **error},
            "422": {"description": "JSON that does not match the protocol", **error},
            "503": {"description": "too many request bytes held at once", **error},
        }
    app.openapi_schema = document
    return document


def _json_bytes(body: object) -> bytes:
    """JSON as Starlette's ``JSONResponse`` encodes it."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


async def _documented_only() -> Response:
    raise AssertionError("the verbs are served by ExtenderApp before FastAPI's routing")


class ExtenderApp(FastAPI):
    """FastAPI with the verbs (``POST /prioritize``, ``POST /preempt``) served before its own layers, as bare
    ASGI apps; everything else (``/healthz``, ``/readyz``, ``/metrics``, a wrong method) goes through FastAPI."""

    #: The verbs by path; :mod:`lyra.extender.serving` answers them straight from the HTTP protocol when it can.
    verbs: dict[str, DirectVerb]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            served = self.verbs.get(scope["path"])
            if served is not None:
                await served.asgi(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(
    source: ViewSource,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_held_bytes: int = DEFAULT_MAX_HELD_MIB * MIB,
    body_timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S,
    recorder: BodyRecorder | None = None,
    preempt_across_namespaces: bool = False,
) -> ExtenderApp:
    registry = exporter_registry()
    metrics = ExtenderMetrics(registry)
    app = ExtenderApp(title="Lyra scheduler extender", version="v1", docs_url=None, redoc_url=None)
    app.state.registry = registry
    held = HeldBytes(max_held_bytes)
    app.state.held = held

    def verb(name: Verb, handler: Callable[[bytes, ClusterView], object]) -> DirectVerb:
        """The verb's answer to a whole body, served two ways: straight from the HTTP protocol when the body is
        small and whole (:mod:`lyra.extender.serving`), else as a bare ASGI app that reads the body within its
        limits. kube-scheduler calls it inside every GPU pod's scheduling cycle, and FastAPI's request, routing and
        response layers cost about as much CPU as the answer at 500 nodes."""

        counted = {outcome: metrics.requests.labels(name.value, outcome.value) for outcome in Outcome}
        timed = metrics.latency.labels(name.value)  # the children looked up once, not per request

        def finished(outcome: Outcome, started: float) -> None:
            counted[outcome].inc()
            timed.observe(time.perf_counter() - started)

        def answer(raw: bytes, started: float) -> Answer:
            try:
                if recorder is not None:
                    recorder.record(name, raw)
                answered = handler(raw, source.current())
                body = bytes(answered) if isinstance(answered, EncodedJson) else _json_bytes(answered)
                outcome, status = Outcome.OK, 200
            except ValidationError as error:
                bad = _bad_body(error)
                outcome, status, body = Outcome.BAD_REQUEST, bad.status, _json_bytes({"Error": bad.message})
            finished(outcome, started)
            return Answer(status, body)

        async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            started = time.perf_counter()
            taken = _Taken(held)
            try:
                raw = await _read_body_within(scope, receive, max_body_bytes, taken, body_timeout_s)
                answered = answer(raw, started)
            except BadBodyError as bad:
                finished(Outcome.REFUSED if bad.status == 503 else Outcome.BAD_REQUEST, started)
                # 408, 413 and 503 leave the rest of the body unread: the connection is closed
                close = bad.status in (408, 413, 503)
                answered = Answer(bad.status, _json_bytes({"Error": bad.message}), close=close)
            except ClientGoneError:
                return
            finally:
                taken.release()
            await send({"type": "http.response.start", "status": answered.status, "headers": answered.headers()})
            await send({"type": "http.response.body", "body": answered.body})

        return DirectVerb(answer=answer, asgi=endpoint, held=held, max_body_bytes=max_body_bytes)

    def do_prioritize(raw: bytes, view: ClusterView) -> object:
        args = ExtenderArgs.model_validate_json(raw)
        return prioritize_answer(args, view)

    def do_preempt(raw: bytes, view: ClusterView) -> object:
        args = ExtenderPreemptionArgs.model_validate_json(raw)
        return _preempt(args, view, across_namespaces=preempt_across_namespaces).model_dump()

    app.verbs = {
        f"/{Verb.PRIORITIZE}": verb(Verb.PRIORITIZE, do_prioritize),
        f"/{Verb.PREEMPT}": verb(Verb.PREEMPT, do_preempt),
    }
    for path in app.verbs:
        app.add_api_route(path, _documented_only, methods=["POST"])  # for the OpenAPI document; never reached

    async def healthz() -> Response:
        return Response("ok\n", media_type="text/plain")

    async def readyz() -> Response:
        if source.synced:
            return Response("ok\n", media_type="text/plain")
        return Response(NOT_SYNCED + "\n", status_code=503, media_type="text/plain")

    async def metrics_endpoint() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_api_route("/healthz", healthz, methods=["GET"])
    app.add_api_route("/readyz", readyz, methods=["GET"])
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"])
    return app
