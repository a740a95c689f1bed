"""Every line of a text file, read by the format that reads it best: never worse than grep.

A real log mixes formats: a pod's stream holds vLLM's API server and engine core, uvicorn's access
lines, NIXL's and mooncake's glog lines and tracebacks; a paste holds a user's cut and the shell
prompt glued to a JSON reply. So the format is chosen a line at a time:

1. frame: the line's wrappers (kubelet, docker, kubectl, compose, srun, mpirun, journald, stern),
   colours and borders are taken off into fields (collector/framing.py);
2. claim: the first format whose own header starts the line reads it (FORMATS: Dynamo, vLLM,
   SGLang, TensorRT-LLM, each a module of its own, the one of the file's first lines tried first and
   the last one that claimed a line before the others); a line no header claims may still be read
   by a format that knows its words (an SGLang exception pasted without its stamp);
3. else a plain text line (`PlainText`): whatever time and level it starts with (ISO 8601 with or
   without a zone, `MM-DD hh:mm:ss`, `MM/DD/YYYY-hh:mm:ss`, glog's `E0904 07:42:34.325699`, syslog's
   `Sep 04 07:42:34`, a year cut short in a paste), or, with neither, the next line of the record
   before it (a traceback's frames, a message's second line: `continues`, at that record's time,
   on its worker). A bare exception line (`ValueError: …`) right after a line with a header of its
   own (not a traceback's frames) is an error;
   a JSON object no format claims is read for its time, level and message;
4. then for every line: the wrapper's time where it is more precise than the line's own (a kubelet's
   UTC nanoseconds over a local time to the second: the line keeps which it was read from), the
   wrapper's pod or container as the worker where the line names none, and every id-shaped word
   of the line as a label (collector/tokens.py).

A line a format claims but cannot read (a JSON line cut short, a field of another type) is stored
as a plain text line by collector/lines.py, with the reason: only a line that is not text (NUL
bytes) or is over the length limit is quarantined.

A format module here provides, beside NAME and sniff, optionally WORDS (a pattern of the words
only its lines say, ASCII, which may claim a line without its header), and a `Reader(path,
worker=, keep_content=, tz=)` with `claims(text)` (the line starts with its header),
`read(framed) -> Record` of a line it claims, `worker` and `role` (what it learned of its file),
and optionally `clock`, `state()`/`restore()`, `aliases`; its `LineParser` is this module's, with
its Reader first. The formats read in bulk (trtllm_log, dynamo_jsonl) give their Reader the bulk
parser's parts as well, which LineParser passes on (collector/bulk.py).
"""

from __future__ import annotations

import importlib
import json
import re

import orjson

from . import bulk_sql
from .. import framing, local_time, tokens, times
from ..records import Record
from .parsing import Unparseable, worker_from_path

NAME = "text_log"
WORKER_FROM_USER = True
CONTENT_FROM_USER = True
LOCAL_TIMES = True

# The formats a line may be in, in the order they are tried when the file's own is not known.
FORMATS = ("dynamo_jsonl", "vllm_log", "sglang_log", "trtllm_log")


def sniff(path: str, head: list[bytes]) -> bool:
    """Any text: the file is not binary (no NUL byte, and UTF-8 or nearly so)."""
    data = b"\n".join(head)
    if not data or b"\x00" in data:
        return False
    text = data.decode("utf-8", "replace")
    return text.count("\ufffd") <= len(text) // 20


def LineParser(path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None,
               first: str | None = None) -> "TextLines":
    return TextLines(path, worker=worker, keep_content=keep_content, tz=tz, first=first)


