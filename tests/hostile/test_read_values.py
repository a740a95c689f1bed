"""What the read commands are asked: a window that reaches back before any date can be named is one
line, whatever command is given it."""

from __future__ import annotations

import pytest

from tests.collector.test_cli_output import write_router_lines
from tests.conftest import assert_one_clear_line

READS = [["requests"], ["coverage"], ["lookup", "chatcmpl-00000001"], ["snapshot"]]


@pytest.mark.parametrize("db", ["duckdb", "chdb"], indirect=True)
@pytest.mark.parametrize("command", READS, ids=lambda c: c[0])
@pytest.mark.parametrize("ago", ["100000000d", "9" * 400 + "s"])  # before the year 1; past what a float holds
def test_a_window_before_the_year_1_is_refused_in_one_line(tj, tmp_path, command, ago):
    write_router_lines(tmp_path / "router.jsonl", 1)
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    run = tj(*command, "--since", ago)
    assert run.code == 2
    assert_one_clear_line(run)
    assert f"--since: {ago} ago is before the year 1" in run.err
