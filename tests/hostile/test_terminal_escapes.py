"""Whoever writes a log line, a span attribute or a file name must not drive the terminal of the
person reading trace-join's output: no retitling (OSC 0), no hyperlinks (OSC 8), no clearing the
screen, no cursor moves, no text hidden by a carriage return, a backspace or a bidi override, no
rich markup taking effect. Without --json every such character is written out as Python's repr
writes it (`\\x1b`, `\\r`, `\\u202e`); --json keeps the text as stored; an error line quoting a file
name stays one line."""

from __future__ import annotations

import orjson

from tests.collector.collector_process import wait_until
from tests.conftest import assert_one_clear_line

TITLE = "\x1b]0;pwned\x07"  # OSC 0: retitles the terminal
LINK = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # OSC 8: a hyperlink
CLEAR = "\x1b[2J\x1b[H"  # CSI: clear the screen, cursor home
HIDE = "ok\rHIDDEN\x08\x7f"  # CR and backspace write over what came before
C1 = "\x9b31m"  # the one-byte CSI
BIDI = "\u202etxt.exe\u200b"  # right-to-left override, zero-width space
MARKUP = "[red]markup[/red]:warning:"  # rich markup and an emoji code, to be shown as written
# Characters a terminal acts on or does not show; rich's own line ends are "\n", checked apart.
PLANTED = "\x1b\x07\r\x08\x7f\x9b\u202e\u200b"

REPLY_ID = "chatcmpl-hostile-1"
INTERNAL_ID = "0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f"
X_REQUEST_ID = f"xr-{MARKUP}"
WORKER = f"gw{C1}:8000"
ROUTER_FILE = "router\n\x1b[31mevil.jsonl"  # a newline and a colour in a file name


def shown(text: str) -> str:
    """How text is written out for a person: as Python's repr writes it, quotes aside."""
    return repr(text)[1:-1].replace("\\\\", "\\")


def tracejoin_line(ts: str, event: str, **fields) -> bytes:
    return orjson.dumps({"schema": "tracejoin.log.v1", "ts": ts, "level": "info", "event": event, **fields})


