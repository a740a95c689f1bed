"""Benchmark 6, a fleet on ClickHouse (docs/fleet.md), on chdb, ClickHouse's engine in process.

1. Intake: `trace-join ingest --store chdb:…` of the ingest benchmark's Dynamo corpus, records/s,
   against chdb's bare insert of the same rows (the records and ids that ingest stored, read back
   and inserted into empty tables of the same schema), same run.
2. The fleet's store: 64 nodes (a frontend, two prefill and two decode workers each) and 24 hourly
   partitions of requests of 11 records (3 on a frontend, 4 on a prefill and 4 on a decode worker
   of random nodes, joined by their internal id, the entry carrying the reply id and an
   x-request-id), written by ClickHouse SQL into the store's own tables; its bytes a record.
3. Lookup of a reply id from the last 24 hours: `trace-join lookup --json --store chdb:…` (whole
   process) and lookup() on an open store (the query), each checked to find its 11 records.
4. `trace-join requests --json --store chdb:…` of the last 10 minutes and of the last hour (its
   default window's length), whole process, each checked to list requests of 11 records; and
   `trace-join snapshot --store chdb:…` of the last 10 minutes, the tables Grafana reads.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tracejoin.collector.lookup import lookup
from tracejoin.collector.store import open_store
from tracejoin.collector.times import ns_to_iso

from .common import TRACE_JOIN, Config, Row, check, median, run_child
from .corpus import Corpus

NODES = 64
RECORDS_PER_REQUEST = 11
TARGET_PROCESS_S, TARGET_QUERY_S = 2.0, 0.5
VERSION = 3  # bump when the rows below change, so a kept store is made again

# ClickHouse SQL over `number` (a record): its request, its place in it, and what it carries.
_REQUEST = f"intDiv(number, {RECORDS_PER_REQUEST})"
_J = f"number % {RECORDS_PER_REQUEST}"
_ROLE = f"multiIf({_J} < 3, 'frontend', {_J} < 7, 'prefill', 'decode')"
_NODE = f"cityHash64({_REQUEST}, {_ROLE}) % {NODES}"
_WORKER = f"concat('node-', toString({_NODE}), ':', {_ROLE}, if({_J} < 3, '', toString(cityHash64({_REQUEST}, 'r') % 2)))"
_HEX16 = "leftPad(lower(hex(cityHash64({}))), 16, '0')"
_UUID = (f"concat(substring({_HEX16.format('r, 1')}, 1, 8), '-', substring({_HEX16.format('r, 1')}, 9, 4), '-', "
         f"substring({_HEX16.format('r, 1')}, 13, 4), '-', substring({_HEX16.format('r, 2')}, 1, 4), '-', "
         f"substring({_HEX16.format('r, 2')}, 5, 12))")
_TRACE = f"concat({_HEX16.format('r, 3')}, {_HEX16.format('r, 4')})"
_NAMES = ("['request received', 'http-request', 'http response sent', 'request received', 'handle_payload', "
          "'prefill done', 'request completed', 'request received', 'handle_payload', 'decode done', "
          "'request completed']")
_SPAN_J = (1, 4, 8)  # the spans: the frontend's http-request and each worker's handle_payload


def _records_sql(first: int, count: int, requests: int, end_ns: int) -> str:
    """The records numbered first..first+count, with their ids, as rows of the store's `records`."""
    day = 86_400 * 10**9
    return f"""
    SELECT toInt64(bitShiftRight(cityHash64(origin_id, offset), 1)) AS record_id, time_ns, NULL AS steady_s, 'dynamo_jsonl' AS source,
        if(j IN {_SPAN_J}, 'span', 'log') AS kind, worker, role, 'INFO' AS level, {_NAMES}[j + 1] AS name,
        if(j IN {_SPAN_J}, 1000000, NULL) AS duration_ns, if(j = 2, '200', NULL) AS status, j = 0 AS entry,
        trace AS trace_id, if(j IN {_SPAN_J}, {_HEX16.format('r, j')}, NULL) AS span_id,
        if(j IN (4, 8), {_HEX16.format('r, 1')}, NULL) AS parent_span_id, '{{"target":"dynamo_llm"}}' AS attrs,
        toInt64(bitShiftRight(cityHash64(worker), 1)) AS origin_id, r * 16 + j AS offset, 0 AS seq,
        arrayConcat(
            [tuple('internal_id', uuid, NULL), tuple('trace_id', trace, NULL)],
            if(j = 0, [tuple('reply_id', concat('chatcmpl-', uuid), NULL), tuple('x_request_id', concat('client-', toString(r)), NULL)], []),
            if(j IN {_SPAN_J}, [tuple('span', concat(trace, '/', {_HEX16.format('r, j')}), NULL)], []),
            if(j IN (4, 8), [tuple('parent_span', concat(trace, '/', {_HEX16.format('r, 1')}), NULL)], [])
        )::Array(Tuple(kind String, value String, scope Nullable(String))) AS ids
    FROM (
        SELECT number, {_REQUEST} AS r, {_J} AS j, {_ROLE} AS role, {_WORKER} AS worker, {_UUID} AS uuid, {_TRACE} AS trace,
            toInt64({end_ns} - {day}) + toInt64(intDiv(r * 86400000, {requests})) * 1000000 + j * 1000000 AS time_ns
        FROM numbers({first}, {count})
    )"""


