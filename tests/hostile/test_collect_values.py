"""`trace-join collect` refuses option values that make no sense, before it starts anything: a
negative or zero size, count or interval (a snapshot interval of -1 would spin at full CPU), one
no timer or gRPC can hold, and an intake budget too small for one body of --max-body."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import Run, assert_one_clear_line

# Option values refused, with what the one line must name.
REFUSED = [
    ("--max-body", "-1"), ("--max-body", "0"), ("--max-body", "3000000000"),  # gRPC holds 2 GiB - 1 at most
    ("--snapshot-interval", "-1"), ("--snapshot-interval", "0"), ("--snapshot-interval", "nan"),
    ("--scrape-interval", "-1"), ("--scrape-interval", "0"), ("--scrape-interval", "inf"),
    ("--header-timeout", "0"), ("--body-timeout", "-5"),
    ("--max-connections", "0"), ("--max-connections", "-1"),
    ("--intake-budget", "0"), ("--intake-budget", "-1"),
    ("--intake-budget", "1048576"),  # cannot hold one body of the default --max-body
]


def collect(db, *args: str) -> Run:
    """`trace-join collect` with free ports; one that starts (and so runs on) fails the test."""
    argv = [sys.executable, "-m", "tracejoin.cli", "collect", "--db", str(db),
            "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "127.0.0.1:0", *args]
    env = {k: v for k, v in os.environ.items() if k != "TRACEJOIN_DEBUG"}
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"collect started with {' '.join(args)}")
    return Run(p.returncode, p.stdout, p.stderr)


@pytest.mark.parametrize(("option", "value"), REFUSED)
def test_values_that_make_no_sense_are_refused_in_one_line(db, option, value):
    run = collect(db, option, value)
    assert run.code == 2, run.err
    assert_one_clear_line(run)
    assert option in run.err and value in run.err  # names what was given, not only the option
    assert not db.exists()  # refused before the store was opened


def test_the_intake_budget_must_hold_one_body_of_the_body_limit(db, collector):
    run = collect(db, "--max-body", "1048576", "--intake-budget", "1048576")
    assert run.code == 2, run.err
    assert_one_clear_line(run)
    needed = int(run.err.split("at least ")[1].split()[0])  # the line says what it needs
    assert needed > 1048576
    c = collector("--max-body", "1048576", "--intake-budget", needed)
    assert c.terminate() == 0, c.stderr()
