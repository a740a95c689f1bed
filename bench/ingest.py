"""1. Ingest of Dynamo JSONL: `trace-join ingest` (the command, and the Ingester it runs) against
DuckDB's own `read_json` loading the same files into a bare table."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from tracejoin.collector.ingest import Ingester
from tracejoin.collector.store import open_store

from .common import TRACE_JOIN, Config, Row, check, median, run_child
from .corpus import Corpus
from .profile import summarize

TARGET_RATIO = 0.5
TARGET_RATE = 200_000


def _fresh(db: Path) -> Path:
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)
    return db


def read_json_seconds(files: list[Path], db: Path) -> float:
    """The baseline: everything DuckDB needs to store the lines, from connect to close."""
    start = time.perf_counter()
    con = duckdb.connect(str(_fresh(db)))
    listed = ", ".join(f"'{f}'" for f in files)
    con.execute(f"CREATE TABLE lines AS SELECT * FROM read_json([{listed}], format='newline_delimited', "
                f"union_by_name=true)")
    con.close()
    return time.perf_counter() - start


def ingester_seconds(files: list[Path], db: Path) -> float:
    start = time.perf_counter()
    with open_store(_fresh(db)) as store:
        Ingester(store).ingest_paths([str(f) for f in files])
    return time.perf_counter() - start


def run(cfg: Config, lines: int, notes: list[str]) -> list[Row]:
    corpus = Corpus(cfg.data / "ingest-corpus", max(1, lines // 11)).ensure()
    files, n = corpus.files(), corpus.lines()
    db = cfg.data / "ingest.duckdb"
    baseline, cli, library, rss = [], [], [], []
    for _ in range(cfg.runs):  # interleaved, so drifting load on the machine hits all three alike
        baseline.append(read_json_seconds(files, cfg.data / "read_json.duckdb"))
        child = check(run_child([TRACE_JOIN, "ingest", "--db", str(_fresh(db)), *map(str, files)]), "trace-join ingest")
        cli.append(child.seconds)
        rss.append(child.peak_rss_mb)
        library.append(ingester_seconds(files, db))
    base_rate = n / median(baseline)
    size = f"{n:,} lines, {corpus.bytes() / 1e6:.0f} MB, 16 files"
    rows = []
    for metric, seconds in (("`trace-join ingest` (whole command)", cli), ("Ingester (library call)", library)):
        rate = n / median(seconds)
        rows.append(Row("1 ingest", f"{metric}, records/s", rate, "rec/s", base_rate,
                        f"≥ {TARGET_RATIO}× and ≥ {TARGET_RATE // 1000}k/s",
                        rate >= TARGET_RATIO * base_rate and rate >= TARGET_RATE, size))
    rows.append(Row("1 ingest", "`trace-join ingest` peak RSS", median(rss), "MB", note=size))
    if cfg.profile and not all(r.passed for r in rows if r.passed is not None):
        raw = cfg.data / "profiles" / "ingest.txt"
        run_child([TRACE_JOIN, "ingest", "--db", str(_fresh(db)), *map(str, files)], profile_to=raw)
        notes.append(summarize(raw))
    return rows
