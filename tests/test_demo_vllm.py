"""`trace-join demo --engine vllm` end to end: vLLM's P/D proxy behind the middleware, two prefill and
two decode servers, each its own process writing vLLM 0.33's log lines and spans (the servers are
simulated: vLLM needs a GPU), then what lookup and coverage say of them.

What the proxy did is read back from the middleware's own lines (tracejoin/*.jsonl), which name
every request it answered with its reply id and status."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import assert_alike_on_clickhouse

from tests.test_demo import trace_join


@pytest.fixture(scope="module")
def vllm_demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vllm-demo")
    db = folder / "demo.duckdb"
    run = trace_join("demo", "--engine", "vllm", "--db", db, "--folder", folder / "records")
    assert run.returncode == 0, run.stderr
    proxy_ends = [json.loads(line) for path in sorted((folder / "records").glob("vllm-*/tracejoin/*.jsonl"))
                  for line in path.read_text().splitlines() if '"request.end"' in line]
    return db, run.stdout, proxy_ends


def lookup(db: Path, value: str) -> dict:
    run = trace_join("lookup", value, "--db", db, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_every_answered_reply_joins_the_proxy_its_prefill_and_its_decode_server(vllm_demo):
    db, _, ends = vllm_demo
    answered = [end for end in ends if end.get("status") == 200 and end.get("reply_id")]
    assert len(answered) >= 4
    for end in answered:
        [request] = lookup(db, end["reply_id"])["requests"]
        roles = {w["role"] for w in request["workers"]}
        assert roles == {"proxy", "prefill", "decode"}, (end["reply_id"], request["workers"])
        sources = {r["source"] for r in request["records"]}
        assert {"vllm_log", "otlp_json", "tracejoin_jsonl"} <= sources
        # the decode server's engine id names the prefill's: both ids are the request's
        assert len(request["ids"]["engine_request_id"]) == 2


def test_the_failed_request_shows_its_decode_servers_error(vllm_demo):
    db, _, ends = vllm_demo
    [failed] = [end for end in ends if end.get("status") == 500]
    [request] = lookup(db, failed["internal_id"])["requests"]
    assert request["outcome"]["http_status"] == 500
    errors = [r for r in request["records"] if r["source"] == "vllm_log" and r["level"] == "ERROR"]
    assert errors and "NIXL transfer of the KV cache" in errors[0]["text"]
    assert errors[0]["exception"].startswith("RuntimeError: NIXL transfer")


def test_a_client_that_leaves_shows_its_decode_server_aborting_the_request(vllm_demo):
    db, _, ends = vllm_demo
    [left] = [end for end in ends if end.get("disconnected")]
    [request] = lookup(db, left["reply_id"])["requests"]
    assert request["outcome"]["client_left"]
    [aborted] = [r for r in request["records"] if r["status"] == "aborted"]
    assert (aborted["source"], aborted["role"]) == ("vllm_log", "decode")


def test_coverage_joins_every_reply_to_both_sides(vllm_demo):
    db, output, ends = vllm_demo
    covered = json.loads(trace_join("coverage", "--db", db, "--json").stdout)
    assert covered["replies"] == len(ends)
    assert covered["joined"]["both_workers"] == len(ends)  # the failed request's prefill and decode too
    assert covered["orphans"]["records"] == 0
    assert "Next, with this run's ids:" in output
    assert re.search(r"^\$ \S*trace-join ingest --db \S+ --tz ", output, re.MULTILINE)  # it names the servers' zone


def test_requests_and_coverage_answer_alike_on_clickhouse(vllm_demo, tmp_path):
    db = vllm_demo[0]
    assert_alike_on_clickhouse(db, db.parent / "records", tmp_path / "store.chdb")
