"""Ids that are parsed out of other ids (docs/id-model.md, rule 4).

- `chatcmpl-<uuid>` / `cmpl-<uuid>` (Dynamo's reply ids) name the internal id `<uuid>`;
- `resp_<disagg_request_id>_<16 hex>` names the disaggregated request;
- a vLLM engine id is its external id plus `-<8 hex>` (and `<n>_` before it for the n-th of several
  samples); the external id names the reply (vllm_external_ids): `chatcmpl-<base>` is the reply id,
  `cmpl-<base>-<i>` and `embd-<base>-<i>` (the i-th prompt) and `resp_<id>_<turn>` (a Responses
  tool-loop turn) are the internal ids of the replies `cmpl-<base>`, `embd-<base>`, `resp_<id>`;
  under Dynamo the external id is Dynamo's internal id (`<uuid>`, `<uuid>-<i>` for embeddings).

Derived ids are added next to the id they come from when a record is read, and to the query when
someone looks an id up, so a reply id that no log ever printed still finds its request. The id
kinds themselves are defined here too.
"""

from __future__ import annotations

import re

# Id kinds. Keys name one request (engine ids and ctx request ids only together with the worker that
# issued them: SCOPED_KINDS); labels may be shared by many requests and never merge them.
# docs/id-model.md explains each.
REPLY_ID = "reply_id"
INTERNAL_ID = "internal_id"
X_REQUEST_ID = "x_request_id"
DISAGG_REQUEST_ID = "disagg_request_id"
TRACE_ID = "trace_id"
ENGINE_REQUEST_ID = "engine_request_id"
CTX_REQUEST_ID = "ctx_request_id"
# An agent's session (Dynamo's request-trace `agent_context.session_id`, the trajectory) and a tool
# call an agent made in it: labels, shared by the many requests of a session and by the request that
# asked for a tool and the one that took its result.
SESSION_ID = "session_id"
TOOL_CALL_ID = "tool_call_id"
# SGLang's disaggregated serving: the one number a request's prefill and decode servers share (a
# random 63-bit integer the router or the prefill server draws), in decimal.
BOOTSTRAP_ROOM = "bootstrap_room"
# TensorRT-LLM's disaggregated router numbers the requests it takes in its time events: a count of
# its own, unique only within the router's process.
ROUTER_REQUEST_ID = "router_request_id"

# vLLM's engine ids end in 8 random hex digits and are unique across its processes: they are scoped
# to the deployment, this name, so a decode server's remote_request_id (its prefill's engine id)
# joins the prefill server's records. It names no process.
VLLM_ENGINE_SCOPE = "vllm"

KEY_KINDS = (REPLY_ID, INTERNAL_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, CTX_REQUEST_ID, BOOTSTRAP_ROOM,
             ROUTER_REQUEST_ID)
SCOPED_KINDS = (ENGINE_REQUEST_ID, CTX_REQUEST_ID, ROUTER_REQUEST_ID)
# Not ids a user quotes but the edges of the span tree, stored beside the ids as "<trace>/<span>":
# the span a record belongs to, and its parent span.
SPAN = "span"
PARENT_SPAN = "parent_span"
# The ids by which records join: the keys and the span tree (labels join nothing).
JOINING_KINDS = (*KEY_KINDS, SPAN, PARENT_SPAN)
# A child span joins its parent's request only when a serving process recorded the parent: a
# client's span is shared by every request it made, so it joins nothing.
# The roles of a disaggregated request's first leg: a reply id only their records carry is that leg's
# own name for the request (SGLang's prefill server draws a rid of its own), not the reply the client saw.
PREFILL_ROLES = frozenset({"prefill", "ctx"})
SERVING_ROLES = frozenset({"router", "frontend", "proxy", "agg", "ctx", "gen", "prefill", "decode", "worker"})
# The roles of a tier that takes a client's request: its entry records start a request.
ENTRY_ROLES = frozenset({"router", "frontend", "agg", "proxy"})


