"""trace-join against a real NVIDIA Dynamo 1.6.1 deployment: a frontend, a prefill and a decode
worker (Dynamo's mocker engine, on CPU) exporting OTLP to `trace-join collect`, their JSONL logs
and request-trace rows in folders it watches, and `trace-join proxy` in front, each a process of
its own on 127.0.0.1 (tracejoin.cli.demo.dynamo_stack starts them, as `trace-join demo --dynamo`
does).

Clients send through the proxy what a fleet sees: chat, completions and Responses, streamed and
not (the openai client); requests sharing an x-request-id; an unknown model; a client that leaves
mid-stream; and last two concurrent requests reusing one x-dynamo-request-id (httpx). Dynamo 1.6.1
takes that UUID as its internal id: one or both fail (503, 500), and the frontend drops its prefill
worker for a few seconds after, so nothing is sent after them.

Then, while the collector runs, every answer comes from `trace-join lookup --json` and
`trace-join requests --json`, run as a user runs them (they read through the collector), and is
checked against what Dynamo itself wrote, read here from its logs without trace-join: the internal
id the frontend gave each request (its lines carry the client's x-request-id, so every request
sends one) and each worker's instance id. Records arrive a little after the replies (OTLP batches,
the tailer's polls), so each check is retried until it holds or ARRIVE_WITHIN_S has passed.

Skipped only when Dynamo cannot be installed here; the first run installs it into
~/.cache/trace-join (about 1.5 minutes), later runs start it in seconds.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import httpx
import pytest
from openai import AsyncOpenAI

from tracejoin.cli.demo.dynamo import MODEL_NAME
from tracejoin.collector.lookup import SAME_EVENT_NS
from tracejoin.cli.demo.dynamo_stack import DynamoStack

pytestmark = pytest.mark.integration

ARRIVE_WITHIN_S = 30  # about a second here: OTLP batches every 0.5 s, the tailer looks every 0.5 s
CLIENT_TIMEOUT_S = 30
# Each request sends its name as x-request-id, except three chat requests that share SESSION.
REPLIES = {
    "chat": ("chat", False), "chat-streamed": ("chat", True),
    "completions": ("completions", False), "completions-streamed": ("completions", True),
    "responses": ("responses", False), "responses-streamed": ("responses", True),
}
SESSION = "agent-session"
UNKNOWN_MODEL = "unknown-model"
LEAVES = "leaves-mid-stream"
COLLIDED = ("collided-a", "collided-b")


@dataclass
class Run:
    stack: DynamoStack
    replies: dict[str, str]  # request name (its x-request-id, or SESSION/i) -> the reply id its client got
    statuses: dict[str, int]  # x-request-id -> the HTTP status its client got, for the requests meant to fail
    reused_uuid: str

    def trace_join(self, *args) -> dict | list:
        """`trace-join ARGS --db DB --json`, while the collector holds DB: it answers through it."""
        assert self.stack.collector.poll() is None, "the collector stopped"
        env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
        done = subprocess.run([sys.executable, "-m", "tracejoin.cli", *args, "--db", str(self.stack.db), "--json"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode in (0, 1), done.stderr  # 1: nothing found (yet)
        return json.loads(done.stdout)

    def lookup(self, value: str) -> dict:
        return self.trace_join("lookup", value)

    def frontend_lines(self, **fields) -> list[dict]:
        lines = [json.loads(line) for line in self.stack.dynamo.log("frontend").read_text().splitlines()
                 if line.startswith("{")]
        return [line for line in lines if fields.items() <= line.items()]

    def internal_ids(self, x_request_id: str) -> set[str]:
        """The ids Dynamo's frontend gave the requests that sent this x-request-id."""
        received = self.frontend_lines(message="request received", x_request_id=x_request_id)
        return {line["request_id"] for line in received}

    def instance_id(self, worker: str) -> str:
        """A worker's discovery id, from the line it logs when it starts."""
        [line] = [json.loads(line) for line in self.stack.dynamo.log(worker).read_text().splitlines()
                  if '"FPM direct publisher started"' in line]
        return str(line["worker_id"])


def only(requests: list[dict]) -> dict:
    assert len(requests) == 1, [r["ids"] for r in requests]
    return requests[0]


def eventually(check):
    """check() until it stops failing; after ARRIVE_WITHIN_S its last failure is the test's."""
    deadline = time.monotonic() + ARRIVE_WITHIN_S
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def run(dynamo_installed, tmp_path_factory) -> Run:
    folder = tmp_path_factory.mktemp("dynamo")
    with DynamoStack(folder, folder / "store.duckdb") as stack:
        yield asyncio.run(send_traffic(stack))


