"""`trace-join demo --dynamo` as a user runs it: it starts a real Dynamo deployment with the
collector and the proxy, prints what it started and two lookups, stops everything, and leaves a
store the commands it suggests can read."""

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

    # What it started, with pids and, for the workers, the instance ids their own logs announce,
    # which the lookups' worker names contain.
    started = dict(re.findall(r"^  (\w+) .* pid (\d+) ", demo.stdout, re.M))
    assert set(started) == {"collector", "prefill", "decode", "frontend", "proxy"}
    lookups = demo.stdout.split("\n$ trace-join lookup ", 1)[1]
    for role in ("prefill", "decode"):
        [announced] = [str(json.loads(line)["worker_id"]) for line in (out / "logs" / f"{role}.stderr.jsonl").open()
                       if '"FPM direct publisher started"' in line]
        assert f"instance {announced}" in demo.stdout
        named = set(re.findall(rf"^  (\S+) +{role} +\d+ ", lookups, re.M))  # the lookups' tables of workers
        assert named and all(announced in name for name in named), (role, announced, named)
    for pid in started.values():
        assert not os.path.exists(f"/proc/{pid}"), f"process {pid} still runs"

    # A Responses and a chat reply were looked up; the store the collector left answers for them.
    looked_up = re.findall(r"^\$ trace-join lookup (\S+)", demo.stdout, re.M)
    assert len(looked_up) == 2 and looked_up[0].startswith("resp_") and looked_up[1].startswith("chatcmpl-")
    for reply in looked_up:
        after = trace_join("lookup", "--db", db, reply, "--json")
        assert after.returncode == 0, after.stderr
        [request] = json.loads(after.stdout)["requests"]
        assert {w["role"] for w in request["workers"]} == {"proxy", "frontend", "prefill", "decode"}
    assert f"trace-join lookup --db {db} {looked_up[0]} --json" in demo.stdout
