"""One process of the demo's llm-d deployment (llm_d_demo.py starts five):

    python -m tracejoin.cli.demo.llm_d_sidecar prefill|decode|sidecar --fd N --out DIR --name NAME
        [--prefill H:P]... [--decode H:P]...

`prefill` and `decode` are the vLLM demo's simulated servers (vllm_server.py). `sidecar` stands in
for llm-d's P/D routing sidecar (llm-d/llm-d-router, `pkg/sidecar/proxy`, Go): each request goes to
a prefill server with `max_tokens` 1 and `kv_transfer_params` asking for a remote decode, then to a
decode server with the parameters the prefill answered. Both legs carry an `x-request-id` the
sidecar adds, a version-1 UUID (`uuid.NewUUID()`), after the client's own when it sent one (vLLM
reads the first), and the trace (`traceparent`, as llm-d-router#1667 injects it). The sidecar's
spans are llm-d's: `llm_d.pd_proxy.request` with a `prefill` and a `decode` child and the
`llm_d.pd_proxy.*` attributes, written as OTLP JSON lines to `otlp/llm-d-sidecar-<pid>.jsonl`.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.propagate import inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .serving import health, run_engine_process
from .vllm_server import APIS, VllmServer, service_log

SERVICE = "llm-d-routing-sidecar"
_P = "llm_d.pd_proxy."


class Sidecar:
    def __init__(self, out: Path, prefill: list[str], decode: list[str]):
        self._prefill, self._decode = itertools.cycle(prefill), itertools.cycle(decode)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))
        path = out / "otlp" / f"{SERVICE}-{os.getpid()}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._provider = TracerProvider(resource=Resource({"service.name": SERVICE, "host.name": socket.gethostname(),
                                                           "process.pid": os.getpid()}))
        self._provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
        self._tracer = self._provider.get_tracer("llm-d-routing-sidecar")

    def app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            yield
            await self.client.aclose()
            self._provider.shutdown()

        routes = [Route(path, self._serve, methods=["POST"]) for path in APIS] + [Route("/health", health)]
        return Starlette(routes=routes, lifespan=lifespan)

    async def _serve(self, http: Request) -> Response:
        arrival = time.time_ns()
        body = await http.json()
        request_id = str(uuid.uuid1())
        client_ids = [("x-request-id", value) for value in http.headers.getlist("x-request-id")]
        prefill_target, decode_target = next(self._prefill), next(self._decode)
        span = self._tracer.start_span(_P[:-1] + ".request", kind=SpanKind.SERVER, start_time=arrival,
                                       context=trace.set_span_in_context(trace.INVALID_SPAN))
        span.set_attributes({_P + "request_id": request_id, _P + "prefill_target": prefill_target,
                             _P + "connector": "nixlv2"})
        within = trace.set_span_in_context(span)

        def headers(leg) -> list[tuple[str, str]]:
            carrier: dict[str, str] = {}
            inject(carrier, context=trace.set_span_in_context(leg))
            return [*client_ids, ("x-request-id", request_id), *carrier.items()]

        leg = self._tracer.start_span("prefill", context=within)
        prefill = {**body, "max_tokens": 1, "stream": False, "kv_transfer_params": {
            "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None}}
        prefilled = await self.client.post(f"http://{prefill_target}{http.url.path}", json=prefill, headers=headers(leg))
        prefill_ms = (time.time_ns() - arrival) / 1e6
        leg.set_attributes({_P + "prefill.status_code": prefilled.status_code, _P + "prefill.duration_ms": prefill_ms})
        leg.end()
        if prefilled.is_error:
            span.set_status(Status(StatusCode.ERROR, f"prefill request failed: {prefilled.status_code}"))
            span.end()
            return Response(prefilled.content, status_code=prefilled.status_code, media_type="application/json")

        leg = self._tracer.start_span("decode", context=within)
        decode_start = time.time_ns()
        decode = {**body, "kv_transfer_params": prefilled.json()["kv_transfer_params"]}
        upstream = await self.client.send(self.client.build_request(
            "POST", f"http://{decode_target}{http.url.path}", json=decode, headers=headers(leg)), stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            first = None
            try:
                async for chunk in upstream.aiter_bytes():
                    first = first or time.time_ns()
                    yield chunk
            finally:  # the reply ended, or the client left
                await upstream.aclose()
                end = time.time_ns()
                decode_ms = (end - decode_start) / 1e6
                leg.set_attributes({_P + "decode.streaming": bool(body.get("stream")),
                                    _P + "decode.target": decode_target, _P + "decode.duration_ms": decode_ms})
                leg.end(end_time=end)
                total_ms = (end - arrival) / 1e6
                span.set_attributes({_P + "total_duration_ms": total_ms, _P + "prefill_duration_ms": prefill_ms,
                                     _P + "decode_duration_ms": decode_ms,
                                     _P + "coordinator_overhead_ms": max(total_ms - prefill_ms - decode_ms, 0.0),
                                     **({_P + "true_ttft_ms": (first - arrival) / 1e6} if first else {})})
                if upstream.is_error:
                    span.set_status(Status(StatusCode.ERROR, f"decode request failed: {upstream.status_code}"))
                span.end(end_time=end)

        return StreamingResponse(chunks(), status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type"))


def main(argv: list[str] | None = None) -> None:
    run_engine_process("tracejoin.cli.demo.llm_d_sidecar", "sidecar",
                       lambda out, prefill, decode: Sidecar(out, prefill, decode).app(),
                       lambda role, out, name, port: VllmServer(role, out, name).app(), service_log, argv)


if __name__ == "__main__":
    main()
