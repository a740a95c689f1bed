"""`collect --watch`: new files, rotation and truncation are followed; after kill -9 tailing
resumes exactly where the committed position says, without a gap or a duplicate."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import orjson

from .collector_process import query, wait_until

STORED_N = "SELECT attrs->>'n' AS n, count(*) FROM records GROUP BY n"
STORED_BY_NAME = "SELECT name, count(*) FROM records GROUP BY name"
COUNT = "SELECT count(*) FROM records"


def line(n, ts: str = "2026-11-30T10:40:30.123456Z") -> bytes:
    """One trace-join JSON line: one record, numbered `n`."""
    return orjson.dumps({"schema": "tracejoin.log.v1", "ts": ts, "level": "info", "event": "tick",
                         "service": "t", "role": "agg", "worker": "w:1", "n": str(n)}) + b"\n"


def banner(tag: str) -> bytes:
    """Over 4 KiB of identical lines: a file that starts so is recognized by its first 4 KiB only."""
    return b"".join(line(f"banner-{tag}") for _ in range(60))


def test_new_rotated_and_truncated_files_are_followed(collector, tmp_path, db):
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    expected: Counter = Counter()

    def write(path, data: bytes, *, mode="ab") -> None:
        with open(path, mode) as f:
            f.write(data)
        expected.update(orjson.loads(ln)["n"] for ln in data.splitlines())

    def stored() -> Counter:
        return Counter(dict(c.snapshot_query(STORED_N)))

    write(app, banner("first") + b"".join(line(i) for i in range(10)))
    c = collector("--watch", logs, "--snapshot-interval", "0.2")
    wait_until(lambda: stored() == expected, what="the first file")

    # Rotation: lines appended just before the rename are read from the renamed file.
    write(app, b"".join(line(i) for i in range(10, 15)))
    os.rename(app, logs / "app.log.1")
    write(app, banner("second") + b"".join(line(i) for i in range(15, 20)))
    write(logs / "other.log", line("other"))  # a new file
    wait_until(lambda: stored() == expected, what="the rotated and the new files")

    # Truncation: the file starts again, with the same first 4 KiB but shorter than what was read;
    # it is a new origin, read from its start, and followed as it grows.
    write(app, banner("second") + line(20), mode="wb")
    wait_until(lambda: stored() == expected, what="the truncated file")
    write(app, b"".join(line(i) for i in range(21, 24)))
    wait_until(lambda: stored() == expected, what="the truncated file as it grows")
    time.sleep(1.2)  # two more polls change nothing
    assert stored() == expected
    assert c.terminate() == 0
    assert Counter(dict(query(db, STORED_N))) == expected


def test_tailing_resumes_after_kill_9_without_gaps_or_duplicates(collector, tmp_path, db):
    log = tmp_path / "stream.log"
    log.touch()
    total = 3000
    done = threading.Event()

    def writer() -> None:
        """Lines as a busy process writes them: in bursts, the last one often cut mid-line."""
        with open(log, "ab", buffering=0) as f:
            for i in range(total):
                data = line(i)
                f.write(data[:20])
                f.write(data[20:])
                if i % 20 == 0:
                    time.sleep(0.02)
        done.set()

    c = collector("--watch", log, "--snapshot-interval", "0.2")
    threading.Thread(target=writer, daemon=True).start()
    wait_until(lambda: c.snapshot_query(COUNT) > [(total // 10,)], what="some lines")
    c.kill()
    assert not done.is_set(), "the kill came after the writer finished"
    restarted = collector("--watch", log, "--snapshot-interval", "0.2")
    assert done.wait(30)
    wait_until(lambda: restarted.snapshot_query(COUNT) == [(total,)], timeout=30, what="every line")
    assert restarted.terminate() == 0
    distinct = query(db, """SELECT count(*), count(DISTINCT attrs->>'n'), count(DISTINCT (origin_id, "offset"))
                            FROM records""")
    assert distinct == [(total, total, total)]


def test_the_files_query_says_how_far_each_watched_file_is_read(collector, tmp_path, db):
    """What `trace-join demo --dynamo` waits on before it stops the collector: through the running
    collector, each file and the byte its committed records reach, which stays before a torn last
    line until the line is complete."""
    from tracejoin.collector.service import remote

    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    complete = b"".join(line(i) for i in range(5))
    torn = line(5)
    app.write_bytes(complete + torn[:20])
    collector("--watch", logs)

    def read_to() -> dict:
        return {f["path"]: (f["source"], f["read_to"]) for f in remote.query(db, "files", {})}

    wait_until(lambda: read_to() == {str(app): ("tracejoin_jsonl", len(complete))}, what="the complete lines")
    time.sleep(1.5)  # three looks of the tailer: the torn line is still left for later
    assert read_to() == {str(app): ("tracejoin_jsonl", len(complete))}
    with open(app, "ab") as f:
        f.write(torn[20:])
    wait_until(lambda: read_to() == {str(app): ("tracejoin_jsonl", len(complete) + len(torn))}, what="the whole file")


def dynamo_line(n: int) -> bytes:
    """One Dynamo JSONL line (read in bulk), numbered `n`."""
    return orjson.dumps({"time": f"2026-09-02T15:50:{n % 60:02d}.000000Z", "level": "INFO",
                         "target": "dynamo_runtime", "message": str(n)}) + b"\n"


def test_a_file_read_in_bulk_is_followed_as_it_grows(collector, tmp_path, db):
    """Each turn reads on with the parser's state as the last turn left it, then stages the lines
    for DuckDB: the file's records arrive whole at every turn."""
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "frontend.stderr.jsonl"
    expected: Counter = Counter()
    c = None
    for turn in range(3):
        with open(app, "ab") as f:
            f.write(b"".join(dynamo_line(turn * 100 + i) for i in range(50)))
        expected.update(str(turn * 100 + i) for i in range(50))
        if c is None:
            c = collector("--watch", logs, "--snapshot-interval", "0.2")
        wait_until(lambda: Counter(dict(c.snapshot_query(STORED_BY_NAME))) == expected, what=f"turn {turn}")
    assert c.terminate() == 0
    assert "Error" not in c.stderr(), c.stderr()
