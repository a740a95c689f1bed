"""What every benchmark shares: the result row, repetition, child processes measured for wall
time and peak memory, and servers started on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The commands the benchmarks run come from the interpreter running them: `make bench` runs the
# venv's python, so its trace-join and uvicorn are the ones measured.
BIN = Path(sys.executable).parent
TRACE_JOIN = str(BIN / "trace-join")
REPO = Path(__file__).resolve().parent.parent
GNU_TIME = "/usr/bin/time"  # Debian package `time`; without it peak RSS is reported as nan


@dataclass
class Row:
    """One line of the table."""

    benchmark: str
    metric: str
    median: float
    unit: str
    baseline: float | None = None  # the baseline's median, same unit, measured in the same run
    target: str = ""
    passed: bool | None = None  # None: no target, reported only
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.baseline:
            return None
        return self.median / self.baseline


@dataclass
class Config:
    data: Path  # generated data and stores; reused by later runs when the sizes match
    runs: int  # repetitions of each measurement; the median is reported
    quick: bool
    profile: bool  # record py-spy profiles of the trace-join processes whose targets are missed


def median(values) -> float:
    return statistics.median(values)


@dataclass
class Child:
    seconds: float
    peak_rss_mb: float
    returncode: int
    output: str  # stdout, then stderr


def profiled(cmd: list[str], profile_to: Path | None) -> list[str]:
    """The command under py-spy, which writes collapsed stacks to `profile_to` when it ends."""
    if profile_to is None:
        return cmd
    profile_to.parent.mkdir(parents=True, exist_ok=True)
    return [str(BIN / "py-spy"), "record", "--format", "raw", "--rate", "250", "--nonblocking",
            "-o", str(profile_to), "--", *cmd]


def run_child(cmd: list[str], *, env: dict | None = None, profile_to: Path | None = None) -> Child:
    """Run a command to its end: its wall time and its own peak RSS. The RSS comes from GNU time:
    Linux carries a process's peak over fork and exec, so a child of this (large) process would
    report this process's peak if asked directly (wait4). With `profile_to`, the command runs
    under py-spy, which writes collapsed stacks there."""
    cmd = profiled(cmd, profile_to)
    with tempfile.NamedTemporaryFile("r") as rss, tempfile.TemporaryFile() as out:
        if Path(GNU_TIME).exists():
            cmd = [GNU_TIME, "-f", "%M", "-o", rss.name, *cmd]
        start = time.perf_counter()
        returncode = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        seconds = time.perf_counter() - start
        out.seek(0)
        output = out.read().decode("utf-8", "replace")
        kilobytes = rss.read().strip().splitlines()
    peak = int(kilobytes[-1]) / 1024 if kilobytes and kilobytes[-1].isdigit() else float("nan")
    return Child(seconds, peak, returncode, output)


def check(child: Child, what: str) -> Child:
    if child.returncode != 0:
        raise RuntimeError(f"{what} failed with exit code {child.returncode}: {child.output[-2000:]}")
    return child


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


class Server:
    """A server process on loopback, stopped with SIGTERM (then SIGKILL) on exit. Profiled, the
    server runs under py-spy, and the server itself is stopped so that py-spy writes its stacks."""

    def __init__(self, cmd: list[str], port: int, *, env: dict | None = None, log: Path | None = None,
                 profile_to: Path | None = None):
        self.port = port
        self._log = open(log or os.devnull, "ab")
        self.proc = subprocess.Popen(profiled(cmd, profile_to), stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._profiled = profile_to is not None
        self.peak_rss_mb = float("nan")

    def __enter__(self) -> "Server":
        try:
            wait_for_port(self.port, self.proc)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _server_pid(self) -> int:
        if not self._profiled:
            return self.proc.pid
        with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
            return int(f.read().split()[0])  # py-spy's one child

    def current_peak_rss_mb(self) -> float:
        """The server's peak RSS so far (VmHWM: of this process alone, unlike wait4's)."""
        with open(f"/proc/{self._server_pid()}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.peak_rss_mb = self.current_peak_rss_mb()
            os.kill(self._server_pid(), signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def env_with(**extra: str) -> dict:
    env = dict(os.environ)
    env.update(extra)
    return env
