"""The disaggregated server of the demo deployment, routing as trtllm-serve's disaggregated server
does with `schedule_style: context_first` (tensorrt_llm/serve/openai_disagg_service.py,
openai_client.py), behind TraceJoinMiddleware with role `router` (serving.py).

For each request it
1. mints a disaggregated request id and binds it (`bind_disagg_request_id`);
2. names a Responses request `resp_<disagg_request_id>_<16 hex>`, unless the client set its
   `request_id`, before any worker sees it (`name_responses_request`, TensorRT-LLM PR #21602);
3. sends the context-only request to a context worker, round robin; when that fails it waits,
   re-mints the disagg id (as `OpenAIHttpClient` does on a retry) and tries the other context
   worker once;
4. sends the generation-only request, with the context reply's `disaggregated_params`, to a
   generation worker, round robin, and relays its reply as it arrives, streamed or not; a reply
   that failed is relayed as it came;
5. writes a disaggregated perf-metrics record per finished reply, from the timings each worker
   sent back (`X-TRTLLM-return-metrics: 1`; workers' other headers are not forwarded).

Calls to the workers carry the request's trace and trace-join's headers (`inject_tracejoin_headers`),
as docs/middleware.md asks of a disaggregated server. Text log lines go to stdout at debug level,
where the `Sending … request … to …` lines are.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import anyio
import httpx
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracejoin.middleware import bind_disagg_request_id, inject_tracejoin_headers, name_responses_request

from .openai_api import APIS, Api, Responses, disaggregated_params, error
from .serving import traced_app
from .trtllm_formats import (
    PERF_METRICS_EVENT, RETURN_METRICS, DisaggRequestIds, PerfMetricsJsonl, disagg_record, headers_in_event,
    steady_now, timing_from_headers, trtllm_logger,
)

MAX_RETRIES = 1
RETRY_INTERVAL_S = 0.25  # TensorRT-LLM waits `retry_interval_sec`, 1 s by default; the demo is in a hurry


class ServerRole(IntEnum):
    """tensorrt_llm.llmapi.disagg_utils.ServerRole. Its log lines format it with an f-string, which
    prints `ServerRole.CONTEXT` under Python 3.10 and `0` from 3.11 on; so do these."""

    CONTEXT = 0
    GENERATION = 1


@dataclass
class ContextDone:
    server: str
    params: dict  # the context reply's disaggregated_params
    timing: dict  # the context worker's phase, from its headers
    disagg_request_id: int  # the last one minted: a retry re-mints it


@dataclass
class Dispatched:
    """A request on its way through the disaggregated server: what its perf record will say."""

    arrival: float
    ctx_dispatch: float
    ctx: ContextDone
    gen_server: str = ""

    def record(self, first_token: float, gen_timing: dict) -> dict:
        return disagg_record(ctx_server=self.ctx.server, gen_server=self.gen_server, arrival=self.arrival,
                             ctx_dispatch=self.ctx_dispatch, first_token=first_token, ctx_timing=self.ctx.timing,
                             gen_timing=gen_timing, disagg_request_id=self.ctx.disagg_request_id)


class Router:
    def __init__(self, out: Path, ctx_servers: list[str], gen_servers: list[str]):
        self.out = out
        self.ctx_servers = ctx_servers
        self._next_ctx = itertools.cycle(ctx_servers)
        self._next_gen = itertools.cycle(gen_servers)
        self.ids = DisaggRequestIds()
        self.log = trtllm_logger(logging.DEBUG)
        # TensorRT-LLM's client is aiohttp, which logs no line per call; httpx would, at INFO.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.app_log = structlog.get_logger()  # trace-join's lines: the middleware configures structlog
        self.perf = PerfMetricsJsonl(out / "perf_metrics", "disagg")
        self.client: httpx.AsyncClient | None = None

    def app(self) -> Starlette:
        routes = [Route(api.path, self._route(api), methods=["POST"]) for api in APIS]
        return traced_app(routes, role="router", service="trtllm-disagg", out=self.out, lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(event_hooks={"request": [inject_tracejoin_headers]}, timeout=30) as client:
            self.client = client
            yield

    def _route(self, api: Api):
        async def serve(http: Request) -> Response:
            arrival = steady_now()
            body = await http.json()
            disagg_request_id = self.ids.next()
            bind_disagg_request_id(disagg_request_id)
            if isinstance(api, Responses):
                name_responses_request(body, disagg_request_id)
            ctx_dispatch = steady_now()
            try:
                ctx = await self._context(api, body, disagg_request_id)
            except httpx.HTTPError as failure:
                return JSONResponse(error(_client_error(failure), 500), status_code=500)
            return await self._generation(api, body, Dispatched(arrival, ctx_dispatch, ctx))

        return serve

    async def _context(self, api: Api, body: dict, disagg_request_id: int) -> ContextDone:
        server = next(self._next_ctx)
        for attempt in itertools.count():
            url = f"http://{server}{api.path}"
            params = {"request_type": "context_only", "disagg_request_id": disagg_request_id,
                      "schedule_style": "context_first"}
            request = {**body, "stream": False, "disaggregated_params": params}
            request.pop("stream_options", None)
            # ctx_request_id is the context worker's to give: a context-first request has none yet.
            self.log.debug(f"Sending {ServerRole.CONTEXT} request {params.get('ctx_request_id')} to {url}")
            try:
                reply = await self.client.post(url, json=request, headers={RETURN_METRICS: "1"})
                reply.raise_for_status()
            except httpx.HTTPError as failure:
                if attempt == MAX_RETRIES:
                    self.log.error(f"Client error to {url}: {_client_error(failure)} - last retry {attempt} of "
                                   f"{MAX_RETRIES} failed", traceback.format_exc())
                    raise
                self.log.error(f"{ServerRole.CONTEXT} client error to {url}: {_client_error(failure)} - retry "
                               f"{attempt} of {MAX_RETRIES}", traceback.format_exc())
                # Logged under the disagg id that failed, before the new one is bound.
                self.app_log.warning("disagg.context_retry", ctx_server=server, error=_client_error(failure))
                await asyncio.sleep(RETRY_INTERVAL_S)
                disagg_request_id = self.ids.next()
                bind_disagg_request_id(disagg_request_id)
                server = next(s for s in self.ctx_servers if s != server)
                continue
            return ContextDone(server, disaggregated_params(reply.json()), timing_from_headers(reply.headers),
                               disagg_request_id)

    async def _generation(self, api: Api, body: dict, request: Dispatched) -> Response:
        request.gen_server = next(self._next_gen)
        url = f"http://{request.gen_server}{api.path}"
        params = {**request.ctx.params, "request_type": "generation_only"}
        self.log.debug(f"Sending {ServerRole.GENERATION} request {params.get('ctx_request_id')} to {url}")
        upstream = await self.client.send(
            self.client.build_request("POST", url, json={**body, "disaggregated_params": params},
                                      headers={RETURN_METRICS: "1"}),
            stream=True,
        )
        media_type = upstream.headers.get("content-type")
        if upstream.is_error:
            content = await upstream.aread()
            await upstream.aclose()
            self.log.error(f"Unexpected error while processing {ServerRole.GENERATION} request to {url}: "
                           f"{upstream.status_code}, message={upstream.reason_phrase!r}")
            return Response(content, status_code=upstream.status_code, media_type=media_type)
        return StreamingResponse(self._relay(upstream, request), status_code=upstream.status_code,
                                 media_type=media_type)

    async def _relay(self, upstream: httpx.Response, request: Dispatched) -> AsyncIterator[bytes]:
        """The generation worker's reply, passed on as it arrives. Of a stream only whole events are
        passed on, so the worker's closing `trtllm.perf_metrics` event can be kept back: it is the
        disaggregated server's, not the client's. The record is written once the reply is complete."""
        streamed = (upstream.headers.get("content-type") or "").startswith("text/event-stream")
        events = EventSplitter()
        worker_metrics = upstream.headers
        first_token = None
        try:
            async for chunk in upstream.aiter_bytes():
                if not streamed:
                    yield chunk
                    continue
                first_token = first_token or steady_now()
                for event in events.feed(chunk):
                    if event.startswith(PERF_METRICS_EVENT):
                        worker_metrics = headers_in_event(event)
                    else:
                        yield event
            if events.rest:
                yield events.rest
            # A reply that is not streamed has its first token when it is complete.
            self.perf.write(request.record(first_token or steady_now(), timing_from_headers(worker_metrics)))
        finally:
            with anyio.CancelScope(shield=True):  # the client may have left: close the worker's reply anyway
                await upstream.aclose()


class EventSplitter:
    """Cuts a byte stream into whole server-sent events, each ending in a blank line."""

    def __init__(self):
        self.rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        *events, self.rest = (self.rest + chunk).split(b"\n\n")
        return [event + b"\n\n" for event in events]


def _client_error(failure: httpx.HTTPError) -> str:
    """A failed call as aiohttp, which TensorRT-LLM's client uses, words it."""
    if isinstance(failure, httpx.HTTPStatusError):
        response = failure.response
        return f"{response.status_code}, message={response.reason_phrase!r}, url={str(failure.request.url)!r}"
    return f"{type(failure).__name__}: {failure}"


def build_app(out: Path, ctx_servers: list[str], gen_servers: list[str]) -> Starlette:
    return Router(out, ctx_servers, gen_servers).app()
