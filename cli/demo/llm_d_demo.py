"""`trace-join demo --engine llm-d`: llm-d's prefill/decode disaggregation over vLLM, on loopback: its
endpoint picker and P/D routing sidecar (simulated, llm_d_sidecar.py: they are Go) in front of two prefill and two
decode vLLM servers (simulated as in the vLLM demo: vLLM needs a GPU).

Each request's two legs carry the x-request-id the sidecar adds, which vLLM names both replies after
(`chatcmpl-<uuid>`, unless the client sent an id of its own, which vLLM reads first), and the trace.
The lookup shows the endpoint picker's choice of the decode server, the sidecar's span with its
`prefill` and `decode` legs, the prefill server's and the decode server's records of one request,
and where its time went as the sidecar measured it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from tracejoin.cli import render
from tracejoin.collector.store import Store

from . import run_simulated
from .traffic import Sent, chat, completion
from .vllm_demo import VllmDeployment
from .vllm_server import FAILING_PROMPT, MODEL


class LlmDDeployment(VllmDeployment):
    """The vLLM demo's servers, behind the sidecar instead of vLLM's proxy."""

    names = ("sidecar", "prefill-0", "prefill-1", "decode-0", "decode-1")
    module = "tracejoin.cli.demo.llm_d_sidecar"


# The client's own x-request-id reaches vLLM (the sidecar adds its own after it): vLLM names the reply
# after it, and a lookup of it finds the request.
CLIENT_ID = "ticket-4711"


def the_mix() -> list[Sent]:
    return [
        Sent("chat, with the client's own x-request-id", *chat("Which server decoded my last request?", stream=False,
                                                                model=MODEL), x_request_id=CLIENT_ID),
        Sent("chat, streamed", *chat("Explain prefill and decode in one line.", stream=True, model=MODEL)),
        Sent("completions", *completion("The KV cache moves over NIXL from", stream=False, model=MODEL)),
        Sent("completions, streamed", *completion("Once upon a time", stream=True, model=MODEL)),
        Sent("chat; its decode server fails", *chat(f"Summarize the outage. {FAILING_PROMPT}", stream=False,
                                                     model=MODEL)),
        Sent("chat, streamed; the client leaves after 3 events", *chat("Tell me a long story.", stream=True,
                                                                          max_tokens=200, model=MODEL), leave_after=3),
    ]


def run_llm_d_demo(store: Store, folder: str) -> None:
    out = (Path(folder) / datetime.now(timezone.utc).strftime("llm-d-%Y%m%dT%H%M%SZ")).resolve()
    intro = ("llm-d's prefill/decode disaggregation on loopback: its endpoint picker and P/D routing sidecar "
             "(simulated: they are Go) "
             "in front of simulated vllm serve prefill and decode servers (vLLM needs a GPU) writing vLLM 0.33's "
             "logs and spans")
    reply = run_simulated(store, out, LlmDDeployment(out), intro, the_mix())
    db = store.path
    lines = [(("lookup", "--db", db, reply, "--json"), "the same, for scripts"),
             (("lookup", "--db", db, CLIENT_ID), "the client's own x-request-id, which vLLM named its reply after"),
             (("requests", "--db", db, "--errors"), "the request its decode server failed")]
    render.next_commands(lines, then=f"Then your own llm-d deployment's records: {render.command('ingest', '--db', db)} --tz ZONE "
                                     f"followed by the vLLM pods' log folders and the sidecar's OTLP spans "
                                     f"(docs/integrations/vllm.md).")
