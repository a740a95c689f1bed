"""Every line's bytes are kept in the store with its records: a record's line as written can be
read back after its file is gone, once, whichever way the file was read (in bulk or a line at a
time), also when the file grew between two ingests."""

from __future__ import annotations

import json

from tracejoin.collector import line_blocks
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.store import open_store


def dynamo_line(i: int) -> str:
    """A line as Dynamo 1.6.1's frontend writes it with DYN_LOGGING_JSONL=1."""
    return json.dumps({
        "time": f"2026-12-05T10:32:{i % 60:02d}.{i:06d}Z", "level": "INFO",
        "file": "/opt/dynamo/lib/llm/src/http/service/metrics.rs", "line": 1711,
        "target": "dynamo_llm::http::service::metrics", "message": "request received",
        "request_id": f"6e45b6fd-30d3-4b4c-bb05-{i:012d}", "span_name": "http-request",
        "trace_id": f"{i:032x}", "span_id": f"{i + 1:016x}", "x_request_id": f"xr-{i}",
    }, separators=(",", ":"))


def text_line(i: int) -> str:
    """A line of a log no format reads, holding an id."""
    return f"2026-12-05 10:32:{i % 60:02d} worker-7 handled job-{i:08d} ünïcode {'x' * (i % 300)}"


def kept_lines(db) -> dict[tuple[str, int], str]:
    """(path, offset) → line, for every record, from the store's blocks alone."""
    with open_store(db, read_only=True) as store:
        places = store.con.execute('SELECT o.path, r.origin_id, r."offset" FROM records r JOIN origins o '
                                   'USING (origin_id)').fetchall()
        lines = line_blocks.lines_at(store.con, [(o, offset) for _, o, offset in places])
        blocks = store.con.execute('SELECT origin_id, "offset", length FROM line_blocks ORDER BY 1, 2').fetchall()
    # the blocks of a file follow each other without a gap or an overlap
    for (o1, off1, len1), (o2, off2, _) in zip(blocks, blocks[1:]):
        assert o1 != o2 or off2 == off1 + len1
    return {(path, offset): lines[(o, offset)] for path, o, offset in places}


def test_each_line_is_kept_as_written_and_read_back_after_its_file_is_gone(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    files = {logs / "frontend.jsonl": [dynamo_line(i) for i in range(3000)],
             logs / "worker.log": [text_line(i) for i in range(3000)]}
    for path, lines in files.items():
        path.write_text("".join(line + "\n" for line in lines))
    db = tmp_path / "store.duckdb"
    with open_store(db) as store:
        Ingester(store).ingest_paths([str(logs)])
    expected = {}
    for path, lines in files.items():
        offset = 0
        for line in lines:
            expected[(str(path), offset)] = line
            offset += len(line.encode()) + 1
    for path in files:
        path.unlink()
    assert kept_lines(db) == expected
    with open_store(db, read_only=True) as store:
        stored, compressed = store.con.execute("SELECT sum(length), sum(octet_length(bytes)) FROM line_blocks").fetchone()
    assert stored == sum(sum(len(line.encode()) + 1 for line in lines) for lines in files.values())
    assert compressed < stored / 3


def test_a_file_that_grew_keeps_each_line_once(tmp_path):
    path = tmp_path / "frontend.jsonl"
    db = tmp_path / "store.duckdb"
    lines = [dynamo_line(i) for i in range(2000)]
    # the first ingest finds the last line unfinished (no newline yet): it is read the next time
    path.write_text("".join(line + "\n" for line in lines[:1500]) + lines[1500][:40])
    with open_store(db) as store:
        Ingester(store).ingest_paths([str(path)])
    with path.open("a") as f:
        f.write(lines[1500][40:] + "\n" + "".join(line + "\n" for line in lines[1501:]))
    with open_store(db) as store:
        Ingester(store).ingest_paths([str(path)])
    kept = kept_lines(db)
    assert sorted(kept.values()) == sorted(lines)
    with open_store(db, read_only=True) as store:
        assert store.con.execute("SELECT sum(length) FROM line_blocks").fetchone()[0] == path.stat().st_size
