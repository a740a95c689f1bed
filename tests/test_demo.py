"""`trace-join demo` end to end: a real disaggregated deployment on loopback (a router, two context
and two generation workers, each its own process), its traffic, ingest, and what `lookup`,
`requests` and `coverage` then say.

The demo runs once, as a user runs it. What the processes actually did is read back from the
middleware's own lines (tracejoin/*.jsonl), which name every request, worker, engine request id
and disagg request id as they happened; trace-join's answers are checked against that. The
middleware names a worker `host:port` and TensorRT-LLM's files name the same process `host:pid`;
the `process` field on the middleware's lines says which is which, so answers are compared process
by process.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import assert_alike_on_clickhouse

DEMO_TIMEOUT_S = 120
DISAGG_RESPONSES_REPLY = re.compile(r"resp_(\d+)_[0-9a-f]{16}")
COUNTER_REPLY = re.compile(r"(?:chatcmpl|cmpl)-\d+")  # a streamed reply, named after its engine request id


def trace_join(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
    return subprocess.run([sys.executable, "-m", "tracejoin.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=DEMO_TIMEOUT_S)


@dataclass
class Demo:
    db: Path
    output: str
    lines: list[dict]  # every line the middleware wrote, in every process

    def query(self, *args) -> object:
        run = trace_join(*args, "--db", self.db, "--json")
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    def lookup(self, value: str) -> list[dict]:
        return self.query("lookup", value)["requests"]

    def process(self, worker: str) -> str:
        """The process a worker name denotes: `host:pid` as is, `host:port` through the middleware."""
        aliases = {line["worker"]: line["process"] for line in self.lines}
        return aliases.get(worker, worker)

    def ends(self, **fields) -> list[dict]:
        return [line for line in self.lines if line["event"] == "request.end" and fields.items() <= line.items()]

    def starts(self, **fields) -> list[dict]:
        return [line for line in self.lines if line["event"] == "request.start" and fields.items() <= line.items()]


def held_ms(*ends: dict) -> float:
    """How long any of these request.end lines' requests was in progress: the union of their
    [ts - duration, ts] intervals."""
    held = sorted((end_ms - end["duration_ms"], end_ms) for end in ends
                  for end_ms in [datetime.fromisoformat(end["ts"].replace("Z", "+00:00")).timestamp() * 1e3])
    covered, reach = 0.0, None
    for begin, end in held:
        if reach is None or begin > reach:
            covered, reach = covered + end - begin, end
        elif end > reach:
            covered, reach = covered + end - reach, end
    return covered


def middleware_lines(records: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(records.glob("run-*/tracejoin/*.jsonl"))
            for line in path.read_text().splitlines()]


def router_replies(lines: list[dict]) -> dict[str, str]:
    """The reply id of each request the router answered, and its internal id."""
    return {line["reply_id"]: line["internal_id"] for line in lines
            if line["event"] == "request.end" and line["role"] == "router" and line.get("reply_id")}


def members(request: dict) -> tuple:
    """A looked-up request's ids and records, whatever the order and the placement of its records."""
    records = sorted((r["source"], r["kind"], r["worker"], r["summary"]) for r in request["records"])
    return json.dumps(request["ids"], sort_keys=True), records


ROOT = Path(__file__).resolve().parents[1]
# `make demo` runs the trace-join installed beside this Python, from the project's root, in a shell
# whose PATH need not hold it; what the demo prints must run there as pasted.
INSTALLED = Path(sys.executable).parent / "trace-join"
PRINTED = os.path.relpath(INSTALLED, ROOT) if INSTALLED.is_relative_to(ROOT) else str(INSTALLED)


