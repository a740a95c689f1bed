"""A poison line in a watched file: quarantined, and tailing goes on past it; the count the
collector gives when it stops is the count it stored."""

from __future__ import annotations

import orjson

from tests.collector.collector_process import query, wait_until
from tests.collector.test_collect_tail import line

COUNT = "SELECT count(*) FROM records"


def test_a_poison_line_in_a_watched_file_is_quarantined_and_tailing_goes_on(collector, tmp_path, db):
    app = tmp_path / "app.log"
    poison = orjson.dumps({"schema": "tracejoin.log.v1", "ts": "2300-01-01T00:00:00Z", "level": "info",
                           "event": "tick", "service": "t", "role": "agg", "worker": "w:1", "n": "poison"}) + b"\n"
    app.write_bytes(b"".join(line(i) for i in range(10)) + poison + b"".join(line(i) for i in range(10, 20)))
    c = collector("--watch", app, "--snapshot-interval", "0.2")

    def stored() -> int:
        return (c.snapshot_query(COUNT) or [(0,)])[0][0]

    wait_until(lambda: stored() == 20, what="the lines around the poisoned one")
    with app.open("ab") as f:
        f.write(b"".join(line(i) for i in range(20, 30)))
    wait_until(lambda: stored() == 30, what="the lines written after it")
    assert c.terminate() == 0

    said = [c.lines.get_nowait() for _ in range(c.lines.qsize())]
    stopped = [ln for ln in said if ln and ln.startswith("stopped: ")]
    assert stopped == ["stopped: 30 records stored this run"], said
    assert query(db, COUNT) == [(30,)]
    [(line_no, reason)] = query(db, "SELECT line_no, reason FROM quarantine")
    assert line_no == 11 and "does not fit" in reason
    assert "quarantined" in c.stderr() and ":11 (byte" in c.stderr()
