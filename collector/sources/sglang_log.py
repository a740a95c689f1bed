"""SGLang's logs (0.5.23): the server's stdout and its request logs (`--log-requests`), which stamp
every line alike, `[YYYY-mm-dd HH:MM:SS[.mmm][ DP0][ PP0][ TP0]…] message`, in local time:

    [2026-08-20 10:15:01 TP0] server_args=ServerArgs(model_path='…', …, disaggregation_mode='decode', …)
    [2026-08-20 10:15:04] {"timestamp": "2026-08-20T10:15:04.315702", "event": "request.finished", "rid": "0cc5…", "obj": {…}, "out": {…}}
    [2026-08-20 10:15:04] Receive: obj=GenerateReqInput(rid='0cc5…', …)
    [2026-08-20 10:15:04 TP0] ReqTimeStats(rid=6fe3…, bootstrap_room=5190…, input_len=128, …, type=decode): queue_duration=0.80ms, …

The scheduler's ranks (`DP0 PP0 ATTN_CP0 MOE_DP0 TP0 EP0`) are kept as `dp_rank`, `tp_rank`, …
Times are local: read by collector/local_time.py's rule; a request log's JSON `timestamp` (µs)
is its line's time.

Ids. The reply id is the rid itself (`uuid4().hex`, a client's `rid`, or `resp_<32 hex>` for
Responses; a batch's items are `<rid>_<i>`), stored as the reply id. Under Dynamo it is not the id
the client sees: Dynamo's `Submitted SGLang Request ID: <rid>` line joins it to Dynamo's request. A
disaggregated request's prefill and decode servers have rids of their own (the router sends both
the same body and no rid) and share its `bootstrap_room`, which joins them.

Lines read:
- request logs, JSON (`--log-requests-format json`): `request.received` (the request's entry on a
  server that answers alone), `request.finished` (with `e2e_latency`, tokens, the finish reason,
  and `queue_time` where SGLang's metrics are on), `request.received.openai` (no rid); text:
  `Receive: obj=GenerateReqInput(rid=…)`, `Finish: obj=…, out={…}`. The request's text (its
  `text`, `input_ids`, messages, the output) is stored as its length unless `--keep-content`;
- `ReqTimeStats(…)` (`--enable-request-time-stats-logging`), its durations in ms, `queue_ms` and
  `kv_transfer_ms` among them;
- `server_args=ServerArgs(…)` at startup: `disaggregation_mode` says the server's role (`prefill`,
  `decode`; else it answers alone, `agg`), as does a `ReqTimeStats` line's `type`;
- an error (SGLang writes no level: a line that says `Error`, `Exception`, `Traceback`, `failed` or
  `timed out`), with the rids (32 hex, `rid='…'`) and bootstrap rooms it names; the lines after it
  without a stamp (its traceback) continue it;
- the same lines pasted without their stamp, known by their words (`GenerateReqInput(`, `rid='`,
  `bootstrap_room=`, `ReqTimeStats(`, `KVTransferError`), read alike at the time of the line before;
- a native `/generate` reply (JSON, `meta_info.id` the rid), logged or pasted, with any text glued
  after it: an `abort` is its request's failure, `finish_reason.message` its error;
- SGLang's router (sgl-router, the Model Gateway, in Rust): `YYYY-mm-dd HH:MM:SS LEVEL
  http_request{… request_id=cmpl-… status=500 …}: sglang_router_rs::…: message`, its request id (the
  router's own, or a client's `X-Request-Id`) an internal id of the router's request, its status.

The process is `ingest --worker`'s name, else the host of a request log `<hostname>_<rank>` (its
file name, rotated hourly as `<hostname>_<rank>.log.YYYY-mm-dd_HH`; the rank too, when it is not 0),
else the file's name.
"""

from __future__ import annotations

import json
import os
import re

import orjson

from . import text_log, tracing_fmt
from .. import framing, local_time
from ..ids import BOOTSTRAP_ROOM, INTERNAL_ID, REPLY_ID, bootstrap_room
from ..records import Record
from .parsing import Unparseable, load_object

NAME = "sglang_log"
WORKER_FROM_USER = True
CONTENT_FROM_USER = True
LOCAL_TIMES = True

_STAMP = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{3}))?((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] ?",
                    re.ASCII)
_RANK = re.compile(r"(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)")
_ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?$")
_SGLANG_WORDS = ("ServerArgs(", '"event": "request.', "Receive: obj=", "Finish: obj=", "ReqTimeStats(", "sglang",
                 "sgl_model_gateway")
