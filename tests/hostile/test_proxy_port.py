"""`trace-join proxy` that cannot start says why in one line and exits 2: a port another process
holds, an address that is not this host's, a --listen or an --upstream it cannot read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import Run, assert_one_clear_line
from tracejoin.middleware.proxy import parse_listen

UPSTREAM = "http://127.0.0.1:9"


def proxy(*args: str) -> Run:
    """`trace-join proxy ARGS...`; one that starts serving instead of failing is stopped and fails the test."""
    env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
    try:
        p = subprocess.run([sys.executable, "-m", "tracejoin.cli", "proxy", *args],
                           capture_output=True, text=True, env=env, timeout=20)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the proxy started serving instead of refusing: {e.stderr}")
    return Run(p.returncode, p.stdout, p.stderr)


def test_a_port_in_use_is_one_clear_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = proxy("--upstream", UPSTREAM, "--listen", f"127.0.0.1:{port}")
    assert run.code == 2, run.err
    assert_one_clear_line(run)
    assert run.err.strip() == f"trace-join: cannot listen on 127.0.0.1:{port}: address already in use"


def test_an_address_not_on_this_host_is_one_clear_line():
    run = proxy("--upstream", UPSTREAM, "--listen", "192.0.2.1:8080")  # TEST-NET-1: no host has it
    assert run.code == 2, run.err
    assert_one_clear_line(run)
    assert run.err.startswith("trace-join: cannot listen on 192.0.2.1:8080: ")


@pytest.mark.parametrize("upstream", ["http://host:abc", "http://[::1", "http://host:99999"])
def test_an_upstream_that_is_not_a_url_is_one_clear_line(upstream):
    run = proxy("--upstream", upstream, "--listen", "127.0.0.1:0")
    assert run.code == 2, run.err
    assert_one_clear_line(run)
    assert run.err.startswith(f"trace-join: upstream must be an http:// or https:// URL, not {upstream!r}")


def test_a_port_in_other_digits_is_not_a_port():
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen("127.0.0.1:٨٠٨٠")  # Arabic-Indic digits, which int() would read as 8080