def a_new_shell() -> dict:
    """The environment of a shell a user opens at the project's root: no virtual environment on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRACEJOIN_DEBUG", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if p and Path(p).resolve() != INSTALLED.parent.resolve())
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    folder = tmp_path_factory.mktemp("demo")
    db = folder / "demo store.duckdb"  # a space: the commands the demo prints must quote it
    assert INSTALLED.exists(), "the suite runs in the environment `make test` installs trace-join into"
    run = subprocess.run([INSTALLED, "demo", "--db", db, "--folder", folder / "records"], cwd=ROOT, env=a_new_shell(),
                         capture_output=True, text=True, timeout=DEMO_TIMEOUT_S)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = middleware_lines(folder / "records")
    processes = {line["process"] for line in lines}
    assert len(processes) == 5, processes  # a router and four workers, each a process of its own
    return Demo(db, run.stdout, lines)


def test_a_responses_reply_joins_the_router_and_its_two_workers_and_nothing_else(demo):
    router_ends = [end for end in demo.ends(role="router", status=200)
                   if end.get("reply_id", "").startswith("resp_")
                   and DISAGG_RESPONSES_REPLY.fullmatch(end["reply_id"]).group(1) == end["disagg_request_id"]]
    assert router_ends, "no Responses reply that went through without a retry"
    reply = router_ends[0]["reply_id"]
    # Both workers answered under the name the router gave the request.
    [ctx] = demo.ends(role="ctx", reply_id=reply)
    [gen] = demo.ends(role="gen", reply_id=reply)
    expected = {demo.process(router_ends[0]["worker"]): None, ctx["process"]: ctx["engine_request_id"],
                gen["process"]: gen["engine_request_id"]}
    # The test means something only if another worker issued one of the same engine ids.
    reused = [end for end in demo.ends() if end["role"] in ("ctx", "gen") and end["process"] not in expected
              and end.get("engine_request_id") in (ctx["engine_request_id"], gen["engine_request_id"])]
    assert reused

    [request] = demo.lookup(reply)
    assert {demo.process(w["worker"]) for w in request["workers"]} == set(expected)
    assert {demo.process(r["worker"]) for r in request["records"]} == set(expected)
    engine_ids = request["ids"]["engine_request_id"]
    assert {(demo.process(e["worker"]), e["id"]) for e in engine_ids} == {
        (ctx["process"], ctx["engine_request_id"]), (gen["process"], gen["engine_request_id"])}
    # TensorRT-LLM's own records of both workers joined, shown under the middleware's name for the
    # process (host:port) although their files name it host:pid: one worker, not two.
    assert len(request["workers"]) == 3
    for end in (ctx, gen):
        assert {"worker": end["worker"], "id": end["engine_request_id"]} in engine_ids
        kinds = {(r["source"], r["kind"]) for r in request["records"] if r["worker"] == end["worker"]}
        assert {("perf_metrics_jsonl", "perf"), ("trtllm_hook", "hook"), ("otlp_json", "span")} <= kinds
    router_perf = [r for r in request["records"] if r["source"] == "perf_metrics_jsonl" and r["role"] == "router"]
    assert len(router_perf) == 1 and router_perf[0]["time"] is not None  # placed on the wall clock

    # Where the time went: each worker's phases as its own perf metrics state them, on one axis.
    phases = {(p["role"], p["phase"]): p for p in request["phases"]}
    assert {("router", "end to end"), ("router", "router queue"), ("ctx", "queue"), ("ctx", "to first token"),
            ("gen", "queue"), ("gen", "kv transfer"), ("gen", "to first token"), ("gen", "decode")} <= set(phases)
    for role in ("ctx", "gen"):
        [perf] = [r for r in request["records"] if r["source"] == "perf_metrics_jsonl" and r["role"] == role]
        assert phases[(role, "to first token")]["duration_ms"] == perf["attrs"]["ttft_ms"]
        assert phases[(role, "queue")]["start"] == perf["time"]
    gen_perf = [r for r in request["records"] if r["source"] == "perf_metrics_jsonl" and r["role"] == "gen"][0]
    assert phases[("gen", "decode")]["duration_ms"] == pytest.approx(
        gen_perf["attrs"]["e2e_ms"] - gen_perf["attrs"]["ttft_ms"])
    assert phases[("ctx", "to first token")]["start"] < phases[("gen", "queue")]["start"]  # prefill, then decode
    # The router's own cost: its whole request less the time either worker held it, as their own
    # request.end lines state it (the two may overlap by a scheduler tick: a worker logs its end
    # after its last byte left, when the router may have called the next one already).
    assert phases[("router", "router overhead")]["duration_ms"] == pytest.approx(
        router_ends[0]["duration_ms"] - held_ms(ctx, gen), abs=0.5)
    shown = trace_join("lookup", reply, "--db", demo.db).stdout
    assert "where the time went" in shown and "kv transfer" in shown and "decode" in shown


def test_the_retried_request_is_found_by_both_disagg_ids_and_keeps_its_failed_attempt(demo):
    [end] = [end for end in demo.ends(role="router") if end.get("reply_id", "").startswith("resp_")
             and DISAGG_RESPONSES_REPLY.fullmatch(end["reply_id"]).group(1) != end["disagg_request_id"]]
    reply, last_disagg = end["reply_id"], end["disagg_request_id"]
    first_disagg = DISAGG_RESPONSES_REPLY.fullmatch(reply).group(1)  # named once, before the retry
    [failed] = demo.ends(role="ctx", disagg_request_id=first_disagg, status=500)
    [retry] = demo.ends(role="ctx", disagg_request_id=last_disagg, status=200)
    assert failed["process"] != retry["process"]

    [by_reply] = demo.lookup(reply)
    [by_first] = demo.lookup(first_disagg)
    [by_last] = demo.lookup(last_disagg)
    assert members(by_first) == members(by_reply) and members(by_last) == members(by_reply)
    assert set(by_reply["ids"]["disagg_request_id"]) == {first_disagg, last_disagg}
    assert {failed["internal_id"], retry["internal_id"]} <= set(by_reply["ids"]["internal_id"])
    assert {(demo.process(r["worker"]), r["role"]) for r in by_reply["records"]} >= {
        (failed["process"], "ctx"), (retry["process"], "ctx")}
    # The abandoned attempt joins this request and no other.
    rows = demo.query("requests", "--limit", "100")
    holding = [row for row in rows if failed["internal_id"] in row["internal_ids"]]
    assert [row["reply_ids"] for row in holding] == [[reply]]
    assert demo.query("coverage")["orphans"]["records"] == 0


def test_a_shared_x_request_id_lists_every_request_that_sent_it(demo):
    session = next(start["x_request_id"] for start in demo.starts(role="router") if "x_request_id" in start)
    sent = {start["internal_id"] for start in demo.starts(role="router", x_request_id=session)}
    assert len(sent) > 1

    requests = demo.lookup(session)
    assert len(requests) == len(sent)
    found = [sent & set(request["ids"]["internal_id"]) for request in requests]
    assert all(len(ids) == 1 for ids in found) and set().union(*found) == sent


def test_the_failing_request_shows_its_error_status(demo):
    [router_end] = demo.ends(role="router", status=500)
    [gen_end] = demo.ends(role="gen", status=500)

    [request] = demo.lookup(router_end["internal_id"])
    failed = {demo.process(r["worker"]) for r in request["records"]
              if r["summary"].startswith("ERROR · request.end") and "status=500" in r["summary"]}
    assert failed == {demo.process(router_end["worker"]), gen_end["process"]}
    # The request's first failure leads it: the generation worker's, which the router's follows,
    # told by what the worker raised.
    first = request["first_error"]
    assert demo.process(first["worker"]) == gen_end["process"] and "RuntimeError: generation request" in first["text"], \
        (first, [(r["time"], r["worker"], r["failed"], r["duration_ms"], r["summary"][:50]) for r in request["records"]])
    shown = trace_join("lookup", router_end["internal_id"], "--db", demo.db).stdout
    assert f"request 1 of 1 · HTTP 500 · failed: {first['text']} ({first['worker']}, gen, " in shown, shown
    errors = demo.query("requests", "--errors")
    assert [row["http_status"] for row in errors if router_end["internal_id"] in row["internal_ids"]] == [500]


def test_each_failed_request_shows_the_exception_its_worker_logged(demo):
    """A worker's traceback names no request; lookup shows it, whole, in the request that failed
    on that worker at that time (inferred), and the request's first error is what it raised."""
    raised = {}  # process -> the exception lines its TensorRT-LLM log holds
    for log in (demo.db.parent / "records").glob("run-*/logs/*/trtllm-serve.log"):
        process = log.parent.name.replace("-", ":")
        raised[process] = [line for line in log.read_text().splitlines() if line.startswith("RuntimeError: ")]
    failures = [end for end in demo.ends(status=500) if end["role"] in ("ctx", "gen")]
    assert {end["role"] for end in failures} == {"ctx", "gen"}, failures
    for end in failures:
        [request] = demo.lookup(end["internal_id"])
        shown = [r for r in request["records"] if r.get("exception") in raised[end["process"]]
                 and demo.process(r["worker"]) == end["process"]]
        assert len(shown) == 1, [r["summary"] for r in request["records"]]
        [traceback] = shown
        assert traceback["inferred"] and traceback["lines"] > 2 and traceback["text"].startswith("Traceback")
        assert traceback["text"].endswith(traceback["exception"]) and not traceback.get("ambiguous")
        assert traceback["exception"] in request["first_error"]["text"]
        # its lines are in the record, not shown apart
        assert not [r for r in request["records"] if r["summary"].startswith("  File ")]


