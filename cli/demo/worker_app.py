"""A context or generation worker of the demo deployment, serving as a trtllm-serve worker does.

An OpenAI-compatible Starlette app (openai_api.py's three endpoints) behind TraceJoinMiddleware with
role `ctx` or `gen` (serving.py). A request's `disaggregated_params.request_type` says what to do:

- `context_only` (a ctx worker): prefill, and answer, never streamed, with the first token and the
  `disaggregated_params` the generation worker needs, `ctx_request_id` being this worker's engine
  request id;
- `generation_only` (a gen worker): receive the KV cache, decode, and answer as the client asked,
  streamed or not.

Once the engine has accepted a request the worker binds its engine request id (the middleware
sends it back as `x-engine-request-id` and writes it on its lines) and the disagg request id the
body carries. A finished request leaves what trtllm-serve leaves with `perf_metrics_output_dir`,
the raw-output hook and tracing switched on: a perf-metrics line, a hook record and an
`llm_request` span. Log lines go to stdout.

Faults, asked for by the demo's traffic: a worker started `flaky` fails a context request whose
prompt contains FLAKY_PROMPT; every generation worker fails one whose prompt contains
FAILING_PROMPT. Both fail as trtllm-serve does on an internal error: a traceback in the log and
an `ErrorResponse` with status 500.
"""

from __future__ import annotations

import contextlib
import os
import socket
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracejoin.middleware import bind_disagg_request_id, bind_engine_request_id

from .engine import VOCABULARY, Engine, EngineRequest
from .openai_api import APIS, Api, Responses, error
from .serving import traced_app
from .trtllm_formats import (
    RETURN_METRICS, LlmRequestSpans, PerfMetricsJsonl, RawOutputDump, metrics_headers, perf_metrics,
    perf_metrics_event, steady_now, timing_metrics, trtllm_logger, utc_now_iso, worker_record,
)

FLAKY_PROMPT = "(the flaky context worker fails on this prompt)"
FAILING_PROMPT = "(every generation worker fails on this prompt)"
MODEL = "demo/tiny-llm"
DEFAULT_MAX_TOKENS = 12
# TensorRT-LLM PR #21602: a Responses reply names its engine request in this header.
ENGINE_REQUEST_ID_HEADER = "x-trtllm-engine-request-id"


@dataclass
class Job:
    """One request on this worker: what the client (here, the router) asked, and the engine's view."""

    http: Request
    api: Api
    body: dict
    params: dict  # the request's disaggregated_params
    engine: EngineRequest

    @property
    def prompt(self) -> str:
        return self.api.prompt(self.body)

    @property
    def wants_metrics(self) -> bool:
        return self.http.headers.get(RETURN_METRICS) == "1"


