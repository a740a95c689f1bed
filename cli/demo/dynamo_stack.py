"""trace-join beside a real Dynamo deployment, as a user runs it: `trace-join collect` receiving
Dynamo's OTLP and following its log files, the deployment (dynamo.py), and `trace-join proxy` in
front of Dynamo's frontend, each a process of its own on 127.0.0.1.

    with DynamoStack(folder, db) as stack:
        ... send requests to stack.proxy_url; `trace-join lookup --db DB` reads through the collector ...

In `folder`:
- logs/: Dynamo's JSONL stderr, one file per process, and the proxy's records (proxy.jsonl);
- request-trace/: the frontend's request-trace rows;
- collector.log, proxy.log: what `trace-join collect` and `trace-join proxy` print.
The collector watches logs/ and request-trace/.

Starting: the collector first, on ephemeral ports (it prints the ones it took), so Dynamo can be
told where to export; then Dynamo; then the proxy. Stopping, in reverse: the proxy, Dynamo (its
exporters flush on the way out), and last the collector, which commits everything queued. A stop
that ends the `with` block normally first waits until the collector has read to their end the
files the others wrote (the collector stops without finishing them: a later `collect` would
resume them, but the demo's store has no later run), so the store it leaves holds every record;
a collector that does not get there within READ_WITHIN_S is a DeploymentError, after it stopped.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tracejoin.collector.service import remote
from tracejoin.collector.store import StoreError

from .deployment import DeploymentError, StartsAndStops
from .dynamo import DynamoDeployment

START_WITHIN_S = 30
STOP_WITHIN_S = 30  # the collector's last commit and snapshot
READ_WITHIN_S = 60  # the tailer looks every 0.5 s; a collector whose commits wait on a busy disk is slower
_DROPPED_ENV_PREFIXES = ("TRACEJOIN_", "OTEL_")  # a user's token, log or exporter would change what runs


@dataclass
class Started:
    """One process, as the demo shows it."""

    name: str
    address: str
    pid: int
    output: Path  # where its own logs go


class DynamoStack(StartsAndStops):
    def __init__(self, folder: Path, db: Path):
        self.folder = folder
        self.db = db
        self.collector: subprocess.Popen | None = None
        self.dynamo = DynamoDeployment(folder, http_port=_free_port())
        self.proxy: subprocess.Popen | None = None
        self.proxy_port = _free_port()

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def watched(self) -> list[Path]:
        return [self.dynamo.log_folder, self.dynamo.request_trace_folder]

    @property
    def proxy_log(self) -> Path:
        return self.dynamo.log_folder / "proxy.jsonl"

    def started(self) -> list[Started]:
        collector = Started("collector", f"OTLP/gRPC {self.dynamo.otlp_grpc}", self.collector.pid,
                            self.folder / "collector.log")
        dynamo = [Started(name, self.dynamo.url if name == "frontend" else f"instance {self.dynamo.instance_id(name)}",
                          process.pid, self.dynamo.log(name))
                  for name, process in self.dynamo.processes.items()]
        return [collector, *dynamo, Started("proxy", self.proxy_url, self.proxy.pid, self.proxy_log)]

    def start(self) -> None:
        for folder in self.watched:
            folder.mkdir(parents=True, exist_ok=True)
        self._start_collector()
        self.dynamo.start()
        self._start_proxy()

    def _start_collector(self) -> None:
        output = self.folder / "collector.log"
        watch = [arg for folder in self.watched for arg in ("--watch", str(folder))]
        self.collector = _spawn(["collect", "--db", str(self.db), "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "off",
                                 *watch], output)
        deadline = time.monotonic() + START_WITHIN_S
        # It prints one line per thing it started (`otlp-grpc  127.0.0.1:PORT`), then `collecting into`.
        while not any(line.startswith("collecting into") for line in output.read_text().splitlines()):
            if self.collector.poll() is not None or time.monotonic() > deadline:
                raise DeploymentError(f"trace-join collect did not start ({_last_line(output)}); see {output}")
            time.sleep(0.1)
        lines = output.read_text().splitlines()
        self.dynamo.otlp_grpc = next(line.split()[1] for line in lines if line.startswith("otlp-grpc "))

    def _start_proxy(self) -> None:
        output = self.folder / "proxy.log"
        self.proxy = _spawn(["proxy", "--upstream", self.dynamo.url, "--listen", f"127.0.0.1:{self.proxy_port}",
                             "--log", str(self.proxy_log)], output)
        deadline = time.monotonic() + START_WITHIN_S
        # Listening means started: uvicorn opens its socket after the app's startup. Not an HTTP
        # probe: the proxy records one as a request, except on /health, which it leaves unrecorded
        # but where it currently logs an AttributeError after answering.
        while not _listening(self.proxy_port):
            if self.proxy.poll() is not None or time.monotonic() > deadline:
                raise DeploymentError(f"trace-join proxy did not start ({_last_line(output)}); see {output}")
            time.sleep(0.1)

    def __exit__(self, exc_type, *exc) -> None:
        # After an error or Ctrl-C, stop at once; after a run, leave a store that holds everything.
        self.stop(read_to_end=exc_type is None)

    def stop(self, read_to_end: bool = False) -> None:
        _stop(self.proxy)
        self.dynamo.stop()
        unread, why = {}, ""
        try:
            if read_to_end and self.proxy is not None:  # everything started, and nothing writes now
                unread, why = self._wait_until_read()
        finally:
            _stop(self.collector)  # SIGTERM: it commits everything queued and publishes a last snapshot
        if unread:
            left = ", ".join(f"{path.relative_to(self.folder)} at byte {read_to} of {end}"
                             for path, (read_to, end) in sorted(unread.items()))
            raise DeploymentError(f"trace-join collect {why} ({left}); {self.db} lacks their last records; "
                                  f"see {self.folder / 'collector.log'}")

    def _wait_until_read(self) -> tuple[dict[Path, tuple[int, int]], str]:
        """Wait until the collector has committed the records of every watched file up to its last
        complete line. Returns what is still unread, and why, when the collector stopped first or
        READ_WITHIN_S passed."""
        deadline = time.monotonic() + READ_WITHIN_S
        while unread := self._unread():
            if self.collector.poll() is not None:
                return unread, f"stopped (exit code {self.collector.returncode}) before it had read every file"
            if time.monotonic() > deadline:
                return unread, f"had not read every file to its end within {READ_WITHIN_S} s"
            time.sleep(0.2)
        return {}, ""

    def _unread(self) -> dict[Path, tuple[int, int]]:
        """{file: (committed up to, last complete line's end)} of the watched files not read to there."""
        try:
            read = {Path(f["path"]): f["read_to"] for f in remote.query(self.db, "files", {})}
        except StoreError:  # not answering (yet, or any more): nothing is known to be read
            read = {}
        unread = {}
        for path in self._watched_files():
            end = _lines_end(path)
            if read.get(path, 0) < end:
                unread[path] = (read.get(path, 0), end)
        return unread

    def _watched_files(self) -> list[Path]:
        """The files the collector reads in the watched folders (it leaves out hidden ones)."""
        return [Path(root) / name for folder in self.watched for root, _, names in os.walk(folder)
                for name in names if not name.startswith(".")]


def _spawn(args: list[str], output: Path) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED_ENV_PREFIXES)}
    with output.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "tracejoin.cli", *args], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, env=env)


def _stop(process: subprocess.Popen | None) -> None:
    if process is None:
        return
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _free_port() -> int:
    """A port nothing listens on now. Dynamo and the proxy bind it a moment later, and another
    process could take it in between: the collector, which can, takes port 0 instead."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _lines_end(path: Path) -> int:
    """Where the file's last complete line ends: the collector reads a last line without a newline
    once it parses, and leaves a torn one (a process killed mid-write) for later, so only up to
    here is it certain to read."""
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return 0
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return end
        position = end
        while position > 0:
            step = min(position, 1 << 16)
            f.seek(position - step)
            newline = f.read(step).rfind(b"\n")
            if newline >= 0:
                return position - step + newline + 1
            position -= step
        return 0


def _last_line(path: Path) -> str:
    return (path.read_text(errors="replace").strip().splitlines() or ["it printed nothing"])[-1]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
