"""Line framing: what stands around an engine's own line in a real log, taken off into fields.

A deployment's logs rarely reach trace-join as the engine wrote them. The container runtime, the
command that fetched them, the job launcher and the terminal they were copied from each add their
part, stacked in any order:

    2026-03-02T08:14:51.402118733Z stdout F (APIServer pid=1) INFO 03-02 08:14:51 [logger.py:39] …   kubelet / CRI file
    {"log":"INFO 03-02 08:14:51 …\\n","stream":"stdout","time":"2026-03-02T08:14:51.4021Z"}          docker's json-file
    2026-03-02T08:14:51.402118733Z INFO 03-02 08:14:51 …                                            kubectl logs --timestamps
    [pod/vllm-decode-0/vllm] INFO 03-02 08:14:51 …                                                  kubectl logs --prefix
    vllm-decode-1  | INFO 03-02 08:14:51 …                                                          docker compose
    0: [03/02/2026-08:14:51] [TRT-LLM] [I] …                                                        srun --label
    [1,0]<stdout>:[03/02/2026-08:14:51] [TRT-LLM] [I] …                                             mpirun --tag-output
    Mar 02 08:14:51 gpu-node-3 vllm[4182]: INFO 03-02 …                                             journalctl (short)
    ms-pd-prefill-72f815fe82-qxv6j vllm (APIServer pid=1) …                                         stern / kubetail

and colours (`\\x1b[32m`, or `[32m` once a paste lost the escape byte), carriage returns, trailing
spaces and a terminal's box-drawing borders. `frame` takes them off, one small operator each
(OPERATORS, in the order they are tried, again after each one that matched), and keeps what they
said in `Framed.fields`: the wrapper's time, stream, pod, container, compose service, rank, host,
unit and pid. The engine's own line is then read by its format (collector/sources/text_log.py).

stern's `pod container ` prefix is two bare words and could be the start of any line: it is taken
off only when what follows is a line some format claims (`strip_named_pod`, tried last).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import orjson

from . import times

# Select Graphic Rendition (colours, bold, dim) and other CSI sequences, with their escape byte;
# without it, only colour codes as a paste leaves them (`[2m`, `[0m`, `[1;32m`): digits and `;`
# then `m`, so `[m]` or a `[file.py:12]` location is never taken.
PASTED_COLOUR = re.compile(r"\[\d{1,3}(?:;\d{1,3}){0,4}m", re.ASCII)
_COLOURS = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|" + PASTED_COLOUR.pattern, re.ASCII)
BOX_FIRST = "\u2500"
_BOX = "\u2500-\u257f"  # box drawing: the borders of k9s, rich's tracebacks, tmux panes
_BORDERS = re.compile(rf"^[{_BOX}]+ ?|\s*[{_BOX}]+$")

_RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)"
_LEVELS = r"(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL)"
_CRI = re.compile(rf"^({_RFC3339}) (stdout|stderr) ([FP]) ?", re.ASCII)
# `kubectl logs --timestamps`: RFC 3339 with a fraction, then the line. A line that itself starts so
# and goes on with its level and its own words (Dynamo's text format) is the engine's, not wrapped:
# unless what follows the level is a second time (an old vLLM line: `INFO 03-02 08:14:51 …`).
_TIMESTAMPED = re.compile(rf"^({_RFC3339}) (?!\s*{_LEVELS}\s+(?!\d\d-\d\d\b)\S)(?=\S)", re.ASCII)
_KUBECTL_PREFIX = re.compile(r"^\[pod/([^/\]\s]+)/([^\]\s]+)\] ")
_COMPOSE = re.compile(r"^([A-Za-z0-9][\w.-]*?[-_]\d+)\s+\| ?", re.ASCII)
_SRUN_LABEL = re.compile(r"^\s{0,4}(\d{1,5}): ", re.ASCII)
_MPIRUN_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr)>: ?", re.ASCII)
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_JOURNALD = re.compile(
    rf"^((?:{_MONTHS}) [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d:?\d\d) "
    r"([\w.-]+) ([\w.@/-]+?)(?:\[(\d+)\])?: ", re.ASCII)
# stern and kubetail: a pod's name (a Deployment's `<name>-<hash>-<5>`, a StatefulSet's `<name>-<n>`,
# a DaemonSet's or Job's `<name>-<5>`) and a container's, then the line.
_NAMED_POD = re.compile(r"^([a-z0-9][a-z0-9.-]*-(?:[a-z0-9]{5}|\d{1,4})) ([a-z0-9][a-z0-9-]{0,62}) (?=\S)", re.ASCII)


@dataclass(slots=True)
class Framed:
    """A line with its wrappers taken off: `text`, the engine's own line, and what the wrappers
    said (`fields`: `by`, the wrappers in the order they stood, then `time`, `time_ns` and
    `time_by` of a wrapper that stamps lines in UTC, `stream`, `pod`, `container`, `service`,
    `rank`, `host`, `unit`, `pid` where one gave them)."""

    text: str
    fields: dict = field(default_factory=dict)
    carriage_return: bool = False  # the line ended in `\r` (vLLM ends a message's every line but the last so)

    def note(self, by: str, **values) -> None:
        self.fields.setdefault("by", []).append(by)
        for key, value in values.items():
            if value is not None:
                self.fields.setdefault(key, value)

    @property
    def time_ns(self) -> int | None:
        return self.fields.get("time_ns")

    @property
    def process(self) -> str | None:
        """The process the wrappers name: the pod, else the compose service, else the container,
        else the journald unit and pid, with the launcher's rank where one gave it."""
        f = self.fields
        name = f.get("pod") or f.get("service") or f.get("container")
        if name is None and f.get("unit"):
            name = f"{f['unit']}[{f['pid']}]" if f.get("pid") else f["unit"]
            if f.get("host"):
                name = f"{f['host']}/{name}"
        if f.get("rank") is not None:
            return f"{name}#{f['rank']}" if name else f"rank {f['rank']}"
        return name


