"""2. Lookup on a store of ≥ 10 million records from 16 workers, by reply id and by x-request-id:
the whole `trace-join lookup` process, the lookup itself on an open store, and `grep -F` of the
same id over the raw log files (what operators do today) as the baseline."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

from tracejoin.collector.lookup import lookup
from tracejoin.collector.store import SCHEMA_VERSION, open_store

from .common import TRACE_JOIN, Config, Row, check, env_with, median, run_child
from .corpus import Corpus, request_ids
from .profile import summarize

CLI_TARGET_MS = 300
LIBRARY_TARGET_MS = 50
TARGET_SPEEDUP = 10
# A label many requests share: an x-request-id an agent session sends on each of its calls.
SHARED_LABEL = "agent-session-shared"
SHARED_REQUESTS = 10_000
SHARED_TARGET_MS = 1000


def ensure_store(cfg: Config, corpus: Corpus) -> tuple[Path, dict]:
    """The store `trace-join ingest` makes of the corpus's raw files (built once, reused while the
    corpus and the store's schema are the same), and the facts of its build."""
    db = cfg.data / "lookup.duckdb"
    marker = cfg.data / "lookup.json"
    if db.exists() and marker.exists():
        facts = json.loads(marker.read_text())
        if facts.get("requests") == corpus.requests and facts.get("schema") == SCHEMA_VERSION and "ingest_s" in facts:
            return db, facts
    marker.unlink(missing_ok=True)
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)
    child = check(run_child([TRACE_JOIN, "ingest", "--db", str(db), *map(str, corpus.files())]), "trace-join ingest")
    with open_store(db, read_only=True) as store:
        records, ids, workers = store.con.execute(
            "SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM record_ids), "
            "(SELECT count(DISTINCT worker) FROM origins)").fetchone()
    facts = {"requests": corpus.requests, "schema": SCHEMA_VERSION, "records": records, "record_ids": ids,
             "workers": workers, "ingest_s": round(child.seconds, 1), "ingest_rss_mb": round(child.peak_rss_mb, 1)}
    marker.write_text(json.dumps(facts))
    return db, facts


def _queries(kind: str, k: int) -> tuple[str, str]:
    """(what the user quotes, what grep must look for in the raw logs). Dynamo's logs never print
    a reply id: an operator greps its internal id, the uuid inside `chatcmpl-<uuid>`."""
    ids = request_ids(k)
    if kind == "reply id":
        return ids.reply_id, ids.internal_id
    return ids.x_request_id, f'"{ids.x_request_id}"'


def _read_through(path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 23):
            pass


def _check_found(output: str, query: str) -> None:
    result = json.loads(output)
    found = [len(r["records"]) for r in result["requests"]]
    if found != [11]:
        raise RuntimeError(f"lookup {query}: expected one request of 11 records, got {found}")


def run(cfg: Config, records: int, notes: list[str]) -> list[Row]:
    corpus = Corpus(cfg.data / "lookup-corpus", math.ceil(records / 11)).ensure()
    db, facts = ensure_store(cfg, corpus)
    files = [str(f) for f in corpus.files()]
    rng = random.Random(8)
    size = (f"{facts['records']:,} records, {facts['record_ids']:,} ids, {facts['workers']} workers; "
            f"raw {corpus.bytes() / 1e9:.1f} GB")
    # Both sides read from the page cache, as on a machine where the store and the logs are in use:
    # a run after the memory benchmark (which reads and writes 7 GB) found the store half evicted.
    for path in [db, *files]:
        _read_through(path)
    rows = [Row("2 lookup", "the store: `trace-join ingest` of the raw files, records/s",
                facts["records"] / facts["ingest_s"], "rec/s",
                note=f"{facts['ingest_s']:,.0f} s, peak RSS {facts['ingest_rss_mb']:,.0f} MB; {size}; one run, "
                     "when the store is built")]
    with open_store(db, read_only=True) as store:
        lookup(store, request_ids(corpus.requests - 1).reply_id)  # the first query loads the catalog
        for kind in ("reply id", "x-request-id"):
            picks = [rng.randrange(corpus.requests) for _ in range(max(cfg.runs, 5))]
            cli, rss, library, grep = [], [], [], []
            for i, k in enumerate(picks):
                query, needle = _queries(kind, k)
                child = check(run_child([TRACE_JOIN, "lookup", "--db", str(db), query, "--json"]), "trace-join lookup")
                _check_found(child.output, query)
                cli.append(child.seconds)
                rss.append(child.peak_rss_mb)
                start = time.perf_counter()
                result = lookup(store, query)
                library.append(time.perf_counter() - start)
                assert len(result["requests"]) == 1
                if i < cfg.runs:  # grep takes seconds: as many times as the other measurements run
                    g = run_child(["grep", "-F", needle, *files], env=env_with(LC_ALL="C"))
                    if g.output.count("\n") != 11:
                        raise RuntimeError(f"grep {needle}: expected 11 lines, got {g.output.count(chr(10))}")
                    grep.append(g.seconds)
            cli_ms, grep_ms, lib_ms = (1000 * median(x) for x in (cli, grep, library))
            rows += [
                Row("2 lookup", f"`trace-join lookup --json` by {kind} (process wall)", cli_ms, "ms", grep_ms,
                    f"≤ {CLI_TARGET_MS} ms and ≤ {1 / TARGET_SPEEDUP:g}× grep",
                    cli_ms <= CLI_TARGET_MS and cli_ms * TARGET_SPEEDUP <= grep_ms,
                    f"baseline: grep -F over the raw files; {size}"),
                Row("2 lookup", f"lookup() by {kind} on an open store", lib_ms, "ms", None,
                    f"≤ {LIBRARY_TARGET_MS} ms", lib_ms <= LIBRARY_TARGET_MS, f"{len(library)} different ids"),
                Row("2 lookup", f"`trace-join lookup` by {kind} peak RSS", median(rss), "MB"),
            ]
    rows += shared_label_run(cfg)
    if cfg.profile and not all(r.passed for r in rows if r.passed is not None):
        raw = cfg.data / "profiles" / "lookup.txt"
        run_child([TRACE_JOIN, "lookup", "--db", str(db), request_ids(1).reply_id, "--json"], profile_to=raw)
        notes.append(summarize(raw))
    return rows