def write_hostile_logs(folder):
    """A router's records whose worker, route, message and attributes carry escape sequences, a
    line quarantined with raw ESC, BEL and CR in it, and a Dynamo worker's ANSI-coloured text log."""
    folder.mkdir()
    common = dict(role="router", worker=WORKER, internal_id=INTERNAL_ID, x_request_id=X_REQUEST_ID,
                  trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
    (folder / ROUTER_FILE).write_bytes(b"\n".join([
        tracejoin_line("2026-11-30T10:40:30.000000Z", "request.start", method="POST", route=f"/v1/{LINK}", **common),
        tracejoin_line("2026-11-30T10:40:30.100000Z", f"note {TITLE}{CLEAR}", model=HIDE + BIDI, **common),
        tracejoin_line("2026-11-30T10:40:30.300000Z", "request.end", status=200, duration_ms=300.0,
                       reply_id=REPLY_ID, **common),
        # raw control characters make the line invalid JSON: it is quarantined, excerpt and all
        b'{"event":"' + (TITLE + "\rX").encode() + b'"}',
    ]) + b"\n")
    (folder / "decode.log").write_bytes(
        f"2026-11-30T10:40:30.200000Z  INFO worker: \x1b[1mDecode Request ID: {INTERNAL_ID}\x1b[0m {TITLE}{C1}\n".encode()
    )
    return folder


def assert_nothing_planted(*texts: str) -> None:
    for text in texts:
        assert not (set(text) & set(PLANTED)), [c for c in text if c in PLANTED]


def test_lookup_writes_escape_sequences_out_and_json_keeps_them(tj, tmp_path):
    tj("ingest", write_hostile_logs(tmp_path / "logs"))

    run = tj("lookup", REPLY_ID)
    assert run.code == 0, run.err
    assert_nothing_planted(run.out, run.err)
    for planted in (WORKER, f"/v1/{LINK}", f"note {TITLE}{CLEAR}", HIDE + BIDI, X_REQUEST_ID):
        assert shown(planted) in run.out, planted
    # the worker's coloured log line: its colours and title taken off at ingest (a text log's
    # wrappers and colours are), what is left of its escapes written out
    assert f"Decode Request ID: {INTERNAL_ID} {shown(C1)}" in run.out
    assert "HIDDEN" in run.out and "[red]markup[/red]:warning:" in run.out

    full = tj("lookup", REPLY_ID, "--full")  # every attribute, and the file each record was read from
    assert full.code == 0, full.err
    assert_nothing_planted(full.out, full.err)
    assert shown(ROUTER_FILE) in full.out and shown(HIDE + BIDI) in full.out and shown(f"/v1/{LINK}") in full.out

    by_x_request_id = tj("lookup", X_REQUEST_ID)  # the query itself, on the first line
    assert by_x_request_id.out.startswith(f"{X_REQUEST_ID} (x_request_id) names 1 request"), by_x_request_id.out

    data = tj("lookup", REPLY_ID, "--json").json()
    summaries = " ".join(r["summary"] for r in data["requests"][0]["records"])
    assert f"route=/v1/{LINK}" in summaries and f"model={HIDE + BIDI}" in summaries
    assert data["requests"][0]["workers"][0]["worker"] == WORKER


def test_requests_and_coverage_write_worker_names_and_routes_out(tj, tmp_path):
    tj("ingest", write_hostile_logs(tmp_path / "logs"))

    listed = tj("requests")
    assert listed.code == 0, listed.err
    assert_nothing_planted(listed.out, listed.err)
    assert shown(f"/v1/{LINK}") in listed.out and shown(WORKER) in listed.out
    assert tj("requests", "--json").json()[0]["route"] == f"/v1/{LINK}"

    coverage = tj("coverage")
    assert coverage.code == 0, coverage.err
    assert_nothing_planted(coverage.out, coverage.err)
    assert shown(WORKER) in coverage.out
    assert WORKER in [w["worker"] for w in tj("coverage", "--json").json()["by_worker"]]


def test_quarantine_and_ingest_write_excerpts_and_file_names_out(tj, tmp_path):
    logs = write_hostile_logs(tmp_path / "logs")

    ingested = tj("ingest", logs)
    assert ingested.code == 2  # a line was quarantined
    assert_nothing_planted(ingested.out, ingested.err)
    [sample] = [ln for ln in ingested.err.splitlines() if ln.startswith("quarantined ")]
    assert f"{shown(ROUTER_FILE)}:4 (byte" in sample  # one line, the file name written out

    listed = tj("quarantine")
    assert listed.code == 0, listed.err
    assert_nothing_planted(listed.out, listed.err)
    assert "\\x1b]0;pwned\\x07\\rX" in listed.out  # the excerpt
    assert shown(str(logs / ROUTER_FILE)) in listed.out  # the file name, whole however long, written out
    [row] = tj("quarantine", "--json").json()
    assert row["path"].endswith(ROUTER_FILE) and TITLE in row["excerpt"]


def test_error_lines_quoting_file_names_stay_one_line(tj, tmp_path):
    unknown = tmp_path / "bad\n\x1b]0;t\x07name.bin"
    unknown.write_bytes(b"\x00\x01 no format trace-join reads\n")

    for run, quoted in [
        (tj("ingest", unknown), unknown),  # named directly: an error line
        (tj("ingest", tmp_path / f"no\nsuch{CLEAR}"), tmp_path / f"no\nsuch{CLEAR}"),  # no such file
        (tj("lookup", "x", "--db", tmp_path / f"no\ndir{CLEAR}" / "store.duckdb", with_db=False),
         tmp_path / f"no\ndir{CLEAR}"),  # no such database
    ]:
        assert run.code == 2, run.err
        assert_one_clear_line(run)
        assert_nothing_planted(run.err)
        assert shown(str(quoted)) in run.err

    folder = tmp_path / "folder"
    folder.mkdir()
    unknown.rename(folder / unknown.name)
    skipped = tj("ingest", folder)  # found in a folder: skipped, said on one line
    assert_nothing_planted(skipped.err)
    assert f"skipped {shown(str(folder / unknown.name))}: not a format trace-join reads" in skipped.err.splitlines()


def test_collect_writes_watched_paths_and_its_reports_out(collector, tmp_path):
    watched = tmp_path / f"watched{TITLE}"
    write_hostile_logs(watched)

    c = collector("--watch", watched)
    assert c.addresses["watch"] == shown(str(watched))  # the `watch  PATH` line it starts with
    wait_until(lambda: "quarantined" in c.stderr(), what="the quarantined line's report")
    c.terminate()
    err = c.stderr()
    assert_nothing_planted(err)
    [report] = [ln for ln in err.splitlines() if "quarantined" in ln and "lines quarantined" not in ln]
    assert report.startswith("trace-join collect: quarantined ")
    assert f"{shown(str(watched / ROUTER_FILE))}:4 (byte" in report
