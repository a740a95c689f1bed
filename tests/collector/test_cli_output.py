"""What the command prints for people: the progress bar on large inputs, the lookup timeline, its
version, help and usage errors."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
import uuid
from importlib.metadata import version

import pytest
import typer

from tracejoin.cli import render
from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.cli.main import app
from tracejoin.collector.ingest import expand_paths

from ..conftest import assert_one_clear_line, interruptible, started_in_the_background

COMMANDS = sorted(typer.main.get_command(app).commands)


def test_version_prints_the_installed_release(tj):
    run = tj("--version", with_db=False)
    assert (run.code, run.out, run.err) == (0, f"trace-join {version('trace-join')}\n", "")


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_h_is_help_on_the_app_and_every_command(tj, command):
    run = tj(*command.split(), "-h", with_db=False)
    assert run.code == 0 and run.err == "", run.err
    assert f"Usage: trace-join {command}".rstrip() in run.out


def test_a_mistyped_command_is_told_the_command_it_was_meant_to_be_once(tj):
    run = tj("lookp", with_db=False)
    assert run.code == 2
    assert_one_clear_line(run)
    assert run.err.count("Did you mean 'lookup'?") == 1, run.err


def test_the_command_alone_shows_its_help_and_no_empty_error(tj):
    run = tj(with_db=False)
    assert run.code == 2 and "Usage: trace-join" in run.out and run.err == ""


@pytest.mark.parametrize("command", [["lookup", "some-id"], ["requests"], ["quarantine"]], ids=lambda c: c[0])
def test_a_negative_limit_is_one_clear_usage_error(tj, command):
    run = tj(*command, "--limit", "-1")
    assert run.code == 2
    assert_one_clear_line(run)
    assert "--limit" in run.err and "-1" in run.err


def test_ingest_without_paths_is_a_usage_error_and_makes_no_store(tj, tmp_path):
    run = tj("ingest")
    assert run.code == 2
    assert_one_clear_line(run)
    assert "Missing argument 'FILE_OR_FOLDER...'" in run.err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("path", ["missing.jsonl", "logs/*.jsonl"])
def test_ingest_of_a_path_that_names_nothing_leaves_no_new_store(tj, tmp_path, path):
    run = tj("ingest", tmp_path / path)
    assert run.code == 2
    assert_one_clear_line(run)
    assert str(tmp_path / path) in run.err
    assert not any(tmp_path.iterdir())


def test_ctrl_c_during_ingest_says_to_run_it_again_and_the_next_run_resumes(tmp_path, db):
    lines = 400_000  # about 7 s of ingest on a quiet machine; it is interrupted once records are committed
    big = tmp_path / "router.jsonl"
    with big.open("w") as f:
        for i in range(lines):
            f.write(json.dumps({"schema": "tracejoin.log.v1", "ts": "2026-12-02T07:58:57.242793Z", "level": "info",
                                "event": "request.start", "role": "router", "worker": "vm:8000",
                                "internal_id": str(uuid.UUID(int=i)), "route": "/v1/chat/completions"}) + "\n")
    argv = [sys.executable, "-m", "tracejoin.cli", "ingest", "--db", str(db), str(big)]
    with started_in_the_background():  # as `make test &` runs it: the child must still take Ctrl-C
        child = subprocess.Popen(interruptible(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wal = db.with_name(db.name + ".wal")
    deadline = time.monotonic() + 60
    # A batch of records committed: the write-ahead log (or the store, once checkpointed) holds megabytes.
    while max((p.stat().st_size for p in (db, wal) if p.exists()), default=0) < 1 << 20:
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == [
        "trace-join: interrupted; run the same command again and it resumes where it stopped"]
    committed = count_records(db)
    assert 0 < committed < lines

    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert count_records(db) == lines
    assert count_records(db, "SELECT count(DISTINCT (origin_id, \"offset\")) FROM records") == lines


def count_records(db, sql="SELECT count(*) FROM records") -> int:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchone()[0]


def test_progress_bar_only_for_large_inputs_on_a_terminal(tmp_path, monkeypatch):
    DynamoSample().write(tmp_path)
    files = expand_paths([str(tmp_path)])
    with render.byte_progress(files) as progress:
        assert progress is None  # small input

    monkeypatch.setattr(render, "PROGRESS_MIN_BYTES", 1)
    with render.byte_progress(files) as progress:
        assert progress is None  # stderr is not a terminal under pytest

    monkeypatch.setattr(render.sys.stderr, "isatty", lambda: True, raising=False)
    with render.byte_progress(files) as progress:
        assert callable(progress)
        progress(10)


def test_timeline_shows_every_worker_and_the_gaps_between_stages(tj, tmp_path):
    sample = DynamoSample()
    req = sample.add(x_request_id="tl-1")
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs").code == 0
    run = tj("lookup", req.reply_id)
    assert run.code == 0
    out = run.out
    assert "names 1 request" in out
    assert f"prefill:{sample.prefill_instance}" in out and f"backend:{sample.decode_instance}" in out
    assert "(decode)" in out and "(prefill)" in out and "(frontend)" in out
    # The decode worker's first record comes 41.5 ms after the request started, 1 ms after the
    # prefill worker's last (DynamoSample's timings).
    assert "41.5" in out
    lines = [ln for ln in out.splitlines() if "request completed" in ln and "(decode)" in ln]
    assert lines and "136.5" in lines[0]


def test_lookup_of_a_pasted_id_finds_the_request_without_what_came_with_it(tj, tmp_path):
    sample = DynamoSample()
    req = sample.add(x_request_id="pasted-1")
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs").code == 0
    for pasted in (f"  {req.reply_id}\n", f'"{req.reply_id}",', f"'{req.reply_id}'", f"`{req.reply_id}`",
                   f', "{req.reply_id}" ,', req.trace_id.upper(), f'"{req.trace_id.upper()}",'):
        run = tj("lookup", pasted, "--json")
        assert run.code == 0, (pasted, run.err)
        [found] = run.json()["requests"]
        assert req.request_id in found["ids"]["internal_id"] and req.trace_id in found["ids"]["trace_id"], pasted
    run = tj("lookup", '"no-such-id",')
    assert run.code == 1
    assert_one_clear_line(run)
    assert "nothing found for 'no-such-id'" in run.err


def _line_at(path: str, offset: int) -> bytes:
    """The line a record's origin points at: bytes of the decompressed stream for a .gz."""
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        f.seek(offset)
        return f.readline()


