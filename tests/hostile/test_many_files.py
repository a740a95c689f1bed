"""Many small files: ingest reads them into shared transactions, each with the position of every
file it holds, so a kill -9 at any moment loses and repeats nothing, and another run goes on where
the last commit left each file. (Its speed, per file and flat as the store grows, is benchmark 1's.)"""

from __future__ import annotations

import subprocess
import sys

import orjson

from tests.collector.collector_process import query

from ..conftest import kill_9_at_random_moments

FILES = 2000
LINES_PER_FILE = 40  # 80,000 records: ingest commits every 20,000, so a run holds several commits


def test_kill_9_at_any_moment_of_an_ingest_of_many_files_loses_and_repeats_nothing(tmp_path, db):
    logs = tmp_path / "logs"
    for i in range(FILES):
        folder = logs / f"node-{i % 20:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"router-{i:05d}.jsonl").write_bytes(b"".join(orjson.dumps({
            "schema": "tracejoin.log.v1", "ts": "2026-11-30T10:40:30.123456Z", "level": "info",
            "event": "request.start", "role": "router", "worker": f"gw-{i}:8000",
            "internal_id": f"req-{i}-{n}", "x_request_id": f"xr-{i}"}) + b"\n" for n in range(LINES_PER_FILE)))
    argv = [sys.executable, "-m", "tracejoin.cli", "ingest", "--db", str(db), str(logs)]
    committed_at_kills = kill_9_at_random_moments(argv, db, seed=5, kills=12, wait_s=1.0)
    # Some kill came after a commit and before the end: between two transactions, or in one.
    assert any(0 < n < FILES * LINES_PER_FILE for n in committed_at_kills), committed_at_kills

    per_file = query(db, "SELECT o.path, count(*), count(DISTINCT r.\"offset\") FROM records r "
                         "JOIN origins o USING (origin_id) GROUP BY o.path")
    assert len(per_file) == FILES
    assert {(n, distinct) for _, n, distinct in per_file} == {(LINES_PER_FILE, LINES_PER_FILE)}
    assert query(db, "SELECT count(*), count(DISTINCT path) FROM origins") == [(FILES, FILES)]
    assert query(db, "SELECT count(*) FROM records") == [(FILES * LINES_PER_FILE,)]

    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert query(db, "SELECT count(*) FROM records") == [(FILES * LINES_PER_FILE,)]
