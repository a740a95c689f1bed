"""What the read commands are asked: a window that reaches back before any date can be named is one
line, whatever command is given it; an id that begins or ends with a quote is looked up as it is,
and only a matching pair of quotes around a pasted id is taken off."""

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


@pytest.mark.parametrize("label, pasted", [
    ("'quote-first", "'quote-first"),
    ('quote-last"', 'quote-last"'),
    ("`unmatched'", "`unmatched'"),
    ("'quote-first", "\"'quote-first\","),  # from a JSON list: the pair around it goes, its own quote stays
    ('"quoted"', "'\"quoted\"'"),  # an id that is quoted itself, quoted once more to be looked up
])
def test_an_id_with_a_quote_at_one_end_is_looked_up_as_it_is(tj, tmp_path, label, pasted):
    [reply] = write_router_lines(tmp_path / "router.jsonl", 1, x_request_id=label)
    assert tj("ingest", tmp_path / "router.jsonl").code == 0
    run = tj("lookup", pasted, "--json")
    assert run.code == 0, run.err
    [found] = run.json()["requests"]
    assert found["ids"]["x_request_id"] == [label] and reply in found["ids"]["reply_id"]
