"""Finding the reply id in a body as it passes, however the server cuts it into chunks."""

from __future__ import annotations

import pytest

from tracejoin.middleware.ids import ReplyIdScanner, internal_id_in_reply_id

RESPONSES_STREAM = (
    b": keep-alive comment\r\n\r\n"
    b'data: {"error": "an event without an id comes first"}\r\n\r\n'
    b"event: response.created\r\n"
    b'data: {"type": "response.created", "response": {"id": "resp_101_0123456789abcdef"}}\r\n\r\n'
    b'data: {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hi"}\r\n\r\n'
)


def scan(content_type: str, body: bytes, chunk_size: int) -> str | None:
    scanner = ReplyIdScanner(content_type)
    chunks = [body[i:i + chunk_size] for i in range(0, len(body), chunk_size)]
    for index, chunk in enumerate(chunks):
        scanner.feed(chunk, last=index == len(chunks) - 1)
    return scanner.reply_id


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 64, 10_000])
def test_the_first_event_with_an_id_names_the_reply_however_the_stream_is_cut(chunk_size):
    assert scan("text/event-stream; charset=utf-8", RESPONSES_STREAM, chunk_size) == "resp_101_0123456789abcdef"
    chat = b'data: {"id": "chatcmpl-7", "object": "chat.completion.chunk"}\n\ndata: [DONE]\n\n'
    assert scan("text/event-stream", chat, chunk_size) == "chatcmpl-7"
    lone_carriage_returns = b'data: {"message": {"id": "msg_01"}}\r\r'
    assert scan("text/event-stream", lone_carriage_returns, chunk_size) == "msg_01"


@pytest.mark.parametrize("chunk_size", [1, 7, 10_000])
def test_a_json_reply_is_named_by_its_top_level_id(chunk_size):
    body = b'{"id": "cmpl-9", "choices": [{"message": {"tool_calls": [{"id": "call_1"}]}}]}'
    assert scan("application/json", body, chunk_size) == "cmpl-9"


def test_what_is_not_a_reply_id_is_left_alone():
    assert scan("text/event-stream", b'data: {"id": "chatcmpl-1"}', 100) is None  # the event never ended
    assert scan("application/json", b'{"id": "cmpl-1"', 100) is None  # truncated
    assert scan("application/json", b"[" * 100_000, 1000) is None  # nested too deep for the parser
    assert scan("text/plain", b'{"id": "cmpl-1"}', 100) is None
    too_big = b'{"pad": "' + b"x" * ReplyIdScanner.JSON_LIMIT + b'", "id": "cmpl-1"}'
    assert scan("application/json", too_big, 64 * 1024) is None


def test_only_a_dynamo_reply_id_reveals_an_internal_id():
    uuid = "0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f"
    assert internal_id_in_reply_id(f"chatcmpl-{uuid}") == uuid
    assert internal_id_in_reply_id(f"cmpl-{uuid}") == uuid
    assert internal_id_in_reply_id("chatcmpl-0d6c7f0e6a554c8e9f601b2a3c4d5e6f") is None  # vLLM's random hex
    assert internal_id_in_reply_id("chatcmpl-42") is None  # TensorRT-LLM's engine id
    assert internal_id_in_reply_id(f"resp_{uuid}") is None
    assert internal_id_in_reply_id(None) is None
