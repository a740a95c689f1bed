"""Shared fixtures: run the real `trace-join` command against a database in a temporary folder."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def _store_in(tmp_path: Path, engine: str) -> Path | str:
    if engine == "chdb":
        pytest.importorskip("chdb", reason="chdb (ClickHouse's engine in process) is not installed")
        return f"chdb:{tmp_path / 'store.chdb'}"
    return tmp_path / "store.duckdb"


@pytest.fixture
def db(request, tmp_path) -> Path | str:
    """A DuckDB store; `@pytest.mark.parametrize("db", ["duckdb", "chdb"], indirect=True)` runs a
    test on each engine."""
    return _store_in(tmp_path, getattr(request, "param", "duckdb"))


@pytest.fixture(params=["duckdb", "chdb"])
def either_store(request, tmp_path) -> Path | str:
    """A store of each engine in turn: a module whose commands must answer alike on DuckDB and on
    ClickHouse (chdb, its engine in process) takes it as its `db`."""
    return _store_in(tmp_path, request.param)


@pytest.fixture
def tj(db):
    """Run `trace-join ARGS... --db DB` as a user would, in a separate process."""

    def run(*args, with_db: bool = True) -> Run:
        argv = [sys.executable, "-m", "tracejoin.cli", *map(str, args)]
        if with_db:
            argv += ["--db", str(db)]
        env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        return Run(p.returncode, p.stdout, p.stderr)

    return run


# Run before the command: SIGINT delivered as a terminal's Ctrl-C delivers it. A job started in the
# background (`make test &`) inherits SIGINT ignored, its children with it, and a Python started so
# never raises KeyboardInterrupt; a disposition survives exec, so this sets it and then becomes the
# command (safer than preexec_fn, which a process with threads should not use).
_SIGINT_AS_CTRL_C = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"


def interruptible(argv: list[str]) -> list[str]:
    """argv, run so that SIGINT interrupts it wherever the test suite was started."""
    return [sys.executable, "-c", _SIGINT_AS_CTRL_C, *argv]


@contextmanager
def started_in_the_background():
    """SIGINT ignored in this process, as in a job started with `&`, for the children started within."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def assert_one_clear_line(run: Run) -> None:
    """An error a user sees: one line on stderr, no traceback."""
    assert "Traceback" not in run.err, run.err
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    assert len(lines) == 1, run.err
    assert lines[0].startswith("trace-join: "), lines[0]


def kill_9_at_random_moments(argv: list[str], db: Path, *, seed: int, kills: int, wait_s: float,
                             total: int | None = None) -> list[int]:
    """Run `argv`, an ingest into `db`, killing it with SIGKILL at random moments around `wait_s`
    into each run, up to `kills` times (a run killed before its first commit lets the next go
    further), then once to its end, which must succeed. The records stored at each kill.

    `total`: what the whole ingest stores. A kill that finds it all stored came too late to test
    anything: the store is started anew and the runs after it are killed sooner (on a busy machine
    a run may take twice as long as on an idle one), so some kill lands part way through."""
    import duckdb

    rng = random.Random(seed)
    committed_at_kills = []
    for _ in range(kills):
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=rng.uniform(0.5, 1.5) * wait_s)
            if total is not None and not any(0 < n < total for n in committed_at_kills):
                _start_anew(db)  # it finished before the kill: try again, sooner
                wait_s *= 0.6
                continue
            break  # it finished before the kill
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        committed = 0
        if db.exists():
            with duckdb.connect(str(db), read_only=True) as con:
                # A run killed between creating the file and committing its schema leaves no tables.
                if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'records'").fetchone()[0]:
                    committed = con.execute("SELECT count(*) FROM records").fetchone()[0]
        committed_at_kills.append(committed)
        if committed == 0:
            wait_s *= 1.5
        elif committed == total and not any(0 < n < total for n in committed_at_kills):
            _start_anew(db)
            wait_s *= 0.6
    last = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert last.returncode == 0, last.stderr
    return committed_at_kills


def _start_anew(db: Path) -> None:
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)


def assert_alike_on_clickhouse(duckdb_store: Path, folder: Path, chdb_folder: Path) -> None:
    """`requests` and `coverage` of `folder` ingested into ClickHouse (chdb) answer as they do on
    the DuckDB store that holds the same folder over the same window (ClickHouse's default: the last
    hour of its records), but for the number each store gives a request (its least record id)."""
    pytest.importorskip("chdb", reason="chdb (ClickHouse's engine in process) is not installed")
    zone = datetime.now().astimezone().strftime("%z")  # as the demo ingested it
    spec = f"chdb:{chdb_folder}"

    def tj(*args) -> Run:
        env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
        p = subprocess.run([sys.executable, "-m", "tracejoin.cli", *map(str, args)], capture_output=True, text=True,
                           env=env, timeout=120)
        return Run(p.returncode, p.stdout, p.stderr)

    assert tj("ingest", "--tz", zone, folder, "--store", spec).code in (0, 2)

    def answers(store, *window) -> tuple[list, dict]:
        requests = tj("requests", "--limit", "10000", "--json", "--store", store, *window).json()
        for row in requests:
            row.pop("request_id")
        return requests, tj("coverage", "--json", "--store", store, *window).json()

    on_clickhouse = answers(spec)
    since = on_clickhouse[1]["window"]["since"]
    assert since is not None, "on ClickHouse, a window of the last hour of records"
    on_duckdb = answers(duckdb_store, "--since", since)
    assert on_duckdb[0], "the DuckDB store lists requests"
    assert on_clickhouse == on_duckdb
