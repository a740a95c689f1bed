"""`trace-join collect` as a real subprocess on ephemeral loopback ports, for the collect tests."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb

from tracejoin.collector.store import open_store

START_TIMEOUT_S = 20


class Collector:
    def __init__(self, db: Path, *args: str, grpc: str = "127.0.0.1:0", http: str = "127.0.0.1:0"):
        self.db = db
        # -X faulthandler: a collector that does not stop is sent SIGABRT, and writes where each
        # of its threads waits to its stderr, which the failing test shows.
        self.argv = [sys.executable, "-X", "faulthandler", "-m", "tracejoin.cli", "collect", "--db", str(db),
                     "--otlp-grpc", grpc, "--otlp-http", http, *map(str, args)]
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        folder = Path(str(db).removeprefix("chdb:"))  # a chdb store is a folder
        self.err_path = folder.with_name(folder.name + f".collector-{time.monotonic_ns()}.err")
        self.addresses: dict[str, str] = {}

    def start(self) -> "Collector":
        env = {k: v for k, v in os.environ.items() if k not in ("TRACEJOIN_DEBUG", "TRACEJOIN_TOKEN")}
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.err_path.open("w"),
                                     text=True, env=env)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"collect did not start: {self.stderr()}") from None
            if line is None:
                raise AssertionError(f"collect exited while starting: {self.stderr()}")
            name, _, rest = line.partition(" ")
            if rest:
                self.addresses[name] = rest.split()[0]
            if line.startswith("collecting into"):
                return self

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    @property
    def grpc(self) -> str:
        return self.addresses["otlp-grpc"]

    @property
    def http(self) -> str:
        return self.addresses["otlp-http"]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def snapshot_query(self, sql: str) -> list[tuple]:
        """Read the running collector's latest snapshot (nothing before the first one)."""
        snapshot = self.db.with_name(self.db.name + ".snapshot.duckdb")
        return query(snapshot, sql) if snapshot.exists() else []

    def stderr(self) -> str:
        return self.err_path.read_text() if self.err_path.exists() else ""

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, and the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)
            self.proc.wait(10)
            raise AssertionError(f"collect did not stop within {timeout} s of SIGTERM; where it waited:\n"
                                 f"{self.stderr()}") from None

    def kill(self) -> None:
        """SIGKILL: no flush, no snapshot, nothing cleaned up."""
        self.proc.kill()
        self.proc.wait(10)

    def peak_rss_kib(self) -> int:
        """The most memory the process has held at once (VmHWM), so far."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    def ensure_dead(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def query(db: Path | str, sql: str, params=()) -> list[tuple]:
    """Read the store once no collector holds it: a DuckDB file, or a chdb folder (`chdb:PATH`),
    each row of which is read once (`final`: copies a retried insert left count once)."""
    if str(db).startswith("chdb:"):
        with open_store(str(db), read_only=True) as store:
            assert not params, "a query of a chdb store takes no parameters"
            return [tuple(row.values()) for row in store.engine.arrow(f"{sql} SETTINGS final = 1").to_pylist()]
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def wait_until(condition, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