def _docker_json(framed: Framed) -> bool:
    """docker's json-file driver: one JSON object a line, the line in `log`."""
    text = framed.text
    if not text.startswith('{"log":'):
        return False
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    if not (isinstance(obj, dict) and isinstance(obj.get("log"), str) and set(obj) <= {"log", "stream", "time", "attrs"}):
        return False
    framed.text = clean(obj["log"])
    _timed(framed, "docker", obj.get("time"), stream=obj.get("stream") if isinstance(obj.get("stream"), str) else None)
    return True


def _timed(framed: Framed, by: str, stamp, **values) -> None:
    try:
        time_ns = times.iso_to_ns(stamp) if isinstance(stamp, str) else None
    except times.BadTime:
        time_ns = None
    framed.note(by, time=stamp if time_ns is not None else None, time_ns=time_ns,
                time_by=by if time_ns is not None else None, **values)


def _take(framed: Framed, pattern: re.Pattern) -> re.Match | None:
    """The pattern's match at the start of the line, taken off it; None, the line as it was."""
    m = pattern.match(framed.text)
    if m is not None:
        framed.text = framed.text[m.end():]
    return m


def _cri(framed: Framed) -> bool:
    if m := _take(framed, _CRI):
        _timed(framed, "kubelet", m.group(1), stream=m.group(2), partial=True if m.group(3) == "P" else None)
    return m is not None


def _timestamped(framed: Framed) -> bool:
    if m := _take(framed, _TIMESTAMPED):
        _timed(framed, "timestamps", m.group(1))
    return m is not None


def _kubectl_prefix(framed: Framed) -> bool:
    if m := _take(framed, _KUBECTL_PREFIX):
        framed.note("kubectl", pod=m.group(1), container=m.group(2))
    return m is not None


def _compose(framed: Framed) -> bool:
    if m := _take(framed, _COMPOSE):
        framed.note("compose", service=m.group(1))
    return m is not None


def _launcher(framed: Framed) -> bool:
    if m := _take(framed, _SRUN_LABEL):
        framed.note("srun", rank=int(m.group(1)))
    elif m := _take(framed, _MPIRUN_TAG):
        framed.note("mpirun", rank=int(m.group(2)), stream=m.group(3))
    return m is not None


def _journald(framed: Framed) -> bool:
    if m := _take(framed, _JOURNALD):
        framed.note("journald", journal_time=m.group(1), host=m.group(2), unit=m.group(3),
                    pid=int(m.group(4)) if m.group(4) else None)
    return m is not None


# Tried in this order, and again from the first after each one that took something off. A line
# that merely starts with digits and a colon is a srun label only at the start, before the others.
OPERATORS = (_docker_json, _cri, _timestamped, _kubectl_prefix, _compose, _launcher, _journald)
_MAX_WRAPPERS = 6
# How a line that any operator takes something off may start: most lines start otherwise, and are
# left after this one look.
_MAY_BE_WRAPPED = re.compile(rf"^(?:\{{\"log\":|\d{{4}}-\d\d-\d\dT|\[pod/|[A-Za-z0-9][\w.-]*?[-_]\d+\s+\||\s{{0,4}}\d{{1,5}}: "
                             rf"|\[\d+,\d+\]<|(?:{_MONTHS}) )", re.ASCII)


def clean(text: str) -> str:
    """The text without colours, a trailing carriage return and spaces, and box borders; a JSON
    line keeps its colours, which are its values' text."""
    if "[" in text and not text.startswith("{"):
        text = _COLOURS.sub("", text)
    text = text.rstrip()
    if text and (text[0] >= BOX_FIRST or text[-1] >= BOX_FIRST):
        text = _BORDERS.sub("", text)
    return text


def frame(text: str) -> Framed:
    """The line's wrappers and decorations taken off (the module doc)."""
    framed = Framed(clean(text), carriage_return=text.endswith("\r"))
    if not _MAY_BE_WRAPPED.match(framed.text):
        return framed
    for _ in range(_MAX_WRAPPERS):
        if not any(operator(framed) for operator in OPERATORS):
            break
    return framed


def strip_named_pod(framed: Framed) -> Framed | None:
    """The line without a leading `pod container ` (stern, kubetail), or None when it has none."""
    m = _NAMED_POD.match(framed.text)
    if m is None:
        return None
    fields = {**framed.fields, "by": [*framed.fields.get("by", []), "stern"]}
    fields.setdefault("pod", m.group(1))
    fields.setdefault("container", m.group(2))
    return Framed(framed.text[m.end():], fields, framed.carriage_return)
