"""vLLM's logs (0.33): the stdout of `vllm serve`, as its text formatter writes it or, with
`--logging-config.formatter json`, as python-json-logger does.

    (APIServer pid=4182) INFO 08-20 10:15:02 [request_logger.py:66] Received request chatcmpl-952be734a436bcaf: params: ...
    {"asctime": "2026-08-20 10:15:02,481", "levelname": "INFO", "name": "vllm.v1.engine.async_llm",
     "processName": "MainProcess", "process": 4182, "message": "Added request ...", "vllm_process_name": "APIServer"}

The text format (`vllm/logger.py`) starts each line with `VLLM_LOGGING_PREFIX`, the process's name
and pid (`APIServer`, `ApiServer_<i>` with several API servers, `EngineCore`, `EngineCore_DP<r>`,
`Worker…`), the level, a local time without a year or a zone (`%m-%d %H:%M:%S`) and the logging
call's file and line. A message of several lines is written a line each, every one with the same
prefix, the line before ending in `\\r` (`vllm/logging_utils/formatter.py`): such lines are marked
`continues`, so a traceback reads as one record. Times are read by collector/local_time.py's rule,
the year from the file's dated lines (the JSON format's) or its modification time.

Lines that carry request ids (`--enable-log-requests`, `--enable-log-outputs`):
- `Received request <external id>: params: SamplingParams(...)` (API server): its
  `kv_transfer_params` say a disaggregated side: `do_remote_decode` the prefill, `do_remote_prefill`
  the decode, whose `remote_request_id` is the prefill's engine id;
- `Added request <engine id>.`, `Aborted request(s) <engine id>,….`, `Request <external id>
  aborted.`, `Generated response <reply id>…: output: …, finish_reason: …`, and the engine core's
  `Finished recving/sending KV transfer for request <engine id>` and `NIXLConnector
  request_finished(<engine id>)…`;
- a warning or an error that names a request (`chatcmpl-…`, `cmpl-…`, `embd-…`, `resp_…`).
The external id and the engine id name the reply (ids.vllm_external_ids). vLLM's engine ids end
in 8 random hex digits and so are unique across its processes: they are scoped to the deployment
(`vllm`), not to a process, so a decode server's `remote_request_id` joins its prefill server's
`Added request` line.

The process is named `<name>:<pid>`, `<name>` being `ingest --worker`'s, else the file's name
without extensions: each API server is a worker of its own; the engine core's lines are its API
server's. A server answers requests alone (`agg`), its `Received request` line then the request's
entry, unless its requests' `kv_transfer_params` make it a prefill or a decode server.

Prompt and reply text is not stored unless `--keep-content` asks: the output of `Generated
response` and the body of `Request … JSON body:` are replaced by their length (`content_chars`).
"""

from __future__ import annotations

import os
import re

import orjson

from .. import local_time
from ..ids import ENGINE_REQUEST_ID, INTERNAL_ID, REPLY_ID, derived, vllm_external_ids
from ..records import Record
from .parsing import Unparseable, load_object, text_line

NAME = "vllm_log"
WORKER_FROM_USER = True
CONTENT_FROM_USER = True
LOCAL_TIMES = True
# vLLM's engine ids are unique across its processes (module doc): their scope is the deployment.
ENGINE_SCOPE = "vllm"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TEXT = re.compile(
    r"^(?P<prefix>.*?)\((?P<process>[A-Za-z][\w\[\]]*) pid=(?P<pid>\d+)\) (?P<level>[A-Z]+) "
    r"(?P<month>\d\d)-(?P<day>\d\d) (?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d) "
    r"\[(?P<file>[^\]\s]+?):(?P<line>\d+)\] ?(?P<message>.*)$", re.ASCII)
_JSON_KEYS = {"asctime", "levelname", "name", "message"}
_ASCTIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:,(\d{3}))?$", re.ASCII)
_STDLIB_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+", re.ASCII)
_API_SERVER = re.compile(r"^(?:APIServer|ApiServer_\d+)$")

_RECEIVED = re.compile(r"^Received request (\S+?): params: (.*?)(?:, lora_request: (.*?)\.?)?$", re.DOTALL)
_ADDED = re.compile(r"^Added request (\S+?)\.?$")
_ABORTED_ENGINE = re.compile(r"^Aborted request\(s\) (.+?)\.?$")
_ABORTED_EXTERNAL = re.compile(r"^Request (\S+) aborted\.$")
_GENERATED = re.compile(r"^Generated response (\S+?)(?P<how> \(streaming (?:delta|complete)\))?: output: (?P<output>.*), "
                        r"finish_reason: (?P<reason>.*)$", re.DOTALL)
