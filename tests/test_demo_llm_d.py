"""`trace-join demo --engine llm-d` end to end: llm-d's endpoint picker and P/D routing sidecar
(simulated: they are Go; their spans as llm-d-router names them) in front of two prefill and two decode vLLM
servers (simulated as in the vLLM demo), each its own process, then what lookup, requests and
coverage say of them.

The replies the client got are read from the demo's own account of what it sent."""

from __future__ import annotations

import json
import re

import pytest

from tracejoin.cli.demo.llm_d_demo import CLIENT_ID

from tests.test_demo import trace_join


@pytest.fixture(scope="module")
def llm_d_demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llm-d-demo")
    db = folder / "demo.duckdb"
    run = trace_join("demo", "--engine", "llm-d", "--db", db, "--folder", folder / "records")
    assert run.returncode == 0, run.stderr
    replies = re.findall(r"^  200  ((?:chatcmpl|cmpl)-\S+)", run.stdout, re.MULTILINE)
    return db, replies


def lookup(db, value: str) -> dict:
    run = trace_join("lookup", value, "--db", db, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_each_reply_is_the_sidecar_its_prefill_and_its_decode_server_each_once(llm_d_demo):
    db, replies = llm_d_demo
    assert len(replies) == 5
    for reply in replies:
        found = lookup(db, reply)
        assert found["matched"] == 1, reply
        [request] = found["requests"]
        roles = [w["role"] for w in request["workers"]]
        assert sorted(roles) == ["decode", "prefill", "proxy", "router"], (reply, request["workers"])
        spans = {r["name"] for r in request["records"] if r["kind"] == "span"}
        assert {"llm_d.pd_proxy.request", "prefill", "decode", "llm_request"} <= spans
        # the endpoint picker's spans carry no id of the request, only its trace
        picked = [r["name"] for r in request["records"] if r["worker"] == "llm-d-epp"]
        assert sorted(picked) == ["filter_endpoints", "pick_endpoints", "run_scheduler_profile", "scoring"]
        sidecar = {p["phase"] for p in request["phases"] if p["role"] == "proxy"}
        assert {"prefill", "decode", "coordinator overhead", "to first token", "end to end"} <= sidecar


def test_the_clients_own_x_request_id_finds_its_request(llm_d_demo):
    db, _ = llm_d_demo
    found = lookup(db, CLIENT_ID)
    assert (found["id_kind"], found["matched"]) == ("x_request_id", 1)
    assert found["requests"][0]["ids"]["reply_id"] == [f"chatcmpl-{CLIENT_ID}"]


def test_requests_and_coverage_see_the_same_requests(llm_d_demo):
    db, replies = llm_d_demo
    listed = json.loads(trace_join("requests", "--db", db, "--json", "--since", "2000-01-01T00:00:00Z").stdout)
    assert sorted(r["reply_id"] for r in listed if r["reply_id"] in replies) == sorted(replies)
    for row in (r for r in listed if r["reply_id"] in replies):  # the workers lookup shows
        assert row["workers"] == sorted(w["worker"] for w in lookup(db, row["reply_id"])["requests"][0]["workers"])
        assert len(row["workers"]) == 4
    covered = json.loads(trace_join("coverage", "--db", db, "--json").stdout)
    assert covered["joined"]["both_workers"] >= len(replies)
