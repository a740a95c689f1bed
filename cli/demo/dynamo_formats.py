"""Writes what a disaggregated Dynamo deployment records for a set of requests: the frontend's,
the prefill worker's and the decode worker's JSONL stderr, OTLP/JSON spans, and request-trace
rows, field for field as a real Dynamo 1.6.1 frontend with mocker workers writes them (Dynamo's
`lib/runtime/src/logging.rs` and `lib/llm/src/http/service/metrics.rs`; docs/integrations/dynamo.md).
Beside trtllm_formats.py, the writers of the formats the simulated TensorRT-LLM deployment writes:
the tests and the benchmarks build their Dynamo data with it.

A request can be given a client-chosen internal id (the pre-fix collision), a shared
x-request-id, or a client traceparent, so every case of the id model can be built.
"""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from tracejoin.collector.times import ns_to_iso

MODEL = "qwen/qwen3-0.6b"
EXPORT_BATCH = 512  # spans per OTLP export, the batch span processor's default
METRICS = "dynamo_llm::http::service::metrics"
SERVICE_V2 = "dynamo_llm::http::service::service_v2"
PUSH_ROUTER = "dynamo_runtime::pipeline::network::egress::push_router"
PUSH_HANDLER = "dynamo_runtime::pipeline::network::ingress::push_handler"


def _hex(rng: random.Random, nbytes: int) -> str:
    return "%0*x" % (nbytes * 2, rng.getrandbits(nbytes * 8))


@dataclass
class SampleRequest:
    request_id: str
    trace_id: str
    start_ns: int
    endpoint: str = "chat_completions"
    stream: bool = True
    x_request_id: str | None = None
    client_parent_span: str | None = None
    status: str = "success"
    spans: dict[str, str] = field(default_factory=dict)

    @property
    def reply_id(self) -> str:
        prefix = "chatcmpl-" if self.endpoint == "chat_completions" else "cmpl-"
        return prefix + self.request_id


