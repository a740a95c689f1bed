"""The servers the middleware benchmark runs: one minimal Starlette app, bare, with
TraceJoinMiddleware (its records go to $TRACEJOIN_LOG), and with what a user would install
instead, opentelemetry-instrumentation-asgi's middleware, its spans batched to a JSON lines file at
$TRACEJOIN_LOG. Started as uvicorn factories: `uvicorn --factory bench.apps:bare` /
`bench.apps:traced` / `bench.apps:otel_asgi`."""

from __future__ import annotations

import asyncio
import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tracejoin.middleware import TraceJoinMiddleware

# A chat completion's shape, so the middleware finds a reply id in it as it would in a real one.
REPLY = (b'{"id":"chatcmpl-0b7ad1c4-3f0e-4c59-9a43-5d0f2b6f1e21","object":"chat.completion","model":"m",'
         b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}')
CHUNK = b'data: {"id":"chatcmpl-0b7ad1c4-3f0e-4c59-9a43-5d0f2b6f1e21","choices":[{"delta":{"content":"x"}}]}\n\n'
STREAM_CHUNKS = 4


async def chat(request: Request) -> Response:
    await request.body()
    return Response(REPLY, media_type="application/json")


async def stream(request: Request) -> StreamingResponse:
    await request.body()

    async def events():
        for _ in range(STREAM_CHUNKS):
            yield CHUNK
            await asyncio.sleep(0)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def bare() -> Starlette:
    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/stream", stream, methods=["POST"])])


def traced() -> Starlette:
    app = bare()
    app.add_middleware(TraceJoinMiddleware, role="agg")
    return app


def otel_asgi() -> Starlette:
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(os.environ["TRACEJOIN_LOG"])))
    app = bare()
    app.add_middleware(OpenTelemetryMiddleware, tracer_provider=provider)
    return app