_REQUEST_LOG_FILE = re.compile(r"^(?P<name>(?P<host>.+)_(?P<rank>\d+))\.log(?:\.\d{4}-\d\d-\d\d_\d\d)?(?:\.gz)?$")

_MODE = re.compile(r"\bdisaggregation_mode='(\w+)'")
_TEXT_REQUEST = re.compile(r"^(Receive|Finish)(?: OpenAI)?: obj=")
_RID = re.compile(r"\brid='([^']+)'")
_ROOM = re.compile(r"\bbootstrap_room=(\d+)")
_E2E = re.compile(r"'e2e_latency': ([0-9.]+)")
_TIME_STATS = re.compile(r"^ReqTimeStats\((?P<fields>[^)]*)\): ?(?P<durations>.*)$")
_FIELD = re.compile(r"(\w+)=([^,]*)")
_DURATION_MS = re.compile(r"^([0-9.]+)ms$")
_EPOCH_SECONDS = re.compile(r"^\d{9,11}(?:\.\d+)?$")
_ERROR = re.compile(r"\b(?:Error|Exception|Traceback)\b|\b[A-Z]\w*(?:Error|Exception)\b|\bfailed\b|\btimed out\b")
_RID_IN_TEXT = re.compile(r"\b[0-9a-f]{32}\b|(?<=rid=')[^']+(?=')")
_ROOM_IN_TEXT = re.compile(r"\bbootstrap[ _]room[ =:]+(\d+)", re.IGNORECASE)
# ReqTimeStats' durations under the names the other sources give the same phases.
_CONTRACT_NAMES = {"queue_duration": "queue_ms", "transfer_duration": "kv_transfer_ms"}
_ROLES = {"prefill": "prefill", "decode": "decode", "unified": "agg", "null": "agg"}
# What a request log keeps of the request that is its text: the prompt, the input, the output.
CONTENT_FIELDS = frozenset({"text", "input_ids", "input_embeds", "messages", "prompt", "image_data", "video_data",
                      "audio_data", "output_ids"})


# The router's lines: Rust's tracing format, stamped in local time, its targets SGLang's crates.
_ROUTER = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s+"
                     r"(?=.*?\b(?:sglang_router\w*|sgl_model_gateway\w*|smg\w*)::)", re.ASCII)
# Words of SGLang's own that a line pasted without its stamp may still be known by.
WORDS = re.compile(r"GenerateReqInput\(|\brid='|\bbootstrap_room=|ReqTimeStats\(|KVTransferError|\"meta_info\"", re.ASCII)


def sniff(path: str, head: list[bytes]) -> bool:
    texts = [framing.frame(line.decode("utf-8", "replace")).text for line in head]
    stamped = [text for text in texts if _STAMP.match(text) or _ROUTER.match(text)]
    return bool(stamped) and (any(word in text for text in stamped for word in _SGLANG_WORDS)
                              or bool(_REQUEST_LOG_FILE.match(os.path.basename(path))))


def _process_of(path: str) -> str:
    """The process a file of SGLang's names: a request log `<hostname>_<rank>` is its server's host
    (in Kubernetes, its pod), as the server's spans and wrapped lines name it; a rank other than 0
    stays in the name. Any other file: its name."""
    m = _REQUEST_LOG_FILE.match(os.path.basename(path))
    if m is None:
        return os.path.basename(path).split(".")[0]
    return m["host"] if m["rank"] == "0" else m["name"]


def LineParser(path: str, **options) -> text_log.TextLines:
    """The parser of a file of SGLang's: its lines read by Reader, each other one by its own format."""
    return text_log.LineParser(path, first=NAME, **options)


