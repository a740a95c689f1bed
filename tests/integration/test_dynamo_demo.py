"""`trace-join demo --dynamo` as a user runs it: it starts a real Dynamo deployment with the
collector and the proxy, prints what it started and two lookups, stops everything, and leaves a
store that holds every record and that the commands it suggests can read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

DEMO_TIMEOUT_S = 300  # about 10 s once Dynamo is installed


def trace_join(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
    return subprocess.run([sys.executable, "-m", "tracejoin.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=DEMO_TIMEOUT_S)


def test_the_dynamo_demo_looks_replies_up_live_and_stops_everything(dynamo_installed, tmp_path):
    db = tmp_path / "demo.duckdb"
    demo = trace_join("demo", "--dynamo", "--db", db, "--folder", tmp_path / "records")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    [out] = (tmp_path / "records").glob("dynamo-run-*")

    # What it started, with pids and, for the workers, the instance ids their own logs announce.
    started = dict(re.findall(r"^  (\w+) .* pid (\d+) ", demo.stdout, re.M))
    assert set(started) == {"collector", "prefill", "decode", "frontend", "proxy"}
    announced = {}
    for role in ("prefill", "decode"):
        log = out / "logs" / f"{role}.stderr.jsonl"
        [announced[role]] = [str(json.loads(line)["worker_id"]) for line in log.open()
                             if '"FPM direct publisher started"' in line]
        assert f"instance {announced[role]}" in demo.stdout
    for pid in started.values():
        assert not os.path.exists(f"/proc/{pid}"), f"process {pid} still runs"

    # A Responses and a chat reply were looked up live, each on its own showing the proxy, the
    # frontend and the prefill and decode workers, named by the instance ids their logs announce.
    lookups = re.findall(r"^\$ \S*trace-join lookup --db \S+ (\S+) .*?\n(.*?)(?=^\$ \S*trace-join lookup |^stopped )",
                         demo.stdout, re.M | re.S)
    looked_up = [reply for reply, _ in lookups]
    assert len(looked_up) == 2 and looked_up[0].startswith("resp_") and looked_up[1].startswith("chatcmpl-")
    for reply, shown in lookups:
        workers = re.findall(r"^  (\S+) +(\S+) +\d+ +[\d.]+ ", shown, re.M)  # its table: worker, role, records, ...
        assert {role for _, role in workers} == {"proxy", "frontend", "prefill", "decode"}, (reply, workers)
        for role, instance in announced.items():
            assert all(instance in name for name, named_role in workers if named_role == role), (reply, role, workers)

    # The store the collector left holds every line the deployment and the proxy wrote (ingesting
    # their folders again adds nothing) and answers for both replies.
    again = trace_join("ingest", "--db", db, out / "logs", out / "request-trace", "--json")
    assert again.returncode == 0, again.stderr
    assert {name: s["records"] for name, s in json.loads(again.stdout)["sources"].items()} == {
        "dynamo_jsonl": 0, "dynamo_request_trace": 0, "tracejoin_jsonl": 0}
    for reply in looked_up:
        after = trace_join("lookup", "--db", db, reply, "--json")
        assert after.returncode == 0, after.stderr
        [request] = json.loads(after.stdout)["requests"]
        assert {w["role"] for w in request["workers"]} == {"proxy", "frontend", "prefill", "decode"}, reply
    assert f"trace-join lookup --db {db} {looked_up[0]} --json" in demo.stdout
