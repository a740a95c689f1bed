"""The OTLP/HTTP receiver: `POST /v1/traces` and `/v1/logs`, protobuf or JSON, plain or gzip.

Answers as the OTLP specification (its "OTLP/HTTP Response" section) says, in the request's content
type: 200 once the records are committed (with `partialSuccess` when some were rejected), 400 for
a body that is not an export request or of which the store can take nothing, 413 over the body
limit or for a body heavier than the whole intake budget (many tiny items), 415 for another
content type, 401 without the bearer token when one is set, and 503 with `Retry-After` when the
intake budget has no room for the body, the writer's queue is full, the commit takes too long or
the store fails (a retried body that did get stored is recognized by its sha256).

The body limit holds before and after decompression, and gzip is inflated as it streams in, never
past the limit: a small gzip bomb costs at most the limit in memory.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Callable

import orjson
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from ..records import Unstorable
from .http_server import bearer_matches
from .otlp import LOGS, MAX_BODY, TRACES, IntakeBudget, Receiver, Signal, TooHeavy, Undecodable, response
from .writer import Busy, Writer

ORIGIN = "otlp/http"
ACK_TIMEOUT_S = 5  # then 503: exporters give up after 10 s by default
RETRY_AFTER_S = "1"
_FORMATS = {"application/x-protobuf": "protobuf", "application/json": "json"}


class TooLarge(Exception):
    pass


def otlp_http_app(writer: Writer, *, max_body: int = MAX_BODY, token: str | None = None,
                  keep_content: bool = False, budget: IntakeBudget | None = None) -> Starlette:
    receiver = Receiver(ORIGIN, keep_content)
    budget = budget or IntakeBudget()

    async def export(request: Request, signal: Signal) -> Response:
        fmt = _FORMATS.get(request.headers.get("content-type", "").split(";")[0].strip().lower())
        if fmt is None:
            return _failure("json", 415, code_pb2.INVALID_ARGUMENT,
                            "Content-Type must be application/x-protobuf or application/json")
        if not bearer_matches(request.headers.get("authorization"), token):
            return _failure(fmt, 401, code_pb2.UNAUTHENTICATED, "a bearer token is required")
        with budget.hold() as hold:
            try:
                raw = await read_body(request, max_body, lambda size: hold.body(size, fmt))
                decoded = await run_in_threadpool(receiver.decode, signal, raw, fmt, hold)
                if decoded.records:
                    hold.committed = writer.submit(receiver.body(raw, decoded), wait=False)
                    # shield: a timeout must not cancel the writer's future; the body may still commit.
                    await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(hold.committed)), ACK_TIMEOUT_S)
            except (TooLarge, TooHeavy) as e:  # neither is retried: 413 is not among OTLP's retryable codes
                return _failure(fmt, 413, code_pb2.RESOURCE_EXHAUSTED, str(e))
            except (Undecodable, Unstorable) as e:  # Unstorable: the writer could store nothing of it
                return _failure(fmt, 400, code_pb2.INVALID_ARGUMENT, str(e))
            except Busy as e:
                return _retry_later(fmt, f"the collector is busy: {e}")
            except asyncio.TimeoutError:
                return _retry_later(fmt, f"not committed within {ACK_TIMEOUT_S} s")
            except ClientDisconnect:
                return Response(status_code=400)  # no one is left to read it
            except Exception as e:  # noqa: BLE001 - the store failed: nothing was acknowledged
                return _retry_later(fmt, f"not stored: {type(e).__name__}: {e}")
        return _answer(fmt, 200, response(signal, decoded))

    async def traces(request: Request) -> Response:
        return await export(request, TRACES)

    async def logs(request: Request) -> Response:
        return await export(request, LOGS)

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"]), Route("/v1/logs", logs, methods=["POST"])])


async def read_body(request: Request, limit: int, sized: Callable[[int], None]) -> bytes:
    """The body, inflated when gzip; TooLarge as soon as it passes `limit` either way. `sized(n)`
    is told the size before any of it is read (its Content-Length), then each time it grows past
    that (a gzip body as it inflates, a chunked one), and may refuse it by raising."""
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else 0
    if size > limit:
        raise TooLarge(f"body of {declared} bytes is over the {limit}-byte limit")
    sized(size)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise Undecodable(f"Content-Encoding {encoding!r} is not supported (gzip is)")
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS) if encoding == "gzip" else None
    received = 0
    body = bytearray()
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise TooLarge(f"body is over the {limit}-byte limit")
        if inflate is not None:
            try:
                # At most one byte past the limit comes out; the rest stays compressed, unread.
                chunk = inflate.decompress(chunk, limit + 1 - len(body))
            except zlib.error as e:
                raise Undecodable(f"not gzip: {e}") from None
        body += chunk
        if len(body) > limit:
            raise TooLarge(f"body is over the {limit}-byte limit once decompressed")
        if len(body) > size:
            size = len(body)
            sized(size)
    if inflate is not None and (not inflate.eof or inflate.unused_data):
        raise Undecodable("the gzip stream is cut short or followed by other data")
    return bytes(body)


def _answer(fmt: str, status: int, message: Message, headers: dict | None = None) -> Response:
    if fmt == "protobuf":
        return Response(message.SerializeToString(), status, headers, media_type="application/x-protobuf")
    return Response(orjson.dumps(MessageToDict(message)), status, headers, media_type="application/json")


def _failure(fmt: str, status: int, code: int, text: str, headers: dict | None = None) -> Response:
    return _answer(fmt, status, status_pb2.Status(code=code, message=text), headers)


def _retry_later(fmt: str, text: str) -> Response:
    return _failure(fmt, 503, code_pb2.UNAVAILABLE, text, {"Retry-After": RETRY_AFTER_S})