class TextLines:
    """The lines of one text file (the module doc); `first`, the name of the format its first lines
    are in."""

    def __init__(self, path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None,
                 first: str | None = None):
        names = ([first] if first else []) + [n for n in FORMATS if n != first]
        options = {"worker": worker, "keep_content": keep_content, "tz": tz}
        modules = {name: importlib.import_module(f"{__package__}.{name}") for name in names}
        self._readers = {name: module.Reader(path, **options) for name, module in modules.items()}
        self._words = {name: getattr(module, "WORDS", None) for name, module in modules.items()}
        self._first = self._readers[first] if first else None
        self._first_name = first or NAME
        self._plain = PlainText(path, worker=worker, tz=tz)
        self._used: dict[str, None] = dict.fromkeys([first] if first else [])  # formats read, first first
        self._last: Record | None = None  # the record of the line before, which an untimed line continues
        self._order = list(self._readers)  # the formats as tried: the last to claim a line by its header, then the rest in order
        self._headed = False  # the line before had a header of its own (it continued none)

    # -- what ingest reads of a file's parser ------------------------------------------------------
    @property
    def worker(self) -> str | None:
        """The file's process, as the formats read so far name it (the file's own format first); a
        file of no format's, by its path."""
        named = next((self._readers[n].worker for n in self._used if self._readers[n].worker), None)
        return named if named or self._first is not None else self._plain.worker

    @worker.setter
    def worker(self, value: str | None) -> None:  # ingest gives back what an earlier run learned
        (self._first or self._plain).worker = value

    @property
    def role(self) -> str | None:
        return next((self._readers[n].role for n in self._used if self._readers[n].role), None)

    @role.setter
    def role(self, value: str | None) -> None:
        if self._first is not None:
            self._first.role = value

    @property
    def clock(self) -> str | None:
        """How the file's local times were read (local_time.py), by the first format that read some."""
        readers = [self._readers[n] for n in self._used] + [self._plain]
        return next((r.clock for r in readers if getattr(r, "clock", None)), None)

    @property
    def aliases(self) -> dict[str, str]:
        return {alias: w for n in self._used for alias, w in getattr(self._readers[n], "aliases", {}).items()}

    def state(self) -> dict:
        """What reading on from the file's position needs (collector/ingest.py)."""
        last = self._last
        return {"readers": {n: r.state() for n, r in self._readers.items() if hasattr(r, "state")},
                "used": list(self._used), "plain": self._plain.state(), "headed": self._headed,
                "last": None if last is None else {"time_ns": last.time_ns, "worker": last.worker, "source": last.source}}

    def restore(self, state: dict) -> None:
        if "readers" not in state:  # a store written before lines were read a format at a time
            if self._first is not None and hasattr(self._first, "restore"):
                self._first.restore(state)
            return
        for name, reader in self._readers.items():
            if name in state["readers"] and hasattr(reader, "restore"):
                reader.restore(state["readers"][name])
        self._used.update(dict.fromkeys(n for n in state.get("used", ()) if n in self._readers))
        self._plain.restore(state.get("plain") or {})
        self._headed = bool(state.get("headed"))
        if last := state.get("last"):
            self._last = Record(kind="log", time_ns=last.get("time_ns"), worker=last.get("worker"),
                                source=last.get("source"))

    # -- what collector/bulk.py reads of the parser of a file read in bulk: its format's -----------
    @property
    def scope(self) -> str:
        return self._first.scope

    def state_markers(self) -> tuple[bytes, ...]:
        return self._first.state_markers()

    def carry(self, time_ns: int | None) -> None:
        """A line of the file's format read in bulk came before: its time, for an untimed line."""
        self._first.carry(time_ns)
        self._last = Record(kind="log", time_ns=time_ns)
        self._headed = True

    def bulk_settings(self) -> dict[str, str] | None:
        return self._first.bulk_settings() if hasattr(self._first, "bulk_settings") else {}

    def learn(self, votes) -> None:
        self._first.learn(votes)

    # -- reading ----------------------------------------------------------------------------------
    def parse(self, line: bytes) -> list[Record]:
        """The line's record; Unparseable when the format that claims it cannot read it (collector/
        lines.py then stores it by `unread`, or holds it back while it may be unfinished)."""
        framed, unread = self._framed(line)
        name, framed, by_words = self._claimed(framed)
        last = self._last
        if name is not None:
            record = self._readers[name].read(framed)
            if name != self._first_name:
                record.source = name
            if by_words and last is not None:  # no header: at the time of the line before, and goes on it
                record.time_ns = last.time_ns
                if record.level is None:
                    record.attrs = {**(record.attrs or {}), "continues": True}
                    record.worker = record.worker or last.worker
            if record.time_ns is None and last is not None:
                record.time_ns = last.time_ns
            coarse = name in _LOCAL_SECONDS
        else:
            record = self._plain.read(framed, last)
            coarse = not self._plain.zoned
        if unread:
            record.attrs = {**(record.attrs or {}), "unread": unread}
        return self._finish(record, framed, by_words, coarse)

    def unread(self, line: bytes, reason: str) -> list[Record]:
        """A line its format claimed and could not read, as a plain line of text that says why, at
        the time of the line before (a time read by another rule could be misplaced)."""
        framed, _ = self._framed(line)
        last = self._last
        record = Record(kind="log", name=framed.text[:2000], attrs={"unread": reason},
                        time_ns=last.time_ns if last is not None else None)
        return self._finish(record, framed, False, True)

    def _framed(self, line: bytes) -> tuple[framing.Framed, str | None]:
        """The line framed, and why it is not read as written (not UTF-8), if it is not."""
        if b"\x00" in line:
            raise Unparseable("binary data (NUL bytes) in a text line")
        try:
            text, unread = line.decode("utf-8"), None
        except UnicodeDecodeError:
            text, unread = line.decode("utf-8", "replace"), "not UTF-8: read with U+FFFD for the bytes that are not"
        return framing.frame(text), unread

    def _finish(self, record: Record, framed: framing.Framed, by_words: bool, coarse: bool) -> list[Record]:
        """What every line gets: an exception said alone is an error, the wrappers' fields, the
        line's id-shaped words as labels."""
        continues = bool(record.attrs and record.attrs.get("continues"))
        if record.level is None and self._headed and EXCEPTION_LINE.match(framed.text):
            # an exception said right after a line with a header of its own (a traceback's last
            # line comes after its frames): an error of its own
            record.level = "ERROR"
            if continues:
                del record.attrs["continues"]
                record.attrs = record.attrs or None
        self._headed = not continues
        if framed.fields:
            _wrapped(record, framed, coarse)
        tokens.add_labels(record, record.line_text if record.line_text is not None else framed.text)
        record.line_text = None
        self._last = record
        return [record]

    def _claimed(self, framed: framing.Framed) -> tuple[str | None, framing.Framed, bool]:
        """The format that reads the line, the line as it reads it, and whether it knew the line by
        its words rather than its header; (None, line, False): no format's."""
        text = framed.text
        order = self._order
        if MAY_BE_TIMED.search(text):  # else no format's header starts it (a traceback's frame)
            for name in order:
                if self._readers[name].claims(text):
                    if name != order[0]:
                        self._order = [name, *(n for n in self._readers if n != name)]
                    self._used[name] = None
                    return name, framed, False
            named = framing.strip_named_pod(framed)
            if named is not None:
                for name in order:
                    if self._readers[name].claims(named.text):
                        self._used[name] = None
                        return name, named, False
        for name in order:
            words = self._words[name]
            if words is not None and words.search(text):
                self._used[name] = None
                return name, framed, True
        return None, framed, False


