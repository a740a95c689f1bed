"""Huge lookups: one request of very many records, or a label thousands of requests share asked for
with `--limit 0`, answer within seconds and bounded memory, showing the first records of each
request and at most 100 requests in full, and say in text, in --json and on the page how many there
are in all and how to see others; how a request went (its outcome, its first error) is read from
all of its records, not only those shown. (Before, a request's records were walked and shown each
against all the others: a request of 20,000 records took 88 s, one of 200,000 had not answered
after 300 s.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import orjson

RECORDS = 200_000  # of one request: enough that reading each record whole is past the bounds below
REQUESTS = 3_000  # sharing one x-request-id
# A lookup of RECORDS records answers within this many seconds, at this peak RSS in MB at most (the
# figures measured are in docs/hostile-input.md).
ANSWERS_WITHIN_S = 20
MOST_MEMORY_MB = 600


def _line(i: int, internal_id: str, **fields) -> bytes:
    """One line of the middleware's JSONL, the i-th microsecond of 10:40."""
    return orjson.dumps({
        "schema": "tracejoin.log.v1", "ts": f"2026-11-30T10:40:{i // 1_000_000:02d}.{i % 1_000_000:06d}Z",
        "level": "info", "event": "stream.chunk", "role": "router", "worker": "gw:8000",
        "internal_id": internal_id, "x_request_id": "xr-shared", **fields}) + b"\n"


def _write_lines(path, n: int, internal_id) -> None:
    """The middleware's JSONL, one line a record; `internal_id(i)` names the request of line i."""
    path.write_bytes(b"".join(_line(i, internal_id(i)) for i in range(n)))


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "tracejoin.cli", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done


# Runs a command as its child and writes the child's peak RSS in KiB to the file descriptor named
# by its first argument. A process's peak RSS
# (ru_maxrss) counts the memory of the process that exec'd it, up to the exec: of a command started
# by this test, the whole pytest worker's. The child of this small process starts from its memory.
_PEAK_OF_CHILD = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
os.write(int(sys.argv[1]), str(usage.ru_maxrss).encode())
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _measured_cli(tmp_path, *args: str) -> tuple[str, float]:
    """The command's output, once it answered within ANSWERS_WITHIN_S, and its peak RSS in MB."""
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    peak_read, peak_written = os.pipe()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-c", _PEAK_OF_CHILD, str(peak_written), "-m", "tracejoin.cli", *args],
                                 stdout=stdout, stderr=stderr, pass_fds=(peak_written,), start_new_session=True)
        os.close(peak_written)
        stopper = threading.Timer(ANSWERS_WITHIN_S, os.killpg, (child.pid, signal.SIGKILL))
        stopper.start()
        child.wait()
        stopper.cancel()
    took = time.monotonic() - started
    with os.fdopen(peak_read, "rb") as peak:
        peak_kib = peak.read()
    assert child.returncode == 0, f"{args} exited {child.returncode} after {took:.1f} s: {err.read_text()}"
    return out.read_text(), int(peak_kib) / 1024


def test_a_request_of_very_many_records_answers_with_its_first_records_and_says_how_many(tmp_path, db):
    _write_lines(tmp_path / "router.jsonl", RECORDS, lambda i: "req-big")
    _cli("ingest", "--db", str(db), str(tmp_path / "router.jsonl"), timeout=60)

    text, peak_mb = _measured_cli(tmp_path, "lookup", "--db", str(db), "req-big", "--json")
    assert peak_mb < MOST_MEMORY_MB
    request, = orjson.loads(text)["requests"]
    assert (len(request["records"]), request["records_total"], request["records_cut"]) == (1000, RECORDS, True)

    text, peak_mb = _measured_cli(tmp_path, "lookup", "--db", str(db), "req-big")
    assert peak_mb < MOST_MEMORY_MB
    assert f"its first 1000 records are shown of {RECORDS} (--records N for more)" in " ".join(text.split())

    page = tmp_path / "ticket.html"
    _, peak_mb = _measured_cli(tmp_path, "lookup", "--db", str(db), "req-big", "--html", str(page))
    assert peak_mb < MOST_MEMORY_MB
    assert f"Its first 1000 records are shown of {RECORDS} (--records N for more)." in page.read_text()

    fewer = orjson.loads(_cli("lookup", "--db", str(db), "req-big", "--json", "--records", "5").stdout)
    assert (len(fewer["requests"][0]["records"]), fewer["requests"][0]["records_total"]) == (5, RECORDS)


def test_how_a_request_ended_is_read_from_its_records_past_those_shown(tmp_path, db):
    """Its record 1,500 of 3,000 failed, and its last answered 502: the first 1,000 shown say neither."""
    def line(i: int) -> bytes:
        if i == 0:
            return _line(i, "req-failed", event="request.start", method="POST", route="/v1/chat/completions")
        if i == 1500:
            return _line(i, "req-failed", level="error", event="upstream.error", error="the worker reset the connection")
        if i == 2999:
            return _line(i, "req-failed", event="request.end", status=502, duration_ms=3.0, ttfb_ms=1.6)
        return _line(i, "req-failed")

    (tmp_path / "router.jsonl").write_bytes(b"".join(map(line, range(3000))))
    _cli("ingest", "--db", str(db), str(tmp_path / "router.jsonl"), timeout=60)

    request, = orjson.loads(_cli("lookup", "--db", str(db), "req-failed", "--json").stdout)["requests"]
    assert (len(request["records"]), request["records_cut"]) == (1000, True)
    assert request["outcome"] == {"http_status": 502, "failed": True, "client_left": False}
    assert request["first_error"] == {"time": "2026-11-30T10:40:00.001500Z", "worker": "gw:8000", "role": "router",
                                      "text": "upstream.error · the worker reset the connection"}
    text = " ".join(_cli("lookup", "--db", str(db), "req-failed").stdout.split())
    assert "502" in text and "the worker reset the connection" in text


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
