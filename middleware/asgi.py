"""TraceJoinMiddleware: names every request a server takes and ties its reply to it.

A pure ASGI middleware (it wraps `receive` and `send`, as Starlette's CORS and GZip middlewares do),
so it works under Starlette, FastAPI and any ASGI app, and never holds a streamed reply back.
For each HTTP request it

1. mints an internal id (a UUID; never taken from the client) and keeps the client's `x-request-id`
   as a label: cleaned (clean_label), echoed on the response, never used as an id;
2. warns once per deprecated id header (`x-dynamo-request-id`, `request-id`) it ignores;
3. continues the caller's W3C trace and opens one SERVER span, current while the app runs;
4. puts the ids on the app's structlog lines and writes `request.start`;
5. on `POST …/responses`, refuses with 409 a body `request_id` that another request in flight
   holds (the app keys its state on it), and frees it when that request ends or its client leaves;
6. watches the reply go by: status, the reply id (JSON body `id`, or the first stream event that
   has one), bytes, time to first byte, and the client leaving early;
7. ends the span and writes `request.end`, also when the client left mid-stream.

Records: docs/tracejoin-log-schema.md. Headers and setup: docs/middleware.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import Status, StatusCode

from .ids import (
    DEPRECATED_ID_HEADERS, DISAGG_REQUEST_ID_HEADER, ENGINE_REQUEST_ID_HEADER, X_REQUEST_ID, ReplyIdScanner,
    clean_label, new_internal_id, parse_json,
)
from .logs import LineWriter, RecordLog, configure_structlog, destination, request_ids
from .request_state import ServedRequest, start_serving, stop_serving
from .settings import WORKER_ROLES, Settings, worker_identity
from .tracing import TRACE_CONTEXT_HEADERS, ServerSpans, incoming_trace_context

Message = dict[str, Any]

# Probes and metric scrapes are not requests of the fleet's users: recording them would make every
# health check a reply that reaches no worker.
UNRECORDED_PATHS = frozenset({"/health", "/healthz", "/ready", "/readyz", "/livez", "/metrics"})

# What request.end says when the client left before any response was sent (nginx's convention).
CLIENT_CLOSED_REQUEST = 499

# Header names as ASGI carries them: lower-case bytes.
X_REQUEST_ID_NAME = X_REQUEST_ID.encode()
ENGINE_REQUEST_ID_NAME = ENGINE_REQUEST_ID_HEADER.encode()
DISAGG_REQUEST_ID_NAME = DISAGG_REQUEST_ID_HEADER.encode()
DEPRECATED_ID_NAMES = {header.encode(): header for header in DEPRECATED_ID_HEADERS}
# The request headers the middleware reads, each for its first value.
READ_HEADERS = frozenset({X_REQUEST_ID_NAME, DISAGG_REQUEST_ID_NAME, *TRACE_CONTEXT_HEADERS, *DEPRECATED_ID_NAMES})


class TraceJoinMiddleware:
    """Add to an ASGI app: `app.add_middleware(TraceJoinMiddleware, role="agg")`.

    Every keyword falls back to its `TRACEJOIN_*` variable (settings.py). `span_processors` are added
    to the middleware's tracer provider, next to the OTLP exporters the settings ask for.
    """

    def __init__(
        self,
        app: Any,
        *,
        service: str | None = None,
        role: str | None = None,
        worker: str | None = None,
        log: str | None = None,
        otlp_endpoint: str | None = None,
        otlp_file: str | None = None,
        span_processors: Iterable[SpanProcessor] = (),
    ) -> None:
        self.app = app
        self.settings = Settings.resolve(
            service=service, role=role, worker=worker, log=log, otlp_endpoint=otlp_endpoint, otlp_file=otlp_file
        )
        self.span_processors = tuple(span_processors)
        # Opened now, so that a log file that cannot be opened stops the server at startup.
        self.log_writer = destination(self.settings.log)
        # Built on the first request: a worker is named after the port it serves on, and only a
        # request's scope tells the port.
        self.outputs: Outputs | None = None
        # Responses `request_id`s held by requests in flight (step 5).
        self.responses_ids_in_flight: set[str] = set()

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in UNRECORDED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.outputs is None:
            self.outputs = Outputs.build(self.settings, scope, self.span_processors, self.log_writer)
        await Exchange(self, scope, receive, send).run()


@dataclass(frozen=True)
class Outputs:
    """Where one serving process's requests are recorded: its name, its spans, its log."""

    worker: str
    spans: ServerSpans
    log: RecordLog
    # The processors the middleware configured structlog with; None when the app configured it.
    structlog_chain: list | None

    def structlog_adds_request_ids(self) -> bool:
        """Whether structlog runs the middleware's chain, which adds the ids to the app's lines
        itself (logs.add_request_ids): not if the app configured structlog, even after us."""
        return structlog.get_config()["processors"] is self.structlog_chain

    @classmethod
    def build(
        cls,
        settings: Settings,
        scope: Message,
        span_processors: Iterable[SpanProcessor],
        log_writer: LineWriter,
    ) -> Outputs:
        worker = settings.worker or worker_identity(scope.get("server"))
        structlog_chain = None
        if not structlog.is_configured():
            # So the application's own structlog lines land in the same file, carrying the ids.
            structlog_chain = configure_structlog(settings.service, settings.role, worker, log_writer)
        return cls(
            worker=worker,
            spans=ServerSpans(settings, worker, span_processors),
            log=RecordLog(settings.service, settings.role, worker, log_writer),
            structlog_chain=structlog_chain,
        )


