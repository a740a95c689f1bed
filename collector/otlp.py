"""OTLP export requests to records, and the answers, for both receivers (otlp_http.py, otlp_grpc.py).

Every body is read by the OTLP JSON source (sources/otlp_json.py), so spans and log records that
arrive over the network become the same records as the same data read from a file. A protobuf
request goes through protobuf's JSON mapping first (its ids come out base64, which that parser
accepts). When some spans or log records cannot be read, the others are kept and the answer is a
partial success: how many were rejected, and the first reason.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from .records import Record
from .sources import otlp_json
from .sources.parsing import Unparseable, load_object
from .writer import Body

SOURCE = otlp_json.NAME
MAX_BODY = 20 << 20  # the limit the OTLP spec recommends, before and after decompression


@dataclass(frozen=True)
class Signal:
    name: str  # the HTTP path's last part: traces, logs
    service: str  # the gRPC service's full name
    request: type[Message]
    response: type[Message]
    rejected_field: str  # in the response's partial_success
    # (resource list, scope list, item list) keys, in lowerCamelCase and in snake_case
    shapes: tuple[tuple[str, str, str], ...]


TRACES = Signal(
    "traces", trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name,
    trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse,
    "rejected_spans", (("resourceSpans", "scopeSpans", "spans"), ("resource_spans", "scope_spans", "spans")),
)
LOGS = Signal(
    "logs", logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name,
    logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse,
    "rejected_log_records",
    (("resourceLogs", "scopeLogs", "logRecords"), ("resource_logs", "scope_logs", "log_records")),
)


class Undecodable(ValueError):
    """A body that is not an export request of its signal at all (answered 400 / INVALID_ARGUMENT)."""


@dataclass
class Decoded:
    records: list[Record]
    rejected: int = 0
    error: str | None = None  # the first rejected item's reason


class Receiver:
    """What both receivers share: one parser per receiver (it remembers the identities of the
    services it has seen, as it does along a file) and the origin their records are stored under."""

    def __init__(self, origin: str):
        self.origin = origin
        self.parser = otlp_json.LineParser()

    def decode_protobuf(self, signal: Signal, body: bytes) -> Decoded:
        try:
            message = signal.request.FromString(body)
        except DecodeError as e:
            raise Undecodable(f"not an {signal.request.__name__}: {e}") from None
        return self.decode_object(signal, MessageToDict(message))

    def decode_json(self, signal: Signal, body: bytes) -> Decoded:
        try:
            obj = load_object(body)
        except Unparseable as e:
            raise Undecodable(str(e)) from None
        return self.decode_object(signal, obj)

    def decode_object(self, signal: Signal, obj: dict) -> Decoded:
        # Only this signal's blocks: a logs block posted to /v1/traces is ignored, as protobuf would.
        export = {key: obj[key] for key, _, _ in signal.shapes if key in obj}
        if not export:
            return Decoded([])  # an empty request is a success
        try:
            return Decoded(self.parser.decode(export))
        except Exception:  # noqa: BLE001 - some item is unreadable: find which, keep the rest
            pass
        decoded = Decoded([])
        try:
            for one in _single_item_exports(signal, export):
                try:
                    decoded.records += self.parser.decode(one)
                except Exception as e:  # noqa: BLE001 - as ingest does with a line no parser expected
                    decoded.rejected += 1
                    decoded.error = decoded.error or str(e)
        except (AttributeError, TypeError):
            raise Undecodable(f"not an OTLP {signal.name} export: its blocks are not objects and lists") from None
        return decoded

    def body(self, raw: bytes, decoded: Decoded) -> Body:
        return Body(self.origin, SOURCE, hashlib.sha256(raw).hexdigest(), decoded.records)


def _single_item_exports(signal: Signal, export: dict):
    """The export split into exports of one span (or log record) each, with its resource and scope."""
    for resources_key, scopes_key, items_key in signal.shapes:
        for block in export.get(resources_key) or []:
            for scope in block.get(scopes_key) or []:
                for item in scope.get(items_key) or []:
                    yield {resources_key: [{**block, scopes_key: [{**scope, items_key: [item]}]}]}


def response(signal: Signal, decoded: Decoded) -> Message:
    """Export<Signal>ServiceResponse: partial_success set only when something was rejected."""
    answer = signal.response()
    if decoded.rejected:
        setattr(answer.partial_success, signal.rejected_field, decoded.rejected)
        answer.partial_success.error_message = decoded.error or "rejected"
    return answer
