"""TensorRT-LLM per-request perf metrics as JSONL files (trtllm-serve with `perf_metrics_output_dir`,
after PR #16668): `perf_metrics-<server_kind>-<hostname>-<pid>-<YYYYmmddTHHMMSSZ>.jsonl`, one
compact line per finished HTTP response, as `PerfMetricsJsonlWriter` in TensorRT-LLM's
`tensorrt_llm/serve/perf_metrics.py` writes it (the record types in `_perf_metrics_schema.py`).

Each file holds the records of one process, in one of two shapes:
- `WorkerPerfMetricsRecord` (a worker or an aggregated server): `request_id` (the engine's own
  id, int or str), `perf_metrics` {timing_metrics, kv_cache_metrics, first_iter, last_iter, ...},
  optional `ctx_request_id`, `disagg_request_id`, `time_breakdown_metrics`, and `status`;
- `DisaggPerfMetricsRecord` (the disaggregated server): `ctx_server`, `gen_server`, its own three
  times, `disagg_request_id` and the ctx/gen phases as the workers reported them in headers. There
  the phases' `request_id` is the disagg id (or the ctx request id when it has none), never an
  engine id: the workers' engine ids are only in their own files.

The file name names the process: the worker is `<hostname>:<pid>` (host names contain dashes, so
the name is split from the right), and the UTC stamp, its start, is kept as `process_start`.

Times are steady-clock seconds, not epoch: each record keeps its earliest arrival in
`steady_s`, no wall time, and the phase durations TensorRT-LLM's own `Server-Timing` header
reports (ms): `queue_ms` (arrival → first scheduled), `ttft_ms` (arrival → first token), `e2e_ms`
(arrival → last token, also the record's duration), `kv_transfer_ms`; a disagg record adds
`disagg_queue_ms` (arrival → ctx dispatch) and each phase's durations prefixed `ctx_` / `gen_`.
A missing, null or zero time leaves the durations that need it out. A record's attributes are its
line as written, after those durations and `process_start` (stored_attrs).

The legacy `GET /perf_metrics` arrays (perf_metrics_legacy.py) carry the same items without
`status`; the record builders below serve both.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from datetime import datetime, timezone

import orjson

from ..ids import CTX_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID
from ..records import Record
from . import bulk_sql
from .parsing import field, load_object, worker_from_path

NAME = "perf_metrics_jsonl"

FILE_NAME = re.compile(
    r"^perf_metrics-(?P<kind>[^-]+)-(?P<host>.+)-(?P<pid>\d+)-(?P<start>\d{8}T\d{6}Z)\.jsonl(?:\.gz)?$"
)
# The disaggregated server writes `disagg`; what workers write is not confirmed, so a kind
# that names a side is taken at its word and anything else is decided from the records.
_KIND_ROLES = {"disagg": "router", "ctx": "ctx", "context": "ctx", "gen": "gen", "generation": "gen"}
# A line of either record shape; trace-join and Dynamo lines carry a "schema" and are not these.
_RECORD_LINE = re.compile(rb'^\s*\{.*"(?:perf_metrics|disagg_server_arrival_time)"\s*:')

# (attribute, start, end) as TensorRT-LLM's Server-Timing header computes them for a worker phase.
_PHASES = (
    ("queue_ms", "arrival_time", "first_scheduled_time"),
    ("ttft_ms", "arrival_time", "first_token_time"),
    ("e2e_ms", "arrival_time", "last_token_time"),
    ("kv_transfer_ms", "kv_cache_transfer_start", "kv_cache_transfer_end"),
)
_TIMING_KEYS = (
    "server_arrival_time", "arrival_time", "first_scheduled_time", "first_token_time",
    "server_first_token_time", "last_token_time", "kv_cache_transfer_start", "kv_cache_transfer_end",
)
_DISAGG_TIMES = ("disagg_server_arrival_time", "disagg_ctx_dispatch_time", "disagg_server_first_token_time")


def sniff(path: str, head: list[bytes]) -> bool:
    if not head:
        return False
    if FILE_NAME.match(os.path.basename(path)):
        return bool(_RECORD_LINE.match(head[0])) and b'"schema"' not in head[0]
    return all(_RECORD_LINE.match(line) and b'"schema"' not in line for line in head)


class RoleVotes:
    """A process has one role: the one most of its records suggest. One record alone can mislead
    — a warm-up request sent straight to a generation worker looks aggregated, a one-token
    generation looks like a context request. On a tie a disaggregated role (`worker`: one whose
    side is not known) wins over `agg`, and `gen` over `ctx`, whatever order the records came in
    (lines read in bulk are counted together, collector/bulk.py)."""

    _TIE_ORDER = ("gen", "ctx", "worker", "agg")

    def __init__(self):
        self._votes: Counter = Counter()

    def vote(self, role: str | None) -> str | None:
        if role:
            self._votes[role] += 1
        return self.leader

    def learn(self, votes: Counter) -> str | None:
        self._votes.update(votes)
        return self.leader

    @property
    def counts(self) -> dict[str, int]:
        return dict(self._votes)

    @property
    def leader(self) -> str | None:
        if not self._votes:
            return None
        return max(self._votes, key=lambda role: (self._votes[role], -self._TIE_ORDER.index(role)))


class RoleFromVotes:
    """What a parser whose file takes the role its records vote for (its `_votes`, RoleVotes) keeps
    across reads: the votes, stored with the file's position (`state`, `restore`, collector/ingest.py),
    so a file read in parts (it grew, or a read was cut short) takes the role a whole read gives;
    and the votes of the lines collector/bulk.py read (`learn`)."""

    _votes: RoleVotes
    role: str | None

    def learn(self, votes: Counter) -> None:
        self.role = self._votes.learn(votes)

    def state(self) -> dict | None:
        return {"role_votes": self._votes.counts} if self._votes.counts else None

    def restore(self, state: dict) -> None:
        self.learn(Counter(state.get("role_votes", {})))


class LineParser(RoleFromVotes):
    def __init__(self, path: str):
        m = FILE_NAME.match(os.path.basename(path))
        self._process_start = None
        self._kind_role = None
        if m:
            self.worker = f"{m['host']}:{m['pid']}"
            self._kind_role = _KIND_ROLES.get(m["kind"].lower())
            start = datetime.strptime(m["start"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
            self._process_start = start.strftime("%Y-%m-%dT%H:%M:%SZ")
        else:
            self.worker = worker_from_path(path)  # a renamed file: see docs/formats.md
        self.role = self._kind_role
        self._votes = RoleVotes()

    # What collector/bulk.py asks of a parser whose lines it reads in bulk (sources/__init__.py):
    # engine ids belong to the file's process, and nothing a line says changes what the parser
    # knows of its file but the role its records vote for, which the bulk reader passes on.
    @property
    def scope(self) -> str | None:
        return self.worker

    def state_markers(self) -> tuple[bytes, ...]:
        return ()

    def carry(self, time_ns: int | None) -> None:
        pass  # a perf record has no wall time to carry

    def bulk_settings(self) -> dict[str, str]:
        return {"worker": bulk_sql.literal(self.worker), "process_start": bulk_sql.literal(self._process_start),
                "kind_role": bulk_sql.literal(self._kind_role)}

    def parse(self, line: bytes) -> list[Record]:
        obj = load_object(line)
        text = line.strip().decode()
        if is_disagg_record(obj):
            record = disagg_record(obj, phase_ids_are_engine_ids=False, text=text, process_start=self._process_start)
        else:
            record = worker_record(obj, self.worker, role=self._kind_role, text=text,
                                   process_start=self._process_start)
            if self._kind_role is None:
                self.role = self._votes.vote(infer_worker_role(obj))
        return [record]


def is_disagg_record(obj: dict) -> bool:
    return any(key in obj for key in ("ctx_server", "gen_server", "disagg_server_arrival_time"))


# -- worker records --------------------------------------------------------------------------


def worker_record(item: dict, worker: str | None, *, role: str | None = None,
                  ctx_scope: str | None = None, text: str | None = None,
                  process_start: str | None = None) -> Record:
    """One worker item. `role` when the caller knows it (else the file decides, see RoleVotes);
    `ctx_scope` scopes its ctx_request_id (only a ctx worker's own items may: the id is that
    worker's), otherwise the ctx request id is a label. `text`: the item as written, which the
    record keeps (stored_attrs)."""
    request_id = field(item, "request_id", (int, str), required=True)
    perf = field(item, "perf_metrics", (dict,), required=True)
    timing = _timing(perf)
    record = Record(kind="perf", name="perf metrics", worker=worker, role=role,
                    steady_s=_earliest(timing, "server_arrival_time", "arrival_time"),
                    status=field(item, "status", (str,)))
    # An aggregated server is the entry server: its record of a request marks that request.
    record.entry = (role or infer_worker_role(item)) == "agg"
    record.add_id(ENGINE_REQUEST_ID, request_id, worker)
    record.add_id(DISAGG_REQUEST_ID, field(item, "disagg_request_id", (int, str)))
    record.add_id(CTX_REQUEST_ID, field(item, "ctx_request_id", (int, str)), ctx_scope)
    field(item, "time_breakdown_metrics", (dict,))  # another type makes the line unparseable
    durations = phase_durations(timing)
    if "e2e_ms" in durations:
        record.duration_ns = round(durations["e2e_ms"] * 1_000_000)
    record.attrs_text = stored_attrs(item, text, {**durations, "process_start": process_start})
    return record


def infer_worker_role(item: dict) -> str | None:
    """The role one worker item suggests: `agg` without any disaggregation id; on a
    disaggregated worker `ctx` when its first and last tokens coincide (a context-only request
    stops at its first token) and `gen` when tokens came after the first; None when it cannot
    tell (timings missing)."""
    if item.get("ctx_request_id") is None and item.get("disagg_request_id") is None:
        return "agg"
    timing = (item.get("perf_metrics") or {}).get("timing_metrics") or {}
    first, last = timing.get("first_token_time"), timing.get("last_token_time")
    if not isinstance(first, (int, float)) or not isinstance(last, (int, float)) or not first or not last:
        return None
    return "ctx" if last == first else "gen"


# -- disaggregated-server records ------------------------------------------------------------


def disagg_record(obj: dict, *, phase_ids_are_engine_ids: bool, worker: str | None = None,
                  text: str | None = None, process_start: str | None = None) -> Record:
    """One disaggregated-server record. Legacy records (GET /perf_metrics) carry each worker's items as they
    were polled, so a phase's `request_id` is that worker's engine id; after #16668 it is
    the disagg id, or the ctx request id when there is none."""
    ctx_server = field(obj, "ctx_server", (str,))
    gen_server = field(obj, "gen_server", (str,))
    own = {key: _seconds(obj, key) for key in _DISAGG_TIMES}
    disagg_id = field(obj, "disagg_request_id", (int, str))
    phases = {"ctx": field(obj, "ctx_perf_metrics", (dict,)), "gen": field(obj, "gen_perf_metrics", (dict,))}
    record = Record(kind="perf", name="disagg perf metrics", worker=worker, role="router", entry=True,
                    steady_s=own["disagg_server_arrival_time"], status=field(obj, "status", (str,)))
    record.add_id(DISAGG_REQUEST_ID, disagg_id)
    arrival = own["disagg_server_arrival_time"]
    computed = _durations({"disagg_queue_ms": (arrival, own["disagg_ctx_dispatch_time"]),
                           "ttft_ms": (arrival, own["disagg_server_first_token_time"])})
    for phase, item in phases.items():
        if item is None:
            continue
        server = ctx_server if phase == "ctx" else gen_server
        request_id = field(item, "request_id", (int, str))
        timing = _timing(field(item, "perf_metrics", (dict,)) or {})
        computed.update({f"{phase}_{name}": value for name, value in phase_durations(timing).items()})
        if phase_ids_are_engine_ids:
            record.add_id(ENGINE_REQUEST_ID, request_id, server)
        elif request_id is not None and str(request_id) != str(disagg_id):
            record.add_id(CTX_REQUEST_ID, request_id, ctx_server)
        # The ctx request id belongs to the ctx server's numbering, whichever phase repeats it.
        record.add_id(CTX_REQUEST_ID, field(item, "ctx_request_id", (int, str)), ctx_server)
        if phase == "gen":
            # Workers report in the disaggregated server's steady clock, so its arrival and
            # the generation worker's last token measure the whole request.
            computed.update(_durations({"e2e_ms": (arrival, timing.get("last_token_time"))}))
    if "e2e_ms" in computed:
        record.duration_ns = round(computed["e2e_ms"] * 1_000_000)
    record.attrs_text = stored_attrs(obj, text, {**computed, "process_start": process_start})
    return record


# -- attributes ------------------------------------------------------------------------------


def stored_attrs(item: dict, text: str | None, computed: dict) -> str:
    """What a record keeps of its item: the item as written (`text`; as orjson writes it when
    there is none), after the computed attributes (phase durations, the process's start) that the
    item does not hold itself. Per-iteration step metrics can run to thousands of entries per
    request: those are kept as counts, with the breakdown's single values."""
    breakdown = item.get("time_breakdown_metrics")
    if isinstance(breakdown, dict) and breakdown:
        item = {**item, "time_breakdown_metrics": _counted(breakdown)}
        text = None
    if text is None:
        text = orjson.dumps(item).decode()
    front = {key: value for key, value in computed.items() if value is not None and key not in item}
    if not front:
        return text
    return f"{orjson.dumps(front).decode()[:-1]},{text[1:]}"  # an item is never empty: it has its ids


def _counted(breakdown: dict) -> dict:
    out = {k: v for k, v in breakdown.items() if not isinstance(v, (list, dict))}
    for key in ("step_metrics", "ctx_chunk_metrics"):
        if isinstance(breakdown.get(key), list):
            out[key.replace("_metrics", "s")] = len(breakdown[key])
    return out


# -- times -----------------------------------------------------------------------------------


def phase_durations(timing: dict) -> dict:
    """queue/ttft/e2e/kv_transfer in ms, as Server-Timing reports them. TensorRT-LLM measures
    from the engine's `arrival_time`; the HTTP arrival stands in when the engine's is missing."""
    arrival = timing.get("arrival_time") or timing.get("server_arrival_time")
    return _durations({
        name: (arrival if start == "arrival_time" else timing.get(start), timing.get(end))
        for name, start, end in _PHASES
    })


def _durations(spans: dict) -> dict:
    out = {}
    for name, (start, end) in spans.items():
        if start is not None and end is not None and end >= start:
            out[name] = round((end - start) * 1000, 3)
    return out


def _timing(perf: dict) -> dict:
    """timing_metrics with every time checked: a number of seconds, or None when missing, null or
    zero (legacy servers report an unset time as 0). Other keys (kv_cache_size) are kept as is."""
    timing = field(perf, "timing_metrics", (dict,)) or {}
    return {**timing, **{key: _seconds(timing, key) for key in _TIMING_KEYS if key in timing}}


def _seconds(obj: dict, key: str) -> float | None:
    value = field(obj, key, (int, float))
    return float(value) if value else None


def _earliest(timing: dict, *keys: str) -> float | None:
    present = [timing[k] for k in keys if timing.get(k) is not None]
    return min(present) if present else None


# -- the same lines in bulk (collector/bulk.py) ----------------------------------------------------
# LineParser.parse's rules over a stage of lines that DuckDB's JSON reader parses once, with the
# fields read typed (BULK.json_columns), for the lines whose reading there is sure to be the
# parser's. The reader converts a value of another type where the parser refuses it (a time given
# as text or a bool, an id as a float), so `ok` looks at the line's text for the values the parser
# would not take and leaves such a line to it (it quarantines the line); likewise a line orjson
# reads otherwise than DuckDB's reader (NaN or Infinity, a trailing comma, an exponent of three
# digits, nesting deeper than orjson reads), an engine id given as text (it may imply other ids),
# a time integer of 16 digits or more (compared exactly by the parser), a duration within 1e-6 of a
# half at its third decimal (Python's round and DuckDB's may part there) or from 1e15 ms (written
# otherwise), per-iteration step metrics (counted), and a line holding a key the record adds (a
# duration, process_start) or, as a worker record, a key of the disaggregated server's. Such
# texts may also stand where the parser does not read them: the line then goes to the parser
# without need, never to a record of its own. A key written twice, or a field of another shape
# than an object where one is read, stops the reader: the parser then reads the whole stage.
# tests/collector/test_bulk_perf_metrics.py holds the two ways to each other.

_TIMING_STRUCT = "STRUCT(" + ", ".join(f"{key} DOUBLE" for key in _TIMING_KEYS) + ")"
_PERF_STRUCT = f"STRUCT(timing_metrics {_TIMING_STRUCT})"
_PHASE_STRUCT = f"STRUCT(request_id VARCHAR, ctx_request_id VARCHAR, perf_metrics {_PERF_STRUCT})"
_LINE_STRUCT = (
    f"STRUCT(request_id VARCHAR, perf_metrics {_PERF_STRUCT}, ctx_request_id VARCHAR, disagg_request_id VARCHAR, "
    f"status VARCHAR, time_breakdown_metrics JSON, ctx_server VARCHAR, gen_server VARCHAR, "
    + ", ".join(f"{key} DOUBLE" for key in _DISAGG_TIMES)
    + f", ctx_perf_metrics {_PHASE_STRUCT}, gen_perf_metrics {_PHASE_STRUCT})"
)


def _keys(names) -> str:
    return '"(?:' + "|".join(names) + r')"\s*:\s*'


_ADDED_KEYS = ["process_start", "disagg_queue_ms"] + [
    f"{prefix}{name}" for prefix in ("", "ctx_", "gen_") for name, _, _ in _PHASES]
_READ_OTHERWISE = re.compile("|".join([
    r"[:\[,]\s*-?(?i:nan|inf)",  # orjson refuses these, DuckDB's reader takes them
    r",\s*[}\]]",  # a trailing comma, likewise
    r"[0-9][eE][-+]?[0-9]{3}",  # beyond a double, or below it
    _keys(_ADDED_KEYS),
    _keys(_TIMING_KEYS + _DISAGG_TIMES) + r'(?:["tf\[{]|-?[0-9]{16})',  # a time that is no number
    # an id orjson reads as no integer (a float, or beyond 64 bits), or as another integer (-0)
    _keys(("request_id", "ctx_request_id", "disagg_request_id")) + r"(?:[tf\[{]|-0[,}\s]|-?[0-9]+[.eE]|[0-9]{20}|-[0-9]{19})",
    _keys(("status", "ctx_server", "gen_server")) + r'[^"n]',  # text or null
]), re.ASCII)
_AS_WORKER_OTHERWISE = re.compile(
    _keys(("ctx_server", "gen_server", "disagg_server_arrival_time")) + "|" + _keys(("request_id",)) + '"', re.ASCII)


def _seconds_sql(x: str) -> str:
    """_seconds: the number, None when zero."""
    return f"CASE WHEN {x} <> 0 THEN {x} END"


def _timing_columns(struct: str, prefix: str) -> list[str]:
    """The times of a timing_metrics struct as seconds, as `<prefix><key>`."""
    return [f"{_seconds_sql(f'{struct}.{key}')} AS {prefix}{key}" for key in _TIMING_KEYS]


def _duration(name: str, start: str, end: str) -> tuple[str, str]:
    """_durations for one span: the ms, and whether DuckDB computes them as Python does."""
    both = f"{start} IS NOT NULL AND {end} IS NOT NULL AND {end} >= {start}"
    raw = f"(({end}) - ({start})) * 1000"
    value = f"CASE WHEN {both} THEN round({raw}, 3) END AS {name}"
    exact = (f"CASE WHEN {both} THEN abs({raw} * 1000 - floor({raw} * 1000) - 0.5) > 1e-6 "
             f"AND round({raw}, 3) < 1e15 ELSE true END")
    return value, exact


def _phase_durations(prefix: str, t: str) -> list[tuple[str, str]]:
    """phase_durations of the times `<t><key>` as `<prefix><name>`."""
    arrival = f"coalesce({t}arrival_time, {t}server_arrival_time)"
    return [_duration(f"{prefix}{name}", arrival if start == "arrival_time" else f"{t}{start}", f"{t}{end}")
            for name, start, end in _PHASES]


_WORKER_DURATIONS = _phase_durations("", "w_")
_DISAGG_DURATIONS = (
    [_duration("disagg_queue_ms", "d_arrival", "d_dispatch"), _duration("d_ttft_ms", "d_arrival", "d_first_token")]
    + _phase_durations("ctx_", "c_") + _phase_durations("gen_", "g_")
    + [_duration("d_e2e_ms", "d_arrival", "CASE WHEN r.gen_perf_metrics IS NOT NULL THEN g_last_token_time END")]
)
# The front of a record's attributes (stored_attrs): the durations it computed, in the order the
# parser adds them, then the process's start.
_WORKER_FRONT = [("queue_ms", "queue_ms"), ("ttft_ms", "ttft_ms"), ("e2e_ms", "e2e_ms"), ("kv_transfer_ms", "kv_transfer_ms")]
_DISAGG_FRONT = ([("disagg_queue_ms", "disagg_queue_ms"), ("ttft_ms", "d_ttft_ms")]
                 + [(f"{p}{name}", f"{p}{name}") for p in ("ctx_", "gen_") for name, _, _ in _PHASES]
                 + [("e2e_ms", "d_e2e_ms")])


def _front(pairs: list[tuple[str, str]]) -> str:
    parts = [f"""CASE WHEN {column} IS NOT NULL THEN '"{key}":' || CAST({column} AS VARCHAR) END"""
             for key, column in pairs]
    parts.append("""CASE WHEN file_process_start IS NOT NULL THEN '"process_start":"' || file_process_start || '"' END""")
    return f"concat_ws(',', {', '.join(parts)})"


# The line as the parser keeps it: without the whitespace bytes.strip() takes off (of which JSON
# allows these four around a value).
_TEXT = "trim(line, ' \t\n\r')"


def _attrs(front: str) -> str:
    return f"CASE WHEN {front} = '' THEN {_TEXT} ELSE '{{' || {front} || ',' || {_TEXT}[2:] END"


_SELECT = f"""
WITH lined AS (
    SELECT l.f, l.idx, l.start, l.line, j.r, {{worker}} AS file_worker, {{process_start}} AS file_process_start,
           {{kind_role}} AS file_kind_role,
           j.r.ctx_server IS NOT NULL OR j.r.gen_server IS NOT NULL OR j.r.disagg_server_arrival_time IS NOT NULL AS is_disagg
    FROM {{lines}} l LEFT JOIN {{json}} j USING (f, idx)
), timed AS (
    SELECT *,
        {", ".join(_timing_columns("r.perf_metrics.timing_metrics", "w_"))},
        {", ".join(_timing_columns("r.ctx_perf_metrics.perf_metrics.timing_metrics", "c_"))},
        {", ".join(_timing_columns("r.gen_perf_metrics.perf_metrics.timing_metrics", "g_"))},
        {_seconds_sql("r.disagg_server_arrival_time")} AS d_arrival,
        {_seconds_sql("r.disagg_ctx_dispatch_time")} AS d_dispatch,
        {_seconds_sql("r.disagg_server_first_token_time")} AS d_first_token
    FROM lined
), measured AS (
    SELECT *,
        {", ".join(value for value, _ in _WORKER_DURATIONS + _DISAGG_DURATIONS)},
        {" AND ".join(f"({exact})" for _, exact in _WORKER_DURATIONS)} AS worker_exact,
        {" AND ".join(f"({exact})" for _, exact in _DISAGG_DURATIONS)} AS disagg_exact,
        -- infer_worker_role
        CASE WHEN r.ctx_request_id IS NULL AND r.disagg_request_id IS NULL THEN 'agg'
             WHEN w_first_token_time IS NOT NULL AND w_last_token_time IS NOT NULL
             THEN CASE WHEN w_last_token_time = w_first_token_time THEN 'ctx' ELSE 'gen' END END AS inferred
    FROM timed
)
SELECT f, idx, start,
    coalesce(r IS NOT NULL AND NOT regexp_matches(line, '{bulk_sql.re2(_READ_OTHERWISE)}')
             AND length(line) - length(replace(replace(line, '[', ''), '{{', '')) < 1000
             AND CASE WHEN is_disagg
                 THEN disagg_exact
                      -- str(None) is the text a missing disagg id is compared as
                      AND coalesce(r.ctx_perf_metrics.request_id, '') <> 'None'
                      AND coalesce(r.gen_perf_metrics.request_id, '') <> 'None'
                 ELSE r.perf_metrics IS NOT NULL AND r.request_id IS NOT NULL AND r.time_breakdown_metrics IS NULL
                      AND worker_exact AND NOT regexp_matches(line, '{bulk_sql.re2(_AS_WORKER_OTHERWISE)}') END,
             false) AS ok,
    NULL::BIGINT AS time_ns,
    CASE WHEN is_disagg THEN d_arrival ELSE least(w_server_arrival_time, w_arrival_time) END AS steady_s,
    'perf' AS kind,
    CASE WHEN is_disagg THEN NULL ELSE file_worker END AS worker,
    CASE WHEN is_disagg THEN 'router' ELSE file_kind_role END AS role,
    NULL::VARCHAR AS level,
    CASE WHEN is_disagg THEN 'disagg perf metrics' ELSE 'perf metrics' END AS name,
    CAST(round(CASE WHEN is_disagg THEN d_e2e_ms ELSE e2e_ms END * 1000000) AS BIGINT) AS duration_ns,
    r.status AS status,
    CASE WHEN is_disagg THEN true ELSE coalesce(coalesce(file_kind_role, inferred) = 'agg', false) END AS entry,
    NULL::VARCHAR AS trace_id, NULL::VARCHAR AS span_id, NULL::VARCHAR AS parent_span_id,
    CASE WHEN is_disagg THEN {_attrs(_front(_DISAGG_FRONT))} ELSE {_attrs(_front(_WORKER_FRONT))} END AS attrs,
    CASE WHEN NOT is_disagg AND file_kind_role IS NULL THEN inferred END AS vote,
    is_disagg, r.ctx_server,
    -- the ids as Record.add_id stores them: str() of the value, none when empty
    nullif(r.request_id, '') AS request_id, nullif(r.disagg_request_id, '') AS disagg_request_id,
    nullif(r.ctx_request_id, '') AS ctx_request_id,
    nullif(r.ctx_perf_metrics.request_id, '') AS ctx_phase_id, nullif(r.gen_perf_metrics.request_id, '') AS gen_phase_id,
    nullif(r.ctx_perf_metrics.ctx_request_id, '') AS ctx_phase_ctx_id,
    nullif(r.gen_perf_metrics.ctx_request_id, '') AS gen_phase_ctx_id
FROM measured
"""

# Ids as worker_record and disagg_record add them: a worker's engine id on its process, its disagg
# id, its ctx request id as a label; a disaggregated server's disagg id and the ctx request ids
# its phases name, on its ctx server (a phase's request_id only where it is not the disagg id).
_IDS = f"""
SELECT DISTINCT record_id, i.kind, i.value, i.scope FROM (
    SELECT record_id, unnest(CASE WHEN NOT is_disagg THEN [
        {{'kind': '{ENGINE_REQUEST_ID}', 'value': request_id, 'scope': scope}},
        {{'kind': '{DISAGG_REQUEST_ID}', 'value': disagg_request_id, 'scope': NULL::VARCHAR}},
        {{'kind': '{CTX_REQUEST_ID}', 'value': ctx_request_id, 'scope': NULL::VARCHAR}}]
    ELSE [
        {{'kind': '{DISAGG_REQUEST_ID}', 'value': disagg_request_id, 'scope': NULL::VARCHAR}},
        {{'kind': '{CTX_REQUEST_ID}', 'value': CASE WHEN ctx_phase_id <> coalesce(disagg_request_id, 'None') THEN ctx_phase_id END,
          'scope': ctx_server}},
        {{'kind': '{CTX_REQUEST_ID}', 'value': ctx_phase_ctx_id, 'scope': ctx_server}},
        {{'kind': '{CTX_REQUEST_ID}', 'value': CASE WHEN gen_phase_id <> coalesce(disagg_request_id, 'None') THEN gen_phase_id END,
          'scope': ctx_server}},
        {{'kind': '{CTX_REQUEST_ID}', 'value': gen_phase_ctx_id, 'scope': ctx_server}}] END) AS i
    FROM {{records}}
) WHERE i.value IS NOT NULL
"""

BULK = bulk_sql.Rules(select=_SELECT, ids=_IDS, json_columns=_LINE_STRUCT, votes=True)