class Worker:
    def __init__(self, role: str, out: Path, *, flaky: bool, first_request_id: int):
        self.role = role
        self.out = out
        self.flaky = flaky
        self.engine = Engine(first_request_id)
        self.log = trtllm_logger()
        host, pid = socket.gethostname(), os.getpid()
        self.perf = PerfMetricsJsonl(out / "perf_metrics", "server")
        # The hook's folder is named after the host, so its records name the process as host:pid.
        self.hook = RawOutputDump(out / "raw" / host)
        self.spans = LlmRequestSpans(out / "otlp" / f"trtllm-{host}-{pid}.jsonl", service=f"trtllm-serve-{role}")

    def app(self) -> Starlette:
        routes = [Route(api.path, self._route(api), methods=["POST"]) for api in APIS]
        return traced_app(routes, role=self.role, service=f"trtllm-serve-{self.role}", out=self.out,
                          lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        self.spans.shutdown()

    def _route(self, api: Api):
        async def serve(http: Request) -> Response:
            arrival = steady_now()  # ServerArrivalTimeMiddleware: the HTTP arrival
            body = await http.json()
            job = Job(http, api, body, body.get("disaggregated_params") or {}, self.engine.submit(api.prompt(body)))
            job.engine.times["server_arrival_time"] = arrival
            bind_engine_request_id(job.engine.request_id)
            if "disagg_request_id" in job.params:
                # The middleware has it from the router's header already; the body brings it from
                # any disaggregated server, with or without the middleware.
                bind_disagg_request_id(job.params["disagg_request_id"])
            try:
                if self.role == "ctx":
                    return await self._context_only(job)
                return await self._generation_only(job)
            except Exception as failure:  # noqa: BLE001 - answered as trtllm-serve answers any failure
                self.log.error(traceback.format_exc())
                return JSONResponse(error(str(failure), 500), status_code=500)

        return serve

    # -- the two kinds of request -----------------------------------------------------------------

    async def _context_only(self, job: Job) -> Response:
        if self.flaky and FLAKY_PROMPT in job.prompt:
            raise RuntimeError(f"context request {job.engine.request_id} failed: CUDA error: an illegal memory access")
        token = await self.engine.prefill(job.engine)
        job.engine.times["server_first_token_time"] = steady_now()
        params = {
            "request_type": "context_only",
            "first_gen_tokens": [VOCABULARY.index(token)],
            "ctx_request_id": job.engine.request_id,
            "disagg_request_id": job.params.get("disagg_request_id"),
            "encoded_opaque_state": None,
            "draft_tokens": None,
        }
        reply_id = job.api.reply_id(job.body, job.engine.request_id, streamed=False)
        reply = job.api.reply(reply_id, MODEL, token, "not_finished", (job.engine.prompt_tokens, 1), params)
        timing = self._finished(job, [token], streamed=False, started_at=utc_now_iso())
        return JSONResponse(reply, headers=self._headers(job, timing))

    async def _generation_only(self, job: Job) -> Response:
        if FAILING_PROMPT in job.prompt:
            raise RuntimeError(f"generation request {job.engine.request_id} failed: the KV cache never arrived")
        await self.engine.receive_kv_cache(job.engine)
        max_tokens = job.api.max_tokens(job.body) or DEFAULT_MAX_TOKENS
        streamed = bool(job.body.get("stream"))
        reply_id = job.api.reply_id(job.body, job.engine.request_id, streamed=streamed)
        if streamed:
            return StreamingResponse(self._stream(job, reply_id, max_tokens), media_type="text/event-stream",
                                     headers=self._headers(job, None))
        frames = [token async for token in self.engine.decode(job.engine, max_tokens)]
        job.engine.times["server_first_token_time"] = steady_now()  # a whole reply's first token is its last
        reply = job.api.reply(reply_id, MODEL, "".join(frames), "length", (job.engine.prompt_tokens, len(frames)))
        timing = self._finished(job, frames, streamed=False, started_at=utc_now_iso())
        return JSONResponse(reply, headers=self._headers(job, timing))

    async def _stream(self, job: Job, reply_id: str, max_tokens: int) -> AsyncIterator[bytes]:
        frames: list[str] = []
        started_at = ""

        async def tokens() -> AsyncIterator[str]:
            nonlocal started_at
            async for token in self.engine.decode(job.engine, max_tokens):
                if not frames:
                    job.engine.times["server_first_token_time"] = steady_now()
                    started_at = utc_now_iso()
                frames.append(token)
                yield token

        finished = False
        try:
            async for event in job.api.stream(reply_id, MODEL, tokens(), job.engine.prompt_tokens):
                yield event
            timing = self._finished(job, frames, streamed=True, started_at=started_at)
            finished = True
            if job.wants_metrics:  # the headers have left already: the timings follow the last event
                yield perf_metrics_event(metrics_headers(timing))
        finally:
            if not finished:  # the caller left: the engine drops the request
                self.log.info(f"{job.http.client} is disconnected, abort {job.engine.request_id}")
                self.hook.write(request_id=job.engine.request_id, disagg_request_id=job.params.get("disagg_request_id"),
                                started_at=started_at or utc_now_iso(), frames=frames, streaming=True, aborted=True)

    # -- what a finished request leaves -------------------------------------------------------------

    def _finished(self, job: Job, frames: list[str], *, streamed: bool, started_at: str) -> dict:
        """Write the request's perf-metrics line, hook record and span; return its timing metrics."""
        request = job.engine
        disagg_request_id = job.params.get("disagg_request_id")
        timing = timing_metrics(request.times, request.kv_cache_size)
        perf = perf_metrics(timing, first_iter=request.first_iter, last_iter=request.last_iter,
                            kv_blocks=request.kv_blocks(len(frames)))
        ctx_request_id = request.request_id if self.role == "ctx" else job.params.get("ctx_request_id")
        self.perf.write(worker_record(request.request_id, perf, ctx_request_id=ctx_request_id,
                                      disagg_request_id=disagg_request_id))
        self.hook.write(request_id=request.request_id, disagg_request_id=disagg_request_id, started_at=started_at,
                        frames=frames, streaming=streamed, aborted=False)
        self.spans.record(request.request_id, request.times, request_headers=job.http.headers,
                          max_tokens=job.api.max_tokens(job.body) or DEFAULT_MAX_TOKENS,
                          prompt_tokens=request.prompt_tokens, completion_tokens=len(frames),
                          finish_reason="not_finished" if self.role == "ctx" else "length")
        return timing

    def _headers(self, job: Job, timing: dict | None) -> dict[str, str]:
        headers = {}
        if isinstance(job.api, Responses):
            headers[ENGINE_REQUEST_ID_HEADER] = str(job.engine.request_id)
        if timing is not None and job.wants_metrics:
            headers.update(metrics_headers(timing))
        return headers


def build_app(role: str, out: Path, *, flaky: bool, first_request_id: int) -> Starlette:
    return Worker(role, out, flaky=flaky, first_request_id=first_request_id).app()
