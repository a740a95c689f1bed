"""The record contract: what the stages after the sources read of a record, each under one name.

A source keeps each line's own fields in `attrs`, named as its format names them: a reader of one
record shows them whole. What the requests build, worker naming and the dashboards read of a
record is one of the facts below, never a source's own field: each fact is read from the fields
and columns the sources give it, in one place, so a new format whose fields are named otherwise
adds its names here and every later stage reads them.

The store's `record_facts` view has one row per record (its `record_id`) and a column per fact;
the requests build reads the same columns (`columns`). docs/contributing.md lists the facts for
whoever maps a new format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Fact:
    name: str
    sql: str  # over one row of `records`
    meaning: str


def _ms(field: str) -> str:
    """The attribute, when it is a number (or its text), as milliseconds."""
    return f"TRY_CAST(attrs->>'{field}' AS DOUBLE)"


# The records with which a tier answered the client: trace-join middleware's `request.end`, Dynamo's
# `http response sent`. Their `status` is the HTTP status sent.
_ANSWERS = "('request.end', 'http response sent')"
# The records whose duration is the whole request as the tier that took it measured it, beside
# every entry record: trace-join's `request.end`, Dynamo's `request completed`.
_WHOLE_REQUEST = "('request.end', 'request completed')"

FACTS = (
    Fact("ttft_ms", _ms("ttft_ms"),
         "arrival to first token, as the record's tier measured it (TensorRT-LLM perf metrics, "
         "Dynamo's `request completed`)"),
    Fact("ttfb_ms", _ms("ttfb_ms"),
         "arrival to the reply's first byte at the HTTP tier (trace-join middleware's `request.end`)"),
    Fact("queue_ms", _ms("queue_ms"),
         "arrival to first scheduled, on the worker that ran the request (TensorRT-LLM perf metrics)"),
    Fact("router_queue_ms", _ms("disagg_queue_ms"),
         "arrival to dispatch to the context worker, at the disaggregated server"),
    Fact("kv_transfer_ms", _ms("kv_transfer_ms"),
         "the KV cache's transfer from the context to the generation worker"),
    Fact("e2e_ms", _ms("e2e_ms"), "arrival to last token, as the record's worker measured it"),
    Fact("prefill_ms", _ms("prefill_ms"),
         "the prefill leg of a disaggregated request, as the proxy that sent it measured it (llm-d's sidecar)"),
    Fact("decode_ms", _ms("decode_ms"),
         "the decode leg of a disaggregated request, as the proxy that sent it measured it (llm-d's sidecar)"),
    Fact("coordinator_ms", _ms("coordinator_ms"),
         "what the proxy itself added between and around the legs (llm-d's sidecar)"),
    Fact("role_by_name", "attrs->>'role_from' = 'name'",
         "the record's role was read from its process's name (an OTLP service.name), not stated by it"),
    Fact("request_ms", f"CASE WHEN entry OR name IN {_WHOLE_REQUEST} THEN duration_ns / 1e6 END",
         "the whole request, as the tier that took it measured it"),
    Fact("http_status", f"CASE WHEN name IN {_ANSWERS} OR (kind = 'span' AND entry "
                        "AND regexp_matches(coalesce(status, ''), '^[0-9]{3}$')) THEN status END",
         "the HTTP status a tier answered the request with (its answer record, or its entry span's "
         "`http.response.status_code`)"),
    Fact("failed", "upper(coalesce(level, '')) IN ('ERROR', 'CRITICAL', 'FATAL') OR status = 'error' "
                   "OR (status = 'aborted' AND source = 'vllm_log') "
                   "OR (regexp_matches(coalesce(status, ''), '^[0-9]{3}$') AND status >= '500')",
         "the record states a failure: an error level, an `error` outcome, vLLM's `Aborted request` (its "
         "engine's word for a request that did not finish, whatever the reason) or an HTTP status of 500 and up"),
    Fact("error_text", "coalesce(nullif(concat_ws(': ', attrs->>'error_type', attrs->>'error_detail'), ''), "
                       "attrs->>'error', attrs->>'error.type')",
         "what the record says went wrong (Dynamo's `error_type` and `error_detail`, trace-join "
         "middleware's `error`, OpenTelemetry's `error.type`)"),
    Fact("route", "coalesce(attrs->>'route', attrs->>'http.route', attrs->>'uri', attrs->>'url.path')",
         "the HTTP route or path (middleware `route`, OpenTelemetry `http.route`, else Dynamo `uri` or "
         "OpenTelemetry `url.path`)"),
    Fact("endpoint", "attrs->>'endpoint'", "the API the request called (Dynamo's `chat_completions`)"),
    Fact("disconnected", "(attrs->>'disconnected') = 'true' OR status = 'cancelled'",
         "the client left before the reply ended (trace-join middleware), or the request was cancelled"),
    Fact("prefill_worker", "attrs->>'prefill_worker_id'",
         "the instance the entry server sent the request's prefill to (Dynamo)"),
    Fact("decode_worker", "attrs->>'decode_worker_id'",
         "the instance the entry server sent the request's decode to (Dynamo)"),
)

_BY_NAME = {fact.name: fact for fact in FACTS}

# The attributes the facts read, in the order they first do. A record whose line the store keeps and
# reads again when shown (line_attributes.py) stores only these of its attributes: every fact, and so
# the requests build, the worker naming and the dashboards, reads the same from them.
ATTRIBUTES = tuple(dict.fromkeys(re.findall(r"attrs->>'([^']+)'", " ".join(fact.sql for fact in FACTS))))


def read_by_facts(attrs: dict) -> dict | None:
    """Those of the attributes the facts read (ATTRIBUTES, in its order, without nulls), or None."""
    kept = {key: attrs[key] for key in ATTRIBUTES if attrs.get(key) is not None}
    return kept or None


def read_by_facts_sql(fields: str) -> str:
    """read_by_facts in SQL, as JSON text: `fields` is a STRUCT with a JSON field for each of
    ATTRIBUTES (a JSON null, or a field missing, is left out). Written by hand rather than by
    json_object: most lines hold one or none of them."""
    members = ", ".join(f"""CASE WHEN {fields}."{key}" <> 'null' THEN '"{key}":' || {fields}."{key}" END"""
                        for key in ATTRIBUTES)
    return f"nullif('{{' || concat_ws(',', {members}) || '}}', '{{}}')"


def http_status_number(status: str | None) -> int | None:
    """The `http_status` fact as the number it is (stored as the text it was read as)."""
    return int(status) if status is not None and status.isdigit() else None


def columns(*names: str) -> str:
    """The named facts (all, without names) as columns of a SELECT over `records`."""
    return ",\n    ".join(f"{_BY_NAME[name].sql} AS {name}" for name in names or _BY_NAME)


RECORD_FACTS_VIEW = f"""
CREATE OR REPLACE VIEW record_facts AS
SELECT record_id,
    {columns()}
FROM records;
"""
