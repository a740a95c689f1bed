"""TensorRT-LLM text logs: the stdout/stderr of `trtllm-serve` workers and of the disaggregated
server. There is no JSON option; its own lines come in these shapes:

    [07/09/2025-23:07:49] [TRT-LLM] [I] message                 tensorrt_llm/logger.py
    [07/09/2025-23:07:49] [TRT-LLM] [RANK 3] [W] message        several ranks (older: [MPI_Rank 3])
    [07/09/2025-23:07:49] [TRT-LLM] [W] [module] [RANK 3] message   newer releases: a module's tag, the rank after
    [07/09/2025-23:07:49] message                               stdlib loggers (the hook) through
                                                                the same root handler
    [TensorRT-LLM][INFO] message                                the C++ runtime, no time

and, in the same stream, uvicorn's lines, tracebacks and anything else a process prints, behind
the labels launchers put in front of each line (`0: ` from `srun -l`, `[1,0]<stdout>:` from
`mpirun --tag-output`): those are read as text (text_log.py, which reads this format's files a
line at a time with this module's Reader first). A C++ line takes the time of the line before it.

Times are local time to the second, with no zone: read by collector/local_time.py's rule (`--tz`,
TRACEJOIN_TZ, then this source's own TRACEJOIN_TRTLLM_TZ, else UTC, said to be assumed).

Lines that carry request ids:
- `<client> is disconnected, abort <engine id>` and `Post-processor hook failed for request
  <engine id>` (also `Failed to abort request <engine id>`): an engine id of this process;
- `Sending ServerRole.CONTEXT request <ctx_request_id> to http://host:port/...` (the disaggregated
  server, DEBUG; `Sending 0 request ...` under Python 3.11 and later, which formats the IntEnum as
  its value): the ctx request id, scoped to the ctx server it was sent to (`host:port`, as the
  server's perf records name it); sent to a generation server it is a label, since the id is the
  ctx server's. Such a line also shows the file is the disaggregated server's (role `router`);
- `disaggregated_params is not set in the response for request <disagg_request_id>`, and any
  `disagg_request_id=<n>` (the disaggregated server's exceptions, pasted without their stamp too).

The process is named by the file's folder when that is `host:port`, `host_port` or `host-pid`, else
by the file's own name (parsing.worker_from_path).
"""

from __future__ import annotations

import re

from . import bulk_sql, text_log
from .. import framing, local_time, tokens
from ..ids import CTX_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID
from ..records import Record
from .parsing import Unparseable, worker_from_path

NAME = "trtllm_log"
# Nothing in the file names its process: the user can (`trace-join ingest --worker`).
WORKER_FROM_USER = True
# Its times are local, without a zone: LineParser(path, tz=...) takes `--tz`.
LOCAL_TIMES = True
TZ_VARIABLE = "TRACEJOIN_TRTLLM_TZ"

# Digits and spaces are ASCII ones (re.ASCII): what launchers and loggers write, and what DuckDB's
# patterns read alike (the lines read in bulk, below).
_STAMP = re.compile(r"^\[(\d\d)/(\d\d)/(\d{4})-(\d\d):(\d\d):(\d\d)\] ?", re.ASCII)
# The rank before the severity (older releases), or a module's tag and the rank after it (newer).
_PYTHON_TAG = re.compile(r"^\[TRT-LLM\] ?(?:\[(?:RANK|MPI_Rank) (\d+)\] ?)?"
                         r"(?:\[([FEWIV])\] ?(?:\[([A-Za-z_][\w.-]*)\] ?)?(?:\[(?:RANK|MPI_Rank) (\d+)\] ?)?)?", re.ASCII)
_CPP_TAG = re.compile(r"^\[TensorRT-LLM\](?:\[([A-Z]+)\])? ?(?:\[(?:RANK|MPI_Rank) (\d+)\] ?)?", re.ASCII)
_SEVERITY = {"F": "CRITICAL", "E": "ERROR", "W": "WARNING", "I": "INFO", "V": "DEBUG"}
_SNIFF = re.compile(r"^\[(?:\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] |TRT-LLM\] |TensorRT-LLM\])")