def shared_label_run(cfg: Config) -> list[Row]:
    """`trace-join lookup` of an x-request-id SHARED_REQUESTS requests share, in a store of twice
    as many (Dynamo JSONL and OTLP of cli/demo/dynamo_formats.py, ingested): the summary of every
    request and the first ten in full. The first lookup after the ingest builds and keeps the
    requests tables (reported, one run); the lookups after it are the ones measured."""
    from tracejoin.cli.demo.dynamo_formats import DynamoSample

    db, marker = cfg.data / "shared-label.duckdb", cfg.data / "shared-label.json"
    if not (db.exists() and marker.exists() and json.loads(marker.read_text()).get("schema") == SCHEMA_VERSION):
        for path in (db, db.with_name(db.name + ".wal"), marker):
            path.unlink(missing_ok=True)
        sample = DynamoSample()
        for i in range(2 * SHARED_REQUESTS):
            sample.add(x_request_id=SHARED_LABEL if i % 2 == 0 else f"xr-{i}", offset_ms=i * 5.0)
        folder = cfg.data / "shared-label-corpus"
        sample.write(folder)
        check(run_child([TRACE_JOIN, "ingest", "--db", str(db), str(folder)]), "trace-join ingest")
        first = check(run_child([TRACE_JOIN, "lookup", "--db", str(db), SHARED_LABEL, "--json"]), "trace-join lookup")
        with open_store(db, read_only=True) as store:
            records = store.con.execute("SELECT count(*) FROM records").fetchone()[0]
        marker.write_text(json.dumps({"schema": SCHEMA_VERSION, "records": records, "first_s": round(first.seconds, 2)}))
    facts = json.loads(marker.read_text())
    size = f"{SHARED_REQUESTS:,} of {2 * SHARED_REQUESTS:,} requests share it; {facts['records']:,} records"
    by_format: dict[str, list[float]] = {"--json": [], "text": []}
    library = []
    for _ in range(cfg.runs):
        for fmt, extra in (("--json", ["--json"]), ("text", [])):
            child = check(run_child([TRACE_JOIN, "lookup", "--db", str(db), SHARED_LABEL, *extra]), "trace-join lookup")
            by_format[fmt].append(child.seconds)
            if fmt == "--json":
                answer = json.loads(child.output)
                if answer["matched"] != SHARED_REQUESTS or len(answer["requests"]) != 10:
                    raise RuntimeError(f"lookup {SHARED_LABEL}: {answer['matched']} requests, {len(answer['requests'])} shown")
        with open_store(db, read_only=True) as store:
            start = time.perf_counter()
            lookup(store, SHARED_LABEL)
            library.append(time.perf_counter() - start)
    rows = [Row("2 lookup", f"`trace-join lookup` of a label many requests share, {fmt} (process wall)",
                1000 * median(seconds), "ms", None, f"< {SHARED_TARGET_MS} ms", 1000 * median(seconds) < SHARED_TARGET_MS,
                f"{size}; the summary of all of them, the first 10 in full")
            for fmt, seconds in by_format.items()]
    rows.append(Row("2 lookup", "lookup() of that label on an open store", 1000 * median(library), "ms",
                    note=f"the first lookup after the ingest, which builds and keeps the requests tables: "
                         f"{facts['first_s']:.1f} s (one run)"))
    return rows
