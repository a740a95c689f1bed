"""3. Middleware overhead: requests/s of a minimal Starlette app with TraceJoinMiddleware against
the same app without it, and against it with opentelemetry-instrumentation-asgi's middleware, what
a user would install instead (wrk on loopback, same run, runs interleaved); the median latency the
middleware adds (wrk, one connection); the instructions a request takes in each (callgrind); and
the time to first byte `trace-join proxy` adds in front of the bare app (a keep-alive socket
client, requests alternating between the two)."""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from .common import BIN, REPO, TRACE_JOIN, Config, Row, Server, env_with, free_port, median
from .profile import summarize

TARGET_RATIO = 0.85


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is not installed either
        return False


OTEL_ASGI = _installed("opentelemetry.instrumentation.asgi")
CALLS = (500, 1500)  # app calls of the two counted runs
BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
WRK_SCRIPT = """wrk.method = "POST"
wrk.body = '%s'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-request-id"] = "bench-client-1"
""" % BODY.decode()


def _app_server(factory: str, cfg: Config, profile_to: Path | None = None) -> Server:
    port = free_port()
    cmd = [str(BIN / "uvicorn"), "--factory", f"bench.apps:{factory}", "--app-dir", str(REPO),
           "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"]
    return Server(cmd, port, env=env_with(TRACEJOIN_LOG=str(cfg.data / f"{factory}.jsonl")),
                  log=cfg.data / f"{factory}.log", profile_to=profile_to)


def _instructions_per_request(factory: str, cfg: Config) -> float:
    """Instructions one call of the app takes (bench/asgi_calls.py), from Valgrind's callgrind: the
    count of a run of 1,500 calls less that of 500, over 1,000, so that starting Python is not in it."""
    counts = []
    for calls in CALLS:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             sys.executable, "-m", "bench.asgi_calls", factory, str(calls)],
            cwd=REPO, capture_output=True, text=True, check=True,
            env=env_with(TRACEJOIN_LOG=str(cfg.data / f"{factory}-calls.jsonl"), PYTHONHASHSEED="0"),
        )
        counts.append(int(re.search(r"Collected : (\d+)", out.stderr).group(1)))
    return (counts[1] - counts[0]) / (CALLS[1] - CALLS[0])


def _wrk(port: int, script: Path, connections: int, seconds: float) -> tuple[float, float]:
    """(requests/s, median latency in µs)."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script),
         f"http://127.0.0.1:{port}/v1/chat/completions"],
        capture_output=True, text=True, check=True,
    ).stdout
    if re.search(r"Non-2xx or 3xx responses", out):
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    value, unit = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()
    return rps, float(value) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]


class _TtfbClient:
    """HTTP/1.1 over one keep-alive socket: time from sending a request to its first response byte."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = (b"POST /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))

    def ttfb_us(self) -> float:
        start = time.perf_counter()
        self.sock.sendall(self.request)
        data = self.sock.recv(65536)
        first = time.perf_counter()
        while not data.endswith(b"\r\n0\r\n\r\n"):  # the chunked reply's last chunk
            more = self.sock.recv(65536)
            if not more:
                raise RuntimeError("the server closed the connection")
            data += more
        return (first - start) * 1e6

    def close(self) -> None:
        self.sock.close()


