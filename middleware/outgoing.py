"""Carry the request's trace and ids to the workers it calls: `traceparent` and trace-join headers.

    client = httpx.AsyncClient(event_hooks={"request": [inject_tracejoin_headers]})

Every request the client sends while TraceJoinMiddleware serves a request then continues that
request's trace (the worker's span is a child of the router's) and carries

- `x-request-id`: the client's label, cleaned, when it sent one;
- `x-tracejoin-internal-id`: the internal id of the request that makes the call, for the worker's
  logs to show (a worker with the middleware mints its own and is joined to the caller by the trace);
- `x-tracejoin-disagg-request-id`: the disaggregated request id, once bound; a worker whose
  middleware has a worker role (ctx, gen, prefill, decode) takes it as its own.
"""

from __future__ import annotations

import httpx

from .ids import DISAGG_REQUEST_ID_HEADER, INTERNAL_ID_HEADER, X_REQUEST_ID
from .request_state import current_request
from .tracing import W3C


def outgoing_headers() -> dict[str, str]:
    """The headers for a call made now, from the current trace context and served request."""
    headers: dict[str, str] = {}
    W3C.inject(headers)
    if "traceparent" in headers:
        headers["traceparent"] = _sampled_flag_only(headers["traceparent"])
    request = current_request()
    if request is not None:
        headers[INTERNAL_ID_HEADER] = request.internal_id
        if request.x_request_id is not None:
            headers[X_REQUEST_ID] = request.x_request_id
        if request.disagg_request_id is not None:
            headers[DISAGG_REQUEST_ID_HEADER] = request.disagg_request_id
    return headers


async def inject_tracejoin_headers(request: httpx.Request) -> None:
    """An httpx.AsyncClient request hook; it replaces any of these headers the caller set."""
    for name, value in outgoing_headers().items():
        request.headers[name] = value  # set as UTF-8: a cleaned label may be non-ASCII


def _sampled_flag_only(traceparent: str) -> str:
    """Keep only the sampled bit of the trace flags. The OpenTelemetry SDK also sets W3C Trace
    Context level 2's "random" bit (flags 03), and servers that read level 1 strictly drop such a
    traceparent and start a new trace: Dynamo 1.6.1's frontend does, which would leave a proxied
    request's reply unjoinable to Dynamo's records."""
    head, flags = traceparent.rsplit("-", 1)
    try:
        return f"{head}-{int(flags, 16) & 0x01:02x}"
    except ValueError:
        return traceparent
