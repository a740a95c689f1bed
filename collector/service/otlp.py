"""OTLP export requests to records, and the answers, for both receivers (otlp_http.py, otlp_grpc.py).

Spans and log records that arrive over the network become the same records as the same data read
from a file: the OTLP JSON source (sources/otlp_json.py) reads JSON bodies, and makes the records of
protobuf bodies too, from the `Span`s and `Log`s read here straight from their messages (going
through protobuf's JSON mapping instead cost more than all the rest of the decode). When some spans
or log records cannot be read, or hold a value the store cannot, the others are kept and the
answer is a partial success: how many were rejected, and the first reason.

Both receivers also share the intake budget (IntakeBudget), which bounds the memory of the
requests in progress, and decode through Receiver.decode, which holds what a body will cost in
that budget before each step that builds it.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ..records import Record, check_storable
from ..sources import otlp_json
from ..sources.otlp_json import Log, Span, id_hex, span_event
from ..sources.parsing import Unparseable, load_object
from .writer import Body, Busy

SOURCE = otlp_json.NAME
MAX_BODY = 20 << 20  # the limit the OTLP spec recommends, before and after decompression
INTAKE_BUDGET = 512 << 20  # memory received bodies may hold at once (IntakeBudget)
# What a body weighs in memory from its reading to its commit: the body, what its decoding builds
# (protobuf's message or the JSON objects, the spans, the records) and the records' tables. A body
# weighs the largest of these estimates, each held as soon as it can be made (Receiver.decode):
# - per byte received, measured on SDK exports of small spans, the heaviest per byte; a protobuf
#   byte becomes more than a JSON one;
WEIGHT = {"protobuf": 24, "json": 16}
# - per resource block, scope block, span and log record, however few bytes it takes: what the
#   smallest ones SDKs make cost, as a body of many tiny items costs far more than its bytes say;
ITEM_WEIGHT = 3584
# - per `{` and `[` of a JSON body, before its items can be counted: what the JSON parser builds
#   for each (those within strings count too, which errs on the heavy side).
JSON_CONTAINER_WEIGHT = 256


# -- protobuf messages to the OTLP JSON source's spans and log records --------------------------
# Each field as that source reads it from protobuf's JSON mapping of the message, which leaves out
# what is unset (so 0 is None here) and writes bytes as base64. Unset strings stay "" where the
# records treat "" as no value.

def _span(span, scope: str | None) -> Span:
    status = span.status
    return Span(
        name=span.name,
        attrs=_attributes(span.attributes),
        scope=scope,
        start_ns=span.start_time_unix_nano or None,
        end_ns=span.end_time_unix_nano or None,
        kind=span.kind,
        status_code=status.code,
        status_message=status.message or None,
        trace_id=id_hex(span.trace_id, 16, "traceId"),
        span_id=id_hex(span.span_id, 8, "spanId"),
        parent_span_id=id_hex(span.parent_span_id, 8, "parentSpanId"),
        events=[span_event(e.name, e.time_unix_nano, lambda e=e: _attributes(e.attributes)) for e in span.events] or None,
    )


def _log(log, scope: str | None) -> Log:
    return Log(
        attrs=_attributes(log.attributes),
        scope=scope,
        body=_value(log.body),
        event_name=log.event_name,
        time_ns=log.time_unix_nano or None,
        observed_ns=log.observed_time_unix_nano or None,
        severity_text=log.severity_text,
        trace_id=id_hex(log.trace_id, 16, "traceId"),
        span_id=id_hex(log.span_id, 8, "spanId"),
    )


def _attributes(kvs) -> dict:
    out = {}
    for kv in kvs:
        key = kv.key
        if not key:
            raise Unparseable(otlp_json.NO_KEY)
        out[key] = _value(kv.value)
    return out


_SCALARS = frozenset({"string_value", "int_value", "bool_value", "double_value"})


def _value(v):
    """An AnyValue as a plain Python value (as otlp_json.any_value reads its JSON form)."""
    kind = v.WhichOneof("value")
    if kind in _SCALARS:
        return getattr(v, kind)
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return _attributes(v.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return None  # unset, or an index into a profiles string table (spans and logs use none)


@dataclass(frozen=True)
class Signal:
    name: str  # the HTTP path's last part: traces, logs
    service: str  # the gRPC service's full name
    request: type[Message]
    response: type[Message]
    rejected_field: str  # in the response's partial_success
    # (resource list, scope list, item list) keys, in lowerCamelCase and in snake_case (the
    # latter are also the protobuf messages' field names)
    shapes: tuple[tuple[str, str, str], ...]
    read: Callable[[Message, str | None], Span | Log]  # reads one protobuf item, given its scope's name
    records: Callable[[otlp_json.LineParser, dict, list], list[Record]]  # makes one resource's records


TRACES = Signal(
    "traces", trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name,
    trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse,
    "rejected_spans", (("resourceSpans", "scopeSpans", "spans"), ("resource_spans", "scope_spans", "spans")),
    _span, otlp_json.LineParser.span_records,
)
LOGS = Signal(
    "logs", logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name,
    logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse,
    "rejected_log_records",
    (("resourceLogs", "scopeLogs", "logRecords"), ("resource_logs", "scope_logs", "log_records")),
    _log, otlp_json.LineParser.log_records,
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
    services it has seen, as it does along a file) and the origin their records are stored under.
    `keep_content`: store prompt and reply text as sent (otlp_json.LineParser)."""

    def __init__(self, origin: str, keep_content: bool = False):
        self.origin = origin
        self.parser = otlp_json.LineParser(keep_content=keep_content)

    def decode(self, signal: Signal, body: bytes, encoding: str, hold: Hold) -> Decoded:
        """The records of a body in `encoding` ("protobuf" or "json"), each estimate of its weight
        held in `hold` before the step it pays for: its size before its items are counted, its
        items before they are built. OverBudget (retry later) or TooHeavy (never) when one does not
        fit."""
        hold.body(len(body), encoding)
        most = hold.budget.limit // ITEM_WEIGHT  # a body of more items is too heavy: counting stops there
        if encoding == "protobuf":
            hold.at_least(_protobuf_items(signal, body, most) * ITEM_WEIGHT)
            return self.decode_protobuf(signal, body)
        hold.at_least((body.count(b"{") + body.count(b"[")) * JSON_CONTAINER_WEIGHT)
        obj = _json_object(body)
        hold.at_least(_json_items(signal, obj, most) * ITEM_WEIGHT)
        return self.decode_object(signal, obj)

    def decode_protobuf(self, signal: Signal, body: bytes) -> Decoded:
        try:
            request = signal.request.FromString(body)
        except DecodeError as e:
            raise Undecodable(f"not an {signal.request.__name__}: {e}") from None
        resources, scopes, items = signal.shapes[1]
        # Each resource block with its items, each item with its scope's name; split into one
        # item each when some item cannot be read, as _single_item_exports splits a JSON export.
        blocks = [
            (block, [(scope.scope.name or None, item)
                     for scope in getattr(block, scopes) for item in getattr(scope, items)])
            for block in getattr(request, resources)
        ]
        return _decode(lambda some: self._protobuf_records(signal, some), blocks,
                       lambda: ([(block, [item])] for block, block_items in blocks for item in block_items))

    def _protobuf_records(self, signal: Signal, blocks: list) -> list[Record]:
        records = []
        for block, items in blocks:
            resource_attrs = _attributes(block.resource.attributes)
            records += signal.records(self.parser, resource_attrs, [signal.read(item, scope) for scope, item in items])
        return records

    def decode_json(self, signal: Signal, body: bytes) -> Decoded:
        return self.decode_object(signal, _json_object(body))

    def decode_object(self, signal: Signal, obj: dict) -> Decoded:
        # Only this signal's blocks: a logs block posted to /v1/traces is ignored, as protobuf would.
        export = {key: obj[key] for key, _, _ in signal.shapes if key in obj}
        if not export:
            return Decoded([])  # an empty request is a success
        return _decode(self.parser.decode, export, lambda: _single_item_exports(signal, export))

    def body(self, raw: bytes, decoded: Decoded) -> Body:
        return Body(self.origin, SOURCE, hashlib.sha256(raw).hexdigest(), decoded.records,
                    aliases=dict(self.parser.aliases))