def ensure_fleet_store(cfg: Config, records: int) -> tuple[Path, dict]:
    """The fleet's chdb store, made once for its size (VERSION): its folder and facts."""
    requests = records // RECORDS_PER_REQUEST
    folder = cfg.data / f"fleet-{records}-v{VERSION}.chdb"
    facts_file = folder.with_suffix(".facts")
    if facts_file.exists():
        return folder, json.loads(facts_file.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    end_ns = time.time_ns()
    script = f"""
import json, time
from tracejoin.collector.store import open_store
from bench.fleet import _records_sql
with open_store("chdb:{folder}") as store:
    ch = store.engine
    start = time.perf_counter()
    hour = {requests} // 24 * {RECORDS_PER_REQUEST}
    for first in range(0, {requests * RECORDS_PER_REQUEST}, hour):
        count = min(hour, {requests * RECORDS_PER_REQUEST} - first)
        rows = _records_sql(first, count, {requests}, {end_ns})
        ch.command("INSERT INTO records " + rows)
        ch.command("INSERT INTO record_ids SELECT i.value, i.kind, i.scope, record_id, time_ns FROM (" + rows + ") "
                   "ARRAY JOIN ids AS i")
    ch.command("INSERT INTO origins SELECT DISTINCT origin_id, worker, 'dynamo_jsonl', 4096, toString(origin_id), 0, 0, "
               "worker, role, now64(6), NULL, NULL FROM records")
    ch.command("INSERT INTO worker_names SELECT DISTINCT worker FROM records")
    made = time.perf_counter() - start
    facts = {{name: ch.arrow(sql).column(0)[0].as_py() for name, sql in {{
        "records": "SELECT count() FROM records",
        "record_ids": "SELECT count() FROM record_ids",
        "partitions": "SELECT uniqExact(partition) FROM system.parts WHERE table = 'records' AND active",
        "bytes": "SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND table IN ('records', 'record_ids')",
    }}.items()}}
    facts["made_s"] = made
    facts["requests"] = {requests}
    print(json.dumps(facts))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)
    if out.returncode:
        raise RuntimeError(f"making the fleet's store failed: {out.stderr.strip().splitlines()[-1]}")
    facts_file.write_text(out.stdout.strip().splitlines()[-1])
    return folder, json.loads(facts_file.read_text())


def _reply_id(folder: Path, request: int) -> str:
    with open_store(f"chdb:{folder}", read_only=True) as store:
        return store.engine.arrow(f"SELECT concat('chatcmpl-', {_UUID}) AS reply FROM (SELECT {request} AS r)").column(0)[0].as_py()


def intake_rows(cfg: Config, lines: int) -> list[Row]:
    corpus = Corpus(cfg.data / "ingest-corpus", max(1, lines // 11)).ensure()
    files = [str(f) for f in corpus.files()]
    ours, bare, records = [], [], 0
    for run in range(cfg.runs):
        folder = cfg.data / "fleet-intake.chdb"
        shutil.rmtree(folder, ignore_errors=True)
        child = check(run_child([TRACE_JOIN, "ingest", "--store", f"chdb:{folder}", *files]), "trace-join ingest")
        ours.append(child.seconds)
        out = subprocess.run([sys.executable, "-c", _BARE_INSERT, str(folder)], capture_output=True, text=True,
                             check=True)
        seconds, records = out.stdout.split()
        bare.append(float(seconds))
        records = int(records)
    return [Row("6 fleet", "`trace-join ingest --store chdb:` (whole command), records/s", records / median(ours), "rec/s",
                records / median(bare), note=f"{records:,} records of {corpus.lines():,} Dynamo lines; baseline: chdb's "
                                            "insert of the same rows and ids into empty tables")]


# chdb's bare insert of what an ingest stored: read back, then inserted into empty tables alike.
_BARE_INSERT = """
import sys, time
from tracejoin.collector.store import open_store
with open_store("chdb:" + sys.argv[1]) as store:
    ch = store.engine
    records, ids = ch.arrow("SELECT * FROM records"), ch.arrow("SELECT * FROM record_ids")
    ch.command("CREATE DATABASE bare")
    ch.command("CREATE TABLE bare.records AS tracejoin.records")
    ch.command("CREATE TABLE bare.record_ids AS tracejoin.record_ids")
    start = time.perf_counter()
    ch.insert("bare.records", records)
    ch.insert("bare.record_ids", ids)
    print(time.perf_counter() - start, records.num_rows)
"""


def run(cfg: Config, records: int, intake_lines: int, notes: list[str]) -> list[Row]:
    rows = intake_rows(cfg, intake_lines)
    folder, facts = ensure_fleet_store(cfg, records)
    size = (f"{facts['records']:,} records, {facts['record_ids']:,} ids, {NODES} nodes, {facts['partitions']} hourly "
            f"partitions")
    rows.append(Row("6 fleet", "the store: bytes on disk a record (records and ids)", facts["bytes"] / facts["records"], "B",
                    note=f"{size}; made by ClickHouse SQL in {facts['made_s']:,.0f} s"))
    rng = random.Random(6)
    picks = [rng.randrange(facts["requests"]) for _ in range(max(cfg.runs, 5))]
    replies = [_reply_id(folder, k) for k in picks]
    process, query = [], []
    for reply in replies:
        child = check(run_child([TRACE_JOIN, "lookup", reply, "--json", "--store", f"chdb:{folder}"]), "trace-join lookup")
        process.append(child.seconds)
        if f'"{reply}"' not in child.output:
            raise RuntimeError(f"lookup of {reply} did not find it: {child.output[-500:]}")
    with open_store(f"chdb:{folder}", read_only=True) as store:
        for reply in replies:
            start = time.perf_counter()
            result = lookup(store, reply)
            query.append(time.perf_counter() - start)
            [request] = result["requests"]
            if len(request["records"]) != RECORDS_PER_REQUEST:
                raise RuntimeError(f"lookup of {reply} found {len(request['records'])} records, not {RECORDS_PER_REQUEST}")
    rows.append(Row("6 fleet", "`trace-join lookup --json --store chdb:` by reply id (process wall)", median(process) * 1000,
                    "ms", target=f"≤ {TARGET_PROCESS_S * 1000:.0f} ms", passed=median(process) <= TARGET_PROCESS_S,
                    note=size))
    rows.append(Row("6 fleet", "lookup() by reply id on an open store (the query)", median(query) * 1000, "ms",
                    target=f"≤ {TARGET_QUERY_S * 1000:.0f} ms", passed=median(query) <= TARGET_QUERY_S, note=size))
    rows += _requests_rows(cfg, folder, size)
    return rows


def _requests_rows(cfg: Config, folder: Path, size: str) -> list[Row]:
    """`trace-join requests` of the last 10 minutes and of the last hour, whole process, each checked
    to list its window's requests whole (11 records each)."""
    with open_store(f"chdb:{folder}", read_only=True) as store:
        newest = store.engine.arrow("SELECT max(time_ns) AS t FROM records").column("t")[0].as_py()
    rows = []
    for label, minutes in (("the last 10 minutes", 10), ("the last hour (the default window's length)", 60)):
        window = ["--since", ns_to_iso(newest - minutes * 60 * 10**9)]
        seconds, listed = [], 0
        for _ in range(cfg.runs):
            child = check(run_child([TRACE_JOIN, "requests", "--json", "--limit", "10000000", "--store", f"chdb:{folder}",
                                     *window]), "trace-join requests")
            seconds.append(child.seconds)
            requests = json.loads(child.output)
            listed = len(requests)
            if not listed or {r["records"] for r in requests} != {RECORDS_PER_REQUEST}:
                raise RuntimeError(f"requests of {label} were not {RECORDS_PER_REQUEST} records each")
        rows.append(Row("6 fleet", f"`trace-join requests --json --store chdb:` of {label} (process wall)",
                        median(seconds), "s", note=f"{listed:,} requests of {RECORDS_PER_REQUEST} records; {size}"))
    window = ["--since", ns_to_iso(newest - 10 * 60 * 10**9)]
    seconds = []
    for _ in range(cfg.runs):  # the first publishes, the next publish the same requests again
        child = check(run_child([TRACE_JOIN, "snapshot", "--json", "--store", f"chdb:{folder}", *window]),
                      "trace-join snapshot")
        seconds.append(child.seconds)
        published = json.loads(child.output)
    rows.append(Row("6 fleet", "`trace-join snapshot --store chdb:` of the last 10 minutes, for Grafana (process wall)",
                    median(seconds), "s", note=f"{published['requests']:,} requests, {published['records']:,} records "
                                               f"published into requests and request_records; {size}"))
    return rows
