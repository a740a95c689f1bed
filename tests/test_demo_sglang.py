"""`trace-join demo --engine sglang` end to end: SGLang's mini load balancer behind the middleware, two
prefill and two decode servers, each its own process writing SGLang 0.5.23's request logs,
ReqTimeStats, request-metrics files and spans (the servers are simulated: SGLang needs a GPU), then
what lookup and coverage say of them.

The router sends both sides the same body and no rid: the client sees the decode server's rid, and
only the bootstrap room joins the prefill's records. What the router did is read back from the
middleware's own lines (tracejoin/*.jsonl)."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import assert_alike_on_clickhouse

from tests.test_demo import trace_join
from tests.test_demo_vllm import lookup


@pytest.fixture(scope="module")
def sglang_demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sglang-demo")
    db = folder / "demo.duckdb"
    run = trace_join("demo", "--engine", "sglang", "--db", db, "--folder", folder / "records")
    assert run.returncode == 0, run.stderr
    router_ends = [json.loads(line) for path in sorted((folder / "records").glob("sglang-*/tracejoin/*.jsonl"))
                   for line in path.read_text().splitlines() if '"request.end"' in line]
    return db, run.stdout, router_ends


def test_every_answered_reply_joins_the_router_its_prefill_and_its_decode_server(sglang_demo):
    db, _, ends = sglang_demo
    answered = [end for end in ends if end.get("status") == 200 and end.get("reply_id")]
    assert len(answered) >= 4
    for end in answered:
        [request] = lookup(db, end["reply_id"])["requests"]
        assert {w["role"] for w in request["workers"]} == {"router", "prefill", "decode"}, request["workers"]
        assert {"sglang_log", "sglang_metrics", "otlp_json", "tracejoin_jsonl"} <= {r["source"] for r in request["records"]}
        assert len(request["ids"]["bootstrap_room"]) == 1
        assert request["ids"]["reply_id"] == [end["reply_id"]]  # the prefill server's rid is no reply


def test_the_failed_request_shows_its_decode_servers_error(sglang_demo):
    db, _, ends = sglang_demo
    [failed] = [end for end in ends if end.get("status") == 500]
    [request] = lookup(db, failed["internal_id"])["requests"]
    assert request["outcome"]["http_status"] == 500
    [error] = [r for r in request["records"] if r["source"] == "sglang_log" and r.get("text")]
    assert error["role"] == "decode" and error["exception"].startswith("RuntimeError: KV transfer")


def test_coverage_joins_every_reply_to_both_sides(sglang_demo):
    db, output, ends = sglang_demo
    covered = json.loads(trace_join("coverage", "--db", db, "--json").stdout)
    assert covered["replies"] == len(ends) and covered["joined"]["both_workers"] == len(ends)
    assert covered["orphans"]["records"] == 0
    assert re.search(r"^\$ \S*trace-join ingest --db \S+ --tz ", output, re.MULTILINE)
    assert "Next, with this run's ids:" in output


def test_requests_and_coverage_answer_alike_on_clickhouse(sglang_demo, tmp_path):
    db = sglang_demo[0]
    assert_alike_on_clickhouse(db, db.parent / "records", tmp_path / "store.chdb")