def _json_object(body: bytes) -> dict:
    try:
        return load_object(body)
    except Unparseable as e:
        raise Undecodable(str(e)) from None


def _decode(decode: Callable[[object], list[Record]], export, singles: Callable[[], Iterable]) -> Decoded:
    """The records of an export; when some item of it cannot be read, or holds a value the store
    cannot (a time past 2262), those of each of `singles()` (the export split into exports of one
    item each) that can be read and stored, and how many cannot. Checked here, such an item is
    rejected alone and its export answered as a partial success; the writer could only refuse the
    whole body."""
    try:
        records = decode(export)
        check_storable(records)
        return Decoded(records)
    except Exception:  # noqa: BLE001 - some item is unreadable or unstorable: find which, keep the rest
        pass
    decoded = Decoded([])
    for one in singles():
        try:
            records = decode(one)
            check_storable(records)
        except Exception as e:  # noqa: BLE001 - as ingest does with a line no parser expected
            decoded.rejected += 1
            decoded.error = decoded.error or str(e)
        else:
            decoded.records += records
    return decoded


def _single_item_exports(signal: Signal, export: dict):
    """The JSON export split into exports of one span (or log record) each, with its resource and scope."""
    try:
        for resources_key, scopes_key, items_key in signal.shapes:
            for block in export.get(resources_key) or []:
                for scope in block.get(scopes_key) or []:
                    for item in scope.get(items_key) or []:
                        yield {resources_key: [{**block, scopes_key: [{**scope, items_key: [item]}]}]}
    except (AttributeError, TypeError):
        raise Undecodable(f"not an OTLP {signal.name} export: its blocks are not objects and lists") from None


