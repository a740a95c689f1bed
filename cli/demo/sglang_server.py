"""One process of the demo's SGLang deployment (sglang_demo.py starts five):

    python -m tracejoin.cli.demo.sglang_server prefill|decode|router --fd N --out DIR --name NAME
        [--prefill H:P]... [--decode H:P]...

`prefill` and `decode` stand in for `python -m sglang.launch_server --disaggregation-mode
prefill|decode` (SGLang needs a GPU), started with `--log-requests --log-requests-format json
--enable-request-time-stats-logging --export-metrics-to-file --enable-trace`: an OpenAI-compatible
chat and completions server that names requests as SGLang 0.5.23 does (the rid, a bare uuid hex,
is the reply id) and leaves SGLang's records (sglang_formats.py): its log on stdout, sent to
`logs/<service>.log` (the launch's server_args, the request log, ReqTimeStats), the exporter's
hourly file under `metrics/<service>/` and its spans.

`router` is SGLang's mini load balancer for disaggregation (`sglang_router.launch_router
--pd-disaggregation --mini-lb`) behind TraceJoinMiddleware: the same body to one prefill and one
decode server at once, round robin, with a `bootstrap_room` it draws and the prefill server's
bootstrap host and port, and the decode server's reply to the client.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracejoin.middleware.outgoing import outgoing_headers

from . import sglang_formats as sg
from .openai_api import DONE, ChatCompletions, Completions, sse
from .serving import engine_app, relayed, run_engine_process, traced_app

MODEL = "demo/tiny-llm"
FAILING_PROMPT = "(the decode server fails on this prompt)"
BOOTSTRAP_PORT = 8998  # --disaggregation-bootstrap-port's default
PREFILL_S, DECODE_PER_TOKEN_S, KV_TRANSFER_S = 0.02, 0.01, 0.005
WORDS = ("The", " prefill", " server", " sent", " the", " cache", " to", " the", " decode", " server", ".")
APIS = {"/v1/chat/completions": ChatCompletions(), "/v1/completions": Completions()}


def service_log(out: Path, service: str) -> Path:
    """Where an SGLang server's stdout goes: named after its service, as its spans' service and its
    metrics folder are, so all three name its process alike."""
    return out / "logs" / f"{service}.log"


class SglangServer:
    """A prefill or a decode server."""

    def __init__(self, role: str, out: Path, service: str, port: int):
        self.role = role
        self.spans = sg.RequestSpans.in_file(out / "otlp" / f"{service}-{os.getpid()}.jsonl", service)
        self.metrics = out / "metrics" / service
        self.metrics.mkdir(parents=True, exist_ok=True)
        self._slot = asyncio.Lock()
        print(sg.server_args_line(datetime.now(), role, port), flush=True)

    def app(self) -> Starlette:
        return engine_app(APIS, self._serve, self.spans.shutdown)

    async def _serve(self, http: Request) -> Response:
        arrival = time.time()
        body = await http.json()
        api = APIS[http.url.path]
        rid = body.get("rid") or sg.new_rid()
        room = body.get("bootstrap_room")
        prompt = api.prompt(body)
        max_tokens = 1 if self.role == "prefill" else int(body.get("max_tokens") or 16)
        request = sg.generate_req_input(rid, prompt, max_tokens, room, body.get("bootstrap_host"),
                                        body.get("bootstrap_port"))
        print(sg.request_log_line(datetime.now(), "request.received", rid, obj=request), flush=True)
        if self.role == "decode" and FAILING_PROMPT in prompt:  # the message is the demo's own
            print(sg.stamp(datetime.now(), " TP0") + f"Error in decode of request {rid}: the KV cache for "
                  f"bootstrap room {room} never arrived\nTraceback (most recent call last):\n"
                  f'  File "sglang/srt/disaggregation/decode.py", line 512, in pop_transferred\n'
                  f"RuntimeError: KV transfer from the prefill server failed (bootstrap room {room})", flush=True)
            return JSONResponse({"object": "error", "message": "KV transfer failed", "type": "InternalServerError",
                                 "param": None, "code": 500}, status_code=500)
        async with self._slot:
            scheduled = time.time()
            await asyncio.sleep(KV_TRANSFER_S if self.role == "decode" else PREFILL_S)
        first_token = time.time()
        times = {"arrival": arrival, "scheduled": scheduled, "first_token": first_token, "headers": dict(http.headers)}
        if body.get("stream") and self.role == "decode":
            return StreamingResponse(self._stream(api, rid, room, request, max_tokens, times),
                                     media_type="text/event-stream")
        text = WORDS[0] if self.role == "prefill" else "".join([w async for w in _decode(max_tokens)])
        self._finished(rid, room, request, text, times)
        return JSONResponse(api.reply(rid, MODEL, text, "length", (8, len(text.split()))))

    async def _stream(self, api: ChatCompletions, rid: str, room: int | None, request: dict, max_tokens: int,
                      times: dict) -> AsyncIterator[bytes]:
        text = ""
        try:
            async for word in _decode(max_tokens):
                yield sse(api.chunk(rid, MODEL, api.choice(word, None, whole=False, first=not text)))
                text += word
        except BaseException:  # the client left: SGLang aborts the request, which finishes so
            self._finished(rid, room, request, text, times, finish_reason="abort")
            raise
        self._finished(rid, room, request, text, times)
        yield DONE

    def _finished(self, rid: str, room: int | None, request: dict, text: str, times: dict,
                  finish_reason: str = "length") -> None:
        end = time.time()
        tokens = len(text.split())
        meta = sg.meta_info(rid, finish_reason, 8, tokens, end - times["arrival"], times["scheduled"] - times["arrival"])
        now = datetime.now()
        print(sg.request_log_line(now, "request.finished", rid, obj=request,
                                  out={"text": text, "meta_info": meta}), flush=True)
        print(sg.req_time_stats_line(now, rid, room, self.role, input_len=8, output_len=tokens,
                                     queue_ms=(times["scheduled"] - times["arrival"]) * 1000,
                                     forward_ms=(end - times["scheduled"]) * 1000,
                                     transfer_ms=KV_TRANSFER_S * 1000 if self.role == "decode" else None,
                                     entry_time=times["arrival"]), flush=True)
        with (self.metrics / sg.metrics_file_name(now)).open("a") as f:
            f.write(sg.metrics_line(request, meta, received_ts=times["arrival"]) + "\n")
        self.spans.record(self.role, rid, room, times["arrival"], end, prompt_tokens=8, completion_tokens=tokens,
                          ttft_s=times["first_token"] - times["arrival"], queue_s=times["scheduled"] - times["arrival"],
                          headers=times["headers"])


async def _decode(max_tokens: int) -> AsyncIterator[str]:
    for index in range(max_tokens):
        await asyncio.sleep(DECODE_PER_TOKEN_S)
        yield WORDS[index % len(WORDS)]


class Router:
    """SGLang's mini load balancer for prefill/decode disaggregation, behind TraceJoinMiddleware."""

    def __init__(self, out: Path, prefill: list[str], decode: list[str]):
        self.out = out
        self._pairs = zip(itertools.cycle(prefill), itertools.cycle(decode))
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))

    def app(self) -> Starlette:
        routes = [Route(path, self._serve, methods=["POST"]) for path in APIS]
        return traced_app(routes, role="router", service="sglang-router", out=self.out, lifespan=None)

    async def _serve(self, http: Request) -> Response:
        body = await http.json()
        prefill, decode = next(self._pairs)
        body = {**body, "bootstrap_host": prefill.split(":")[0], "bootstrap_port": BOOTSTRAP_PORT,
                "bootstrap_room": sg.new_bootstrap_room()}
        headers = outgoing_headers()
        path = http.url.path
        prefilled = asyncio.ensure_future(self.client.post(f"http://{prefill}{path}", json=body, headers=headers))
        upstream = await self.client.send(self.client.build_request("POST", f"http://{decode}{path}", json=body,
                                                                     headers=headers), stream=True)
        await prefilled
        return await relayed(upstream)


def main(argv: list[str] | None = None) -> None:
    run_engine_process("tracejoin.cli.demo.sglang_server", "router",
                       lambda out, prefill, decode: Router(out, prefill, decode).app(),
                       lambda role, out, name, port: SglangServer(role, out, name, port).app(), service_log, argv)


if __name__ == "__main__":
    main()
