"""One process of the demo's vLLM deployment (vllm_demo.py starts five):

    python -m tracejoin.cli.demo.vllm_server prefill|decode|proxy --fd N --out DIR --name NAME
        [--prefill H:P]... [--decode H:P]...

`prefill` and `decode` stand in for `vllm serve` with a NIXL connector (vLLM needs a GPU): an
OpenAI-compatible server for chat and completions that names requests as vLLM 0.33 does, spends
an engine's time in short sleeps, and leaves vLLM's records (vllm_formats.py): its log on stdout,
sent to `logs/<service>.log`, and its `llm_request` spans. A request whose `kv_transfer_params`
ask for `do_remote_decode` is prefilled only, and answered with the parameters its decode needs;
one that brings `do_remote_prefill` first receives the KV cache, then decodes.

`proxy` is vLLM's P/D proxy (the repository's toy proxy: every request to one prefill and then
one decode server, round robin, under one `X-Request-Id` of its own, a uuid) behind
TraceJoinMiddleware, which records the client's request, its reply id and its status.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracejoin.middleware.outgoing import outgoing_headers

from .openai_api import DONE, ChatCompletions, Completions, sse
from .serving import engine_app, relayed, run_engine_process, traced_app
from .vllm_formats import LlmRequestSpans, VllmLogger, engine_request_id, random_uuid, sampling_params

MODEL = "demo/tiny-llm"
FAILING_PROMPT = "(the decode server fails on this prompt)"
NIXL_PORT = 5600  # VLLM_NIXL_SIDE_CHANNEL_PORT's default
PREFILL_S, DECODE_PER_TOKEN_S, KV_TRANSFER_S = 0.02, 0.01, 0.005
WORDS = ("Prefill", " filled", " the", " cache;", " decode", " read", " it", " over", " NIXL", " and", " went", " on.")
# The two APIs served, and the prefix vLLM gives their reply ids.
APIS = {"/v1/chat/completions": ChatCompletions(), "/v1/completions": Completions()}


def service_log(out: Path, service: str) -> Path:
    """Where a vLLM server's stdout goes: named after its service, as its spans' service name is, so
    the log and the spans name its process alike (`<service>:<pid>`)."""
    return out / "logs" / f"{service}.log"


class VllmServer:
    """A prefill or a decode server."""

    def __init__(self, role: str, out: Path, service: str):
        self.role = role
        self.log = VllmLogger()
        self.spans = LlmRequestSpans(out / "otlp" / f"{service}-{os.getpid()}.jsonl", service)
        self.engine_id = str(uuid.uuid4())  # kv_transfer_config.engine_id
        self._slot = asyncio.Lock()  # one batch at a time: concurrent requests queue

    def app(self) -> Starlette:
        return engine_app(APIS, self._serve, self.spans.shutdown)

    async def _serve(self, http: Request) -> Response:
        arrival = time.time()
        body = await http.json()
        base = http.headers.get("x-request-id") or body.get("request_id") or random_uuid()
        api = APIS[http.url.path]
        reply_id = f"{api.id_prefix}-{base}"
        external = reply_id if api.id_prefix == "chatcmpl" else f"{reply_id}-0"  # completions: the prompt's index
        kv = body.get("kv_transfer_params")
        max_tokens = int(body.get("max_tokens") or 16)
        self.log.received(external, sampling_params(max_tokens, kv))
        engine_id = engine_request_id(external)
        self.log.added(engine_id)
        prompt = str(body.get("messages") or body.get("prompt"))
        times = {"arrival": arrival}
        if self.role == "decode" and FAILING_PROMPT in prompt:
            try:
                raise RuntimeError(f"NIXL transfer of the KV cache for {engine_id} timed out")
            except RuntimeError as failure:
                self.log.error("serving_chat.py:1410", f"Error in {api.id_prefix} generator for request {external}")
                return JSONResponse({"error": {"message": str(failure), "type": "InternalServerError", "param": None,
                                               "code": 500}}, status_code=500)
        async with self._slot:
            times["scheduled"] = time.time()
            if kv and kv.get("do_remote_prefill"):
                await asyncio.sleep(KV_TRANSFER_S)
            else:
                await asyncio.sleep(PREFILL_S + 0.0005 * len(prompt.split()))
        times["first_token"] = time.time()
        if kv and kv.get("do_remote_decode"):  # a prefill: its first token is its last
            times["last_token"] = times["first_token"]
            self._finished(external, reply_id, WORDS[0], "length", times, http, 1, streamed=False)
            return JSONResponse(api.reply(reply_id, MODEL, WORDS[0], "length", (8, 1)) | {
                "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                       "remote_block_ids": [1, 2, 3], "remote_engine_id": self.engine_id,
                                       "remote_request_id": engine_id, "remote_host": "127.0.0.1",
                                       "remote_port": NIXL_PORT, "tp_size": 1}})
        if body.get("stream"):
            return StreamingResponse(self._stream(external, reply_id, api, engine_id, max_tokens, times, http),
                                     media_type="text/event-stream")
        text = "".join([word async for word in _decode(max_tokens)])
        times["last_token"] = time.time()
        self._finished(external, reply_id, text, "length", times, http, max_tokens, streamed=False)
        return JSONResponse(api.reply(reply_id, MODEL, text, "length", (8, max_tokens)))

    async def _stream(self, external: str, reply_id: str, api: ChatCompletions, engine_id: str, max_tokens: int,
                      times: dict, http: Request) -> AsyncIterator[bytes]:
        text = ""
        try:
            async for word in _decode(max_tokens):
                yield sse(api.chunk(reply_id, MODEL, api.choice(word, None, whole=False, first=not text)))
                text += word
        except BaseException:  # the client left: vLLM aborts the request in its engine
            self.log.aborted([engine_id])
            raise
        times["last_token"] = time.time()
        self._finished(external, reply_id, text, "length", times, http, max_tokens, streamed=True)
        yield DONE

    def _finished(self, external: str, reply_id: str, text: str, finish_reason: str, times: dict, http: Request,
                  max_tokens: int, *, streamed: bool) -> None:
        self.log.generated(reply_id, text, finish_reason, streamed=streamed)
        self.spans.record(external, times, headers=http.headers, max_tokens=max_tokens, prompt_tokens=8,
                          completion_tokens=len(text.split()))


async def _decode(max_tokens: int) -> AsyncIterator[str]:
    for index in range(max_tokens):
        await asyncio.sleep(DECODE_PER_TOKEN_S)
        yield WORDS[index % len(WORDS)]


class Proxy:
    """vLLM's P/D toy proxy, behind TraceJoinMiddleware."""

    def __init__(self, out: Path, prefill: list[str], decode: list[str]):
        self.out = out
        self._prefill, self._decode = itertools.cycle(prefill), itertools.cycle(decode)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))

    def app(self) -> Starlette:
        routes = [Route(path, self._serve, methods=["POST"]) for path in APIS]
        return traced_app(routes, role="proxy", service="vllm-pd-proxy", out=self.out, lifespan=None)

    async def _serve(self, http: Request) -> Response:
        body = await http.json()
        # One id of the proxy's own to both sides (the client's x-request-id reaches neither), and
        # the trace, which TraceJoinMiddleware's outgoing headers carry on.
        headers = {**outgoing_headers(), "x-request-id": str(uuid.uuid4())}
        prefill = {**body, "max_tokens": 1, "stream": False, "kv_transfer_params": {
            "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None}}
        prefilled = await self.client.post(f"http://{next(self._prefill)}{http.url.path}", json=prefill, headers=headers)
        if prefilled.is_error:
            return Response(prefilled.content, status_code=prefilled.status_code, media_type="application/json")
        decode = {**body, "kv_transfer_params": prefilled.json()["kv_transfer_params"]}
        upstream = await self.client.send(
            self.client.build_request("POST", f"http://{next(self._decode)}{http.url.path}", json=decode,
                                      headers=headers), stream=True)
        return await relayed(upstream)


def main(argv: list[str] | None = None) -> None:
    run_engine_process("tracejoin.cli.demo.vllm_server", "proxy",
                       lambda out, prefill, decode: Proxy(out, prefill, decode).app(),
                       lambda role, out, name, port: VllmServer(role, out, name).app(), service_log, argv)


if __name__ == "__main__":
    main()