class DynamoSample:
    def __init__(self, seed: int = 7, start_ns: int = 1_787_307_302_000_000_000):
        self.rng = random.Random(seed)
        self.start_ns = start_ns
        self.prefill_instance = str(7587888880384150229)
        self.decode_instance = str(7587888880384150231)
        self.requests: list[SampleRequest] = []
        self.frontend: list[bytes] = []
        self.prefill: list[bytes] = []
        self.decode: list[bytes] = []
        self.trace_rows: list[bytes] = []
        self.spans: list[dict] = []

    def add(self, *, offset_ms: float = 0.0, request_id: str | None = None, trace_id: str | None = None,
            **kw) -> SampleRequest:
        req = SampleRequest(
            request_id=request_id or str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            trace_id=trace_id or _hex(self.rng, 16),
            start_ns=self.start_ns + int(offset_ms * 1e6),
            **kw,
        )
        for name in ("http", "to_prefill", "to_decode", "prefill", "decode"):
            req.spans[name] = _hex(self.rng, 8)
        self.requests.append(req)
        self._write(req)
        return req

    # -- one request --------------------------------------------------------------------------

    def _write(self, req: SampleRequest) -> None:
        t = req.start_ns
        ms = 1_000_000
        ctx = {"trace_id": req.trace_id, "request_id": req.request_id}
        if req.x_request_id is not None:
            ctx["x_request_id"] = req.x_request_id
        uri = "/v1/chat/completions" if req.endpoint == "chat_completions" else "/v1/completions"
        request_type = "stream" if req.stream else "unary"
        http = {**ctx, "span_id": req.spans["http"], "span_name": "http-request", "method": "POST",
                "uri": uri, "version": "HTTP/1.1"}
        if req.client_parent_span:
            http.update(parent_id=req.client_parent_span, trace_flags="01")
        end = t + 180 * ms
        ok = req.status == "success"

        fe = self.frontend.append
        fe(_line(t, "INFO", METRICS, "request received", endpoint=req.endpoint, model=MODEL,
                 request_type=request_type, **http))
        hops = (("prefill", self.prefill_instance, t + 1 * ms, t + 40 * ms, self.prefill),
                ("decode", self.decode_instance, t + 41 * ms, end - 2 * ms, self.decode))
        for hop, instance, start, stop, worker_lines in hops:
            route = {**ctx, "span_id": req.spans[f"to_{hop}"], "parent_id": req.spans["http"],
                     "span_name": "router.route_request", "otel.kind": "client", "router_mode": "RoundRobin",
                     "request.attempt": "0", "migration.is_retry": "false", "worker_id": instance}
            fe(_line(start, "INFO", PUSH_ROUTER, "Selected worker", **{**http, "router_mode": "round-robin",
                                                                        "worker_id": int(instance)}))
            handle = {**ctx, "span_id": req.spans[hop], "parent_id": req.spans[f"to_{hop}"],
                      "span_name": "handle_payload", "otel.kind": "server", "trace_flags": "01",
                      "component": "prefill" if hop == "prefill" else "backend", "endpoint": "generate",
                      "namespace": "dynamo", "instance_id": instance}
            worker_lines.append(_line(start + ms // 2, "INFO", PUSH_HANDLER, "request received", **handle))
            worker_lines.append(_line(stop, "INFO", PUSH_HANDLER, "request completed", **handle))
            fe(_line(stop + ms // 2, "INFO", "request_span", "route request completed",
                     **{**route, "request.outcome": "success"}))
            self._span("dynamo-frontend", "router.route_request", req, f"to_{hop}", req.spans["http"],
                       start, stop + ms // 2, 3, {"request_id": req.request_id, "worker_id": instance})
            self._span(f"dynamo-worker-{hop}", "handle_payload", req, hop, req.spans[f"to_{hop}"],
                       start + ms // 2, stop, 2,
                       {k: handle[k] for k in ("request_id", "x_request_id", "component", "endpoint", "namespace",
                                               "instance_id") if k in handle})
        done = {"elapsed_ms": "180", "endpoint": req.endpoint, "model": MODEL, "request_type": request_type,
                "status": req.status, "request.outcome": req.status, **http}
        if ok:
            done.update(avg_itl_ms="11.84", decode_worker_id=self.decode_instance, input_tokens="128",
                        output_tokens="150", prefill_worker_id=self.prefill_instance, ttft_ms="58.21")
        else:
            done.update(error_type="internal", error_detail="Failed to generate completions")
        fe(_line(end, "INFO" if ok else "ERROR", METRICS, "request completed", **done))
        fe(_line(end + ms // 10, "INFO" if ok else "ERROR", SERVICE_V2, "http response sent",
                 status="200" if ok else "500", latency_ms="180", **http))
        self._span("dynamo-frontend", "http-request", req, "http", req.client_parent_span, t, end + ms // 10, 1,
                   {"request_id": req.request_id, "x_request_id": req.x_request_id, "method": "POST",
                    "uri": uri, "model": MODEL, **({"prefill_worker_id": self.prefill_instance,
                                                     "decode_worker_id": self.decode_instance} if ok else {})})
        if ok:  # failed requests get no request-trace rows
            self.trace_rows.append(orjson.dumps({"timestamp": 1000, "event": {
                "schema": "dynamo.request.trace.v1", "event_type": "request_end",
                "event_time_unix_ms": end // ms,
                "request": {"request_id": req.request_id, "input_tokens": 128, "output_tokens": 150,
                            "request_received_ms": t // ms, "ttft_ms": 58.2, "total_time_ms": 180.0,
                            "worker": {"prefill_worker_id": int(self.prefill_instance),
                                       "decode_worker_id": int(self.decode_instance)},
                            "replay": {"trace_block_size": 64, "input_length": 128,
                                       "input_sequence_hashes": [14879255164371896291, 274632075616497421]}},
            }}))

    def _span(self, service, name, req, span, parent, start, end, kind, attrs) -> None:
        self.spans.append({
            "service": service,
            "span": {
                "traceId": req.trace_id, "spanId": req.spans[span], **({"parentSpanId": parent} if parent else {}),
                "name": name, "kind": kind, "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
                "attributes": [{"key": k, "value": {"stringValue": str(v)}} for k, v in attrs.items() if v is not None],
                "status": {}, "flags": 257,
            },
        })

    # -- files --------------------------------------------------------------------------------

    def write(self, folder: str | os.PathLike) -> dict[str, Path]:
        """Write every file into folder; returns their paths by name."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        files = {
            "frontend": folder / "frontend.stderr.jsonl",
            "prefill": folder / "prefill.stderr.jsonl",
            "decode": folder / "decode.stderr.jsonl",
            "request_trace": folder / "dynamo-request-trace.000001.jsonl",
            "otlp": folder / "traces.otlp.jsonl",
        }
        before = self.start_ns - 5_000_000_000
        otel_line = lambda service: _line(before, "INFO", "dynamo_runtime::logging",  # noqa: E731
                                          "OpenTelemetry OTLP export enabled (traces and logs)", service=service)
        frontend = [otel_line("dynamo-frontend"),
                    _line(before + 1000, "INFO", SERVICE_V2, "Starting HTTP(S) service", address="127.0.0.1:8000",
                          protocol="HTTP")]
        prefill, decode = ([otel_line(f"dynamo-worker-{role}"),
                            _python_line(before + 500, "Using local model path: /models/qwen3"),
                            _line(before + 1000, "INFO", "dynamo_runtime::pipeline::network::ingress::shared_tcp_endpoint",
                                  f"Registered endpoint 'dynamo.{component}.generate' with shared TCP server on 127.0.0.1:4335{i}"),
                            _line(before + 2000, "INFO", "dynamo_llm::fpm_publisher", "FPM direct publisher started",
                                  worker_id=instance)]
                           for i, (role, component, instance) in enumerate(
                               (("prefill", "prefill", self.prefill_instance), ("decode", "backend", self.decode_instance))))
        files["frontend"].write_bytes(b"\n".join(frontend + self._sorted(self.frontend)) + b"\n")
        files["prefill"].write_bytes(b"\n".join(prefill + self._sorted(self.prefill)) + b"\n")
        files["decode"].write_bytes(b"\n".join(decode + self._sorted(self.decode)) + b"\n")
        files["request_trace"].write_bytes(b"\n".join(self.trace_rows) + b"\n")
        with open(files["otlp"], "wb") as f:
            for service in sorted({s["service"] for s in self.spans}):
                spans = [s["span"] for s in self.spans if s["service"] == service]
                for i in range(0, len(spans), EXPORT_BATCH):  # one line per export batch
                    f.write(orjson.dumps({"resourceSpans": [{
                        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                        "scopeSpans": [{"scope": {"name": service}, "spans": spans[i:i + EXPORT_BATCH]}],
                    }]}) + b"\n")
        return files

    @staticmethod
    def _sorted(lines: list[bytes]) -> list[bytes]:
        return sorted(lines, key=lambda line: orjson.loads(line)["time"])


def _line(time_ns: int, level: str, target: str, message: str, **fields) -> bytes:
    """A Dynamo JSONL line: fixed keys first, then the fields sorted, as logging.rs writes them."""
    head = {"time": ns_to_iso(time_ns), "level": level, "file": f"/opt/dynamo/lib/{target.split('::')[0]}.rs",
            "line": 1, "target": target, "message": message}
    return orjson.dumps({**head, **dict(sorted(fields.items()))})


def _python_line(time_ns: int, message: str) -> bytes:
    """A bridged Python log line: target "log", no `file`/`line`, no trace context."""
    head = {"time": ns_to_iso(time_ns), "level": "INFO", "target": "log", "message": message}
    return orjson.dumps({**head, "log.file": "/opt/dynamo/mocker/main.py", "log.line": 56, "log.target": "main.prefetch"})