_KV_DONE = re.compile(r"^Finished (?:recving|sending) KV transfer for request (\S+?)\.?$")
_NIXL_FINISHED = re.compile(r"^NIXLConnector request_finished\(([^)\s]+)\)")
_BODY = re.compile(r"^Request (\S+) JSON body: (.*)$", re.DOTALL)
_REMOTE_REQUEST = re.compile(r"'remote_request_id': '([^']+)'")
# A request's id in the text of a warning or an error: an external, reply or engine id.
_ID_IN_TEXT = re.compile(r"\b(?:chatcmpl|cmpl|embd)-[\w-]+|\bresp_\w+")
_WORRYING = ("WARNING", "ERROR", "CRITICAL")
_REMOTE_DECODE = re.compile(r"'do_remote_decode': True")
_REMOTE_PREFILL = re.compile(r"'do_remote_prefill': True")
_SNIFF_TEXT = re.compile(rb"\((?:APIServer|ApiServer_\d+|EngineCore(?:_DP\d+)?) pid=\d+\) [A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d \[")


def sniff(path: str, head: list[bytes]) -> bool:
    for line in head:
        if _SNIFF_TEXT.search(_ANSI.sub("", line.decode("utf-8", "replace")).encode()):
            return True
        if line.lstrip().startswith(b"{"):
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict) and _JSON_KEYS <= obj.keys() and (
                    "vllm_process_name" in obj or str(obj.get("name", "")).startswith("vllm.")):
                return True
    return False


