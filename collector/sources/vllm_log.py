"""vLLM's logs, from 0.4 to 0.33 and its Rust frontend: the stdout of `vllm serve`, as its text
formatter writes it or, with `--logging-config.formatter json`, as python-json-logger does.

    (APIServer pid=4182) INFO 08-20 10:15:02 [request_logger.py:66] Received request chatcmpl-952be734a436bcaf: params: ...
    (APIServer pid=1) (EngineCore_DP0 pid=78) DEBUG 12-07 22:42:47 [distributed/.../v1/nixl_connector.py:614] NIXLConnector request_finished(chatcmpl-…), …
    INFO 04-10 04:02:53 [logger.py:39] Received request chatcmpl-159892b4…: prompt: '…', params: SamplingParams(…)    (2025, V1)
    INFO 10-01 19:10:36 logger.py:36] Received request cmpl-f47dc5f9…-0: prompt: '…', params: SamplingParams(…)    (2024, V0)
    (RustFrontend pid=2502) INFO 12-03 10:15:04 [chat_completions.rs:212] chat_completions{request_id=chatcmpl-1a2b engine_request_id="chatcmpl-1a2b-bf02a813"}: chat completion finished model=… finish_reason=stop
    {"asctime": "2026-08-20 10:15:02,481", "levelname": "INFO", "name": "vllm.v1.engine.async_llm",
     "processName": "MainProcess", "process": 4182, "message": "Added request ...", "vllm_process_name": "APIServer"}

The text format (`vllm/logger.py`) starts each line with `VLLM_LOGGING_PREFIX`, the process's name
and pid (`APIServer`, `ApiServer_<i>` with several API servers, `EngineCore`, `EngineCore_DP<r>`,
`Worker_TP0_EP0`, `VllmWorker rank=0`, `RustFrontend`; several when one process prints another's
lines; none before 0.6), the level, a local time without a year or a zone (`%m-%d %H:%M:%S`) and
the logging call's file and line: `[file.py:36]`, `[v1/metrics/loggers.py:259]` or `file.py:36]`
before 0.7 (a page's auto-linker may have made it `[[loggers.py:259](http://loggers.py:259/)]`).
The Rust frontend writes the same prefix, then the tracing span scope that names the request
(`request_id`, its reply id; `engine_request_id`), the message and its `key=value` fields
(collector/sources/tracing_fmt.py). A message of several lines is written a line each, every one with the same
prefix, the line before ending in `\\r` (`vllm/logging_utils/formatter.py`): such lines are marked
`continues`, so a traceback reads as one record. Times are read by collector/local_time.py's rule,
the year from the file's dated lines (the JSON format's) or its modification time.

Lines that carry request ids (`--enable-log-requests`, `--enable-log-outputs`):
- `Received request <external id>: params: SamplingParams(...)` (API server; before 0.7
  `prompt: '…', params: …` or `prompt: None, prefix_pos: None,sampling_params: …`, the prompt not
  stored): its `kv_transfer_params` say a disaggregated side: `do_remote_decode` the prefill,
  `do_remote_prefill` the decode, whose `remote_request_id` is the prefill's engine id;
- `Added request <engine id>.`, `Aborted request(s) <engine id>,….` (`Aborted request <id>.`
  before 0.7), `Request <external id> aborted.`, `Finished request <id>.`, `Generated response
  <reply id>…: output: …, finish_reason: …`, and the engine core's `Finished recving/sending KV
  transfer for request <engine id>` and `NIXLConnector request_finished(<engine id>)…`; an aborted
  request's line states its failure;
- any other line that names one request (`chatcmpl-…`, `cmpl-…`, `embd-…`, `resp_…`, the 2024
  `chat-<32 hex>`); a line naming several joins none of them (its ids are labels);
- the Rust frontend's span scope: `request_id` and `engine_request_id`.
An engine id is its external id plus `-<8 hex>` since 0.11, and the external id itself before: an
id of the first shape is read as an engine id, else as an external one. The external id and the
engine id name the reply (ids.vllm_external_ids). vLLM's engine ids end
in 8 random hex digits and so are unique across its processes: they are scoped to the deployment
(`vllm`), not to a process, so a decode server's `remote_request_id` joins its prefill server's
`Added request` line.

The process is named `<name>:<pid>`, `<name>` being `ingest --worker`'s, else the pod or container
a log wrapper names (collector/framing.py), else the file's name without extensions: each API
server is a worker of its own; the engine core's lines are its API server's. A server answers requests alone (`agg`), its `Received request` line then the request's
entry, unless its requests' `kv_transfer_params` make it a prefill or a decode server.

Prompt and reply text is not stored unless `--keep-content` asks: the output of `Generated
response` and the body of `Request … JSON body:` are replaced by their length (`content_chars`).
"""

from __future__ import annotations