class Reader:
    """SGLang's lines of one file (text_log.py's reader contract)."""

    def __init__(self, path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None):
        self.worker = worker or _process_of(path)
        self.role: str | None = None
        self.keep_content = keep_content
        self._times = local_time.LocalTimes(local_time.clock(tz))
        self._last_time_ns: int | None = None

    @property
    def clock(self) -> str:
        return self._times.how

    def state(self) -> dict:
        return {"last_time_ns": self._last_time_ns, "role": self.role}

    def restore(self, state: dict) -> None:
        self._last_time_ns = state.get("last_time_ns")
        self.role = state.get("role") or self.role

    def claims(self, text: str) -> bool:
        return _STAMP.match(text) is not None or _ROUTER.match(text) is not None

    def read(self, framed: framing.Framed) -> Record:
        text = framed.text
        record = Record(kind="log", attrs={})
        m = _STAMP.match(text)
        if m is None:
            if router := _ROUTER.match(text):
                self._router(record, router, text[router.end():])
            elif text.startswith("{"):
                self._reply(record, text)
            else:  # SGLang's words without its stamp: at the time of the line before
                record.name = self._message(record, text)[:2000]
            return self._done(record)
        record.time_ns = self._last_time_ns = self._time(*m.groups()[:6], milliseconds=m.group(7),
                                                         attrs=record.attrs)
        for name, rank in _RANK.findall(m.group(8) or ""):
            record.attrs[f"{name.lower()}_rank"] = int(rank)
        message = text[m.end():]
        if message.startswith("{"):
            self._request_log(record, message)
        else:
            record.name = self._message(record, message)[:2000]
        return self._done(record)

    def _router(self, record: Record, m: re.Match, rest: str) -> None:
        """A line of SGLang's router: its time, level, span scope and the request it names."""
        record.time_ns = self._last_time_ns = self._time(*m.groups()[:6], microseconds=(m.group(7) or "")[:6],
                                                         attrs=record.attrs)
        record.level = "WARNING" if m.group(8) == "WARN" else m.group(8)
        event = tracing_fmt.parse(rest)
        record.name = event.message[:2000]
        record.role = "router"
        record.attrs["target"] = event.target
        if event.spans:
            record.attrs["span"] = event.spans[-1][0]
        for key in ("method", "uri", "status", "latency"):
            if (value := event.field(key)) is not None:
                record.attrs[key] = value
        if (status := event.field("status")) and status[:3].isdigit():
            record.status = status[:3]
        record.add_id(INTERNAL_ID, event.field("request_id"))

    def _reply(self, record: Record, text: str) -> None:
        """A native /generate reply, with whatever was glued after it (module doc)."""
        try:
            obj, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise Unparseable("a JSON reply cut short") from None
        meta = obj.get("meta_info") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            raise Unparseable("a JSON reply without its meta_info")
        rid = meta.get("id")
        record.add_id(REPLY_ID, rid if isinstance(rid, str) else None)
        reason = meta.get("finish_reason") if isinstance(meta.get("finish_reason"), dict) else {}
        record.name = f"reply {rid}" + (f": {reason['type']}" if isinstance(reason.get("type"), str) else "")
        if reason.get("type") == "abort":
            record.level = "ERROR"
            if isinstance(reason.get("message"), str):
                record.attrs["error"] = reason["message"]
            code = reason.get("status_code")
            if isinstance(code, int) and not isinstance(code, bool):
                record.status = str(code)
        e2e = meta.get("e2e_latency")
        if isinstance(e2e, (int, float)) and not isinstance(e2e, bool) and e2e >= 0:
            record.duration_ns = round(e2e * 1e9)
        record.attrs["reply"] = self._without_content(obj, record)
        if after := text[end:].strip():
            record.attrs["after"] = after[:2000]
        record.line_text = record.name + " " + orjson.dumps(record.attrs).decode()

    def _done(self, record: Record) -> Record:
        record.attrs = record.attrs or None
        return record

    def _time(self, year, month, day, hour, minute, second, *, milliseconds=None, microseconds=None,
              attrs: dict) -> int:
        notes: list[str] = []
        try:
            ns = self._times.ns(int(year), int(month), int(day), int(hour), int(minute), int(second), notes)
        except local_time.ZoneError as e:
            raise Unparseable(str(e)) from None
        except ValueError as e:
            raise Unparseable(f"unreadable time {year}-{month}-{day} {hour}:{minute}:{second}: {e}") from None
        if notes:
            attrs["time_note"] = notes[0]
        if microseconds:
            return ns + int(microseconds.ljust(6, "0")) * 1000
        return ns + int(milliseconds or 0) * 1_000_000

    def _request_log(self, record: Record, message: str) -> None:
        """A request log line in SGLang's JSON format (`sglang/srt/utils/request_logger.py`)."""
        obj = load_object(message.encode())
        event, rid, stamp = obj.get("event"), obj.get("rid"), obj.get("timestamp")
        if not isinstance(event, str):
            raise Unparseable("a request log line needs its text field `event`")
        if isinstance(stamp, str) and (t := _ISO.match(stamp)):
            record.time_ns = self._time(*t.groups()[:6], microseconds=t.group(7), attrs=record.attrs)
        record.name = event
        if isinstance(rid, str):
            record.add_id(REPLY_ID, rid)
        request, out = obj.get("obj"), obj.get("out")
        room = None
        if isinstance(request, dict):
            room = bootstrap_room(request.get("bootstrap_room"))
            record.add_id(BOOTSTRAP_ROOM, room)
            record.attrs["obj"] = self._without_content(request, record)
        if isinstance(out, dict):
            meta = out.get("meta_info") if isinstance(out.get("meta_info"), dict) else {}
            e2e = meta.get("e2e_latency")
            if isinstance(e2e, (int, float)) and not isinstance(e2e, bool) and e2e >= 0:
                record.duration_ns = round(e2e * 1e9)
            queue = meta.get("queue_time")
            if isinstance(queue, (int, float)) and not isinstance(queue, bool) and queue >= 0:
                record.attrs["queue_ms"] = round(queue * 1000, 3)
            reason = meta.get("finish_reason")
            if isinstance(reason, dict) and isinstance(reason.get("type"), str):
                record.status = reason["type"]
            record.attrs["out"] = self._without_content(out, record)
        if "headers" in obj:
            record.attrs["headers"] = obj["headers"]
        if event == "request.received":
            self._entry(record, room)

    def _entry(self, record: Record, room: str | None) -> None:
        """A request's arrival is its entry on a server that answers alone: one that no
        `disaggregation_mode` or `ReqTimeStats` type names a side, and whose request has no
        bootstrap room (a disaggregated request's entry is its router's)."""
        if self.role is None and room is None:
            self.role = "agg"
        record.entry = self.role == "agg"

    def _without_content(self, value: dict, record: Record) -> dict:
        if self.keep_content:
            return value
        kept = {}
        for key, item in value.items():
            if key in CONTENT_FIELDS and item is not None:
                record.attrs.setdefault("content_chars", {})[key] = len(orjson.dumps(item))
            else:
                kept[key] = item
        return kept

    def _message(self, record: Record, message: str) -> str:
        """The ids and facts of a text line; the message as stored."""
        if message.startswith("server_args="):
            if m := _MODE.search(message):
                self.role = _ROLES.get(m.group(1), "agg")
        elif m := _TEXT_REQUEST.match(message):
            rid, room = _RID.search(message), _ROOM.search(message)
            if rid:
                record.add_id(REPLY_ID, rid.group(1))
            if room:
                record.add_id(BOOTSTRAP_ROOM, room.group(1))
            if (e2e := _E2E.search(message)) and m.group(1) == "Finish":
                record.duration_ns = round(float(e2e.group(1)) * 1e9)
            if m.group(1) == "Receive":
                self._entry(record, room and room.group(1))
            if not self.keep_content:  # the request's repr holds its text
                record.attrs["content_chars"] = {"message": len(message)}
                record.line_text = " ".join(filter(None, (m.group(1), rid and rid.group(0), room and room.group(0))))
                return f"{m.group(1)}: obj=GenerateReqInput(rid={rid.group(1)!r})" if rid else m.group(1)
        elif m := _TIME_STATS.match(message):
            fields = dict(_FIELD.findall(m.group("fields")))
            record.add_id(REPLY_ID, fields.get("rid"))
            record.add_id(BOOTSTRAP_ROOM, bootstrap_room(fields.get("bootstrap_room")))
            if fields.get("type") in _ROLES:
                self.role = _ROLES[fields["type"]]
            for key in ("input_len", "cached_input_len", "output_len", "attempts"):
                if fields.get(key, "").isdigit():
                    record.attrs[key] = int(fields[key])
            for key, value in _FIELD.findall(m.group("durations")):
                value = value.strip()
                if d := _DURATION_MS.match(value):
                    record.attrs[_CONTRACT_NAMES.get(key, key.replace("_duration", "_ms"))] = float(d.group(1))
                elif key == "entry_time" and _EPOCH_SECONDS.match(value):
                    # A request's timings, measured from its entry (epoch seconds): the record is
                    # timed there, as a perf record is, rather than at its line's second.
                    record.kind, record.time_ns = "perf", round(float(value) * 1e9)
            return f"ReqTimeStats(rid={fields.get('rid')}, type={fields.get('type')})"
        elif _ERROR.search(message):
            # SGLang's lines have no level: an error says so in its words, and names its request by
            # the rid or the bootstrap room, if at all.
            record.level = "ERROR"
            for rid in _RID_IN_TEXT.findall(message):
                record.add_id(REPLY_ID, rid)
            for room in _ROOM_IN_TEXT.findall(message):
                record.add_id(BOOTSTRAP_ROOM, room)
        return message