def test_lookup_json_gives_every_record_whole_with_the_file_and_byte_it_was_read_from(tj, tmp_path):
    sample = DynamoSample()
    req = sample.add(x_request_id="full-1")
    files = sample.write(tmp_path / "logs")
    decode = files["decode"]
    decode.with_suffix(".jsonl.gz").write_bytes(gzip.compress(decode.read_bytes()))
    decode.unlink()
    assert tj("ingest", tmp_path / "logs").code == 0

    records = tj("lookup", req.reply_id, "--json").json()["requests"][0]["records"]
    assert {r["source"] for r in records} >= {"dynamo_jsonl", "otlp_json", "dynamo_request_trace"}
    assert any(r["origin"]["path"].endswith(".gz") for r in records)
    for r in records:
        assert set(r) >= {"time", "source", "kind", "worker", "role", "summary", "name", "level", "status",
                          "duration_ms", "trace_id", "span_id", "parent_span_id", "attrs", "origin"}
        assert r["origin"]["kind"] == "file"
        line = _line_at(r["origin"]["path"], r["origin"]["offset"])
        if r["source"] == "dynamo_jsonl":
            fields = json.loads(line)
            assert r["name"] in (fields.get("message"), fields.get("span_name"), fields.get("target"))
            assert r["level"] == fields["level"]
            # Every attribute is the line's own field, but the two names the record states otherwise.
            assert {k: v for k, v in r["attrs"].items() if k not in ("target", "span_name")}.items() <= fields.items()
            assert len(r["attrs"]) >= len(fields) - 12  # all but the fields lifted into columns
        elif r["kind"] == "span":
            assert r["span_id"].encode() in line and r["name"].encode() in line
        else:
            assert line.strip(), r


def test_lookup_full_prints_every_attribute_and_where_each_record_was_read(tj, tmp_path):
    sample = DynamoSample()
    req = sample.add(x_request_id="full-2")
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs").code == 0
    records = tj("lookup", req.reply_id, "--json").json()["requests"][0]["records"]
    plain, full = tj("lookup", req.reply_id).out, tj("lookup", req.reply_id, "--full").out

    # an attribute no summary shows, of every record that has one
    shown = [(k, v) for r in records for k, v in r["attrs"].items()
             if isinstance(v, str) and v and k not in r["summary"] and v not in r["summary"]]
    assert shown
    for key, value in shown:
        assert any(ln.split() == [key, value] or ln.split()[:1] == [key] and value in ln
                   for ln in full.splitlines()), (key, value)
    for r in records:
        assert f"read from   {r['origin']['path']}, byte {r['origin']['offset']}" in full
    assert "read from" not in plain


