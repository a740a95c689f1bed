"""The request being served, as the application's code sees it, and the helpers that add ids to it.

TraceJoinMiddleware puts a `ServedRequest` in a context variable for the duration of a request, so
the application can name the ids it learns (the engine's request id, the disaggregated request id)
without being handed anything: call the helpers from the request's handler or from code it calls.
Outside a request the middleware serves they do nothing.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field

import structlog
from opentelemetry.trace import Span

from .ids import ENGINE_REQUEST_ID_HEADER, clean_label
from .logs import REQUEST_IDS, RecordLog


@dataclass
class ServedRequest:
    """A request being served. The ids learnt while serving it are set through the set_* methods,
    which keep ids() current."""

    internal_id: str  # minted by the middleware, never taken from the client
    x_request_id: str | None  # the client's label, already cleaned
    trace_id: str  # the request's server span, as 32 and 16 lowercase hex
    span_id: str
    parent_span_id: str | None  # the caller's span, when a traceparent came in
    worker: str
    span: Span
    log: RecordLog  # the middleware's own records of this process
    response_started: bool = False
    reply_id: str | None = None
    disagg_request_id: str | None = None
    engine_request_id: str | None = None
    engine_worker: str | None = None
    # ids() as last made; None once an id changed. Every record reads them.
    _ids: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    def set_reply_id(self, reply_id: str) -> None:
        self.reply_id = reply_id
        self._ids = None
        self.span.set_attribute("gen_ai.response.id", reply_id)

    def set_disagg_request_id(self, disagg_request_id: str) -> None:
        self.disagg_request_id = disagg_request_id
        self._ids = None
        self.span.set_attribute("tracejoin.disagg_request_id", disagg_request_id)

    def set_engine_request_id(self, engine_request_id: str, engine_worker: str) -> None:
        self.engine_request_id, self.engine_worker = engine_request_id, engine_worker
        self._ids = None
        self.span.set_attribute("tracejoin.engine_request_id", engine_request_id)
        self.span.set_attribute("tracejoin.engine_worker", engine_worker)

    def ids(self) -> dict[str, str]:
        """The ids known so far, in the schema's order (docs/tracejoin-log-schema.md): the same dict
        until one changes, not to be modified."""
        if self._ids is None:
            self._ids = {key: value for key in REQUEST_IDS if (value := getattr(self, key)) is not None}
        return self._ids

    # The middleware's records of this request, carrying its ids; `at_ns` dates a record by when what
    # it states happened rather than by when it is written (request.end, by the request's end).
    def info(self, event: str, *, at_ns: int | None = None, **fields: object) -> None:
        self.log.write("info", event, self.ids(), fields, at_ns)

    def warning(self, event: str, **fields: object) -> None:
        self.log.write("warning", event, self.ids(), fields)

    def error(self, event: str, *, at_ns: int | None = None, **fields: object) -> None:
        self.log.write("error", event, self.ids(), fields, at_ns)


_served_request: ContextVar[ServedRequest | None] = ContextVar("tracejoin_served_request", default=None)


def current_request() -> ServedRequest | None:
    """The request TraceJoinMiddleware is serving in this context, if any."""
    return _served_request.get()


def bind_engine_request_id(engine_request_id: int | str, *, engine_worker: str | None = None) -> None:
    """Name the engine request that serves this request.

    The id goes on the request's span (`tracejoin.engine_request_id`), on `request.end` and on every
    line logged after this call (`engine_request_id`, `engine_worker`), and out to the client in the
    `x-engine-request-id` response header. The header leaves with the response start, so call this
    before the handler returns its response (for a stream: before returning the StreamingResponse,
    right after submitting the request to the engine). `engine_worker` names the process whose
    engine issued the id when that is not this one (engine ids restart at 0 in every process).
    """
    request = current_request()
    if request is None:
        return
    if request.response_started:
        # The span and the log still get the id; the header cannot follow any more.
        request.warning("request.engine_request_id_after_response_start", header=ENGINE_REQUEST_ID_HEADER)
    request.set_engine_request_id(clean_label(str(engine_request_id)), engine_worker or request.worker)
    structlog.contextvars.bind_contextvars(
        engine_request_id=request.engine_request_id, engine_worker=request.engine_worker
    )


def bind_disagg_request_id(disagg_request_id: int | str) -> None:
    """Name the disaggregated request this request is (router) or belongs to (worker).

    Call again when a retried context request gets a new one: the last value is the one on the span
    and on `request.end`; lines logged in between keep the value they were logged with.
    """
    request = current_request()
    if request is None:
        return
    request.set_disagg_request_id(clean_label(str(disagg_request_id)))
    structlog.contextvars.bind_contextvars(disagg_request_id=request.disagg_request_id)


def start_serving(request: ServedRequest) -> Token[ServedRequest | None]:
    """Make `request` the current request for the code the middleware runs next, until stop_serving."""
    return _served_request.set(request)


def stop_serving(token: Token[ServedRequest | None]) -> None:
    _served_request.reset(token)