def _wrapped(record: Record, framed: framing.Framed, coarse: bool) -> None:
    """What the wrappers said, on the record (the module doc's step 4): `coarse`, the record's own
    time is local, to the second, which a wrapper's UTC time beats."""
    fields = {k: v for k, v in framed.fields.items() if k != "time_ns"}
    attrs = record.attrs if record.attrs is not None else {}
    attrs["wrapper"] = fields
    wrapper_ns = framed.time_ns
    if wrapper_ns is not None and (record.time_ns is None or coarse):
        if record.time_ns is not None:
            attrs["own_time_ns"] = record.time_ns
        attrs["time_from"] = fields.get("time_by")
        record.time_ns = wrapper_ns
    if record.worker is None and framed.process:
        record.worker = framed.process
    record.attrs = attrs


# The formats whose lines are stamped in local time to the second.
_LOCAL_SECONDS = frozenset({"vllm_log", "trtllm_log", "sglang_log"})


def words_sql(text: str) -> str:
    """SQL: whether some format knows the text (an SQL expression) by its WORDS, as _claimed does,
    for the lines a format's bulk SQL reads as plain text."""
    patterns = [getattr(importlib.import_module(f"{__package__}.{name}"), "WORDS", None) for name in FORMATS]
    return "(" + " OR ".join(f"regexp_matches({text}, '{bulk_sql.re2(p)}')" for p in patterns if p is not None) + ")"


# -- plain text -------------------------------------------------------------------------------------

