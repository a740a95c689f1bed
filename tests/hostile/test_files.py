"""Files that are not what they seem: a gzip file cut short or still being written, a last line
over the length limit still being written, paths that are not files, a gzip bomb of newlines, and a
disk that fills up during the ingest. Each is read as far as it can be, said in one line, and
resumed without losing or repeating a line. The page `lookup --html` writes replaces whatever
stands at its path, a planted link included, and never writes through it."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import orjson
import pytest

from tests.collector.test_cli_output import write_router_lines
from tests.conftest import assert_one_clear_line

LINES = 1000


def line(i: int) -> bytes:
    return orjson.dumps({"schema": "tracejoin.log.v1", "ts": "2026-11-30T10:40:30.123456Z", "level": "info",
                         "event": "request.start", "role": "router", "worker": "gw:8000",
                         "internal_id": f"req-{i:05d}", "x_request_id": f"xr-{i}", "pad": "x" * (i % 300)})


def content(n: int = LINES) -> bytes:
    return b"".join(line(i) + b"\n" for i in range(n))


def stored(tj) -> dict[str, int]:
    rows = tj("requests", "--json", "--limit", 100_000)
    assert rows.code in (0, 1), rows.err
    return {r["internal_ids"][0]: r["records"] for r in rows.json()} if rows.code == 0 else {}


def test_a_gzip_file_cut_short_stores_its_readable_part_and_says_so(tj, tmp_path):
    whole = gzip.compress(content())
    log = tmp_path / "router.jsonl.gz"
    log.write_bytes(whole[: len(whole) // 2])

    first = tj("ingest", log)
    assert first.code == 2
    assert "gzip stream ends early" in first.err and "ingesting it again reads on" in first.err
    readable = stored(tj)
    assert 0 < len(readable) < LINES
    assert all(n == 1 for n in readable.values())

    log.write_bytes(whole)  # the rest arrived (or the whole file was copied again)
    assert tj("ingest", log).code == 0
    assert stored(tj) == {f"req-{i:05d}": 1 for i in range(LINES)}


def test_a_gzip_file_still_being_written_is_read_to_its_last_flush_then_on(tj, tmp_path):
    deflate = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)  # a writer that flushes as it goes
    data = content()
    half = data.index(line(LINES // 2))
    log = tmp_path / "router.jsonl.gz"
    written = deflate.compress(data[: half + 40]) + deflate.flush(zlib.Z_SYNC_FLUSH)  # 40 bytes into a line
    log.write_bytes(written)

    first = tj("ingest", log, "--json")
    assert first.code == 2 and "gzip stream ends early" in first.json()["errors"][0]
    assert first.json()["held_back"]  # the line cut in the middle waits for the rest
    assert len(stored(tj)) == LINES // 2

    log.write_bytes(written + deflate.compress(data[half + 40:]) + deflate.flush())
    assert tj("ingest", log).code == 0
    assert stored(tj) == {f"req-{i:05d}": 1 for i in range(LINES)}


def test_an_over_long_last_line_is_held_back_until_complete_then_quarantined_once(tj, tmp_path):
    log = tmp_path / "router.jsonl"
    long_start = b'{"schema": "tracejoin.log.v1", "message": "' + b"x" * (2 << 20)
    log.write_bytes(content(10) + long_start)

    first = tj("ingest", log, "--json")
    assert first.code == 0, first.err
    assert first.json()["held_back"] == [f"{log}:11 (byte {len(content(10))})"]
    assert tj("quarantine", "--json").json() == []

    with log.open("ab") as f:  # the writer finishes the line, then goes on
        f.write(b"x" * (1 << 20) + b'"}\n' + line(10) + b"\n")
    second = tj("ingest", log, "--json")
    assert second.code == 2  # the over-long line is quarantined
    [row] = tj("quarantine", "--json").json()
    assert (row["line"], row["offset"]) == (11, len(content(10)))
    assert "over the" in row["reason"]
    assert stored(tj) == {f"req-{i:05d}": 1 for i in range(11)}
    assert tj("ingest", log).code == 0
    assert len(tj("quarantine", "--json").json()) == 1


@pytest.mark.parametrize("path, what", [
    ("/dev/null", "is a character device, not a file or folder"),
    ("/dev/zero", "is a character device, not a file or folder"),
    ("FIFO", "is a fifo (a named pipe), not a file or folder"),
    ("MISSING", "no such file or folder"),
])
def test_a_path_that_is_not_a_file_is_named_for_what_it_is(tj, tmp_path, path, what):
    if path == "FIFO":
        path = tmp_path / "logs.pipe"
        os.mkfifo(path)
    elif path == "MISSING":
        path = tmp_path / "gone.jsonl"
    run = tj("ingest", path)
    assert run.code == 2
    assert_one_clear_line(run)
    assert f"{path} {what}" in run.err or f"{what}: {path}" in run.err


def test_a_fifo_or_a_dangling_link_inside_a_folder_is_said_and_the_rest_read(tj, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "router.jsonl").write_bytes(content(5))
    os.mkfifo(logs / "stream.pipe")  # opening it would wait for a writer forever
    (logs / "old.jsonl").symlink_to(tmp_path / "rotated-away.jsonl")
    run = tj("ingest", logs, "--json")
    assert run.code == 2
    errors = run.json()["errors"]
    assert errors == [f"no such file or folder: {logs / 'old.jsonl'} (a link to nothing)",
                      f"{logs / 'stream.pipe'} is a fifo (a named pipe), not a file or folder: trace-join reads "
                      "files, so that it can resume them where it stopped; save the stream to a file first"]
    assert len(stored(tj)) == 5


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"),
                    reason="as root, permissions apply only without its override capabilities: needs setpriv (util-linux)")
def test_an_unreadable_folder_is_named_and_the_readable_ones_read(db, tmp_path):
    logs = tmp_path / "logs"
    (logs / "sealed").mkdir(parents=True)
    (logs / "open").mkdir()
    (logs / "open" / "router.jsonl").write_bytes(content(3))
    (logs / "sealed" / "worker.jsonl").write_bytes(content(3))
    (logs / "sealed").chmod(0)
    try:
        # As root, permissions apply only once the override capabilities are dropped.
        drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []

        def run(*args):
            return subprocess.run([*drop, sys.executable, "-m", "tracejoin.cli", *map(str, args), "--db", str(db)],
                                  capture_output=True, text=True, timeout=120)

        inside = run("ingest", logs, "--json")
        assert inside.returncode == 2
        assert orjson.loads(inside.stdout)["errors"] == [f"cannot read the folder {logs / 'sealed'}: Permission denied"]
        named = run("ingest", logs / "sealed")
        assert named.returncode == 2
        assert named.stderr.strip() == f"trace-join: cannot read the folder {logs / 'sealed'}: Permission denied"
    finally:
        (logs / "sealed").chmod(0o755)


def test_a_gzip_bomb_of_newlines_commits_its_progress_as_it_goes(db, tmp_path, monkeypatch):
    """A stream of blank lines holds no records, so the batch never fills: progress must still be
    committed as the bytes go by, or a killed ingest starts it all over again."""
    from tracejoin.collector import ingest
    from tracejoin.collector.ingest import Ingester
    from tracejoin.collector.store import open_store

    monkeypatch.setattr(ingest, "FLUSH_BYTES", 1 << 20)
    bomb = tmp_path / "blank.jsonl.gz"
    bomb.write_bytes(gzip.compress(content(3) + b"\n" * (8 << 20) + line(3) + b"\n"))

    class Killed(BaseException):
        pass

    def killed_at_the_second_commit(calls=[]):  # noqa: B006 - counts calls
        def progress(n):
            calls.append(n)
            if len(calls) == 2:
                raise Killed()
        return progress

    with open_store(db) as store, pytest.raises(Killed):
        Ingester(store, progress=killed_at_the_second_commit()).ingest_paths([str(bomb)])
    with open_store(db) as store:
        [(consumed,)] = store.con.execute("SELECT consumed FROM origins").fetchall()
        assert consumed >= 1 << 20
        result = Ingester(store).ingest_paths([str(bomb)])
        assert result.records == 1  # resumed past the first three lines, which are stored once
        assert store.con.execute("SELECT count(*) FROM records").fetchone() == (4,)


@pytest.fixture
def small_disk():
    """A 12 MiB file system (tmpfs), mounted for the test; needs root."""
    mount = Path(tempfile.mkdtemp(prefix="tracejoin-small-disk-"))
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a small tmpfs to fill ({made.stderr.strip() or 'mount failed'}); needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)
        mount.rmdir()


def test_a_full_disk_is_named_and_the_ingest_resumes_once_there_is_room(tj, tmp_path, small_disk):
    logs = tmp_path / "router.jsonl"
    logs.write_bytes(content(60_000))  # 12 MB of lines: their store does not fit in 12 MiB
    db = small_disk / "store.duckdb"

    full = tj("ingest", logs, "--db", db, with_db=False)
    assert full.code == 2
    assert_one_clear_line(full)
    assert f"the disk holding {db} is full" in full.err and "run the same command again" in full.err

    subprocess.run(["mount", "-o", "remount,size=200m", str(small_disk)], check=True)
    assert tj("ingest", logs, "--db", db, with_db=False).code == 0
    counted = tj("requests", "--json", "--limit", 100_000, "--db", db, with_db=False).json()
    assert len(counted) == 60_000 and {r["records"] for r in counted} == {1}


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("plant", ["symlink", "hard link", "dangling symlink"])
def test_html_replaces_a_planted_link_and_never_writes_through_it(tj, tmp_path, plant):
    [reply] = write_router_lines(tmp_path / "router.jsonl", 1)
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    home, tickets = tmp_path / "home", tmp_path / "tickets"
    home.mkdir()
    tickets.mkdir()
    bashrc = home / ".bashrc"
    page = tickets / "ticket.html"
    if plant == "dangling symlink":
        page.symlink_to(bashrc)  # the page written through it would create .bashrc
    else:
        bashrc.write_text("export PATH=$HOME/bin:$PATH\n")
        page.symlink_to(bashrc) if plant == "symlink" else page.hardlink_to(bashrc)

    run = tj("lookup", reply, "--html", page)
    assert run.code == 0, run.err
    assert not page.is_symlink() and page.read_text().startswith("<!DOCTYPE html>") and reply in page.read_text()
    assert page.stat().st_mode & 0o777 == 0o666 & ~umask()  # as any new file, not a private temporary one
    if plant == "dangling symlink":
        assert not bashrc.exists()
    else:
        assert bashrc.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert sorted(p.name for p in tickets.iterdir()) == ["ticket.html"]  # no temporary file left beside it


def test_an_html_page_that_does_not_fit_on_the_disk_leaves_the_old_page_whole(tj, tmp_path, small_disk):
    write_router_lines(tmp_path / "router.jsonl", 50, x_request_id="batch-9")  # a page of 119 KB
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    page = small_disk / "ticket.html"
    page.write_text("<!DOCTYPE html><p>yesterday's page</p>")
    with (small_disk / "filler").open("wb", buffering=0) as filler:  # the disk is full, but for the old page
        with pytest.raises(OSError, match="No space left"):
            while True:
                filler.write(b"x" * (1 << 16))

    run = tj("lookup", "batch-9", "--limit", "0", "--html", page)
    assert run.code == 2
    assert_one_clear_line(run)
    assert f"cannot write {page}" in run.err and "No space left on device" in run.err
    assert page.read_text() == "<!DOCTYPE html><p>yesterday's page</p>"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "ticket.html"]
