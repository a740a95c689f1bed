"""The three OpenAI-compatible endpoints a demo worker serves, shaped as trtllm-serve shapes them
(tensorrt_llm/serve/openai_protocol.py, postprocess_handlers.py):

| endpoint              | streamed reply id                                | non-streamed reply id |
|-----------------------|--------------------------------------------------|-----------------------|
| /v1/chat/completions  | `chatcmpl-<engine id>`                           | `chatcmpl-<uuid hex>` |
| /v1/completions       | `cmpl-<engine id>`                               | `cmpl-<uuid hex>`     |
| /v1/responses         | the body's `request_id`, else `resp_<uuid hex>`  | the same              |

A context worker's reply carries the `disaggregated_params` the generation worker needs: in its
first choice for chat and completions, at the top of a Responses reply.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator


def sse(data: dict, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


class ChatCompletions:
    path = "/v1/chat/completions"
    id_prefix = "chatcmpl"
    reply_object, chunk_object = "chat.completion", "chat.completion.chunk"

    def prompt(self, body: dict) -> str:
        return " ".join(str(message.get("content", "")) for message in body.get("messages", []))

    def max_tokens(self, body: dict) -> int | None:
        return body.get("max_completion_tokens") or body.get("max_tokens")

    def reply_id(self, body: dict, engine_request_id: int, *, streamed: bool) -> str:
        return f"{self.id_prefix}-{engine_request_id if streamed else uuid.uuid4().hex}"

    def reply(self, reply_id: str, model: str, text: str, finish_reason: str, tokens: tuple[int, int],
              disaggregated_params: dict | None = None) -> dict:
        choice = self.choice(text, finish_reason, whole=True)
        if disaggregated_params is not None:
            choice["disaggregated_params"] = disaggregated_params
        prompt_tokens, completion_tokens = tokens
        return {"id": reply_id, "object": self.reply_object, "created": int(time.time()),
                "model": model, "choices": [choice],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def choice(self, text: str, finish_reason: str | None, *, whole: bool, first: bool = False) -> dict:
        if whole:
            return {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
        delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": delta, "finish_reason": finish_reason}

    async def stream(self, reply_id: str, model: str, tokens: AsyncIterator[str], prompt_tokens: int) -> AsyncIterator[bytes]:
        first = True
        async for token in tokens:
            yield sse(self.chunk(reply_id, model, self.choice(token, None, whole=False, first=first)))
            first = False
        yield sse(self.chunk(reply_id, model, self.choice("", "length", whole=False)))
        yield DONE

    def chunk(self, reply_id: str, model: str, choice: dict) -> dict:
        return {"id": reply_id, "object": self.chunk_object, "created": int(time.time()), "model": model,
                "choices": [choice]}


class Completions(ChatCompletions):
    path = "/v1/completions"
    id_prefix = "cmpl"
    reply_object = chunk_object = "text_completion"

    def prompt(self, body: dict) -> str:
        prompt = body.get("prompt", "")
        return " ".join(prompt) if isinstance(prompt, list) else str(prompt)

    def max_tokens(self, body: dict) -> int | None:
        return body.get("max_tokens")

    def choice(self, text: str, finish_reason: str | None, *, whole: bool, first: bool = False) -> dict:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}


class Responses:
    path = "/v1/responses"

    def prompt(self, body: dict) -> str:
        given = body.get("input", "")
        if isinstance(given, str):
            return given
        return " ".join(str(item.get("content", "")) for item in given if isinstance(item, dict))

    def max_tokens(self, body: dict) -> int | None:
        return body.get("max_output_tokens")

    def reply_id(self, body: dict, engine_request_id: int, *, streamed: bool) -> str:
        return body.get("request_id") or f"resp_{uuid.uuid4().hex}"

    def reply(self, reply_id: str, model: str, text: str, finish_reason: str, tokens: tuple[int, int],
              disaggregated_params: dict | None = None) -> dict:
        status = "in_progress" if finish_reason == "not_finished" else "completed"
        reply = self._response(reply_id, model, status, text, tokens)
        if disaggregated_params is not None:
            reply["disaggregated_params"] = disaggregated_params
        return reply

    async def stream(self, reply_id: str, model: str, tokens: AsyncIterator[str], prompt_tokens: int) -> AsyncIterator[bytes]:
        sequence = itertools.count()
        created = self._response(reply_id, model, "in_progress", None, None)
        yield sse({"type": "response.created", "sequence_number": next(sequence), "response": created},
                  "response.created")
        text = []
        async for token in tokens:
            text.append(token)
            yield sse({"type": "response.output_text.delta", "sequence_number": next(sequence), "item_id": "msg_0",
                       "output_index": 0, "content_index": 0, "delta": token}, "response.output_text.delta")
        completed = self._response(reply_id, model, "completed", "".join(text), (prompt_tokens, len(text)))
        yield sse({"type": "response.completed", "sequence_number": next(sequence), "response": completed},
                  "response.completed")

    @staticmethod
    def _response(reply_id: str, model: str, status: str, text: str | None, tokens: tuple[int, int] | None) -> dict:
        output = [] if text is None else [{
            "type": "message", "id": "msg_0", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }]
        usage = None if tokens is None else {"input_tokens": tokens[0], "output_tokens": tokens[1],
                                             "total_tokens": sum(tokens)}
        return {"id": reply_id, "object": "response", "created_at": int(time.time()), "status": status,
                "model": model, "output": output, "usage": usage}


Api = ChatCompletions | Responses
APIS: tuple[Api, ...] = (ChatCompletions(), Completions(), Responses())


def disaggregated_params(reply: dict) -> dict:
    """The `disaggregated_params` a context worker's reply hands on to the generation worker."""
    if "disaggregated_params" in reply:
        return reply["disaggregated_params"]
    return reply["choices"][0]["disaggregated_params"]


def error(message: str, status: int) -> dict:
    """trtllm-serve's `ErrorResponse`."""
    return {"object": "error", "message": message, "type": "InternalServerError", "param": None, "code": status}