def response(signal: Signal, decoded: Decoded) -> Message:
    """Export<Signal>ServiceResponse: partial_success set only when something was rejected."""
    answer = signal.response()
    if decoded.rejected:
        setattr(answer.partial_success, signal.rejected_field, decoded.rejected)
        answer.partial_success.error_message = decoded.error or "rejected"
    return answer


# -- counting a body's items, before they are built ---------------------------------------------

# The protobuf fields of an export request that hold its resource blocks, theirs that hold scope
# blocks, and theirs that hold spans or log records: the same numbers for both signals.
_ITEM_PATH = (1, 2, 2)


class _NotWireFormat(ValueError):
    pass


def _protobuf_items(signal: Signal, body: bytes, most: int) -> int:
    """The resource blocks, scope blocks and items of a protobuf export request, counted on the
    wire without building anything; once past `most`, the count so far."""
    try:
        return _count_fields(body, 0, len(body), 0, most)
    except IndexError:
        raise Undecodable(f"not an {signal.request.__name__}: it ends within a field") from None
    except _NotWireFormat as e:
        raise Undecodable(f"not an {signal.request.__name__}: {e}") from None


def _count_fields(buf: bytes, pos: int, end: int, depth: int, most: int) -> int:
    """The fields numbered _ITEM_PATH[depth] of the message buf[pos:end] and, within each, those
    of the levels below; once past `most`, the count so far. Only tags and lengths are read: one
    turn of the loop per field, which on a body of millions of tiny items is what `most` bounds."""
    count = 0
    wanted = _ITEM_PATH[depth] << 3 | 2  # the tag of a length-delimited field of that number
    inner = depth + 1 < len(_ITEM_PATH)
    while pos < end and count <= most:
        tag = buf[pos]
        pos += 1
        if tag > 0x7F:
            tag, pos = _varint(buf, pos - 1)
        wire = tag & 7
        if wire == 2:  # length-delimited: a message, a string or bytes
            length = buf[pos]
            pos += 1
            if length > 0x7F:
                if buf[pos] > 0x7F:
                    length, pos = _varint(buf, pos - 1)
                else:  # two bytes, as most spans' lengths take: read here rather than in a call
                    length = length & 0x7F | buf[pos] << 7
                    pos += 1
            if tag == wanted:
                count += 1
                if inner:
                    count += _count_fields(buf, pos, pos + length, depth + 1, most - count)
            pos += length
        elif wire == 0:
            pos = _varint(buf, pos)[1]
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:  # a group, which no OTLP message has
            raise _NotWireFormat(f"a field of wire type {wire}")
    if pos != end and count <= most:
        raise _NotWireFormat("a field runs past the end of its message")
    return count


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at buf[pos], and the position after it."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:  # protobuf's take ten bytes at most; reading on would grow an integer without end
            raise _NotWireFormat("a varint of more than ten bytes")