import os
import re

from . import text_log, tracing_fmt
from .. import framing, local_time
from ..ids import ENGINE_REQUEST_ID, INTERNAL_ID, REPLY_ID, VLLM_ENGINE_SCOPE, derived, vllm_external_ids
from ..records import Record
from .parsing import Unparseable, load_object

NAME = "vllm_log"
WORKER_FROM_USER = True
CONTENT_FROM_USER = True
LOCAL_TIMES = True

_PROCESS_TAG = r"\((?P<process>[A-Za-z][\w\[\]]*)(?: rank=\d+)? pid=(?P<pid>\d+)\) "
_TEXT = re.compile(
    rf"^(?:(?P<prefix>[^(]*?)(?P<tags>(?:\([A-Za-z][\w\[\]]*(?: rank=\d+)? pid=\d+\) )*){_PROCESS_TAG})?"
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) "
    r"(?P<month>\d\d)-(?P<day>\d\d) (?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)(?:\.(?P<fraction>\d{1,6}))? "
    r"(?:\[\[?(?P<file>[^\]\s(]+?):(?P<line>\d+)(?:\]\([^)\s]*\))?\]|(?P<old_file>[\w./-]+?):(?P<old_line>\d+)\]) ?"
    r"(?P<message>.*)$", re.ASCII | re.DOTALL)
_LEVEL_AND_DATE = re.compile(r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d ", re.ASCII)
_JSON_KEYS = {"asctime", "levelname", "name", "message"}
_ASCTIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:,(\d{3}))?$", re.ASCII)
_API_SERVER = re.compile(r"^(?:APIServer|ApiServer_\d+|RustFrontend)$")
_LEVELS = {"WARN": "WARNING"}

_RECEIVED = re.compile(r"^Received request (\S+?): (.*?)\.?$", re.DOTALL)
_PARAMS = re.compile(r"(?:^|[ ,])(?:sampling_)?params: ")
_PROMPT = re.compile(r"^prompt: ")
_LORA = re.compile(r", lora_request: (.*?)\.?$", re.DOTALL)
_ADDED = re.compile(r"^Added request (\S+?)\.?$")
_FINISHED = re.compile(r"^Finished request (\S+?)\.?$")
_ABORTED_ENGINE = re.compile(r"^Aborted request(?:\(s\))? (.+?)\.?$")
_ABORTED_EXTERNAL = re.compile(r"^Request (\S+) aborted\.$")
# The reply id is not in the Rust frontend's line (its span scope has it).
_GENERATED = re.compile(r"^Generated response(?: (?P<id>[^\s(]\S*?))?(?P<how> \(streaming (?:delta|complete)\))?: "
                        r"output: (?P<output>.*), finish_reason: (?P<reason>.*)$", re.DOTALL)
_KV_DONE = re.compile(r"^Finished (?:recving|sending) KV transfer for request (\S+?)\.?$")
_NIXL_FINISHED = re.compile(r"^NIXLConnector request_finished\(([^)\s]+)\)")
_BODY = re.compile(r"^Request (\S+) JSON body: (.*)$", re.DOTALL)
_REMOTE_REQUEST = re.compile(r"'remote_request_id': '([^']+)'")
# A request's id in any other line: an external, reply or engine id.
_ID_IN_TEXT = re.compile(r"\b(?:chatcmpl|cmpl|embd)-[\w-]+|\bchat-[0-9a-f]{32}\b|\bresp_\w+")
_REMOTE_DECODE = re.compile(r"'do_remote_decode': True")
_REMOTE_PREFILL = re.compile(r"'do_remote_prefill': True")
_SNIFF_TEXT = re.compile(r"(?:^|\) )(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d (?:\[[^\]\s]+:\d+\]|[\w./-]+:\d+\])")


def sniff(path: str, head: list[bytes]) -> bool:
    for line in head:
        text = framing.frame(line.decode("utf-8", "replace")).text
        if _SNIFF_TEXT.search(text) or _is_json_line(text):
            return True
    return False


def _is_json_line(text: str) -> bool:
    return text.startswith("{") and '"levelname"' in text and '"asctime"' in text and "vllm" in text


def LineParser(path: str, **options) -> text_log.TextLines:
    """The parser of a file of vLLM's: its lines read by Reader, each other one by its own format."""
    return text_log.LineParser(path, first=NAME, **options)