class Exchange:
    """One request and its response, as they pass through the middleware."""

    __slots__ = (
        "middleware", "outputs", "scope", "receive", "send", "headers", "started_at", "started_ns", "first_byte_at",
        "status", "bytes_sent", "reply", "response_complete", "disconnected", "held_responses_id", "span", "request",
    )

    def __init__(self, middleware: TraceJoinMiddleware, scope: Message, receive: Any, send: Any) -> None:
        self.middleware = middleware
        self.outputs: Outputs = middleware.outputs
        self.scope, self.receive, self.send = scope, receive, send
        self.headers = _read_headers(scope.get("headers", ()))

        # The request's one start: its span and its request.end line state the same interval.
        self.started_at, self.started_ns = time.perf_counter(), time.time_ns()
        self.first_byte_at: float | None = None
        self.status: int | None = None
        self.bytes_sent = 0
        self.reply: ReplyIdScanner | None = None  # made at the response start, when the content type is known
        self.response_complete = False
        self.disconnected = False
        self.held_responses_id: str | None = None

        method, path = scope["method"], scope["path"]
        internal_id = new_internal_id()
        raw_x_request_id = self.headers.get(X_REQUEST_ID_NAME)
        # a header that cleans to nothing is no label
        x_request_id = (clean_label(raw_x_request_id) if raw_x_request_id is not None else "") or None
        attributes = {"http.request.method": method, "url.path": path, "tracejoin.internal_id": internal_id}
        if x_request_id is not None:
            attributes["http.request.header.x-request-id"] = [x_request_id]  # semconv: a string array
        parent, caller_span = incoming_trace_context(self.headers)
        self.span = self.outputs.spans.start(f"{method} {path}", parent, caller_span, attributes, self.started_ns)
        span_context = self.span.get_span_context()
        self.request = ServedRequest(
            internal_id=internal_id,
            x_request_id=x_request_id,
            trace_id=trace.format_trace_id(span_context.trace_id),
            span_id=trace.format_span_id(span_context.span_id),
            parent_span_id=trace.format_span_id(caller_span.span_id) if caller_span.is_valid else None,
            worker=self.outputs.worker,
            span=self.span,
            log=self.outputs.log,
        )
        forwarded_disagg_id = self.headers.get(DISAGG_REQUEST_ID_NAME)
        if self.middleware.settings.role in WORKER_ROLES and forwarded_disagg_id:
            # A worker believes the disagg id its router forwards; an entry server takes no key
            # from a client.
            self.request.set_disagg_request_id(clean_label(forwarded_disagg_id))

    # -- the request's life ------------------------------------------------------------------------

    async def run(self) -> None:
        request = self.request
        attached = otel_context.attach(trace.set_span_in_context(self.span))
        # What every line the app logs while serving the request carries, set and reset.
        if self.outputs.structlog_adds_request_ids():
            # The middleware's chain adds the process identity and these: one context variable
            # rather than one per key (the chain's line is the same).
            bound = [request_ids.set(request.ids())]
        else:
            # For the app's chain, which merges structlog's contextvars. Bound and reset rather
            # than bound_contextvars(), which reads the whole context to restore it.
            settings = self.middleware.settings
            bound = structlog.contextvars.bind_contextvars(
                service=settings.service, role=settings.role, worker=request.worker, **request.ids()
            ).values()
        serving = start_serving(request)
        try:
            request.info("request.start", method=self.scope["method"], route=self.scope["path"])
            for name, header in DEPRECATED_ID_NAMES.items():
                if name in self.headers:
                    request.warning("request.header_ignored", header=header)
            try:
                await self._serve()
            except Exception as error:
                self.span.record_exception(error)
                if self.status is None:
                    await self._send_server_error()
                raise  # for the server to log; it sends nothing more once a response has started
            finally:
                self._release_responses_id()
                self._end()
        finally:
            stop_serving(serving)
            for token in bound:
                token.var.reset(token)
            otel_context.detach(attached)

    async def _serve(self) -> None:
        receive = self._receive_observed
        if self.scope["method"] == "POST" and self.scope["path"].rstrip("/").endswith("/responses"):
            body_messages = await self._read_request_body()
            receive = _replay(body_messages, receive)
            responses_id = _responses_request_id(body_messages)
            if responses_id in self.middleware.responses_ids_in_flight:
                await self._refuse_duplicate(responses_id)
                return
            if responses_id is not None:
                self.middleware.responses_ids_in_flight.add(responses_id)
                self.held_responses_id = responses_id
        await self.middleware.app(self.scope, receive, self._send_observed)

    async def _read_request_body(self) -> list[Message]:
        messages = []
        while True:
            message = await self._receive_observed()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                return messages

    async def _refuse_duplicate(self, responses_id: str) -> None:
        shown = clean_label(responses_id)
        self.request.warning("request.request_id_in_use", client_request_id=shown)
        body = json.dumps(
            {
                "error": {
                    "message": f'request_id "{shown}" is in use by another request in flight; '
                    "send a different request_id, or retry once that request has finished",
                    "type": "invalid_request_error",
                    "param": "request_id",
                    "code": "request_id_in_use",
                }
            }
        ).encode()
        await self._send_observed(
            {
                "type": "http.response.start",
                "status": 409,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await self._send_observed({"type": "http.response.body", "body": body, "more_body": False})

    async def _send_server_error(self) -> None:
        """The 500 the server would send for an app that raised, sent here so that it carries the
        headers every response does (the x-request-id echo)."""
        body = b"Internal Server Error"
        try:
            await self._send_observed(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())],
                }
            )
            await self._send_observed({"type": "http.response.body", "body": body, "more_body": False})
        except OSError:  # the client has gone
            pass

    def _release_responses_id(self) -> None:
        if self.held_responses_id is not None:
            self.middleware.responses_ids_in_flight.discard(self.held_responses_id)
            self.held_responses_id = None

    def _client_left(self) -> None:
        self.disconnected = True
        # The app may take a while to notice; the id is free for a new request already.
        self._release_responses_id()

    def _end(self) -> None:
        now = time.perf_counter()
        ended_ns = self.started_ns + round((now - self.started_at) * 1e9)
        status = self.status or (CLIENT_CLOSED_REQUEST if self.disconnected else 500)
        streaming = self.reply is not None and self.reply.streaming
        span = self.span
        if span.is_recording():  # what only a recorded span keeps
            span.set_attribute("http.response.status_code", status)
            span.set_attribute("tracejoin.streaming", streaming)
            span.set_attribute("tracejoin.disconnected", self.disconnected)
            route = getattr(self.scope.get("route"), "path", None)  # the route template, when routed
            if route:
                span.set_attribute("http.route", route)
                span.update_name(f"{self.scope['method']} {route}")
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        log_method = self.request.error if status >= 500 else self.request.info
        log_method(
            "request.end",
            at_ns=ended_ns,
            status=status,
            duration_ms=_ms(now - self.started_at),
            ttfb_ms=_ms(self.first_byte_at - self.started_at) if self.first_byte_at is not None else None,
            bytes=self.bytes_sent,
            streaming=streaming,
            disconnected=self.disconnected,
        )
        span.end(end_time=ended_ns)

    # -- the wire ----------------------------------------------------------------------------------

    async def _receive_observed(self) -> Message:
        message = await self.receive()
        if message["type"] == "http.disconnect" and not self.response_complete:
            self._client_left()
        return message

    async def _send_observed(self, message: Message) -> None:
        kind = message["type"]
        last_body = kind == "http.response.body" and not message.get("more_body", False)
        if kind == "http.response.start":
            message = self._on_response_start(message)
        elif kind == "http.response.body":
            self._on_body(message.get("body", b""), last=last_body)
        try:
            await self.send(message)
        except OSError:  # ASGI 2.4 servers raise it when the client has gone
            self._client_left()
            raise
        if last_body:
            self.response_complete = True

    def _on_response_start(self, message: Message) -> Message:
        request = self.request
        request.response_started = True
        self.status = message["status"]
        # One pass over the app's headers: find the content type, drop any x-request-id to be echoed.
        echo_x_request_id = request.x_request_id is not None
        content_type = None
        headers = []
        for header in message.get("headers", ()):
            name = header[0].lower()
            if name == b"content-type" and content_type is None:
                content_type = header[1]
            if not (echo_x_request_id and name == X_REQUEST_ID_NAME):
                headers.append(header)
        self.reply = ReplyIdScanner(content_type.decode("latin-1") if content_type is not None else "")
        if echo_x_request_id:
            # The echo is the cleaned label, whatever the app put there.
            headers.append((X_REQUEST_ID_NAME, request.x_request_id.encode()))
        if request.engine_request_id is not None:
            headers.append((ENGINE_REQUEST_ID_NAME, request.engine_request_id.encode()))
        return {**message, "headers": headers}

    def _on_body(self, body: bytes, *, last: bool) -> None:
        if body and not self.disconnected:
            if self.first_byte_at is None:
                self.first_byte_at = time.perf_counter()
            self.bytes_sent += len(body)
        if self.request.reply_id is None and self.reply is not None:
            self.reply.feed(body, last=last)
            if self.reply.reply_id:
                self.request.set_reply_id(self.reply.reply_id)


def _read_headers(raw_headers: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """The first value of each request header the middleware reads, by its lower-case name."""
    read: dict[bytes, bytes] = {}
    for name, value in raw_headers:
        name = name.lower()  # noqa: PLW2901
        if name in READ_HEADERS and name not in read:
            read[name] = value
    return read


def _replay(messages: list[Message], receive: Any) -> Any:
    """A receive() that hands out `messages` first, then what the server sends."""
    pending = list(messages)

    async def replaying_receive() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replaying_receive


def _responses_request_id(body_messages: list[Message]) -> str | None:
    body = b"".join(message.get("body", b"") for message in body_messages if message["type"] == "http.request")
    parsed = parse_json(body)  # a body that is not JSON is the app's to answer
    request_id = parsed.get("request_id") if isinstance(parsed, dict) else None
    return request_id if isinstance(request_id, str) and request_id else None


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