def _json_items(signal: Signal, export, most: int) -> int:
    """The resource blocks, scope blocks and items of a JSON export, under either spelling of
    their keys (both, where a block has both, as _single_item_exports reads them); once past
    `most`, the count so far."""
    resources, scopes, items = (set(keys) for keys in zip(*signal.shapes))
    count = 0
    for blocks in _lists(export, resources):
        count += len(blocks)
        for block in blocks:
            for scope_blocks in _lists(block, scopes):
                count += len(scope_blocks)
                for scope in scope_blocks:
                    if count > most:
                        return count
                    count += sum(map(len, _lists(scope, items)))
            if count > most:
                return count
    return count


def _lists(obj, keys: set[str]) -> list[list]:
    """The lists the JSON value `obj` holds under `keys`: none when it is not an object."""
    return [value for key in keys if isinstance(value := obj.get(key), list)] if isinstance(obj, dict) else []


# -- the intake budget -----------------------------------------------------------------------------

class OverBudget(Busy):
    """Taking a body would put the receivers' memory past the intake budget: retry later."""


class TooHeavy(ValueError):
    """A body that weighs more than the whole intake budget: no retry could make it fit, so it is
    refused for good (413 / INVALID_ARGUMENT) rather than told to retry later."""


class IntakeBudget:
    """The memory that received bodies may hold at once, shared by both receivers, as the
    OpenTelemetry Collector's memory_limiter bounds its pipeline's. A body of N bytes counts as
    N × WEIGHT from before it is read, and as what its items weigh (ITEM_WEIGHT) once they are
    counted, before they are built, until the writer has committed (or refused) its records.
    One that does not fit is refused before it is read (a gzip body that inflates past its share,
    as it is read; a body of many tiny items, before they are built), and its client retries
    later; one that fits is read, decoded and committed, so under any load some bodies get
    through. One heavier than the whole budget is refused for good."""

    def __init__(self, limit: int = INTAKE_BUDGET):
        self.limit = limit
        self.held = 0
        self.lock = threading.Lock()  # the receivers' threads and the writer's (as bodies commit)

    @staticmethod
    def needed(max_body: int) -> int:
        """The smallest budget that holds one body of `max_body` bytes by its size, whatever its
        encoding (its items may weigh more)."""
        return max_body * max(WEIGHT.values())

    @contextmanager
    def hold(self) -> Iterator["Hold"]:
        """One request's share, given back when the request is done, or once the body it handed to
        the writer is committed."""
        hold = Hold(self)
        try:
            yield hold
        finally:
            if hold.committed is None:
                hold.resize(0)
            else:
                hold.committed.add_done_callback(lambda _: hold.resize(0))


class Hold:
    """One request's share of the budget, resized as the request's size becomes known. Once its
    body is handed to the writer, `committed` is the writer's future: the share lasts until then."""

    def __init__(self, budget: IntakeBudget):
        self.budget = budget
        self.nbytes = 0
        self.committed: Future | None = None  # the writer's future for the body, once handed over

    def resize(self, nbytes: int) -> None:
        """Hold `nbytes` of the budget from now on; OverBudget (holding what it held) when that
        does not fit beside what the other requests hold, TooHeavy when it does not fit at all."""
        budget = self.budget
        if nbytes > budget.limit:
            raise TooHeavy(f"decoded, the body would take at least {nbytes} bytes, more than the whole intake "
                           f"memory budget ({budget.limit} bytes): send fewer spans or log records at once")
        with budget.lock:
            if nbytes > self.nbytes and budget.held - self.nbytes + nbytes > budget.limit:
                raise OverBudget(f"the intake memory budget ({budget.limit} bytes) is taken by the bodies in progress")
            budget.held += nbytes - self.nbytes
            self.nbytes = nbytes

    def body(self, nbytes: int, encoding: str) -> None:
        """Hold what a body of `nbytes` in `encoding` weighs by its size."""
        self.resize(nbytes * WEIGHT[encoding])

    def at_least(self, nbytes: int) -> None:
        """Hold `nbytes` of the budget if that is more than it holds."""
        if nbytes > self.nbytes:
            self.resize(nbytes)

