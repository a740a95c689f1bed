"""`trace-join demo --engine vllm`: a disaggregated vLLM deployment's records, made by a running one
on loopback, ingested and looked up across its prefill and decode servers.

vLLM needs a GPU, so its servers are simulated (vllm_server.py): two prefill and two decode servers
writing vLLM 0.33's own log lines and spans (vllm_formats.py), behind vLLM's P/D proxy with
TraceJoinMiddleware. The proxy sends one request id of its own to both sides, and the decode side
logs the prefill's engine id it was handed (`remote_request_id`): the lookup shows the proxy, the
prefill and the decode server's records of one request.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from tracejoin.cli import render
from tracejoin.collector.store import Store

from . import run_simulated
from .deployment import Processes, Server
from .traffic import Sent, chat, completion
from .vllm_server import FAILING_PROMPT, MODEL, service_log

NAMES = ("proxy", "prefill-0", "prefill-1", "decode-0", "decode-1")


class VllmDeployment(Processes):
    names = NAMES
    module = "tracejoin.cli.demo.vllm_server"

    def options(self, name: str, addresses: dict[str, str]) -> list[str]:
        if name == self.names[0]:  # the entry, told where the servers are
            return ["--name", name] + [arg for server in self.names[1:] for arg in
                                       (f"--{server.split('-')[0]}", addresses[server])]
        return ["--name", f"vllm-{name}"]

    def log_of(self, server: Server) -> Path:
        return service_log(self.out, f"vllm-{server.name}")


def the_mix() -> list[Sent]:
    session = "agent-session-vllm"
    return [
        Sent("chat", *chat("Which server decoded my last request?", stream=False, model=MODEL), x_request_id=session),
        Sent("chat, streamed", *chat("Explain prefill and decode in one line.", stream=True, model=MODEL),
             x_request_id=session),
        Sent("completions", *completion("The KV cache moves over NIXL from", stream=False, model=MODEL)),
        Sent("completions, streamed", *completion("Once upon a time", stream=True, model=MODEL)),
        Sent("chat; its decode server fails", *chat(f"Summarize the outage. {FAILING_PROMPT}", stream=False,
                                                     model=MODEL), x_request_id=session),
        Sent("chat, streamed; the client leaves after 3 events", *chat("Tell me a long story.", stream=True,
                                                                          max_tokens=200, model=MODEL), leave_after=3),
    ]


def run_vllm_demo(store: Store, folder: str) -> None:
    out = (Path(folder) / datetime.now(timezone.utc).strftime("vllm-%Y%m%dT%H%M%SZ")).resolve()
    intro = ("A disaggregated vLLM deployment on loopback: simulated vllm serve prefill and decode servers "
             "(vLLM needs a GPU) writing vLLM 0.33's logs and spans, behind vLLM's P/D proxy")
    reply = run_simulated(store, out, VllmDeployment(out), intro, the_mix())
    db = store.path
    lines = [(("lookup", "--db", db, reply, "--json"), "the same, for scripts"),
             (("lookup", "--db", db, "agent-session-vllm"), "the x-request-id three requests share"),
             (("requests", "--db", db, "--errors"), "the request its decode server failed")]
    render.next_commands(lines, then=f"Then your own vLLM servers' logs: {render.command('ingest', '--db', db)} --tz ZONE "
                                     f"followed by their log folders (docs/integrations/vllm.md).")
