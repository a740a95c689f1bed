"""`trace-join demo --engine sglang`: a disaggregated SGLang deployment's records, made by a running one
on loopback, ingested and looked up across its prefill and decode servers.

SGLang needs a GPU, so its servers are simulated (sglang_server.py): two prefill and two decode servers
writing SGLang 0.5.23's own records (sglang_formats.py: request logs, ReqTimeStats, the request-metrics
exporter's files, spans), behind SGLang's mini load balancer with TraceJoinMiddleware. The router
sends both sides the same body and no rid, so each names the request its own way; the bootstrap room
it draws for them is what joins the prefill's records to the decode's, whose rid the client sees.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from tracejoin.cli import render
from tracejoin.collector.store import Store

from . import run_simulated
from .deployment import Processes, Server
from .sglang_server import FAILING_PROMPT, MODEL, service_log
from .traffic import Sent, chat, completion

NAMES = ("router", "prefill-0", "prefill-1", "decode-0", "decode-1")
SESSION = "agent-session-sglang"


class SglangDeployment(Processes):
    names = NAMES
    module = "tracejoin.cli.demo.sglang_server"

    def options(self, name: str, addresses: dict[str, str]) -> list[str]:
        if name == "router":
            return ["--name", name] + [arg for server in NAMES[1:] for arg in
                                       (f"--{server.split('-')[0]}", addresses[server])]
        return ["--name", f"sglang-{name}"]

    def log_of(self, server: Server) -> Path:
        return service_log(self.out, f"sglang-{server.name}")


def the_mix() -> list[Sent]:
    return [
        Sent("chat", *chat("Which server decoded my last request?", stream=False, model=MODEL), x_request_id=SESSION),
        Sent("chat, streamed", *chat("Explain the bootstrap room in one line.", stream=True, model=MODEL),
             x_request_id=SESSION),
        Sent("completions", *completion("The KV cache moves from the prefill server to", stream=False, model=MODEL)),
        Sent("completions, streamed", *completion("Once upon a time", stream=True, model=MODEL)),
        Sent("chat; its decode server fails", *chat(f"Summarize the outage. {FAILING_PROMPT}", stream=False,
                                                     model=MODEL), x_request_id=SESSION),
        Sent("chat, streamed; the client leaves after 3 events", *chat("Tell me a long story.", stream=True,
                                                                          max_tokens=200, model=MODEL), leave_after=3),
    ]


def run_sglang_demo(store: Store, folder: str) -> None:
    out = (Path(folder) / datetime.now(timezone.utc).strftime("sglang-%Y%m%dT%H%M%SZ")).resolve()
    intro = ("A disaggregated SGLang deployment on loopback: simulated prefill and decode servers (SGLang "
             "needs a GPU) writing SGLang 0.5.23's logs, metrics and spans, behind its mini load balancer")
    reply = run_simulated(store, out, SglangDeployment(out), intro, the_mix())
    db = store.path
    lines = [(("lookup", "--db", db, reply, "--json"), "the same, for scripts"),
             (("lookup", "--db", db, SESSION), "the x-request-id three requests share"),
             (("requests", "--db", db, "--errors"), "the request its decode server failed")]
    render.next_commands(lines, then=f"Then your own SGLang servers' logs: {render.command('ingest', '--db', db)} --tz ZONE "
                                     f"followed by their log folders (docs/integrations/sglang.md).")
