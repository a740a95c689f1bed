"""`trace-join demo`: a disaggregated TensorRT-LLM deployment's records, made by a running one on
loopback, ingested and looked up; nothing to configure.

The deployment is trace-join's own (TensorRT-LLM needs a GPU): a router and two context and two
generation workers, Starlette apps behind TraceJoinMiddleware, each a process of its own
(deployment.py), writing TensorRT-LLM's records (trtllm_formats.py: perf-metrics JSONL, hook
records, text logs, `llm_request` spans) beside trace-join's own lines and spans. traffic.py sends
them a mix of requests; then this module ingests the run's folder, looks up one Responses reply
(the one whose context request was retried, when it was), summarizes coverage, writes the copy
Grafana reads (a snapshot) and prints the next commands to try, with this run's ids.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from tracejoin.cli import render
from tracejoin.collector.coverage import coverage
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.lookup import lookup
from tracejoin.collector.store import Store

from .deployment import Deployment, DeploymentError, Processes
from .traffic import Sent, send_all, send_traffic

__all__ = ["DeploymentError", "run_demo"]

_DISAGG_RESPONSES_REPLY = re.compile(r"resp_(\d+)_[0-9a-f]{16}")


def run_demo(store: Store, folder: str) -> None:
    # Each run writes a folder of its own, so nothing an earlier run (or anyone) left is touched.
    out = (Path(folder) / datetime.now(timezone.utc).strftime("run-%Y%m%dT%H%M%SZ")).resolve()
    started = time.monotonic()
    # Streamed chat and completion replies are named after their engine request id (chatcmpl-<id>),
    # so each run's engines start past the last run's ids: at the count of records stored, which
    # grows by more than any worker's requests in every run (each request leaves several records).
    first_engine_request_id = store.con.execute("SELECT count(*) FROM records").fetchone()[0]
    with Deployment(out, first_engine_request_id) as deployment:
        show_started("A disaggregated deployment on loopback: trace-join's stand-ins for trtllm-serve",
                     deployment.servers)
        sent = asyncio.run(send_traffic(deployment.router_url))
    show_sent(sent, started)
    replies = [s.reply_id for s in sent if s.path == "/v1/responses" and s.status == 200 and s.reply_id]
    if not replies:
        raise DeploymentError(f"no Responses request went through; the processes' logs are in {out / 'logs'}")
    reply = replies[0]  # the retried request's, when it went through: it was sent first
    _print_next(store, sent, reply, walk_through(store, out, reply))


def run_simulated(store: Store, out: Path, deployment: Processes, intro: str, mix: list[Sent]) -> str:
    """Start the deployment, send it the mix, walk through what it recorded; the reply looked up."""
    started = time.monotonic()
    with deployment:
        show_started(intro, deployment.servers)
        sent = asyncio.run(send_all(deployment.router_url, mix))
    show_sent(sent, started)
    replies = [s.reply_id for s in sent if s.status == 200 and s.reply_id and not s.leave_after]
    if not replies:
        raise DeploymentError(f"no request went through; the servers' logs are in {out / 'logs'}")
    walk_through(store, out, replies[0])
    return replies[0]


def show_started(intro: str, servers) -> None:
    print(intro)
    for server in servers:
        print(f"  {server.name:<10} {server.address:<16} pid {server.process.pid}")


def show_sent(sent: list[Sent], started: float) -> None:
    print(f"\nsent {len(sent)} requests; the deployment ran for {time.monotonic() - started:.1f} s")
    for request in sent:
        print(f"  {request.line()}")


def walk_through(store: Store, out: Path, reply: str) -> dict:
    """What a user does next, shown as they would type it: ingest the run's folder, look the reply up,
    see coverage, write Grafana's copy. Returns the lookup's answer."""
    # The stand-ins stamp their text logs in this machine's local time, as the engines do: its zone is
    # known here, so the demo names it, as a user names their servers' zone.
    zone = datetime.now().astimezone().strftime("%z")
    print(f"\n$ {render.command('ingest', '--db', store.path, '--tz', zone, out)}\n")
    render.ingest_summary(Ingester(store, tz=zone).ingest_paths([str(out)]), as_json=False)
    print(f"\n$ {render.command('lookup', '--db', store.path, reply)}\n")
    found = lookup(store, reply)
    render.lookup_text(found)
    print(f"\n$ {render.command('coverage', '--db', store.path)}\n")
    render.coverage_text(coverage(store))
    print(f"\n$ {render.command('snapshot', '--db', store.path)}\n")
    print(render.grafana_hint(store.publish_for_grafana(None, None)))
    return found


def _print_next(store: Store, sent: list[Sent], reply: str, found: dict) -> None:
    """Commands to run next, each as it can be pasted into a shell."""
    db = store.path
    disagg_ids = [d for request in found["requests"] for d in request["ids"]["disagg_request_id"]]
    named_after = _DISAGG_RESPONSES_REPLY.fullmatch(reply)
    first_disagg = named_after.group(1) if named_after else None
    session = next((s.x_request_id for s in sent if s.x_request_id), None)
    sharing = sum(1 for s in sent if s.x_request_id == session)
    lines = [
        (("lookup", "--db", db, reply, "--json"), "the same, for scripts"),
        (("requests", "--db", db, "--slowest"), "where the time went (docs/runbook.md)"),
        (("requests", "--db", db, "--errors"), "the failed, the retried and the cut-short requests"),
    ]
    if first_disagg and len(disagg_ids) > 1:
        lines.insert(0, (("lookup", "--db", db, first_disagg),
                         "the disagg id its retry abandoned: the same request"))
    if session:
        lines.insert(1, (("lookup", "--db", db, session), f"an x-request-id {sharing} requests share"))
    render.next_commands(lines, then=f"Then your own deployment's records: {render.command('ingest', '--db', db)} followed "
                                     f"by its log folders (docs/integrations/trtllm.md).")