async def send_traffic(stack: DynamoStack) -> Run:
    openai = AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key="unchecked", max_retries=0,
                         timeout=CLIENT_TIMEOUT_S)
    async with httpx.AsyncClient(base_url=stack.proxy_url, timeout=CLIENT_TIMEOUT_S) as http:
        names = [*REPLIES, *(f"{SESSION}/{i}" for i in range(3))]
        answers = await asyncio.gather(*(ask(openai, *REPLIES[name], x_request_id=name) for name in REPLIES),
                                       *(ask(openai, "chat", False, x_request_id=SESSION) for _ in range(3)))
        replies = dict(zip(names, answers))
        unknown = await http.post("/v1/chat/completions", headers={"x-request-id": UNKNOWN_MODEL},
                                  json={"model": "no/such-model", "messages": [{"role": "user", "content": "hi"}]})
        replies[LEAVES] = await leave_after_first_chunk(http)
        reused_uuid = str(uuid.uuid4())
        collided = await asyncio.gather(*(
            http.post("/v1/chat/completions", headers={"x-request-id": name, "x-dynamo-request-id": reused_uuid},
                      json={"model": MODEL_NAME, "max_tokens": 100,
                            "messages": [{"role": "user", "content": "tell me a story"}]})
            for name in COLLIDED))
    await openai.close()
    statuses = {UNKNOWN_MODEL: unknown.status_code, **{name: r.status_code for name, r in zip(COLLIDED, collided)}}
    assert statuses[UNKNOWN_MODEL] == 404, unknown.text
    return Run(stack, replies, statuses, reused_uuid)


async def ask(openai: AsyncOpenAI, endpoint: str, stream: bool, x_request_id: str) -> str:
    """One request through the openai client; the reply id it saw (every event of a stream names
    the same one)."""
    headers = {"x-request-id": x_request_id}
    if endpoint == "chat":
        reply = await openai.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                                     max_tokens=8, stream=stream, extra_headers=headers)
    elif endpoint == "completions":
        reply = await openai.completions.create(model=MODEL_NAME, prompt="once upon a time", max_tokens=8,
                                                stream=stream, extra_headers=headers)
    else:
        reply = await openai.responses.create(model=MODEL_NAME, input="what is the answer ?", max_output_tokens=8,
                                              stream=stream, extra_headers=headers)
    if not stream:
        return reply.id
    ids = set()
    async for event in reply:
        if endpoint != "responses":
            ids.add(event.id)
        elif hasattr(event, "response"):  # response.created, response.in_progress, response.completed
            ids.add(event.response.id)
    assert len(ids) == 1, ids
    return ids.pop()


