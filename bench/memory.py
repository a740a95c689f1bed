"""5. Memory: the peak resident memory of `trace-join ingest` reading a large Dynamo JSONL corpus
(the collector's batch path; the live collector's own peak under OTLP load is in benchmark 4).
The default size is scaled down; `--memory-mb 5120` runs the 5 GB of the issue."""

from __future__ import annotations

from .common import TRACE_JOIN, Config, Row, check, run_child
from .corpus import Corpus

TARGET_MB = 500
TARGET_SECONDS = 120  # for 5 GB, on 2 cores
BYTES_PER_REQUEST = 6040  # what one request's 11 lines weigh in the corpus


def run(cfg: Config, megabytes: int, notes: list[str]) -> list[Row]:
    corpus = Corpus(cfg.data / "memory-corpus", max(1, megabytes * 10**6 // BYTES_PER_REQUEST)).ensure()
    db = cfg.data / "memory.duckdb"
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)
    child = check(run_child([TRACE_JOIN, "ingest", "--db", str(db), *map(str, corpus.files())]), "trace-join ingest")
    size = corpus.bytes()
    scaled = "" if size >= 5e9 else f"; scaled ({size / 5e9:.0%} of 5 GB, and of the time target)"
    seconds_target = TARGET_SECONDS * min(1.0, size / 5e9)
    return [Row("5 memory", f"`trace-join ingest` of {size / 1e6:,.0f} MB, peak RSS", child.peak_rss_mb, "MB",
                target=f"< {TARGET_MB} MB", passed=child.peak_rss_mb < TARGET_MB,
                note=f"{corpus.lines():,} lines, one run" + scaled),
            Row("5 memory", f"`trace-join ingest` of {size / 1e6:,.0f} MB, wall time", child.seconds, "s",
                target=f"≤ {seconds_target:,.0f} s", passed=child.seconds <= seconds_target,
                note=f"{corpus.lines() / child.seconds:,.0f} lines/s" + scaled)]
