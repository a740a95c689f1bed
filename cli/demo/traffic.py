"""What the demo's clients send to the router: a realistic mix, over httpx, as applications send it.

- chat, completions and Responses requests, streamed and not;
- an agent session whose requests all carry one `x-request-id`, as client-chosen ids are shared;
- a Responses request whose context worker fails: the router retries it on the other context
  worker under a new disagg request id. It is sent first, alone, so the router's round robin gives
  it to the flaky context worker (deployment.py makes ctx-0 flaky);
- a request whose generation worker fails (500);
- a long prompt, whose prefill holds up its context worker's queue;
- a client that leaves in the middle of a streamed reply.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass

import httpx

from tracejoin.middleware.ids import reply_id_in

from .worker_app import FAILING_PROMPT, FLAKY_PROMPT, MODEL

TIMEOUT_S = 30
LONG_PROMPT = "Summarize this incident timeline: " + " ".join(["08:14:03 gen-1 decode step 412 took 31 ms;"] * 100)


@dataclass
class Sent:
    what: str  # one line for the user
    path: str
    body: dict
    x_request_id: str | None = None
    leave_after: int | None = None  # events, for a client that leaves mid-stream
    status: int | None = None
    reply_id: str | None = None

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))

    def line(self) -> str:
        """What was sent and what came back, in one line for the user."""
        return (f"{self.status or '-':<4} {self.reply_id or '-':<48} {self.what}"
                + (f"  [x-request-id {self.x_request_id}]" if self.x_request_id else ""))


def chat(prompt: str, *, stream: bool, max_tokens: int = 12, model: str = MODEL) -> tuple[str, dict]:
    return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": prompt}],
                                    "stream": stream, "max_tokens": max_tokens}


def completion(prompt: str, *, stream: bool, model: str = MODEL) -> tuple[str, dict]:
    return "/v1/completions", {"model": model, "prompt": prompt, "stream": stream, "max_tokens": 12}


def response(prompt: str, *, stream: bool, model: str = MODEL) -> tuple[str, dict]:
    return "/v1/responses", {"model": model, "input": prompt, "stream": stream, "max_output_tokens": 12}


def the_mix() -> tuple[Sent, list[Sent]]:
    """The request to retry, sent first, and the rest, sent together."""
    session = f"agent-session-{secrets.token_hex(3)}"
    retried = Sent("Responses; its context worker fails, the router retries on the other",
                   *response(f"Draft the on-call status update. {FLAKY_PROMPT}", stream=False), x_request_id=session)
    rest = [
        Sent("chat, streamed", *chat("Which worker served my last request?", stream=True), x_request_id=session),
        Sent("completions", *completion("The KV cache moves from the context worker to", stream=False),
             x_request_id=session),
        Sent("chat; its generation worker fails", *chat(f"Summarize the failed deploy. {FAILING_PROMPT}", stream=False),
             x_request_id=session),
        Sent("Responses, streamed", *response("Explain disaggregated serving in one paragraph.", stream=True)),
        Sent("Responses with a long prompt", *response(LONG_PROMPT, stream=False)),
        Sent("completions, streamed", *completion("Once upon a time", stream=True)),
        Sent("chat", *chat("Say hello.", stream=False)),
        Sent("chat, streamed; the client leaves after 3 events", *chat("Tell me a long story.", stream=True,
                                                                          max_tokens=200), leave_after=3),
        Sent("Responses", *response("List three causes of a slow time to first token.", stream=False)),
    ]
    return retried, rest


async def send_traffic(router_url: str) -> list[Sent]:
    retried, rest = the_mix()
    async with httpx.AsyncClient(base_url=router_url, timeout=TIMEOUT_S) as client:
        await send(client, retried)
        await asyncio.gather(*(send(client, sent) for sent in rest))
    return [retried, *rest]


async def send_all(url: str, sent: list[Sent]) -> list[Sent]:
    """Send them all at once."""
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S) as client:
        await asyncio.gather(*(send(client, s) for s in sent))
    return sent


async def send(client: httpx.AsyncClient, sent: Sent) -> None:
    """Send one request and note what came back: the status, the reply id (from the JSON body, or
    the first event of a stream that has one)."""
    headers = {"x-request-id": sent.x_request_id} if sent.x_request_id else {}
    async with client.stream("POST", sent.path, json=sent.body, headers=headers) as reply:
        sent.status = reply.status_code
        if not sent.streamed or reply.is_error:
            body = await reply.aread()
            sent.reply_id = reply_id_in(json.loads(body)) if reply.is_success else None
            return
        events = 0
        async for line in reply.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            sent.reply_id = sent.reply_id or reply_id_in(json.loads(line[5:]))
            events += 1
            if events == sent.leave_after:
                return  # leaving the block closes the connection mid-stream
