"""`trace-join demo --dynamo`: trace-join beside a real NVIDIA Dynamo deployment, live.

It starts what dynamo_stack.py describes (`trace-join collect`, Dynamo's frontend with a prefill
and a decode worker exporting to it, `trace-join proxy` in front), prints what runs where, sends a
small mix of requests through the proxy, and looks up one Responses reply and one chat reply
through the running collector once their records have arrived (every worker's lines, spans and
log records: a Responses reply is joined to Dynamo's records only through them, so before they
arrive its lookup shows the proxy alone). Then it stops everything, the collector once it has read
every file the others wrote (dynamo_stack.py), and prints the next commands to try, with this
run's ids; they read the store the collector left.
Dynamo is installed on first use (dynamo.py).
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from tracejoin.cli import render
from tracejoin.collector.service import remote
from tracejoin.collector.store import StoreError

from .deployment import DeploymentError
from .dynamo import DYNAMO_VERSION, MODEL_NAME, cache_dir, dynamo_installed
from .dynamo_stack import DynamoStack
from .traffic import TIMEOUT_S, Sent, chat, completion, response, send

# Dynamo exports every 0.5 s and the collector looks at files every 0.5 s: a second or two, unless
# the collector's commits wait (on a disk another process keeps busy, say).
ARRIVE_WITHIN_S = 60
# What a reply's lookup shows once everything has arrived: each Dynamo process's lines, spans and
# OTLP log records, and the frontend's request-trace rows.
COMPLETE = {("frontend", "dynamo_request_trace", "log")} | {
    (role, source, kind) for role in ("frontend", "prefill", "decode")
    for source, kind in (("dynamo_jsonl", "log"), ("otlp_json", "span"), ("otlp_json", "log"))}


def the_mix() -> list[Sent]:
    session = f"agent-session-{secrets.token_hex(3)}"
    return [
        Sent("Responses", *response("what is the answer ?", stream=False, model=MODEL_NAME), x_request_id=session),
        Sent("chat, streamed", *chat("tell me a story", stream=True, model=MODEL_NAME), x_request_id=session),
        Sent("completions", *completion("once upon a time", stream=False, model=MODEL_NAME), x_request_id=session),
        Sent("Responses, streamed", *response("how are you ?", stream=True, model=MODEL_NAME)),
        Sent("chat", *chat("say hi please", stream=False, model=MODEL_NAME)),
        Sent("chat for a model Dynamo does not serve", *chat("hello", stream=False, model="no/such-model")),
        # The mocker's tokens decode to no text here, so its streams have two events: the role, then
        # the end. Leaving after the first is leaving mid-stream.
        Sent("chat, streamed; the client leaves after the first event",
             *chat("tell me a long story", stream=True, max_tokens=200, model=MODEL_NAME), leave_after=1),
    ]


def run_dynamo_demo(db: Path, folder: str) -> None:
    # Each run writes a folder of its own, so nothing an earlier run (or anyone) left is touched.
    out = (Path(folder) / datetime.now(timezone.utc).strftime("dynamo-run-%Y%m%dT%H%M%SZ")).resolve()
    db = db.resolve()
    if not dynamo_installed():
        print(f"Installing Dynamo {DYNAMO_VERSION} into {cache_dir()}, once (a minute or two)...", flush=True)
    started = time.monotonic()
    with DynamoStack(out, db) as stack:
        print(f"NVIDIA Dynamo {DYNAMO_VERSION} on loopback (a frontend, a prefill and a decode mocker worker) with "
              f"trace-join beside it, started in {time.monotonic() - started:.1f} s; its files are in {out}/")
        for process in stack.started():
            print(f"  {process.name:<9} {process.address:<34} pid {process.pid:<8} {process.output.relative_to(out)}")
        watched = " and ".join(f"{folder.relative_to(out)}/" for folder in stack.watched)
        print(f"The collector follows {watched}, receives Dynamo's spans and log records over OTLP, and stores "
              f"it all in {db}.")

        sent = asyncio.run(_send(stack.proxy_url, the_mix()))
        print(f"\nsent {len(sent)} requests through the proxy:")
        for request in sent:
            print(f"  {request.line()}")
        looked_up = [_first_reply(sent, "/v1/responses"), _first_reply(sent, "/v1/chat/completions")]
        for reply in looked_up:
            print(f"\n$ {render.command('lookup', '--db', db, reply)}    # through the running collector\n")
            render.lookup_text(_once_arrived(db, reply, out))
    print(f"\nstopped the proxy, Dynamo and the collector; their records are in {db}, their logs in {out}")
    _print_next(db, out, sent, looked_up)


async def _send(url: str, mix: list[Sent]) -> list[Sent]:
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S) as client:
        await asyncio.gather(*(send(client, sent) for sent in mix))
    return mix


def _first_reply(sent: list[Sent], path: str) -> str:
    reply = next((s.reply_id for s in sent if s.path == path and s.status == 200 and s.reply_id), None)
    if reply is None:
        raise DeploymentError(f"no {path} request went through Dynamo; its logs are in the folder above")
    return reply


def _once_arrived(db: Path, reply: str, out: Path) -> dict:
    """The lookup, once the request's records are COMPLETE and each process has one name (the
    collector names a worker's spans after its logs once both are in, a moment after storing
    them). Records that have not all arrived within ARRIVE_WITHIN_S are a DeploymentError: a lookup
    printed before then would show the request without the workers whose records are still on
    their way (a Responses reply only the proxy's), or a worker twice under two names."""
    deadline = time.monotonic() + ARRIVE_WITHIN_S
    while True:
        try:
            result = remote.query(db, "lookup", {"id": reply})
        except StoreError as e:
            raise DeploymentError(f"{e}; see {out / 'collector.log'}") from None
        records = [r for request in result["requests"] for r in request["records"]]
        seen = {(r["role"], source, r["kind"]) for r in records
                for source in (r["source"], *(also["source"] for also in r.get("also", ())))}  # an event shown once
        names = {(r["role"], r["worker"]) for r in records if r["role"] in ("prefill", "decode")}
        if COMPLETE <= seen and len(names) == len({role for role, _ in names}):
            return result
        if time.monotonic() > deadline:
            missing = ", ".join(f"the {role}'s {source} {kind}s" for role, source, kind in sorted(COMPLETE - seen))
            if not missing:
                missing = "one name for each worker: " + ", ".join(sorted(f"{role} {worker}" for role, worker in names))
            raise DeploymentError(f"the records of {reply} had not all reached the collector within "
                                  f"{ARRIVE_WITHIN_S} s (still none of {missing}); see {out / 'collector.log'}")
        time.sleep(0.5)


def _print_next(db: Path, out: Path, sent: list[Sent], looked_up: list[str]) -> None:
    """Commands to run next, each as it can be pasted into a shell."""
    logs = shlex.quote(str(out / "logs"))
    session = next(s.x_request_id for s in sent if s.x_request_id)
    sharing = sum(1 for s in sent if s.x_request_id == session)
    responses_reply = looked_up[0]
    render.next_commands([
        (("lookup", "--db", db, responses_reply, "--json"), "the same, for scripts"),
        (("lookup", "--db", db, session), f"an x-request-id {sharing} requests share"),
        (("requests", "--db", db, "--errors"), "the unknown model's 404 and the client that left"),
        (("coverage", "--db", db), "how many replies joined their prefill and decode workers"),
        (f"grep -rl {responses_reply} {logs}", "no Dynamo record has a Responses reply id; the proxy's has"),
    ], then=f"Then your own deployment: {render.command('collect', '--db', db)} with --watch for each of its log folders "
            f"(docs/integrations/dynamo.md).")
