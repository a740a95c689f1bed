"""Writes what a disaggregated Dynamo deployment records for a set of requests: the frontend's,
the prefill worker's and the decode worker's JSONL stderr, OTLP/JSON spans, and request-trace
rows, field for field as ../shared/reference/formats-dynamo.md describes them (and as a real
1.6.1 frontend with mocker workers writes them). The demo and the tests build their data with it.

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

from .times import ns_to_iso

MODEL = "qwen/qwen3-0.6b"


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

    def add(self, *, offset_ms: float = 0.0, request_id: str | None = None, **kw) -> SampleRequest:
        req = SampleRequest(
            request_id=request_id or str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            trace_id=_hex(self.rng, 16),
            start_ns=self.start_ns + int(offset_ms * 1e6),
            **kw,
        )
        for name in ("http", "route", "to_prefill", "to_decode", "prefill", "decode"):
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
        http = {**ctx, "span_id": req.spans["http"], "span_name": "http-request"}
        if req.client_parent_span:
            http["parent_id"] = req.client_parent_span
        uri = "/v1/chat/completions" if req.endpoint == "chat_completions" else "/v1/completions"
        request_type = "stream" if req.stream else "unary"

        self.frontend.append(_line(t, "INFO", "dynamo_llm::http::service::metrics", "request received",
                                   endpoint=req.endpoint, method="POST", model=MODEL,
                                   request_type=request_type, uri=uri, **http))
        to_prefill = {**ctx, "span_id": req.spans["to_prefill"], "parent_id": req.spans["http"],
                      "span_name": "client_request", "instance_id": self.prefill_instance, "operation": "generate"}
        self.frontend.append(_line(t + 1 * ms, "DEBUG", "dynamo_runtime::pipeline::network::egress::push_router",
                                   "sending request to worker", **to_prefill))
        prefill = {**ctx, "span_id": req.spans["prefill"], "parent_id": req.spans["to_prefill"],
                   "span_name": "handle_payload", "component": "prefill", "endpoint": "generate",
                   "namespace": "dynamo", "instance_id": self.prefill_instance}
        self.prefill.append(_line(t + 2 * ms, "DEBUG", "dynamo_runtime::pipeline::network::ingress::push_handler",
                                  "handling request", **prefill))
        self.prefill.append(_python_line(t + 3 * ms, f"Prefill Request ID: {req.request_id}"))
        self.prefill.append(_line(t + 40 * ms, "DEBUG", "dynamo_runtime::pipeline::network::ingress::push_handler",
                                  "request handled", **prefill))
        to_decode = {**to_prefill, "span_id": req.spans["to_decode"], "instance_id": self.decode_instance}
        self.frontend.append(_line(t + 41 * ms, "DEBUG", "dynamo_runtime::pipeline::network::egress::push_router",
                                   "sending request to worker", **to_decode))
        decode = {**prefill, "span_id": req.spans["decode"], "parent_id": req.spans["to_decode"],
                  "component": "backend", "instance_id": self.decode_instance}
        self.decode.append(_line(t + 42 * ms, "DEBUG", "dynamo_runtime::pipeline::network::ingress::push_handler",
                                 "handling request", **decode))
        self.decode.append(_python_line(t + 43 * ms, f"Decode Request ID: {req.request_id}"))
        end = t + 180 * ms
        self.decode.append(_line(end - 2 * ms, "DEBUG", "dynamo_runtime::pipeline::network::ingress::push_handler",
                                 "request handled", **decode))
        done = {"avg_itl_ms": "11.84", "decode_worker_id": self.decode_instance, "elapsed_ms": "180",
                "endpoint": req.endpoint, "input_tokens": "128", "model": MODEL,
                "prefill_worker_id": self.prefill_instance, "request_type": request_type,
                "status": req.status, "ttft_ms": "58.21", "output_tokens": "150", **http}
        if req.status != "success":
            done["error_type"] = "internal"
        self.frontend.append(_line(end, "INFO" if req.status == "success" else "ERROR",
                                   "dynamo_llm::http::service::metrics", "request completed", **done))
        self.trace_rows.append(orjson.dumps({
            "schema": "dynamo.request.trace.v1", "event_type": "request_end",
            "event_time_unix_ms": end // ms,
            "request": {"request_id": req.request_id, "output_tokens": 150, "request_received_ms": t // ms,
                        "replay": {"trace_block_size": 64, "input_length": 128,
                                   "input_sequence_hashes": [14879255164371896291, 274632075616497421]}},
        }))
        self._span("dynamo-frontend", "http-request", req, "http", req.client_parent_span, t, end, 2,
                   {"request_id": req.request_id, "x_request_id": req.x_request_id, "method": "POST",
                    "uri": uri, "model": MODEL})
        self._span("dynamo-worker-prefill", "handle_payload", req, "prefill", req.spans["to_prefill"],
                   t + 2 * ms, t + 40 * ms, 2,
                   {"request_id": req.request_id, "component": "prefill", "endpoint": "generate",
                    "instance_id": self.prefill_instance})
        self._span("dynamo-worker-decode", "handle_payload", req, "decode", req.spans["to_decode"],
                   t + 42 * ms, end - 2 * ms, 2,
                   {"request_id": req.request_id, "component": "backend", "endpoint": "generate",
                    "instance_id": self.decode_instance})

    def _span(self, service, name, req, span, parent, start, end, kind, attrs) -> None:
        self.spans.append({
            "service": service,
            "span": {
                "traceId": req.trace_id, "spanId": req.spans[span], **({"parentSpanId": parent} if parent else {}),
                "name": name, "kind": kind, "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
                "attributes": [{"key": k, "value": {"stringValue": str(v)}} for k, v in attrs.items() if v is not None],
                "status": {},
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
        startup = [_python_line(self.start_ns - 5_000_000_000, "Starting worker"), b"vLLM-style plain text line"]
        files["frontend"].write_bytes(b"\n".join(self._sorted(self.frontend)) + b"\n")
        files["prefill"].write_bytes(b"\n".join(startup + self._sorted(self.prefill)) + b"\n")
        files["decode"].write_bytes(b"\n".join(startup + self._sorted(self.decode)) + b"\n")
        files["request_trace"].write_bytes(b"\n".join(self.trace_rows) + b"\n")
        with open(files["otlp"], "wb") as f:
            for service in sorted({s["service"] for s in self.spans}):
                spans = [s["span"] for s in self.spans if s["service"] == service]
                f.write(orjson.dumps({"resourceSpans": [{
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                    "scopeSpans": [{"scope": {"name": "dynamo"}, "spans": spans}],
                }]}) + b"\n")
        return files

    @staticmethod
    def _sorted(lines: list[bytes]) -> list[bytes]:
        return sorted(lines, key=lambda line: orjson.loads(line)["time"])


def _line(time_ns: int, level: str, target: str, message: str, **fields) -> bytes:
    """A Dynamo JSONL line: fixed keys first, then the fields sorted, as logging.rs writes them."""
    head = {"time": ns_to_iso(time_ns), "level": level, "target": target, "message": message}
    return orjson.dumps({**head, **dict(sorted(fields.items()))})


def _python_line(time_ns: int, message: str) -> bytes:
    """A bridged Python log line: target "log", no trace context."""
    return _line(time_ns, "INFO", "log", message, **{"log.file": "/opt/dynamo/vllm/handlers.py",
                                                     "log.line": 912, "log.target": "handlers.generate"})