_ENGINE_ID_LINES = re.compile(
    r"is disconnected, abort (\d+)|Post-processor hook failed for request (\d+)|Failed to abort request (\d+)",
    re.ASCII,
)
_SENDING = re.compile(r"Sending (?:ServerRole\.)?(\w+) request (\d+|None) to (?:https?://)?([^/\s]+)", re.ASCII)
# ServerRole is an IntEnum: Python 3.10 formats it `ServerRole.CONTEXT`, 3.11 and later `0`.
_CONTEXT_ROLE = ("CONTEXT", "0")
_NO_DISAGG_PARAMS = re.compile(r"disaggregated_params is not set in the response for request (\d+)", re.ASCII)
# What only this format's lines say, where a line has neither its time nor its tag: the
# disaggregated server's errors, the request-naming messages above as a traceback's last line.
WORDS = re.compile(rf"\b(?:disagg_request_id=\d|ctx_request_id\b)|{_ENGINE_ID_LINES.pattern}|{_NO_DISAGG_PARAMS.pattern}",
                    re.ASCII)
# Texts a line holds when it may show the file is the disaggregated server's (ESC: a terminal
# color may cut the words apart).
_ROUTER_MARKERS = (b"Sending", b"\x1b")


def sniff(path: str, head: list[bytes]) -> bool:
    return any(_SNIFF.match(framing.frame(line.decode("utf-8", "replace")).text) for line in head)


# A line this format writes: a time in its form, or one of its loggers' tags.
_CLAIMS = re.compile(r"^\[(?:\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\]|TRT-LLM\]|TensorRT-LLM\])", re.ASCII)
_DISAGG_IN_TEXT = re.compile(r"\bdisagg_request_id=(\d+)", re.ASCII)


def LineParser(path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None):
    return text_log.LineParser(path, worker=worker, keep_content=keep_content, tz=tz, first=NAME)


class Reader:
    def __init__(self, path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None):
        self.worker = worker or worker_from_path(path)
        self.role: str | None = None
        self._times = local_time.LocalTimes(local_time.clock(tz, TZ_VARIABLE))
        self._last_time_ns: int | None = None
        self._stamp_cache: tuple[str, int, list[str]] | None = None  # lines come many to a second

    @property
    def clock(self) -> str:
        """How the file's times were read (local_time.py), kept with its origin."""
        return self._times.how

    @property
    def scope(self) -> str:
        """The worker engine ids read now belong to: the file's process."""
        return self.worker

    def state_markers(self) -> tuple[bytes, ...]:
        """Texts of which a line must hold one to change what the parser knows of its file."""
        return () if self.role == "router" else _ROUTER_MARKERS

    def carry(self, time_ns: int | None) -> None:
        """The time the lines before left, for a line without its own (collector/bulk.py)."""
        self._last_time_ns = time_ns

    def state(self) -> dict:
        """What reading on from the file's position needs beside its worker and role
        (collector/ingest.py): the time an untimed line (a traceback's) takes."""
        return {"last_time_ns": self._last_time_ns}

    def restore(self, state: dict) -> None:
        self._last_time_ns = state.get("last_time_ns")

    def bulk_settings(self) -> dict[str, str] | None:
        """The zone's offset for BULK's select; None for a zone that follows daylight saving (or
        cannot be read), whose lines are read one by one."""
        offset_s = self._times.clock.fixed_offset_s
        return None if offset_s is None or self._times.clock.error else {"offset_s": str(offset_s)}

    def claims(self, text: str) -> bool:
        return _CLAIMS.match(text) is not None

    def read(self, framed) -> Record:
        text = framed.text
        record = Record(kind="log")
        attrs: dict = {}
        m = _STAMP.match(text)
        if m:
            record.time_ns = self._stamp_ns(m, attrs)
            text = text[m.end():]
        m = _PYTHON_TAG.match(text) or _CPP_TAG.match(text)
        if m:
            python = m.re is _PYTHON_TAG
            rank, level = (m.group(1) or m.group(4), m.group(2)) if python else (m.group(2), m.group(1))
            record.level = _SEVERITY.get(level, level) if python else level
            if rank is not None:
                attrs["rank"] = int(rank)
            attrs["logger"] = "TRT-LLM" if python else "TensorRT-LLM"
            if python and m.group(3):
                attrs["module"] = m.group(3)
            text = text[m.end():]
        elif m := text_log.PLAIN_LEVEL.match(text):  # a stdlib logger's line known by its words
            record.level = m.group(1)
        record.name = text[:2000]
        self._ids(record, text, attrs)
        record.attrs = attrs or None
        if record.time_ns is None:
            record.time_ns = self._last_time_ns  # C++ lines follow the line before
        else:
            self._last_time_ns = record.time_ns
        return record

    def _stamp_ns(self, m: re.Match, attrs: dict) -> int:
        stamp = m.group(0)
        if self._stamp_cache is None or self._stamp_cache[0] != stamp:
            month, day, year, hour, minute, second = (int(g) for g in m.groups())
            notes: list[str] = []
            try:
                ns = self._times.ns(year, month, day, hour, minute, second, notes)
            except local_time.ZoneError as e:
                raise Unparseable(str(e)) from None
            except ValueError as e:
                raise Unparseable(f"unreadable time {stamp.strip()!r}: {e}") from None
            self._stamp_cache = (stamp, ns, notes)
        _, ns, notes = self._stamp_cache
        if notes:
            attrs["time_note"] = notes[0]
        return ns

    def _ids(self, record: Record, text: str, attrs: dict) -> None:
        m = _ENGINE_ID_LINES.search(text)
        if m:
            record.add_id(ENGINE_REQUEST_ID, next(g for g in m.groups() if g), self.worker)
        m = _SENDING.search(text)
        if m:
            role, ctx_request_id, server = m.groups()
            sent_to_ctx = role.upper() in _CONTEXT_ROLE
            if ctx_request_id != "None":
                record.add_id(CTX_REQUEST_ID, ctx_request_id, server if sent_to_ctx else None)
            attrs["ctx_server" if sent_to_ctx else "gen_server"] = server
            self.role = "router"
        m = _NO_DISAGG_PARAMS.search(text) or _DISAGG_IN_TEXT.search(text)
        if m:
            record.add_id(DISAGG_REQUEST_ID, m.group(1))