async def leave_after_first_chunk(http: httpx.AsyncClient) -> str:
    """A streamed chat whose client closes the connection after the first chunk; its reply id."""
    body = {"model": MODEL_NAME, "max_tokens": 500, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with http.stream("POST", "/v1/chat/completions", json=body, headers={"x-request-id": LEAVES}) as reply:
        async for line in reply.aiter_lines():
            if line.startswith("data:"):
                return json.loads(line[5:])["id"]  # leaving the block closes the connection
    raise AssertionError("the stream ended before its first chunk")


@pytest.mark.parametrize("name", REPLIES)
def test_each_reply_id_gives_one_request_with_its_frontend_prefill_and_decode_records(run, name):
    reply = run.replies[name]
    [internal_id] = run.internal_ids(name)
    every_internal_id = {line["request_id"] for line in run.frontend_lines(message="request received")}
    workers = {"frontend": f"127.0.0.1:{run.stack.dynamo.http_port}",
               "prefill": run.instance_id("prefill"), "decode": run.instance_id("decode")}

    def check():
        request = only(run.lookup(reply)["requests"])
        assert reply in request["ids"]["reply_id"]
        # Of the ids Dynamo gave requests, this request carries its own and no other.
        assert set(request["ids"]["internal_id"]) & every_internal_id == {internal_id}
        named = {}
        for worker in request["workers"]:
            named.setdefault(worker["role"], set()).add(worker["worker"])
        assert set(named) == {"proxy", *workers}, named
        for role, identity in workers.items():
            assert all(identity in worker for worker in named[role]), (role, identity, named[role])
        seen = {(r["role"], r["source"], r["kind"]) for r in request["records"]}
        seen |= {(r["role"], also["source"], r["kind"]) for r in request["records"] for also in r.get("also", ())}
        expected = {("proxy", "tracejoin_jsonl", "tap"), ("frontend", "dynamo_request_trace", "log")}
        expected |= {(role, source, kind) for role in workers
                     for source, kind in (("dynamo_jsonl", "log"), ("otlp_json", "span"), ("otlp_json", "log"))}
        assert expected <= seen, expected - seen
        # Each log line Dynamo wrote to its JSONL file and exported over OTLP is shown once, naming both.
        logs = [r for r in request["records"] if r["kind"] == "log" and r["source"] in ("dynamo_jsonl", "otlp_json")]
        twins = [(a["name"], a["time"], b["time"]) for a in logs for b in logs
                 if a["source"] == "dynamo_jsonl" and b["source"] == "otlp_json"
                 and (a["worker"], a["span_id"], a["name"]) == (b["worker"], b["span_id"], b["name"])
                 and abs(_seconds(a["time"]) - _seconds(b["time"])) * 1e9 <= SAME_EVENT_NS]
        assert not twins, twins
        assert {r["source"] for r in logs} | {a["source"] for r in logs for a in r.get("also", ())} == \
            {"dynamo_jsonl", "otlp_json"}
        assert any(a["source"] == "otlp_json" for r in logs for a in r.get("also", ()))

    eventually(check)


def test_a_responses_reply_id_is_in_no_dynamo_file_only_in_the_proxys(run):
    """Why a Responses reply joins only through the proxy: Dynamo writes its id in no log line and no
    request-trace row."""
    replies = [run.replies["responses"], run.replies["responses-streamed"]]

    def check():
        files = [path for folder in run.stack.watched for path in folder.iterdir()]
        holding = {reply: [path.name for path in files if reply in path.read_text()] for reply in replies}
        assert holding == {reply: [run.stack.proxy_log.name] for reply in replies}

    eventually(check)


def test_a_shared_x_request_id_gives_every_request_that_sent_it(run):
    internal_ids = run.internal_ids(SESSION)
    replies = {run.replies[f"{SESSION}/{i}"] for i in range(3)}
    assert len(internal_ids) == len(replies) == 3

    def check():
        result = run.lookup(SESSION)
        assert result["id_kind"] == "x_request_id"
        requests = result["requests"]
        assert sorted(len(set(r["ids"]["internal_id"]) & internal_ids) for r in requests) == [1, 1, 1]
        assert {reply for r in requests for reply in r["ids"]["reply_id"]} == replies
        assert all({w["role"] for w in r["workers"]} == {"proxy", "frontend", "prefill", "decode"} for r in requests)

    eventually(check)


def test_a_reused_x_dynamo_request_id_is_reported_as_a_collision_and_the_requests_kept_apart(run):
    # Dynamo did take the client's UUID as the internal id of both requests.
    assert all(run.internal_ids(name) == {run.reused_uuid} for name in COLLIDED)

    def check():
        result = run.lookup(run.reused_uuid)
        assert any("collision" in w and run.reused_uuid in w for w in result["warnings"]), result["warnings"]
        requests = result["requests"]
        assert sorted(r["ids"]["x_request_id"] for r in requests) == [[name] for name in COLLIDED]
        assert len({trace for r in requests for trace in r["ids"]["trace_id"]}) == 2

    eventually(check)


def test_errors_show_their_status(run):
    """The status each client got: the unknown model's 404, and the collided pair's (Dynamo 1.6.1
    fails one or both, with 500 and 503)."""
    sent = dict(run.statuses)
    failed = {name for name, status in run.statuses.items() if status >= 400}

    def check():
        rows = run.trace_join("requests", "--limit", "100")
        assert {name: row["http_status"] for row in rows for name in row["x_request_ids"] if name in sent} == sent
        errors = run.trace_join("requests", "--errors", "--limit", "100")
        assert {name for row in errors for name in row["x_request_ids"] if name in sent} == failed
        # Dynamo's own record of the unknown model says so too, not only the proxy's.
        request = only(run.lookup(UNKNOWN_MODEL)["requests"])
        assert any(r["role"] == "frontend" and "http response sent" in r["summary"] and "status=404" in r["summary"]
                   for r in request["records"]), [r["summary"] for r in request["records"]]

    eventually(check)


def test_a_client_that_left_mid_stream_is_shown_as_such(run):
    reply = run.replies[LEAVES]

    def check():
        records = only(run.lookup(reply)["requests"])["records"]
        assert any(r["role"] == "proxy" and "request.end" in r["summary"] and "disconnected" in r["summary"].split(" · ")
                   for r in records), [r["summary"] for r in records]
        assert any(r["role"] == "frontend" and "request completed" in r["summary"]
                   and "status=cancelled" in r["summary"] for r in records), [r["summary"] for r in records]
        rows = run.trace_join("requests", "--errors", "--limit", "100")
        assert [row["disconnected"] for row in rows if reply in row["reply_ids"]] == [True]

    eventually(check)


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
