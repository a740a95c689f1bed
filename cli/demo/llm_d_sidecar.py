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

In llm-d, the gateway asks its endpoint picker (EPP) which decode pod serves a request, then sends it
to that pod's sidecar, in one trace. The sidecar process here also plays both: the picker's spans
(`run_scheduler_profile` with `filter_endpoints`, `scoring` and `pick_endpoints`, and their
`llm_d.epp.*` attributes) go to `otlp/llm-d-epp-<pid>.jsonl` under a service of their own. Like the
real picker's, they carry no id of the request, only the gateway's trace, which the sidecar's spans
share; the gateway exports no span of its own.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from opentelemetry import trace
from opentelemetry.context import Context
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
PICKER = "llm-d-epp"
_P = "llm_d.pd_proxy."
_E = "llm_d.epp."


def _exported_to(out: Path, service: str, resource: dict) -> TracerProvider:
    path = out / "otlp" / f"{service}-{os.getpid()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    provider = TracerProvider(resource=Resource({"service.name": service, **resource}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    return provider


class EndpointPicker:
    """llm-d's endpoint picker choosing a decode server, as its scheduling spans record it."""

    def __init__(self, provider: TracerProvider, decode: list[str]):
        self._tracer = provider.get_tracer("llm-d-inference-scheduler")
        self._decode = itertools.cycle(decode)
        self._count = len(decode)

    def pick(self, gateway: Context) -> str:
        with self._tracer.start_as_current_span("run_scheduler_profile", context=gateway) as profile:
            profile.set_attribute(_E + "scheduling.profile.name", "decode")
            with self._tracer.start_as_current_span("filter_endpoints") as step:
                step.set_attributes({_E + "filter.candidate_endpoints": self._count,
                                     _E + "filter.filtered_endpoints": self._count})
            with self._tracer.start_as_current_span("scoring") as step:
                step.set_attributes({_E + "scorer.count": 2, _E + "scoring.candidate_endpoints": self._count})
            target = next(self._decode)
            with self._tracer.start_as_current_span("pick_endpoints") as step:
                step.set_attributes({_E + "picker.candidate_endpoints": self._count, _E + "picker.top_endpoints": target,
                                     _E + "picker.top_scores": "1.0"})
        return target


def _gateway() -> Context:
    """The context of a gateway's span for one request: a trace the picker and the sidecar share."""
    span = trace.NonRecordingSpan(trace.SpanContext(random.getrandbits(128), random.getrandbits(64), is_remote=True,
                                                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)))
    return trace.set_span_in_context(span)


class Sidecar:
    def __init__(self, out: Path, prefill: list[str], decode: list[str]):
        self._prefill = itertools.cycle(prefill)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))
        self._providers = [_exported_to(out, SERVICE, {"host.name": socket.gethostname(), "process.pid": os.getpid()}),
                           _exported_to(out, PICKER, {})]
        self._tracer = self._providers[0].get_tracer("llm-d-routing-sidecar")
        self._picker = EndpointPicker(self._providers[1], decode)

    def app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            yield
            await self.client.aclose()
            for provider in self._providers:
                provider.shutdown()

        routes = [Route(path, self._serve, methods=["POST"]) for path in APIS] + [Route("/health", health)]
        return Starlette(routes=routes, lifespan=lifespan)

    async def _serve(self, http: Request) -> Response:
        gateway = _gateway()  # the gateway had the picker choose the decode server before it called the sidecar
        decode_target = self._picker.pick(gateway)
        arrival = time.time_ns()
        body = await http.json()
        request_id = str(uuid.uuid1())
        client_ids = [("x-request-id", value) for value in http.headers.getlist("x-request-id")]
        prefill_target = next(self._prefill)
        span = self._tracer.start_span(_P[:-1] + ".request", kind=SpanKind.SERVER, start_time=arrival, context=gateway)
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
