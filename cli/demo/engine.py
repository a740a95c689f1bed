"""The engine behind a demo worker, standing in for TensorRT-LLM's executor.

It numbers requests as the executor does, counting up in every process (from the same first id:
deployment.py), so two workers issue the same engine request ids. It spends the time a GPU would,
in short sleeps: a request waits for the one prefill slot (queue), is prefilled, waits for its KV
cache to arrive on a generation worker, and decodes token by token. Each moment is noted on the steady clock under the name TensorRT-LLM's
`RequestPerfMetrics` gives it (`arrival_time`, `first_scheduled_time`, ...).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from .trtllm_formats import steady_now

TOKENS_PER_BLOCK = 32
KV_BYTES_PER_TOKEN = 131_072  # K and V, 32 layers × 8 KV heads × 128 dims, fp16

PREFILL_S, PREFILL_PER_TOKEN_S = 0.015, 0.0005
KV_TRANSFER_S, KV_TRANSFER_PER_TOKEN_S = 0.004, 0.00005
DECODE_PER_TOKEN_S = 0.012

# What every reply says, token by token; a token's id is its place here.
VOCABULARY = ("The", " context", " worker", " filled", " the", " cache;", " the", " generation", " worker",
              " decoded", " every", " token", " after", " the", " first.")


@dataclass
class EngineRequest:
    request_id: int  # the engine's own id: unique only within this process
    prompt_tokens: int
    times: dict[str, float] = field(default_factory=dict)  # steady-clock seconds, by TensorRT-LLM's names
    first_iter: int | None = None
    last_iter: int | None = None
    kv_cache_size: int = 0  # bytes received from the context worker

    def kv_blocks(self, output_tokens: int) -> dict:
        blocks = math.ceil((self.prompt_tokens + output_tokens) / TOKENS_PER_BLOCK)
        return {"num_total_allocated_blocks": blocks, "num_new_allocated_blocks": blocks,
                "num_reused_blocks": 0, "num_missed_blocks": blocks}


class Engine:
    def __init__(self, first_request_id: int):
        self._request_ids = itertools.count(first_request_id)
        self._iterations = itertools.count()
        self._prefill_slot = asyncio.Lock()  # one prefill at a time: concurrent requests queue

    def submit(self, prompt: str) -> EngineRequest:
        request = EngineRequest(request_id=next(self._request_ids), prompt_tokens=len(prompt.split()))
        request.times["arrival_time"] = steady_now()
        return request

    async def prefill(self, request: EngineRequest) -> str:
        """Queue for the prefill slot, prefill, and return the first token (a context-only request
        ends here: its first token is its last)."""
        async with self._prefill_slot:
            self._schedule(request)
            await asyncio.sleep(PREFILL_S + PREFILL_PER_TOKEN_S * request.prompt_tokens)
        self._token(request)
        return VOCABULARY[0]

    async def receive_kv_cache(self, request: EngineRequest) -> None:
        """A generation-only request first receives the KV cache its context worker computed."""
        request.times["kv_cache_transfer_start"] = steady_now()
        await asyncio.sleep(KV_TRANSFER_S + KV_TRANSFER_PER_TOKEN_S * request.prompt_tokens)
        request.times["kv_cache_transfer_end"] = steady_now()
        request.kv_cache_size = request.prompt_tokens * KV_BYTES_PER_TOKEN
        self._schedule(request)

    async def decode(self, request: EngineRequest, max_tokens: int) -> AsyncIterator[str]:
        for index in range(max_tokens):
            await asyncio.sleep(DECODE_PER_TOKEN_S)
            self._token(request)
            yield VOCABULARY[index % len(VOCABULARY)]

    def _schedule(self, request: EngineRequest) -> None:
        request.times["first_scheduled_time"] = steady_now()
        request.first_iter = request.last_iter = next(self._iterations)

    def _token(self, request: EngineRequest) -> None:
        now = steady_now()
        request.times.setdefault("first_token_time", now)
        request.times["last_token_time"] = now
        request.last_iter = next(self._iterations)