class LineParser:
    def __init__(self, path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None):
        self._name = worker or _file_name(path)
        self.worker: str | None = None  # the API server whose lines were read last
        self.role: str | None = "agg"
        self.keep_content = keep_content
        self._times = local_time.LocalTimes.of_file(path, local_time.clock(tz))
        self._last_time_ns: int | None = None
        self._continued = False  # the line before ended in \r: this one goes on its message

    @property
    def clock(self) -> str:
        return self._times.how

    def state(self) -> dict:
        """What reading on from the file's position needs (collector/ingest.py)."""
        return {"last_time_ns": self._last_time_ns, "continued": self._continued, "worker": self.worker,
                "times": self._times.state()}

    def restore(self, state: dict) -> None:
        self._last_time_ns, self._continued = state.get("last_time_ns"), state.get("continued", False)
        self.worker = state.get("worker") or self.worker
        self._times.restore(state.get("times") or {})

    def parse(self, line: bytes) -> list[Record]:
        text = text_line(line)
        continues, self._continued = self._continued, text.endswith("\r")
        text = _ANSI.sub("", text.rstrip("\r\n"))
        if text.lstrip().startswith("{"):
            record = self._json_line(text)
        else:
            record = self._text_line(text)
        if continues:
            record.attrs["continues"] = True
        if record.time_ns is None:
            record.time_ns = self._last_time_ns  # lines printed without vLLM's prefix follow their line
        else:
            self._last_time_ns = record.time_ns
        record.attrs = record.attrs or None
        return [record]

    def _text_line(self, text: str) -> Record:
        m = _TEXT.match(text)
        if m is None:
            record = Record(kind="log", worker=self.worker, attrs={})
            std = _STDLIB_LEVEL.match(text)
            if std:  # uvicorn's own lines, printed past vLLM's formatter
                record.level, text = std.group(1), text[std.end():]
            else:
                record.attrs["continues"] = True
            record.name = text[:2000]
            return record
        notes: list[str] = []
        try:
            time_ns = self._times.ns(None, *(int(m.group(k)) for k in ("month", "day", "hour", "minute", "second")),
                                     notes=notes)
        except local_time.ZoneError as e:
            raise Unparseable(str(e)) from None
        except ValueError as e:
            raise Unparseable(f"unreadable time {m.group('month')}-{m.group('day')} "
                              f"{m.group('hour')}:{m.group('minute')}:{m.group('second')}: {e}") from None
        attrs = {"process": m.group("process"), "pid": int(m.group("pid")), "file": m.group("file"),
                 "line": int(m.group("line"))}
        if notes:
            attrs["time_note"] = notes[0]
        return self._message(m.group("message"), m.group("level"), time_ns, m.group("process"), m.group("pid"), attrs)

    def _json_line(self, text: str) -> Record:
        obj = load_object(text.encode())
        message, level, asctime = obj.get("message"), obj.get("levelname"), obj.get("asctime")
        if not (isinstance(message, str) and isinstance(level, str) and isinstance(asctime, str)):
            raise Unparseable("a vLLM JSON line needs text fields message, levelname and asctime")
        m = _ASCTIME.match(asctime)
        if m is None:
            raise Unparseable(f"unreadable time {asctime!r}")
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        notes: list[str] = []
        try:
            time_ns = self._times.ns(year, month, day, hour, minute, second, notes) + int(m.group(7) or 0) * 1_000_000
        except local_time.ZoneError as e:
            raise Unparseable(str(e)) from None
        except ValueError as e:
            raise Unparseable(f"unreadable time {asctime!r}: {e}") from None
        process = obj.get("vllm_process_name") or obj.get("processName")
        pid = obj.get("process")
        attrs = {k: v for k, v in obj.items() if k not in ("message", "levelname", "asctime")}
        if notes:
            attrs["time_note"] = notes[0]
        return self._message(message, level, time_ns, process if isinstance(process, str) else None,
                             str(pid) if isinstance(pid, int) and not isinstance(pid, bool) else None, attrs)

    def _message(self, message: str, level: str, time_ns: int, process: str | None, pid: str | None,
                 attrs: dict) -> Record:
        if process and pid and _API_SERVER.match(process):
            self.worker = f"{self._name}:{pid}"
        elif self.worker is None and pid:
            self.worker = f"{self._name}:{pid}"  # no API server seen yet: the process itself
        record = Record(kind="log", time_ns=time_ns, level=level, worker=self.worker, attrs=attrs)
        record.name = self._ids(record, message)[:2000]
        return record

    def _ids(self, record: Record, message: str) -> str:
        """Add the ids the message names; the message as stored (without prompt or reply text)."""
        if m := _RECEIVED.match(message):
            self._external(record, m.group(1))
            params = m.group(2)
            record.attrs["params"] = params
            if m.group(3) not in (None, "None"):
                record.attrs["lora_request"] = m.group(3)
            if _REMOTE_DECODE.search(params):
                self.role = "prefill"
            elif _REMOTE_PREFILL.search(params):
                self.role = "decode"
                for remote in _REMOTE_REQUEST.findall(params):
                    self._engine(record, remote)
                    record.attrs["remote_request_id"] = remote
            else:
                record.entry = self.role == "agg"
            return f"Received request {m.group(1)}"
        elif m := _ADDED.match(message):
            self._engine(record, m.group(1))
        elif m := _ABORTED_ENGINE.match(message):
            record.status = "aborted"
            for engine_id in m.group(1).split(","):
                self._engine(record, engine_id.strip())
        elif m := _ABORTED_EXTERNAL.match(message):
            record.status = "aborted"
            self._external(record, m.group(1))
        elif m := _GENERATED.match(message):
            record.add_id(REPLY_ID, m.group(1))
            record.attrs["finish_reason"] = m.group("reason")
            if self.keep_content:
                record.attrs["output"] = m.group("output")
            else:
                record.attrs["content_chars"] = {"output": len(m.group("output"))}
            return f"Generated response {m.group(1)}{m.group('how') or ''}"
        elif m := _KV_DONE.match(message) or _NIXL_FINISHED.match(message):
            self._engine(record, m.group(1))
            for remote in _REMOTE_REQUEST.findall(message):
                record.attrs["remote_request_id"] = remote
        elif m := _BODY.match(message):
            if not self.keep_content:
                record.attrs["content_chars"] = {"body": len(m.group(2))}
                return f"Request {m.group(1)} JSON body"
        elif record.level in _WORRYING:
            for named in _ID_IN_TEXT.findall(message):
                if derived(ENGINE_REQUEST_ID, named):
                    self._engine(record, named)
                else:
                    self._external(record, named)
        return message

    @staticmethod
    def _external(record: Record, external: str) -> None:
        for kind, value in vllm_external_ids(external) or [(INTERNAL_ID, external)]:
            record.add_id(kind, value)

    @staticmethod
    def _engine(record: Record, engine_id: str) -> None:
        record.add_id(ENGINE_REQUEST_ID, engine_id, ENGINE_SCOPE)


def _file_name(path: str) -> str:
    """The file's name without its extensions: `vllm-decode-0` of `/var/log/vllm-decode-0.log.gz`."""
    name = os.path.basename(path)
    return name.split(".")[0] or name