def test_coverage_reports_every_reply_joined_to_both_workers(demo):
    replies = len(demo.starts(role="router"))
    result = demo.query("coverage")
    assert result["replies"] == replies
    assert result["joined"]["both_workers"] == replies
    worker_processes = {line["process"] for line in demo.lines if line["role"] in ("ctx", "gen")}
    assert worker_processes <= {demo.process(w["worker"]) for w in result["by_worker"] if w["replies"] > 0}


def test_the_demo_says_what_to_run_next_with_this_runs_ids(demo):
    [retried] = [end["reply_id"] for end in demo.ends(role="router") if end.get("reply_id", "").startswith("resp_")
                 and DISAGG_RESPONSES_REPLY.fullmatch(end["reply_id"]).group(1) != end["disagg_request_id"]]
    assert f"$ {PRINTED} lookup --db {shlex.quote(str(demo.db))} {retried}" in demo.output
    assert f"{PRINTED} lookup --db {shlex.quote(str(demo.db))} {retried} --json" in demo.output
    replies = len(demo.starts(role="router"))
    assert f"joined to both workers (ctx/prefill, gen/decode): {replies} (100%)" in demo.output
    # under the request's heading, where most of its time went
    assert re.search(r"^request 1 of 1 · .*\n  the longest part: .+ on \S+ \((router|ctx|gen)\), [\d.]+ of [\d.]+ ms "
                     r"\(\d+%\)$", demo.output, re.M), demo.output


