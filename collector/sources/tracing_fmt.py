"""What follows the level in a line of Rust's `tracing-subscriber` text format, which Dynamo's
readable logs, SGLang's router (sgl-router, the Model Gateway) and vLLM's Rust frontend write:

    http_request{method=POST uri=/v1/completions request_id=cmpl-wAeJ…}: sglang_router_rs::response: src/middleware.rs:159: request failed with server error
    chat_completions: triton_distributed_llm::http::service::openai: Failed to fold … request_id="1e96…"
    prefill_worker.prefill_queue_handler: Dequeued prefill request: bf89a741-…

the span scope (each span entered, outermost first, `name{field=value …}` or a bare `name`, joined
by `:`), the target (the Rust module, or a Python logger's name through Dynamo's bridge), the
source location where it is on, then the message and the event's fields, `key=value` each
(`key="quoted"` for text recorded with Debug). Field values of a span are written unquoted with
Display, so they may hold spaces (`status=500 Internal Server Error`): such a value is read up to
its first space.

One parser for the three sources; each decides what the fields mean (which is a request id of
which kind).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NAME = r"[A-Za-z_][\w.-]*"
_BODY = r'\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}'
_SPAN = rf"{_NAME}(?:{_BODY})?"
_CHAIN = rf"{_SPAN}(?::{_SPAN})*"
_MODULE = r"[A-Za-z_][\w.]*(?:::[A-Za-z_][\w.]*)+"  # a Rust module path: it has `::`
_LOCATION = r"(?:(?P<file>[\w./-]+\.rs):(?P<line>\d+): )?"
# A span scope and a Rust target; a span scope with fields and a one-word target; a span scope with
# fields alone (vLLM's Rust frontend writes no target); or a target alone.
_WITH_MODULE = re.compile(rf"^(?:(?P<spans>{_CHAIN}): )?(?P<target>{_MODULE}): {_LOCATION}")
_WITH_WORD = re.compile(rf"^(?P<spans>{_CHAIN}(?<=\}})): (?P<target>[A-Za-z_][\w.-]*): {_LOCATION}")
_SPANS_ONLY = re.compile(rf"^(?P<spans>{_CHAIN}(?<=\}})): {_LOCATION}")
_WORD = re.compile(rf"^(?P<target>[A-Za-z_][\w.-]*): {_LOCATION}")
_EACH_SPAN = re.compile(rf"({_NAME})(?:\{{((?:[^{{}}\"]|\"(?:[^\"\\]|\\.)*\")*)\}})?")
FIELD = re.compile(r'(?<![\w.])([A-Za-z_][\w.]*)=("(?:[^"\\]|\\.)*"|[^\s,;)}\]]+)')


@dataclass(slots=True)
class Event:
    """A line's parts after its level."""

    spans: list[tuple[str, dict]] = field(default_factory=list)  # (name, fields), outermost first
    target: str | None = None
    file: str | None = None
    line: int | None = None
    message: str = ""
    fields: dict = field(default_factory=dict)  # the message's `key=value` fields

    def field(self, key: str) -> str | None:
        """A field of the event, else of the innermost span that has it."""
        if key in self.fields:
            return self.fields[key]
        for _, fields in reversed(self.spans):
            if key in fields:
                return fields[key]
        return None


def parse(rest: str) -> Event:
    """The parts of what follows a line's level (its leading spaces taken off)."""
    rest = rest.lstrip()
    m = _WITH_MODULE.match(rest) or _WITH_WORD.match(rest) or _SPANS_ONLY.match(rest) or _WORD.match(rest)
    event = Event()
    if m is None:
        event.message = rest
    else:
        event.target = m.groupdict().get("target")
        event.file = m.group("file")
        event.line = int(m.group("line")) if m.group("line") else None
        spans = m.groupdict().get("spans")
        if spans:
            event.spans = [(name, fields_of(body or "")) for name, body in _EACH_SPAN.findall(spans)]
        event.message = rest[m.end():]
    event.fields = fields_of(event.message)
    return event


def fields_of(text: str) -> dict:
    """The `key=value` pairs of a text, a quoted value unquoted."""
    return {key: _unquoted(value) for key, value in FIELD.findall(text)}


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value