_LEVEL_WORDS = "TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|CRITICAL|FATAL|PANIC"
_LEVELS = {"WARN": "WARNING", "ERR": "ERROR", "PANIC": "CRITICAL", "FATAL": "CRITICAL", "NOTICE": "INFO",
           "I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "D": "DEBUG", "V": "DEBUG"}
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
_FRACTION = r"(?:[.,](?P<frac>\d{1,9}))?"
# The times a line may start with, each a pattern with named parts; `zone` where the time has one.
_STAMPS = [
    re.compile(r"^(?P<level>[IWEF])(?P<M>\d\d)(?P<D>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)" + _FRACTION
               + r" +(?P<thread>\d+) (?P<location>[^\s:\]]+:\d+)\] ?", re.ASCII),  # glog
    re.compile(r"^\[?(?P<Y>\d{3,4})-(?P<M>\d\d)-(?P<D>\d\d)[T ](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)" + _FRACTION
               + r"(?P<zone>Z|[+-]\d\d:?\d\d| UTC)?\]?[ \t]*", re.ASCII),
    re.compile(r"^\[?(?P<Y>\d{4})/(?P<M>\d\d)/(?P<D>\d\d)[ T-](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)" + _FRACTION
               + r"\]?[ \t]*", re.ASCII),
    re.compile(r"^\[?(?P<M>\d\d)/(?P<D>\d\d)/(?P<Y>\d{4})[ -](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)" + _FRACTION
               + r"\]?[ \t]*", re.ASCII),
    re.compile(rf"^(?:(?P<level>{_LEVEL_WORDS}) +)?(?P<M>\d\d)-(?P<D>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)"
               + _FRACTION + r"[ \t]*", re.ASCII),
    re.compile(r"^(?P<Mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (?P<D>[ \d]\d) (?P<h>\d\d):(?P<m>\d\d):"
               r"(?P<s>\d\d)" + _FRACTION + r"[ \t]*", re.ASCII),
]
# A level near the start of what follows the time (`INFO`, `[I]`, `<E>`, `LMCache WARNING:`), or
# starting a line that has no time (uvicorn's `INFO:     …`, Python's `ERROR:root:…`).
_LEVEL_AFTER_TIME = re.compile(rf"^(?:\S+ ){{0,2}}?[\[<(]?(?P<level>{_LEVEL_WORDS}|[IWEF])[\]>)]?(?=[\s:|]|$)")
_LEVEL_FIRST = re.compile(rf"^(?P<level>{_LEVEL_WORDS})(?::\s*|\s+)")
# How a line that may have a time of its own starts, read by any way TextLines reads a line: a
# wrapper (framing.py's), a format's header, a stamp PlainText reads, JSON, vLLM's process tags
# after any prefix. A line that does not match takes the time of the line before (a traceback's
# frames, a message's second line): a format's bulk SQL carries the time over such a line it
# leaves to the parser. A superset, in RE2's dialect too: being wrong one way costs only speed.
MAY_BE_TIMED = re.compile(
    rf"^(?:\s{{0,4}}[0-9]|[\[{{(]|[IWEF][0-9]{{4}} |(?:{_LEVEL_WORDS}) +[0-9]|(?:{'|'.join(_MONTHS)}) )"
    r"|^[A-Za-z0-9][\w.-]*?[-_][0-9]+\s+\||^[a-z0-9][a-z0-9.-]*-(?:[a-z0-9]{5}|[0-9]{1,4}) [a-z0-9][a-z0-9-]{0,62} "
    r"|pid=[0-9]+\) ", re.ASCII)
# A line PlainText finds a level in, when it has no time (a superset of _LEVEL_FIRST and
# _LOGFMT_LEVEL): the lines that do not match, nor MAY_BE_TIMED, continue the line before.
MAY_HAVE_LEVEL = re.compile(rf"^(?:{_LEVEL_WORDS})(?::|\s)|\blevel=", re.ASCII)
# The lines of _LEVEL_FIRST a format's bulk SQL may read as PlainText does (a stdlib logger's or
# uvicorn's `INFO:     …`): those of the levels that are their own names, before a colon.
PLAIN_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s*", re.ASCII)
_LOGFMT_LEVEL = re.compile(r"\blevel=\"?(?P<level>[A-Za-z]+)", re.ASCII)
# An exception's own line: `ValueError: …`, `torch.OutOfMemoryError`, `asyncio.exceptions.TimeoutError`.
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault)\b(?::|$)", re.ASCII)
_TIME_KEYS = ("time", "timestamp", "ts", "@timestamp", "asctime", "date", "datetime")
_LEVEL_KEYS = ("level", "levelname", "severity", "lvl", "log.level")
_MESSAGE_KEYS = ("message", "msg", "event")