def test_the_demo_leaves_grafanas_copy_next_to_its_database(demo):
    snapshot = demo.db.with_name(demo.db.name + ".snapshot.duckdb")
    assert snapshot.exists()
    assert f"wrote {snapshot.resolve()}\nGrafana: point a DuckDB data source" in demo.output


def test_every_next_command_the_demo_prints_runs_as_printed(demo):
    lines = demo.output.splitlines()
    start = lines.index("Next, with this run's ids:") + 1
    commands = [line.split("  # ")[0].strip() for line in lines[start:] if line.startswith("  ")]
    assert len(commands) >= 5, demo.output
    for command in [*commands, *(line[2:] for line in lines if line.startswith("$ "))]:
        run = subprocess.run(command, shell=True, cwd=ROOT, env=a_new_shell(), capture_output=True, text=True,
                             timeout=DEMO_TIMEOUT_S)
        assert run.returncode == 0, (command, run.stderr)


def test_a_second_run_into_the_same_database_gives_no_request_a_reply_id_the_first_gave(demo, tmp_path):
    db = tmp_path / "twice.duckdb"
    shutil.copy(demo.db, db)  # the module's other tests read the first run's store as it was
    run = trace_join("demo", "--db", db, "--folder", tmp_path / "records")
    assert run.returncode == 0, run.stdout + run.stderr
    first, second = router_replies(demo.lines), router_replies(middleware_lines(tmp_path / "records"))
    counted = [reply for reply in second if COUNTER_REPLY.fullmatch(reply)]
    assert counted and any(COUNTER_REPLY.fullmatch(reply) for reply in first)  # the format each run reproduces
    assert not first.keys() & second.keys()
    for reply in counted:
        found = json.loads(trace_join("lookup", reply, "--db", db, "--json").stdout)
        assert found["matched"] == 1 and second[reply] in found["requests"][0]["ids"]["internal_id"], reply


def test_requests_and_coverage_answer_alike_on_clickhouse(demo, tmp_path):
    assert_alike_on_clickhouse(demo.db, demo.db.parent / "records", tmp_path / "store.chdb")
