"""The ids a request carries: headers that name them, cleaning client values, finding the reply id.

Keys (the internal id, the reply id, the disagg request id, a worker's engine request id) name one
request; labels (`x-request-id`, chosen by the client and reused by concurrent requests) only
correlate. See docs/middleware.md.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import unicodedata

import orjson

# Request and response headers.
X_REQUEST_ID = "x-request-id"
ENGINE_REQUEST_ID_HEADER = "x-engine-request-id"
# Sent to workers by the outgoing-request hook (outgoing.py).
INTERNAL_ID_HEADER = "x-tracejoin-internal-id"
DISAGG_REQUEST_ID_HEADER = "x-tracejoin-disagg-request-id"
# Headers other servers once took as the request's id; a client that sends them could make two
# requests share one id, so they are never used as one (ai-dynamo/dynamo, server-minted ids).
DEPRECATED_ID_HEADERS = ("x-dynamo-request-id", "request-id")

LABEL_MAX_CHARS = 256


def clean_label(raw: bytes | str) -> str:
    """A client-chosen value made safe for a log line: printable, at most LABEL_MAX_CHARS characters.

    Header bytes are read as UTF-8 when they are UTF-8 (what clients send), else as Latin-1 (what
    HTTP allows). Control and format characters (Unicode category C*, which includes bidi overrides
    that can make a log line read differently than it is) and line separators are dropped.
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raw = raw.decode("latin-1")
    if raw.isprintable():  # no C* character and no line separator: nothing to drop (the usual case)
        return raw[:LABEL_MAX_CHARS]
    kept = []
    for char in raw:
        if unicodedata.category(char)[0] == "C" or char in "\u2028\u2029":
            continue
        kept.append(char)
        if len(kept) == LABEL_MAX_CHARS:
            break
    return "".join(kept)


# A random hex digit with the top two bits made 10, as RFC 9562 sets a UUID's variant.
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_internal_id() -> str:
    """A random (version 4) UUID as text, as `str(uuid.uuid4())` writes it, in a third of its time."""
    digits = os.urandom(16).hex()
    variant = _VARIANT_DIGIT[digits[16]]
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"


def name_responses_request(body: dict, disagg_request_id: int | str) -> str:
    """Name a Responses request `resp_<disagg_request_id>_<16 hex>` unless the client named it.

    Call it where the disaggregated request id is assigned, before any worker sees the request, and
    forward `body` to every worker: the reply then carries the name whichever worker answers. The
    random part keeps the name unique should a disagg request id repeat; a retried request that
    already has a name keeps it (TensorRT-LLM PR #21602).
    """
    if not body.get("request_id"):
        body["request_id"] = f"resp_{disagg_request_id}_{secrets.token_hex(8)}"
    return body["request_id"]


_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_REPLY_ID_OF_INTERNAL_ID = re.compile(rf"(?:chatcmpl|cmpl)-({_UUID})")


def internal_id_in_reply_id(reply_id: str | None) -> str | None:
    """Dynamo names a chat or completion reply after its internal id: `chatcmpl-<uuid>`."""
    match = _REPLY_ID_OF_INTERNAL_ID.fullmatch(reply_id or "")
    return match.group(1) if match else None


def reply_id_in(obj: object) -> str | None:
    """The reply id an OpenAI-compatible JSON object or stream event carries, if any.

    A reply or a chat/completion chunk has it at the top (`id`); a Responses `response.created`
    event under `response`, an Anthropic `message_start` under `message`.
    """
    if not isinstance(obj, dict):
        return None
    for holder in (obj, obj.get("response"), obj.get("message")):
        if isinstance(holder, dict) and isinstance(holder.get("id"), str) and holder["id"]:
            return clean_label(holder["id"])
    return None


class ReplyIdScanner:
    """Finds the reply id in a response body as it passes, without holding any of it back.

    It reads copies of the chunks: for an event stream, events until one carries an id; for JSON,
    the whole body. It stops looking past a size limit, so a huge reply costs no more than that.
    """

    SSE_LIMIT = 64 * 1024
    JSON_LIMIT = 1024 * 1024

    def __init__(self, content_type: str):
        media_type = content_type.split(";", 1)[0].strip().lower()
        self.streaming = media_type == "text/event-stream"
        self._json = media_type == "application/json" or media_type.endswith("+json")
        self._limit = self.SSE_LIMIT if self.streaming else self.JSON_LIMIT
        self._bytes_seen = 0
        self._event_tail = b""  # the stream after its last complete event
        self._json_chunks: list[bytes] = []
        self.reply_id: str | None = None

    @property
    def looking(self) -> bool:
        return (self.streaming or self._json) and self.reply_id is None and self._bytes_seen <= self._limit

    def feed(self, chunk: bytes, *, last: bool) -> None:
        if not self.looking:
            return
        self._bytes_seen += len(chunk)
        if self._bytes_seen > self._limit:  # past the limit: give up, and let go of what was kept
            self._event_tail, self._json_chunks = b"", []
        elif self.streaming:
            self._scan_events(chunk, last=last)
        else:
            self._json_chunks.append(chunk)
            if last:  # a body sent in one piece is parsed as it is, not copied
                self.reply_id = reply_id_in(parse_json(b"".join(self._json_chunks)))

    def _scan_events(self, chunk: bytes, *, last: bool) -> None:
        # Events end with a blank line; "\r\n" and "\r" end lines too (the SSE spec). A "\r" that
        # ends a chunk may be half of a "\r\n", so it waits for the next chunk, if one comes.
        text = self._event_tail + chunk
        held_back = b"\r" if text.endswith(b"\r") and not last else b""
        lines = text[: len(text) - len(held_back)].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *events, partial = lines.split(b"\n\n")
        self._event_tail = partial + held_back
        for event in events:
            data = b"\n".join(
                line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
            )
            self.reply_id = reply_id_in(parse_json(data))
            if self.reply_id:
                return


def parse_json(data: bytes) -> object:
    """The JSON value, or None for anything that is not JSON (the "[DONE]" sentinel, a truncated or
    absurdly nested body): what is only observed must never break the request.

    orjson reads JSON five times faster than json; json then reads what orjson refuses (NaN, UTF-16,
    a BOM, lone surrogates, 1e400). On what both read they differ only in that orjson makes an
    integer past 64 bits a float; the ids looked for are strings, so both find the same ones."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # ValueError includes UnicodeDecodeError
        return None