class PlainText:
    """A line no format claims: its time and level if it starts with them, else the record before it
    goes on (the module doc's step 3)."""

    def __init__(self, path: str, worker: str | None = None, tz: str | None = None):
        self.worker = worker or worker_from_path(path)
        self._times = local_time.LocalTimes.of_file(path, local_time.clock(tz))
        self.zoned = False  # the time of the line read last had a zone (or the line had none)
        self._read_local = False

    @property
    def clock(self) -> str | None:
        return self._times.how if self._read_local else None

    def state(self) -> dict:
        return {"times": self._times.state()}

    def restore(self, state: dict) -> None:
        self._times.restore(state.get("times") or {})

    def read(self, framed: framing.Framed, last: Record | None) -> Record:
        text = framed.text
        record = Record(kind="log", attrs={})
        self.zoned = True
        if text.startswith("{") and self._json(record, text):
            return self._done(record)
        rest = self._stamp(record, text)
        if record.level is None and (m := _LEVEL_FIRST.match(rest) if record.time_ns is None else
                                     _LEVEL_AFTER_TIME.match(rest)):
            record.level = _LEVELS.get(m.group("level"), m.group("level"))
            if record.time_ns is None:
                rest = rest[m.end():]
        if record.level is None and (m := _LOGFMT_LEVEL.search(rest)):
            record.level = _LEVELS.get(m.group("level").upper(), m.group("level").upper())
        headed = record.time_ns is not None or record.level is not None
        if not headed and last is not None:
            record.attrs["continues"] = True
            record.time_ns, record.worker = last.time_ns, last.worker
            record.source = last.source
        elif record.time_ns is None and last is not None:  # a level but no time (uvicorn's): the time before
            record.time_ns = last.time_ns
        record.name = rest[:2000]
        return self._done(record)

    def _done(self, record: Record) -> Record:
        record.attrs = record.attrs or None
        return record

    def _stamp(self, record: Record, text: str) -> str:
        """Read the time the text starts with into the record; the text after it."""
        if not text[:1].isalnum() and text[:1] != "[":
            return text
        for pattern in _STAMPS:
            m = pattern.match(text)
            if m is None:
                continue
            parts = m.groupdict()
            try:
                record.time_ns = self._ns(parts, record)
            except (ValueError, local_time.ZoneError):
                continue
            if parts.get("level"):
                record.level = _LEVELS.get(parts["level"], parts["level"])
            if parts.get("location"):
                record.attrs.update(thread=int(parts["thread"]), location=parts["location"])
            return text[m.end():]
        return text

    def _ns(self, parts: dict, record: Record) -> int:
        month = _MONTHS[parts["Mon"]] if parts.get("Mon") else int(parts["M"])
        day, hour, minute, second = int(parts["D"]), int(parts["h"]), int(parts["m"]), int(parts["s"])
        year = parts.get("Y")
        if year is not None and len(year) == 3:  # `025-08-19`: a paste cut the year's first digit
            record.attrs["time_note"] = f"year {year} read as 2{year}"
            year = "2" + year
        fraction = int((parts.get("frac") or "").ljust(9, "0") or 0)
        zone = (parts.get("zone") or "").strip()
        if zone:
            iso = (f"{int(year):04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
                   + ("Z" if zone in ("Z", "UTC") else zone))
            return times.iso_to_ns(iso) + fraction
        notes: list[str] = []
        ns = self._times.ns(int(year) if year else None, month, day, hour, minute, second, notes)
        self.zoned, self._read_local = False, True
        if notes:
            record.attrs["time_note"] = notes[0]
        return ns + fraction

    def _json(self, record: Record, text: str) -> bool:
        """A JSON object no format claims (or one with text glued after it): its time, level and
        message; False when the line holds none."""
        try:
            obj, after = orjson.loads(text), ""
        except orjson.JSONDecodeError:
            try:
                obj, end = json.JSONDecoder().raw_decode(text)
            except ValueError as e:
                if text.startswith('{"'):  # a JSON object cut short: unfinished, or stored as text with why
                    raise Unparseable(f"invalid JSON: {e}") from None
                return False
            after = text[end:].strip()
        if not isinstance(obj, dict):
            return False
        for key in _TIME_KEYS:
            if isinstance(obj.get(key), str):
                try:
                    record.time_ns = times.iso_to_ns(obj[key])
                    break
                except times.BadTime:
                    pass
        level = next((obj[k] for k in _LEVEL_KEYS if isinstance(obj.get(k), str)), None)
        if level:
            record.level = _LEVELS.get(level.upper(), level.upper())
        message = next((obj[k] for k in _MESSAGE_KEYS if isinstance(obj.get(k), str)), None)
        record.name = (message if message is not None else text)[:2000]
        record.attrs.update(obj)
        if after:  # a shell prompt, say, glued to a reply that had no newline of its own
            record.attrs["after"] = after[:2000]
        return True