class Reader:
    """vLLM's lines of one file (text_log.py's reader contract)."""

    def __init__(self, path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None):
        self._given = worker
        self._name = worker or _file_name(path)
        # The API server whose lines were read last, of each process the wrappers name (None: the
        # file's own): an engine core's lines are that server's requests'.
        self._servers: dict[str | None, str] = {}
        self.role: str | None = "agg"
        self.keep_content = keep_content
        self._times = local_time.LocalTimes.of_file(path, local_time.clock(tz))
        self._last_time_ns: int | None = None
        self._continued = False  # the line before ended in \r: this one goes on its message
        self._claimed: tuple[str | None, re.Match | None] = (None, None)  # the text claims() matched last

    @property
    def clock(self) -> str:
        return self._times.how

    @property
    def worker(self) -> str | None:
        """The file's process: its API server, else the first one a wrapper names."""
        return self._servers.get(None) or next(iter(self._servers.values()), None)

    @worker.setter
    def worker(self, value: str | None) -> None:  # ingest gives back what an earlier run learned
        if value:
            self._servers.setdefault(None, value)

    def state(self) -> dict:
        """What reading on from the file's position needs (collector/ingest.py)."""
        return {"last_time_ns": self._last_time_ns, "continued": self._continued,
                "servers": [[k, v] for k, v in self._servers.items()], "times": self._times.state()}

    def restore(self, state: dict) -> None:
        self._last_time_ns, self._continued = state.get("last_time_ns"), state.get("continued", False)
        self._servers.update({k: v for k, v in state.get("servers") or ()})
        if state.get("worker"):  # a store written before wrappers were read
            self._servers.setdefault(None, state["worker"])
        self._times.restore(state.get("times") or {})

    def claims(self, text: str) -> bool:
        if text.startswith("{"):
            return _is_json_line(text)
        # _TEXT only where its level and date stand (a search that costs a tenth of the match); the
        # match kept for read()
        self._claimed = (text, _TEXT.match(text) if _LEVEL_AND_DATE.search(text) else None)
        return self._claimed[1] is not None

    def read(self, framed: framing.Framed) -> Record:
        text = framed.text
        if text.startswith("{"):
            record = self._json_line(text, framed.process)
        else:
            record = self._text_line(text, framed.process)
        if self._continued:  # the line before ended in \r: vLLM split one message over lines
            record.attrs["continues"] = True
        self._continued = framed.carriage_return
        if record.time_ns is None:
            record.time_ns = self._last_time_ns
        else:
            self._last_time_ns = record.time_ns
        record.attrs = record.attrs or None
        return record

    def _text_line(self, text: str, wrapped_by: str | None) -> Record:
        claimed, m = self._claimed
        if claimed is not text:
            m = _TEXT.match(text)
        notes: list[str] = []
        month, day, hour, minute, second = (int(m.group(k)) for k in ("month", "day", "hour", "minute", "second"))
        try:
            time_ns = self._times.ns(None, month, day, hour, minute, second, notes=notes)
        except local_time.ZoneError as e:
            raise Unparseable(str(e)) from None
        except ValueError as e:
            raise Unparseable(f"unreadable time {m.group('month')}-{m.group('day')} "
                              f"{m.group('hour')}:{m.group('minute')}:{m.group('second')}: {e}") from None
        if m.group("fraction"):
            time_ns += int(m.group("fraction").ljust(9, "0"))
        attrs = {"file": m.group("file") or m.group("old_file"), "line": int(m.group("line") or m.group("old_line"))}
        process, pid = m.group("process"), m.group("pid")
        for tag in _PROCESS_TAGS.finditer(m.group("tags") or ""):  # the process that printed the line's
            if _API_SERVER.match(tag.group(1)):
                process, pid = tag.group(1), tag.group(2)
        if process:
            attrs.update(process=m.group("process"), pid=int(m.group("pid")))
        if notes:
            attrs["time_note"] = notes[0]
        return self._message(m.group("message"), _LEVELS.get(m.group("level"), m.group("level")), time_ns,
                             process, pid, attrs, wrapped_by)

    def _json_line(self, text: str, wrapped_by: str | None) -> Record:
        obj = load_object(text)
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
                             str(pid) if isinstance(pid, int) and not isinstance(pid, bool) else None, attrs, wrapped_by)

    def _message(self, message: str, level: str, time_ns: int, process: str | None, pid: str | None,
                 attrs: dict, wrapped_by: str | None) -> Record:
        name = self._given or wrapped_by or self._name
        key = None if self._given else wrapped_by
        if process and pid and _API_SERVER.match(process):
            self._servers[key] = f"{name}:{pid}"
        elif key not in self._servers and pid:
            self._servers[key] = f"{name}:{pid}"  # no API server seen yet: the process itself
        record = Record(kind="log", time_ns=time_ns, level=level, worker=self._servers.get(key), attrs=attrs)
        if attrs.get("file", "").endswith(".rs"):
            message = self._rust(record, message)
        record.name = self._ids(record, message)[:2000]
        return record

    def _rust(self, record: Record, message: str) -> str:
        """The Rust frontend's span scope: the request it names (module doc); the message without it."""
        event = tracing_fmt.parse(message)
        if not event.spans:
            return message
        record.attrs["span"] = event.spans[-1][0]
        if request_id := event.field("request_id"):
            self._external(record, request_id)
        if engine_id := event.field("engine_request_id"):
            self._engine_or_external(record, engine_id)
        for key in ("finish_reason", "prompt_tokens", "output_tokens", "model", "status"):
            if (value := event.field(key)) is not None:
                record.attrs[key] = value
        return event.message

    def _ids(self, record: Record, message: str) -> str:
        """Add the ids the message names; the message as stored (without prompt or reply text)."""
        if m := _RECEIVED.match(message):
            return self._received(record, m.group(1), m.group(2))
        elif m := _ADDED.match(message) or _FINISHED.match(message) or _KV_DONE.match(message) \
                or _NIXL_FINISHED.match(message):
            self._engine_or_external(record, m.group(1))
            for remote in _REMOTE_REQUEST.findall(message):
                record.attrs["remote_request_id"] = remote
        elif m := _ABORTED_ENGINE.match(message):
            record.status = "aborted"
            for engine_id in m.group(1).split(","):
                self._engine_or_external(record, engine_id.strip())
        elif m := _ABORTED_EXTERNAL.match(message):
            record.status = "aborted"
            self._external(record, m.group(1))
        elif m := _GENERATED.match(message):
            record.add_id(REPLY_ID, m.group("id"))
            record.attrs["finish_reason"] = m.group("reason")
            if self.keep_content:
                record.attrs["output"] = m.group("output")
            else:
                record.attrs["content_chars"] = {"output": len(m.group("output"))}
            record.line_text = f"Generated response{' ' + m.group('id') if m.group('id') else ''}{m.group('how') or ''}"
            return record.line_text
        elif m := _BODY.match(message):
            if not self.keep_content:
                record.attrs["content_chars"] = {"body": len(m.group(2))}
                record.line_text = f"Request {m.group(1)} JSON body"
                return record.line_text
        elif len(named := set(_ID_IN_TEXT.findall(message))) == 1:
            self._engine_or_external(record, named.pop())
        return message

    def _received(self, record: Record, external: str, body: str) -> str:
        """`Received request X: …`: its ids, its sampling parameters and what they say of the
        server's side; the prompt, before 0.7 on the same line, only as its length."""
        self._external(record, external)
        params = ""
        if m := _PARAMS.search(body):
            params = _balanced(body, m.end())
            if m.start() > 0 and _PROMPT.match(body):
                prompt = body[len("prompt: "):m.start()].rstrip(", ")
                if self.keep_content:
                    record.attrs["prompt"] = prompt
                elif prompt != "None":
                    record.attrs["content_chars"] = {"prompt": len(prompt)}
            if (lora := _LORA.search(body[m.end() + len(params):])) and lora.group(1) != "None":
                record.attrs["lora_request"] = lora.group(1)
        record.attrs["params"] = params
        if _REMOTE_DECODE.search(params):
            self.role = "prefill"
        elif _REMOTE_PREFILL.search(params):
            self.role = "decode"
            for remote in _REMOTE_REQUEST.findall(params):
                self._engine(record, remote)
                record.attrs["remote_request_id"] = remote
        else:
            record.entry = self.role == "agg"
        record.line_text = f"Received request {external}: params: {params}"
        return f"Received request {external}"

    @staticmethod
    def _external(record: Record, external: str) -> None:
        for kind, value in vllm_external_ids(external) or [(INTERNAL_ID, external)]:
            record.add_id(kind, value)

    def _engine_or_external(self, record: Record, named: str) -> None:
        """An id a line names as the engine's: an engine id where it has the engine's suffix, else
        the external id itself (vLLM before the suffix, 0.11)."""
        if derived(ENGINE_REQUEST_ID, named):
            self._engine(record, named)
        else:
            self._external(record, named)

    @staticmethod
    def _engine(record: Record, engine_id: str) -> None:
        record.add_id(ENGINE_REQUEST_ID, engine_id, VLLM_ENGINE_SCOPE)


_PROCESS_TAGS = re.compile(r"\(([A-Za-z][\w\[\]]*)(?: rank=\d+)? pid=(\d+)\) ")


_BRACKET = re.compile(r"[(\[{)\]}]")


def _balanced(text: str, start: int) -> str:
    """The text from `start` to the end of its first bracketed group (`SamplingParams(…)`), or to
    the end of the text. (Only the brackets are visited: a character at a time, a line's
    parameters cost more than the rest of its reading.)"""
    depth = 0
    for bracket in _BRACKET.finditer(text, start):
        if bracket.group() in "([{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return text[start:bracket.end()]
    return text[start:]


def _file_name(path: str) -> str:
    """The file's name without its extensions: `vllm-decode-0` of `/var/log/vllm-decode-0.log.gz`."""
    name = os.path.basename(path)
    return name.split(".")[0] or name
