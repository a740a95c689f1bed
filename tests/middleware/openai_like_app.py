"""A small FastAPI app that answers like an OpenAI-compatible LLM server, for the middleware tests.

It plays the parts trtllm-serve and its disaggregated server play: it numbers engine requests (from
42 up, as if one engine served them) and disaggregated requests (from 101 up), tells the middleware
both, names Responses replies after the disagg request id, and logs through structlog.

The model name steers a reply:
- `hold`: a stream sends its first event, then waits for `release` (a threading.Event) before the rest,
  so a test can hold a request in flight;
- `endless`: a stream never finishes; it runs until the client leaves;
- `dynamo-like`: a chat reply is named `chatcmpl-<internal id>`, as Dynamo's frontend names it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tracejoin.middleware import (
    bind_disagg_request_id, bind_engine_request_id, current_request, name_responses_request,
)

WORDS = ["Hello", " from", " the", " test", " server"]
TEXT = "".join(WORDS)
HOLD_AT_MOST_S = 10.0


def create_app(release: threading.Event) -> FastAPI:
    app = FastAPI()
    engine_ids = itertools.count(42)
    disagg_ids = itertools.count(101)
    log = structlog.get_logger()

    async def words(model: str) -> AsyncIterator[str]:
        """The reply's words; `hold` pauses after the first, `endless` never stops."""
        if model == "endless":
            while True:
                yield " more"
                await asyncio.sleep(0.01)
        for index, word in enumerate(WORDS):
            yield word
            if index == 0 and model == "hold":
                deadline = time.monotonic() + HOLD_AT_MOST_S
                while not release.is_set() and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await request.json()
        engine_id = next(engine_ids)
        bind_engine_request_id(engine_id)
        log.info("app.generating", model=body["model"])
        model, created = body["model"], int(time.time())
        reply_id = f"chatcmpl-{current_request().internal_id if model == 'dynamo-like' else engine_id}"
        if not body.get("stream"):
            return JSONResponse({
                "id": reply_id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": len(WORDS), "total_tokens": 3 + len(WORDS)},
            })

        async def chunks() -> AsyncIterator[str]:
            async for word in words(model):
                yield _sse({
                    "id": reply_id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": word}, "finish_reason": None}],
                })
            yield _sse({
                "id": reply_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            })
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        engine_id = next(engine_ids)
        bind_engine_request_id(engine_id)
        reply_id, model, created = f"cmpl-{engine_id}", body["model"], int(time.time())

        def completion(text: str, finish_reason: str | None) -> dict:
            return {
                "id": reply_id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
            }

        if not body.get("stream"):
            return JSONResponse(completion(TEXT, "stop"))

        async def chunks() -> AsyncIterator[str]:
            async for word in words(model):
                yield _sse(completion(word, None))
            yield _sse(completion("", "stop"))
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    @app.post("/v1/responses")
    async def responses(request: Request):
        body = await request.json()
        disagg_id = next(disagg_ids)
        bind_disagg_request_id(disagg_id)
        reply_id = name_responses_request(body, disagg_id)
        engine_id = next(engine_ids)
        bind_engine_request_id(engine_id)
        model = body["model"]

        def response(status: str, text: str | None) -> dict:
            output = [] if text is None else [{
                "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }]
            return {
                "id": reply_id, "object": "response", "created_at": int(time.time()), "status": status,
                "model": model, "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            }

        if not body.get("stream"):
            return JSONResponse(response("completed", TEXT))

        async def events() -> AsyncIterator[str]:
            sequence = itertools.count()
            yield _sse({"type": "response.created", "sequence_number": next(sequence),
                        "response": response("in_progress", None)}, event="response.created")
            async for word in words(model):
                yield _sse({"type": "response.output_text.delta", "sequence_number": next(sequence),
                            "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": word,
                            "logprobs": []}, event="response.output_text.delta")
            yield _sse({"type": "response.completed", "sequence_number": next(sequence),
                        "response": response("completed", TEXT)}, event="response.completed")

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.api_route("/echo/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def echo(request: Request, rest: str):
        """What arrived, as JSON, with a status and a header the request asks for (proxy tests)."""
        body = await request.body()
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "headers": [[name, value] for name, value in request.headers.items()],
                "body": body.decode("utf-8", "replace"),
            },
            status_code=int(request.query_params.get("status", "200")),
            headers={"x-echo-reply": "from-upstream"},
        )

    return app


def _sse(data: dict, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"