# -- the same lines in bulk (collector/bulk.py) ----------------------------------------------------
# Reader.read's rules over a batch of lines in DuckDB, for the lines the Reader claims and line
# framing leaves as they are (no colour, no trailing space; a claimed line starts with `[`, which
# no wrapper does but kubectl's and mpirun's, whose `[pod/`, `[1,0]<` no claimed line starts
# with), and text_log.PlainText's for uvicorn's `INFO:` lines (text_log.PLAIN_LEVEL) that no
# format knows by its words. `ok` leaves to the parser: every other line (a traceback's, a wrapped one),
# NUL bytes, a time it may refuse (not a date, or outside 1678-2261: 64-bit nanoseconds), a rank
# too long for 64 bits, a server name that is not plain ASCII (JSON may write it otherwise), and a
# line without a time whose time the SQL does not know (the last line before it in its piece
# that may give one is the parser's, or there is none). tests/collector/test_bulk_trtllm_log.py
# holds the two ways to each other.

_SEVERITY_SQL = " ".join(f"WHEN '{letter}' THEN '{level}'" for letter, level in _SEVERITY.items())
# Patterns whose groups are read by name are put in a group of their own: the first name is the
# whole match. A pattern is matched only against text holding the words it needs (_when), which
# is most of the select's time saved.
# A line the parser reads, whose time the SQL does not know.
_PARSERS = "-9223372036854775808"
_SELECT = f"""
WITH framed AS (
    -- lines framing leaves as they are
    SELECT f, idx, start, offset_s, t, uncoloured AND right(t, 1) BETWEEN '!' AND '~' AS as_is,
        -- a line that takes the time of the line before, however it is read (0x01: a line bulk.py
        -- did not give the SQL, which the parser reads)
        uncoloured AND left(t, 1) < '{framing.BOX_FIRST}' AND NOT starts_with(t, chr(1))
            AND NOT regexp_matches(t, '{bulk_sql.re2(text_log.MAY_BE_TIMED)}') AS timeless
    FROM (SELECT *, NOT contains(t, chr(27)) AND NOT regexp_matches(t, '{bulk_sql.re2(framing.PASTED_COLOUR)}') AS uncoloured
          FROM (SELECT f, idx, start, {{offset_s}} AS offset_s, rtrim(line, chr(13) || chr(10)) AS t FROM {{lines}}))
), stripped AS (
    SELECT *, as_is AND regexp_matches(t, '{bulk_sql.re2(_CLAIMS)}') AS claimed,
        -- a line that goes on the line before (a traceback's frame), as text_log.PlainText reads it
        CASE WHEN timeless AND as_is AND NOT regexp_matches(t, '{bulk_sql.re2(text_log.MAY_HAVE_LEVEL)}')
             THEN NOT {text_log.words_sql("t")} ELSE false END AS cont,
        -- a line text_log.PlainText reads by its level alone (uvicorn's), which no format knows by its words
        regexp_extract(_when(as_is AND contains(left(t, 9), ':'), t), '({bulk_sql.re2(text_log.PLAIN_LEVEL)})',
                       ['tag', 'level']) AS plain
    FROM framed
), worded AS (
    SELECT * REPLACE (CASE WHEN plain.tag <> '' AND {text_log.words_sql("t")} THEN {{'tag': '', 'level': ''}}
                           ELSE plain END AS plain)
    FROM stripped
), stamped AS (
    SELECT *, regexp_extract(t, '{bulk_sql.re2(_STAMP)}', 0) AS stamp FROM worded
), timed AS (
    SELECT *, substr(t, length(stamp) + 1) AS after_stamp,
        CASE WHEN stamp <> '' AND substr(stamp, 8, 4) BETWEEN '1678' AND '2261'
             THEN epoch_ns(try_strptime(substr(stamp, 2, 19), '%m/%d/%Y-%H:%M:%S')) - offset_s::BIGINT * 1000000000 END AS own_time
    FROM stamped
), tagged AS (
    SELECT *,
        regexp_extract(_when(starts_with(after_stamp, '[TRT-LLM]'), after_stamp),
                       '({bulk_sql.re2(_PYTHON_TAG)})', ['tag', 'rank', 'letter', 'module', 'rank_after']) AS py,
        regexp_extract(_when(starts_with(after_stamp, '[TensorRT-LLM]'), after_stamp),
                       '({bulk_sql.re2(_CPP_TAG)})', ['tag', 'level', 'rank']) AS cpp
    FROM timed
), read AS (
    SELECT f, idx, start, t, claimed, cont, timeless, plain.tag <> '' AS plain, stamp, own_time,
        CASE WHEN py.tag <> '' THEN CASE py.letter {_SEVERITY_SQL} END
             WHEN cpp.tag <> '' THEN nullif(cpp.level, '')
             WHEN plain.tag <> '' THEN plain.level END AS level,
        CASE WHEN py.tag <> '' THEN coalesce(nullif(py.rank, ''), nullif(py.rank_after, ''))
             WHEN cpp.tag <> '' THEN nullif(cpp.rank, '') END AS rank,
        CASE WHEN py.tag <> '' THEN 'TRT-LLM' WHEN cpp.tag <> '' THEN 'TensorRT-LLM' END AS logger,
        CASE WHEN py.tag <> '' THEN nullif(py.module, '') END AS module,
        substr(after_stamp, length(CASE WHEN py.tag <> '' THEN py.tag WHEN cpp.tag <> '' THEN cpp.tag
                                        WHEN plain.tag <> '' THEN plain.tag ELSE '' END) + 1) AS message
    FROM tagged
), ided AS (
    SELECT *,
        regexp_extract(_when(claimed AND (contains(message, 'abort ') OR contains(message, 'Post-processor hook failed')), message),
                       '({bulk_sql.re2(_ENGINE_ID_LINES)})', ['all', 'a', 'b', 'c']) AS engine,
        regexp_extract(_when(claimed AND contains(message, 'Sending '), message),
                       '({bulk_sql.re2(_SENDING)})', ['all', 'role', 'id', 'server']) AS sending,
        CASE WHEN claimed AND contains(message, 'disagg') THEN coalesce(
            nullif(regexp_extract(message, '{bulk_sql.re2(_NO_DISAGG_PARAMS)}', 1), ''),
            nullif(regexp_extract(message, '{bulk_sql.re2(_DISAGG_IN_TEXT)}', 1), '')) END AS disagg_id
    FROM read
), checked AS (
    SELECT *, sending.all <> '' AND upper(sending.role) IN ('CONTEXT', '0') AS to_ctx,
        -- lines the parser stores nothing of, and which leave its time as it was
        contains(t, chr(0)) OR NOT regexp_matches(t, '[^\\t\\n\\x0b\\f\\r ]') AS unstored
    FROM ided
), own AS MATERIALIZED (
    SELECT *, (claimed OR plain) AND NOT unstored AND (stamp = '' OR own_time IS NOT NULL)
        AND coalesce(length(rank) <= 18, true) AND (sending.all = '' OR regexp_matches(sending.server, '^[!-~]+$'))
        AS own_ok
    FROM checked
), flags AS (
    -- what the windows below read: few columns, since a window sorts every column it carries
    SELECT f, idx, unstored, own_ok, timeless, cont, stamp <> '' AS stamped, own_time,
        sending.all <> '' AS sends, contains(t, 'Sending') AS says_sending
    FROM own
), carrying AS (
    -- the time the lines before leave: a line the parser reads that may have a time of its own
    -- leaves one the SQL does not know
    SELECT *, last_value(CASE WHEN unstored THEN NULL
                              WHEN NOT own_ok THEN CASE WHEN NOT timeless THEN {_PARSERS} END
                              WHEN stamped THEN own_time END
                         IGNORE NULLS)
        OVER (PARTITION BY f ORDER BY idx ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before,
        max(idx) OVER (PARTITION BY f) AS last_idx,
        -- a line before that shows the file is the router's: then no line is one of its state_markers()
        coalesce(bool_or(sends) OVER (PARTITION BY f ORDER BY idx
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false) AS taught
    FROM flags
), stored AS (
    SELECT *, own_ok AND (stamped OR coalesce(before <> {_PARSERS}, false)) AS row_ok
    FROM carrying
), continued AS (
    -- a run of lines that go on the line before is the SQL's when the SQL stores the line it goes
    -- on and the line after it: the parser then reads no line right after one of them (the
    -- last line of a piece, a line that may teach it something of its file, are the parser's)
    SELECT f, idx, before, row_ok,
        last_value(CASE WHEN unstored OR cont THEN NULL ELSE row_ok END IGNORE NULLS)
            OVER (PARTITION BY f ORDER BY idx ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS opened,
        first_value(CASE WHEN unstored OR cont THEN NULL
                         ELSE row_ok AND idx < last_idx AND (taught OR NOT says_sending) END IGNORE NULLS)
            OVER (PARTITION BY f ORDER BY idx ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS closed,
        last_value(CASE WHEN unstored THEN NULL ELSE cont END IGNORE NULLS)
            OVER (PARTITION BY f ORDER BY idx ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS after_cont
    FROM stored
), done AS (
    SELECT * REPLACE (
        CASE WHEN cont THEN CASE WHEN NOT after_cont AND regexp_matches(t, '{bulk_sql.re2(text_log.EXCEPTION_LINE)}')
                                 THEN 'ERROR' END
             ELSE level END AS level),
        row_ok OR (cont AND coalesce(opened AND closed, false)) AS ok
    FROM own JOIN continued USING (f, idx)
)
SELECT f, idx, start, ok,
    CASE WHEN stamp <> '' THEN own_time ELSE nullif(before, {_PARSERS}) END AS time_ns,
    NULL::DOUBLE AS steady_s, 'log' AS kind, NULL::VARCHAR AS worker, NULL::VARCHAR AS role, level,
    left(message, 2000) AS name, NULL::BIGINT AS duration_ns, NULL::VARCHAR AS status, false AS entry,
    NULL::VARCHAR AS trace_id, NULL::VARCHAR AS span_id, NULL::VARCHAR AS parent_span_id,
    CASE WHEN cont THEN CASE WHEN level IS NULL THEN '{{"continues":true}}' END
         -- the attributes the Reader sets, in its order (a concatenation: JSON functions cost twice as much)
         ELSE nullif('{{' || concat_ws(',', '"rank":' || TRY_CAST(rank AS BIGINT), '"logger":' || to_json(logger),
                                       '"module":' || to_json(module),
                                       '"ctx_server":' || to_json(CASE WHEN to_ctx THEN sending.server END),
                                       '"gen_server":' || to_json(CASE WHEN sending.all <> '' AND NOT to_ctx
                                                                       THEN sending.server END)) || '}}', '{{}}') END AS attrs,
    coalesce(nullif(engine.a, ''), nullif(engine.b, ''), nullif(engine.c, '')) AS engine_id,
    CASE WHEN sending.all <> '' AND sending.id <> 'None' THEN sending.id END AS ctx_id,
    CASE WHEN to_ctx THEN sending.server END AS ctx_scope, disagg_id, {tokens.sql("t")} AS words
FROM done
"""
_IDS = f"""
SELECT DISTINCT record_id, i.kind, i.value, i.scope FROM (
    SELECT record_id, unnest([
        {{'kind': '{ENGINE_REQUEST_ID}', 'value': engine_id, 'scope': scope}},
        {{'kind': '{CTX_REQUEST_ID}', 'value': ctx_id, 'scope': ctx_scope}},
        {{'kind': '{DISAGG_REQUEST_ID}', 'value': disagg_id, 'scope': NULL::VARCHAR}}]) AS i
    FROM {{records}} WHERE engine_id IS NOT NULL OR ctx_id IS NOT NULL OR disagg_id IS NOT NULL
) WHERE i.value IS NOT NULL
UNION ALL
SELECT record_id, '{tokens.TOKEN}', w, NULL::VARCHAR FROM (
    SELECT record_id, engine_id, ctx_id, disagg_id, unnest(words) AS w FROM {{records}}
) WHERE w IS DISTINCT FROM engine_id AND w IS DISTINCT FROM ctx_id AND w IS DISTINCT FROM disagg_id
"""

BULK = bulk_sql.Rules(select=_SELECT, ids=_IDS)