_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_DYNAMO_REPLY = re.compile(rf"^(?:chatcmpl|cmpl)-({_UUID})$")
_DISAGG_RESPONSES_REPLY = re.compile(r"^resp_(\d+)_[0-9a-f]{16}$")
# vLLM: an engine id is `[<n>_]<external id>-<8 hex>`; what an external id is by its prefix.
_VLLM_ENGINE = re.compile(r"^(?:\d+_)?(.+)-[0-9a-f]{8}$")
_VLLM_INDEXED = re.compile(r"^((?:cmpl|embd)-.+)-\d+$")
_VLLM_RESPONSES_TURN = re.compile(r"^(resp_.+)_\d+$")
_UUID_INDEXED = re.compile(rf"^({_UUID})(?:-\d+)?$")
UUID_RE = re.compile(rf"^{_UUID}$")
# `chat-<32 hex>`: vLLM 0.4's chat completions.
REPLY_PREFIXES = ("chatcmpl-", "chat-", "cmpl-", "resp_", "msg_", "embd-")


def derived(kind: str, value: str) -> list[tuple[str, str]]:
    """(kind, value) pairs that an id of this kind and value implies."""
    if kind == REPLY_ID:
        m = _DYNAMO_REPLY.match(value)
        if m:
            return [(INTERNAL_ID, m.group(1).lower())]
        m = _DISAGG_RESPONSES_REPLY.match(value)
        if m:
            return [(DISAGG_REQUEST_ID, m.group(1))]
    elif kind == ENGINE_REQUEST_ID:
        m = _VLLM_ENGINE.match(value)
        if m:
            return vllm_external_ids(m.group(1))
    return []


def bootstrap_room(value) -> str | None:
    """SGLang's bootstrap room in decimal, as its logs write it; its spans write it in hex (`0x…`)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value) if value >= 0 else None
    text = str(value).strip()
    try:
        return str(int(text, 16)) if text.lower().startswith("0x") else str(int(text)) if text.isdigit() else None
    except ValueError:
        return None


def vllm_external_ids(external: str) -> list[tuple[str, str]]:
    """The ids a vLLM external request id (its log's `Received request <id>`, its span's
    `gen_ai.request.id`, an engine id less its suffix) names; none for another shape."""
    if external.startswith(("chatcmpl-", "chat-")):
        return [(REPLY_ID, external)]
    m = _VLLM_INDEXED.match(external) or _VLLM_RESPONSES_TURN.match(external)
    if m:
        return [(INTERNAL_ID, external), (REPLY_ID, m.group(1))]
    m = _UUID_INDEXED.match(external)
    if m:
        return [(INTERNAL_ID, m.group(1).lower())]
    return []


# What comes along with an id copied from a log line, a ticket or a JSON list: whitespace and
# commas around it, and one pair of quotes. A quote at one end only is the id's own.
_PASTED_AROUND = re.compile(r"^[\s,]+|[\s,]+$")
_QUOTED = re.compile(r"(['\"`])(.*)\1", re.DOTALL)
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")


def pasted_id(text: str) -> str:
    """The id in what someone pasted to look up: without the whitespace and commas around it, nor
    a matching pair of quotes (' " `) around that, and a trace id (32 hex digits) in lower case, as
    every source stores it."""
    value = _PASTED_AROUND.sub("", text)
    quoted = _QUOTED.fullmatch(value)
    if quoted:
        value = quoted.group(2)
    return value.lower() if _TRACE_ID.fullmatch(value) else value


# vLLM names its reply after the client's X-Request-Id (or the body's request_id) when one is sent:
# `chatcmpl-<id>`, `cmpl-<id>`, `embd-<id>`. Nothing else in its logs holds the client's id alone.
CLIENT_ID_REPLY_PREFIXES = ("chatcmpl-", "cmpl-", "embd-")


def implied_by_query(query: str) -> list[tuple[str, str]]:
    """Ids a looked-up string implies beyond itself: a reply id's internal or disagg id; any other
    string may be a client's id, and implies the reply ids vLLM makes of one."""
    if query.startswith(REPLY_PREFIXES):
        return derived(REPLY_ID, query)
    return [(REPLY_ID, prefix + query) for prefix in CLIENT_ID_REPLY_PREFIXES]
