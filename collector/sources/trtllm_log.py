"""TensorRT-LLM text logs: the stdout/stderr of `trtllm-serve` workers and of the disaggregated
server. There is no JSON option; lines come in these shapes:

    [07/09/2025-23:07:49] [TRT-LLM] [I] message                 tensorrt_llm/logger.py
    [07/09/2025-23:07:49] [TRT-LLM] [RANK 3] [W] message        several ranks (older: [MPI_Rank 3])
    [07/09/2025-23:07:49] message                               stdlib loggers (the hook) through
                                                                the same root handler
    [TensorRT-LLM][INFO] message                                the C++ runtime, no time
    INFO:     127.0.0.1:50522 - "POST /v1/chat/completions ..."  uvicorn and logging's default format

plus tracebacks and anything else a process prints, and the labels launchers put in front of
each line (`0: ` from `srun -l`, `[1,0]<stdout>:` from `mpirun --tag-output`), which are removed.
Every line becomes a record; a line with no time of its own (tracebacks, C++ lines) takes the
time of the line before it.

Times are local time to the second, with no zone. They are read as UTC unless the environment
variable TRACEJOIN_TRTLLM_TZ names the servers' zone: an offset (`+02:00`, `-0530`) or a zone name
(`Europe/Berlin`, which follows daylight saving). A value that is neither makes every timed line
unreadable, with the reason, rather than placing lines at the wrong time.

Lines that carry request ids:
- `<client> is disconnected, abort <engine id>` and `Post-processor hook failed for request
  <engine id>` (also `Failed to abort request <engine id>`): an engine id of this process;
- `Sending ServerRole.CONTEXT request <ctx_request_id> to http://host:port/...` (the disaggregated
  server, DEBUG; `Sending 0 request ...` under Python 3.11 and later, which formats the IntEnum as
  its value): the ctx request id, scoped to the ctx server it was sent to (`host:port`, as the
  server's perf records name it); sent to a generation server it is a label, since the id is the
  ctx server's. Such a line also shows the file is the disaggregated server's (role `router`);
- `disaggregated_params is not set in the response for request <disagg_request_id>`.

The process is named by the file's folder when that is `host:port`, `host_port` or `host-pid`, else
by the file's own name (parsing.worker_from_path).
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..ids import CTX_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID
from ..records import Record
from .parsing import Unparseable, worker_from_path

NAME = "trtllm_log"
# Nothing in the file names its process: the user can (`trace-join ingest --worker`).
WORKER_FROM_USER = True
TZ_VARIABLE = "TRACEJOIN_TRTLLM_TZ"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LAUNCHER_LABEL = re.compile(r"^(?:\s*\d+: |\[\d+,\d+\]<std(?:out|err)>:)")
_STAMP = re.compile(r"^\[(\d\d)/(\d\d)/(\d{4})-(\d\d):(\d\d):(\d\d)\] ?")
_PYTHON_TAG = re.compile(r"^\[TRT-LLM\] ?(?:\[(?:RANK|MPI_Rank) (\d+)\] ?)?(?:\[([FEWIV])\] ?)?")
_CPP_TAG = re.compile(r"^\[TensorRT-LLM\](?:\[([A-Z]+)\])? ?(?:\[(?:RANK|MPI_Rank) (\d+)\] ?)?")
_STDLIB_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s*")
_SEVERITY = {"F": "CRITICAL", "E": "ERROR", "W": "WARNING", "I": "INFO", "V": "DEBUG"}
_SNIFF = re.compile(r"^\[(?:\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] |TRT-LLM\] |TensorRT-LLM\])")

_ENGINE_ID_LINES = re.compile(
    r"is disconnected, abort (\d+)|Post-processor hook failed for request (\d+)|Failed to abort request (\d+)"
)
_SENDING = re.compile(r"Sending (?:ServerRole\.)?(\w+) request (\d+|None) to (?:https?://)?([^/\s]+)")
# ServerRole is an IntEnum: Python 3.10 formats it `ServerRole.CONTEXT`, 3.11 and later `0`.
_CONTEXT_ROLE = ("CONTEXT", "0")
_NO_DISAGG_PARAMS = re.compile(r"disaggregated_params is not set in the response for request (\d+)")


def sniff(path: str, head: list[bytes]) -> bool:
    return any(_SNIFF.match(_strip_decorations(line.decode("utf-8", "replace"))) for line in head)


def _strip_decorations(text: str) -> str:
    """A line without terminal colors and without a launcher's label."""
    return _LAUNCHER_LABEL.sub("", _ANSI.sub("", text))


class LineParser:
    def __init__(self, path: str, worker: str | None = None):
        self.worker = worker or worker_from_path(path)
        self.role: str | None = None
        self._zone, self._zone_error = _zone_from_environment()
        self._last_time_ns: int | None = None
        self._stamp_cache: tuple[str, int] | None = None  # lines come many to a second

    def parse(self, line: bytes) -> list[Record]:
        try:
            text = line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            raise Unparseable("not UTF-8 text") from None
        if "\x00" in text:
            raise Unparseable("binary data (NUL bytes) in a text line")
        text = _strip_decorations(text)
        record = Record(kind="log")
        attrs: dict = {}
        m = _STAMP.match(text)
        if m:
            record.time_ns = self._stamp_ns(m)
            text = text[m.end():]
        m = _PYTHON_TAG.match(text) or _CPP_TAG.match(text)
        if m:
            python = m.re is _PYTHON_TAG
            rank, level = (m.group(1), m.group(2)) if python else (m.group(2), m.group(1))
            record.level = _SEVERITY.get(level, level) if python else level
            if rank is not None:
                attrs["rank"] = int(rank)
            attrs["logger"] = "TRT-LLM" if python else "TensorRT-LLM"
            text = text[m.end():]
        else:
            m = _STDLIB_LEVEL.match(text)
            if m:
                record.level = m.group(1)
                text = text[m.end():]
        record.name = text[:2000]
        self._ids(record, text, attrs)
        record.attrs = attrs or None
        if record.time_ns is None:
            record.time_ns = self._last_time_ns  # tracebacks and untimed lines follow their line
        else:
            self._last_time_ns = record.time_ns
        return [record]

    def _stamp_ns(self, m: re.Match) -> int:
        if self._zone_error:
            raise Unparseable(self._zone_error)
        stamp = m.group(0)
        if self._stamp_cache and self._stamp_cache[0] == stamp:
            return self._stamp_cache[1]
        month, day, year, hour, minute, second = (int(g) for g in m.groups())
        try:
            local = datetime(year, month, day, hour, minute, second, tzinfo=self._zone)
        except ValueError as e:
            raise Unparseable(f"unreadable time {stamp.strip()!r}: {e}") from None
        ns = int(local.timestamp()) * 1_000_000_000
        self._stamp_cache = (stamp, ns)
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
        m = _NO_DISAGG_PARAMS.search(text)
        if m:
            record.add_id(DISAGG_REQUEST_ID, m.group(1))


def _zone_from_environment() -> tuple[tzinfo | None, str | None]:
    """(zone, None), or (None, reason) when TRACEJOIN_TRTLLM_TZ cannot be read."""
    value = os.environ.get(TZ_VARIABLE, "").strip()
    if value in ("", "Z", "UTC"):
        return timezone.utc, None
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)?", value)
    if m:
        offset = timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))
        return timezone(-offset if m.group(1) == "-" else offset), None
    try:
        return ZoneInfo(value), None
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None, f"{TZ_VARIABLE}={value!r} is neither an offset like +02:00 nor a zone name like Europe/Berlin"
