"""`trace-join proxy` as a user runs it: a separate process, stopped with Ctrl-C."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import httpx

from ..conftest import assert_one_clear_line, interruptible, started_in_the_background
from .live_servers import LogFile, Served, event, wait_until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_trace_join_proxy_forwards_and_records_until_interrupted(served: Served, tmp_path):
    port, log = free_port(), LogFile(tmp_path / "proxy.jsonl")
    command = [sys.executable, "-m", "tracejoin.cli", "proxy", "--upstream", served.url,
               "--listen", f"127.0.0.1:{port}", "--log", str(log.path)]
    with started_in_the_background():  # as `make test &` runs it: the proxy must still take Ctrl-C
        proxy = subprocess.Popen(interruptible(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/echo/ready").status_code == 200
            except httpx.TransportError:
                return proxy.poll() is not None  # stop waiting if it died

        wait_until(answers, "the proxy never answered")
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"model": "m", "messages": []}).json()
        assert log.wait_for(lambda r: r["event"] == "proxy.tap" and r.get("reply_id") == reply["id"])
    finally:
        proxy.send_signal(signal.SIGINT)
        _, err = proxy.communicate(timeout=10)
    # a graceful shutdown (the upstream client closed), then the exit status of an interrupt
    assert "Application shutdown complete" in err
    assert proxy.returncode == 130, err
    assert log.wait_for(event("request.end"), count=2)


def test_a_bad_listen_address_is_one_clear_line(tj):
    run = tj("proxy", "--upstream", "http://127.0.0.1:9", "--listen", "nonsense", with_db=False)
    assert run.code == 2
    assert_one_clear_line(run)
    assert "HOST:PORT" in run.err