def run(cfg: Config, seconds: float, ttfb_requests: int, notes: list[str]) -> list[Row]:
    if shutil.which("wrk") is None:
        notes.append("3 middleware: skipped, wrk is not installed (Debian: apt-get install -y wrk)")
        return []
    script = cfg.data / "post.lua"
    script.write_text(WRK_SCRIPT)
    apps = ["bare", "traced"] + (["otel_asgi"] if OTEL_ASGI else [])
    if not OTEL_ASGI:
        notes.append("3 middleware: opentelemetry-instrumentation-asgi is not installed, so not compared "
                     "(`make bench` installs it)")
    rps = {name: [] for name in apps}
    latency = {name: [] for name in apps}
    with contextlib.ExitStack() as started:
        servers = {name: started.enter_context(_app_server(name, cfg)) for name in apps}
        bare = servers["bare"]
        for server in servers.values():  # warm-up: imports, the middleware's first-request setup
            _wrk(server.port, script, 4, 1)
        for _ in range(cfg.runs):
            for name, server in servers.items():
                rps[name].append(_wrk(server.port, script, 32, seconds)[0])
                latency[name].append(_wrk(server.port, script, 1, seconds / 2)[1])
        proxy_port = free_port()
        proxy_cmd = [TRACE_JOIN, "proxy", "--upstream", f"http://127.0.0.1:{bare.port}",
                     "--listen", f"127.0.0.1:{proxy_port}", "--log", str(cfg.data / "proxy.jsonl")]
        with Server(proxy_cmd, proxy_port, log=cfg.data / "proxy.log"):
            direct, proxied = _TtfbClient(bare.port), _TtfbClient(proxy_port)
            for _ in range(50):  # warm-up: connections, the proxy's upstream pool
                direct.ttfb_us(), proxied.ttfb_us()
            ttfb = {"direct": [], "proxy": []}
            for _ in range(ttfb_requests):
                ttfb["direct"].append(direct.ttfb_us())
                ttfb["proxy"].append(proxied.ttfb_us())
            direct.close(), proxied.close()
    bare_rps, traced_rps = median(rps["bare"]), median(rps["traced"])
    if cfg.profile and traced_rps < TARGET_RATIO * bare_rps:
        raw = cfg.data / "profiles" / "middleware.txt"
        with _app_server("traced", cfg, profile_to=raw) as server:
            _wrk(server.port, script, 32, seconds)
        notes.append(summarize(raw))
    added_us = median(latency["traced"]) - median(latency["bare"])
    counted = []
    if shutil.which("valgrind") is None:
        notes.append("3 middleware: instructions not counted, Valgrind is not installed (apt-get install -y valgrind)")
    else:
        ir = {name: _instructions_per_request(name, cfg) for name in apps}
        counted.append(Row("3 middleware", "instructions a request, app called in-process (callgrind)", ir["traced"],
                           "instr", ir["bare"], note=f"added: {ir['traced'] - ir['bare']:,.0f}; the same count "
                                                     "whatever else the machine runs"))
        if OTEL_ASGI:
            counted.append(Row("3 middleware", "instructions a request: TraceJoinMiddleware against "
                               "opentelemetry-instrumentation-asgi", ir["traced"], "instr", ir["otel_asgi"],
                               note=f"OTel ASGI adds {ir['otel_asgi'] - ir['bare']:,.0f} to the bare app's"))
    how = f"wrk -t1 -c32, {seconds:g} s × {cfg.runs}, uvicorn 1 process; records to a JSONL file"
    compared = []
    if OTEL_ASGI:
        otel_rps = median(rps["otel_asgi"])
        compared = [
            Row("3 middleware", "requests/s with opentelemetry-instrumentation-asgi", otel_rps, "req/s", bare_rps,
                note=how.replace("records to a JSONL file", "spans batched to a JSON lines file")),
            Row("3 middleware", "requests/s: TraceJoinMiddleware against opentelemetry-instrumentation-asgi",
                traced_rps, "req/s", otel_rps, note="what a user would install instead, same run"),
        ]
    return [
        Row("3 middleware", "requests/s with TraceJoinMiddleware", traced_rps, "req/s", bare_rps,
            f"≥ {TARGET_RATIO}×", traced_rps >= TARGET_RATIO * bare_rps, how),
        *compared,
        Row("3 middleware", "median latency with middleware (1 connection)", median(latency["traced"]), "µs",
            median(latency["bare"]), note=f"added: {added_us:.0f} µs"),
        Row("3 middleware", "proxy time to first byte (streamed POST)", median(ttfb["proxy"]), "µs",
            median(ttfb["direct"]), note=f"added: {median(ttfb['proxy']) - median(ttfb['direct']):.0f} µs; "
                                        f"{ttfb_requests} requests each, alternating"),
        *counted,
    ]
