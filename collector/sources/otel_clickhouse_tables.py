"""The tables the OpenTelemetry Collector's ClickHouse exporter (`clickhouseexporter`) writes:
`otel_traces`, a row per span, and `otel_logs`, a row per log record. A fleet that exports OTLP
to ClickHouse already holds its spans there; a lookup on a ClickHouse store reads them where they
are (clickhouse_store.py), without a second copy, and this module makes them records as the OTLP
sources do (otlp_json.py), so that a span gives the same record whichever way it came.

The exporter keeps ids as lowercase hex, times as DateTime64(9), the span kind and status code as
names (`SPAN_KIND_SERVER`, `STATUS_CODE_ERROR`), every attribute as text in Map(String, String) columns, the resource's
attributes whole in ResourceAttributes, and a span's events as the nested columns `Events.*`.
"""

from __future__ import annotations

from itertools import groupby

from ..records import Record
from .otlp_json import Log, LineParser, Span, span_event

TRACES, LOGS = "otel_traces", "otel_logs"

# What a lookup reads of a row, as ClickHouse SQL over the exporter's columns.
SPAN_COLUMNS = """
    toUnixTimestamp64Nano(Timestamp) AS start_ns, Duration AS duration_ns, TraceId AS trace_id,
    SpanId AS span_id, ParentSpanId AS parent_span_id, SpanName AS name, SpanKind AS kind,
    StatusCode AS status_code, StatusMessage AS status_message, ScopeName AS scope,
    ResourceAttributes AS resource, SpanAttributes AS attrs,
    arrayMap(t -> toUnixTimestamp64Nano(t), `Events.Timestamp`) AS event_times, `Events.Name` AS event_names,
    `Events.Attributes` AS event_attrs
"""
LOG_COLUMNS = """
    toUnixTimestamp64Nano(Timestamp) AS time_ns, TraceId AS trace_id, SpanId AS span_id,
    SeverityText AS severity_text, Body AS body, ScopeName AS scope,
    ResourceAttributes AS resource, LogAttributes AS attrs
"""

# Span kinds and status codes as OTLP's numbers, by the exporter's names for them: the proto's
# (`SPAN_KIND_SERVER`, `STATUS_CODE_ERROR`, traceutil's), or pdata's String() (`Server`, `Error`).
_KINDS = {"UNSPECIFIED": 0, "INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}


def _enum(names: dict[str, int], prefix: str, name: str) -> int:
    return names.get(name.upper().removeprefix(prefix), 0)


def _pairs(items) -> dict:
    """A Map column's value, which Arrow gives as (key, value) pairs, as a dict."""
    return dict(items)


def span_records(rows: list[dict]) -> list[Record]:
    """Records of rows of otel_traces (SPAN_COLUMNS), the spans of each resource together: a
    resource's role may follow from its spans (otlp_json.LineParser._identity)."""
    parser = LineParser()
    records: list[Record] = []
    by_resource = sorted(rows, key=lambda r: r["resource"])
    for resource, spans in groupby(by_resource, key=lambda r: r["resource"]):
        records += parser.span_records(_pairs(resource), [_span(row) for row in spans])
    return records


def _span(row: dict) -> Span:
    start = row["start_ns"]
    return Span(
        name=row["name"] or None,
        attrs=_pairs(row["attrs"]),
        scope=row["scope"] or None,
        start_ns=start,
        end_ns=start + row["duration_ns"] if start is not None and row["duration_ns"] is not None else None,
        kind=_enum(_KINDS, "SPAN_KIND_", row["kind"]),
        status_code=_enum(_STATUS, "STATUS_CODE_", row["status_code"]),
        status_message=row["status_message"] or None,
        trace_id=row["trace_id"] or None,
        span_id=row["span_id"] or None,
        parent_span_id=row["parent_span_id"] or None,
        events=[span_event(name, time, lambda a=attrs: _pairs(a))
                for time, name, attrs in zip(row["event_times"], row["event_names"], row["event_attrs"])] or None,
    )


def log_records(rows: list[dict]) -> list[Record]:
    """Records of rows of otel_logs (LOG_COLUMNS), the log records of each resource together."""
    parser = LineParser()
    records: list[Record] = []
    for resource, logs in groupby(sorted(rows, key=lambda r: r["resource"]), key=lambda r: r["resource"]):
        records += parser.log_records(_pairs(resource), [_log(row) for row in logs])
    return records


def _log(row: dict) -> Log:
    return Log(attrs=_pairs(row["attrs"]), scope=row["scope"] or None, body=row["body"], event_name=None,
               time_ns=row["time_ns"] or None, observed_ns=None, severity_text=row["severity_text"] or None,
               trace_id=row["trace_id"] or None, span_id=row["span_id"] or None)
