"""Huge lookups: one request of very many records, or a label thousands of requests share asked for
with `--limit 0`, answer within seconds, showing the first records of each request and at most
100 requests in full, and say in text, in --json and on the page how many there are in all and how
to see others. (Before, a request's records were walked and shown each against all the others: a
request of 20,000 records took 88 s, one of 200,000 had not answered after 300 s.)"""

from __future__ import annotations

import subprocess
import sys

import orjson

RECORDS = 20_000  # of one request: enough that a cost in the square of their number takes minutes
REQUESTS = 3_000  # sharing one x-request-id


def _write_lines(path, n: int, internal_id) -> None:
    """The middleware's JSONL, one line a record; `internal_id(i)` names the request of line i."""
    path.write_bytes(b"".join(orjson.dumps({
        "schema": "tracejoin.log.v1", "ts": f"2026-11-30T10:40:{i // 1_000_000:02d}.{i % 1_000_000:06d}Z",
        "level": "info", "event": "stream.chunk", "role": "router", "worker": "gw:8000",
        "internal_id": internal_id(i), "x_request_id": "xr-shared"}) + b"\n" for i in range(n)))


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "tracejoin.cli", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done


def test_a_request_of_very_many_records_answers_with_its_first_records_and_says_how_many(tmp_path, db):
    _write_lines(tmp_path / "router.jsonl", RECORDS, lambda i: "req-big")
    _cli("ingest", "--db", str(db), str(tmp_path / "router.jsonl"), timeout=60)

    answer = orjson.loads(_cli("lookup", "--db", str(db), "req-big", "--json").stdout)
    request, = answer["requests"]
    assert (len(request["records"]), request["records_total"], request["records_cut"]) == (1000, RECORDS, True)
    said = f"its first 1000 records are shown of {RECORDS} (--records N for more)"
    assert said in " ".join(_cli("lookup", "--db", str(db), "req-big").stdout.split())

    page = tmp_path / "ticket.html"
    _cli("lookup", "--db", str(db), "req-big", "--html", str(page))
    assert f"Its first 1000 records are shown of {RECORDS} (--records N for more)." in page.read_text()

    fewer = orjson.loads(_cli("lookup", "--db", str(db), "req-big", "--json", "--records", "5").stdout)
    assert (len(fewer["requests"][0]["records"]), fewer["requests"][0]["records_total"]) == (5, RECORDS)


def test_a_label_thousands_of_requests_share_shows_the_first_hundred_and_lists_every_one(tmp_path, db):
    _write_lines(tmp_path / "router.jsonl", REQUESTS, lambda i: f"req-{i}")
    _cli("ingest", "--db", str(db), str(tmp_path / "router.jsonl"), timeout=60)

    answer = orjson.loads(_cli("lookup", "--db", str(db), "xr-shared", "--limit", "0", "--json").stdout)
    assert (answer["matched"], len(answer["requests"]), answer["requests_cut"]) == (REQUESTS, 100, True)
    assert len(answer["summary"]) == REQUESTS  # each with its own ids, to look it up by
    assert not answer["requests"][0]["records_cut"]
    said = (f"the first 100 of {REQUESTS} with their records, the most one answer shows (--since and --until "
            "for fewer, or look one up by an id of its own from the summary)")
    assert said in " ".join(_cli("lookup", "--db", str(db), "xr-shared", "--limit", "0").stdout.split())

    page = tmp_path / "ticket.html"
    _cli("lookup", "--db", str(db), "xr-shared", "--limit", "0", "--html", str(page))
    assert said[0].upper() + said[1:] + "." in page.read_text()

    asked = orjson.loads(_cli("lookup", "--db", str(db), "xr-shared", "--limit", "3", "--json").stdout)
    assert (len(asked["requests"]), asked["requests_cut"]) == (3, False)