def test_on_a_terminal_failures_are_red_and_warnings_yellow(tmp_path, db):
    """As a person at a terminal sees it: `lookup` run on a pseudo-terminal."""
    import os
    import pty
    import subprocess
    import sys

    sample = DynamoSample()
    req = sample.add(x_request_id="tty-1", status="error")
    sample.write(tmp_path / "logs")
    subprocess.run([sys.executable, "-m", "tracejoin.cli", "ingest", "--db", str(db), str(tmp_path / "logs")],
                   check=True, capture_output=True)
    controller, terminal = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "250"}
    env.pop("NO_COLOR", None)
    child = subprocess.Popen([sys.executable, "-m", "tracejoin.cli", "lookup", "--db", str(db), req.reply_id],
                             stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    assert child.wait(timeout=60) == 0
    lines = out.decode().splitlines()
    [failed] = [ln for ln in lines if "ERROR · request completed" in ln]
    assert "\x1b[31m" in failed  # red
    [received] = [ln for ln in lines if "request received" in ln and "frontend" in ln and "· also" not in ln][:1]
    assert "\x1b[" not in received  # a line that states no failure is not coloured


def write_router_lines(path, count: int, *, x_request_id: str | None = None, status: int = 200) -> list[str]:
    """`count` requests a router took, in trace-join's middleware lines, a second apart; their replies."""
    replies, lines = [], []
    for i in range(count):
        internal, reply = str(uuid.UUID(int=i + 1)), f"chatcmpl-{i + 1:08d}"
        common = {"schema": "tracejoin.log.v1", "role": "router", "worker": "vm:8000", "internal_id": internal,
                  **({"x_request_id": x_request_id} if x_request_id else {})}
        lines.append({**common, "ts": f"2026-12-02T07:{i // 60:02d}:{i % 60:02d}.100000Z", "level": "info",
                      "event": "request.start", "route": "/v1/chat/completions"})
        lines.append({**common, "ts": f"2026-12-02T07:{i // 60:02d}:{i % 60:02d}.300000Z",
                      "level": "error" if status >= 500 else "info", "event": "request.end", "status": status,
                      "duration_ms": 200.0, "reply_id": reply})
        replies.append(reply)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return replies


def test_an_unknown_store_scheme_is_named_and_nothing_is_made(tj, tmp_path):
    for command in (["lookup", "x"], ["ingest", str(tmp_path)]):
        run = tj(*command, "--store", "foo://bar", with_db=False)
        assert run.code == 2, run.err
        assert_one_clear_line(run)
        assert "foo://" in run.err and "chdb:" in run.err and "no database" not in run.err
    assert not (tmp_path / "foo:").exists() and not list(tmp_path.glob("foo*"))


def test_collect_with_a_bad_address_starts_nothing_and_says_so_in_one_line(tj, tmp_path):
    run = tj("collect", "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "notanaddr")
    assert run.code == 2
    assert_one_clear_line(run)
    assert "notanaddr" in run.err and run.out == ""  # no receiver said it was listening


def test_html_says_where_it_wrote_the_page(tj, tmp_path):
    [reply] = write_router_lines(tmp_path / "router.jsonl", 1)
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    run = tj("lookup", reply, "--html", tmp_path / "ticket.html")
    assert run.code == 0 and (tmp_path / "ticket.html").exists()
    assert f"wrote {tmp_path / 'ticket.html'}" in run.err


def test_limit_0_means_all_for_requests_as_for_lookup(tj, tmp_path):
    replies = write_router_lines(tmp_path / "router.jsonl", 25)
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    listed = tj("requests", "--limit", "0", "--json", "--since", "2000-01-01T00:00:00Z")
    assert listed.code == 0, listed.err
    assert sorted(r["reply_id"] for r in listed.json()) == sorted(replies)


def test_a_label_many_requests_share_is_counted_and_its_first_requests_listed(tj, tmp_path):
    write_router_lines(tmp_path / "router.jsonl", 60, x_request_id="batch-7")
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    out = tj("lookup", "batch-7", "--limit", "1").out
    assert "batch-7 (x_request_id) names 60 requests" in out
    listed = [line for line in out.splitlines() if "chatcmpl-000000" in line and "/v1/chat/completions" in line]
    assert 0 < len(listed) <= 20, out
    assert f"and {60 - len(listed)} more" in out and "--json" in out


@pytest.mark.parametrize("window, says", [
    (("--since", "2026-12-02T07:00:00Z"), "requests that started at or after 2026-12-02T07:00:00.000000Z"),
    (("--until", "2026-12-02T08:00:00Z"), "requests that started at or before 2026-12-02T08:00:00.000000Z"),
    (("--since", "2026-12-02T07:00:00Z", "--until", "2026-12-02T08:00:00Z"),
     "requests that started between 2026-12-02T07:00:00.000000Z and 2026-12-02T08:00:00.000000Z"),
])
def test_coverage_names_its_window_as_the_other_commands_do(tj, tmp_path, window, says):
    write_router_lines(tmp_path / "router.jsonl", 2)
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    run = tj("coverage", *window)
    assert run.code == 0 and says in run.out and "the last" not in run.out
