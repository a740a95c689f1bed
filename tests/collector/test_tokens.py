"""The id-shaped words of a line, which make every stored line findable by any id it holds, and
the words that say there is no id, which never make one request of the lines that write them."""

from __future__ import annotations

import duckdb
import pytest

from tracejoin.collector import tokens
from tracejoin.collector.records import Record

LINES = [
    "Received request chatcmpl-4b1f0c2d9e8a7b6c5d4e3f2a1b0c9d8e: params: SamplingParams(n=1)",
    "Aborted request(s) cmpl-77ab01c2d3e4f5a6-0,chatcmpl-a-0123abcd.",
    "http_request{method=POST request_id=cmpl-wAeJ9x0Q2}: sglang_router_rs::response: failed",
    "KVTransferError(bootstrap_room=7418329021459911432): Request 9e1c57a3b0d24f6e8a1b2c3d4e5f6071 timed out",
    "Dequeued prefill request: bf89a741-4e4f-47da-a09a-9be54d3fb2f0 at 2025-09-04T07:42:34.402118733Z",
    "__init__ model_runner.py:1234 dtype=float16 step 12345 of 2026/03/02",
    "resp_0a1b2c3d4e5f6a7b_0 and msg_01XyZ0aBcDeF and 'rid': '0f3c9a2b1d4e5f60718293a4b5c6d7e8'",
    "ReqTimeStats(rid=9e1c57a3b0d24f6e8a1b2c3d4e5f6071, entry_time=1787307302.520) took 0.12345678901 s",
    "abcd1efg and 1abcdefg and abcdefg1 at 10.0.0.12:8000 for 7 of 2048 tokens",
]


@pytest.mark.parametrize("line, words", [
    (LINES[0], ["chatcmpl-4b1f0c2d9e8a7b6c5d4e3f2a1b0c9d8e"]),
    (LINES[1], ["cmpl-77ab01c2d3e4f5a6-0", "chatcmpl-a-0123abcd"]),
    (LINES[2], ["cmpl-wAeJ9x0Q2"]),
    (LINES[3], ["7418329021459911432", "9e1c57a3b0d24f6e8a1b2c3d4e5f6071"]),
    (LINES[4], ["bf89a741-4e4f-47da-a09a-9be54d3fb2f0"]),  # a date, a time's fraction: not ids
    (LINES[5], []),  # words, short numbers, paths and dates are not ids
])
def test_the_id_shaped_words_of_a_line(line, words):
    assert tokens.tokens(line) == words


def test_a_short_word_with_its_digit_anywhere_is_an_id():
    assert tokens.tokens(LINES[8]) == ["abcd1efg", "1abcdefg", "abcdefg1"]


def test_the_sql_twin_finds_the_same_words():
    """Lines read in bulk get their words from DuckDB: the two must agree, or a line found one way
    would be missed the other."""
    con = duckdb.connect()
    for line in LINES:
        [found] = con.execute(f"SELECT {tokens.sql('$1')}", [line]).fetchone()
        assert sorted(set(found)) == sorted(tokens.tokens(line)), line


def test_a_word_the_record_carries_as_an_id_is_not_a_label_as_well():
    record = Record(kind="log")
    record.add_id("reply_id", "chatcmpl-4b1f0c2d9e8a7b6c5d4e3f2a1b0c9d8e")
    tokens.add_labels(record, LINES[0] + " and chatcmpl-0123456789abcdef")
    assert record.ids == [("reply_id", "chatcmpl-4b1f0c2d9e8a7b6c5d4e3f2a1b0c9d8e", None),
                          (tokens.TOKEN, "chatcmpl-0123456789abcdef", None)]


@pytest.mark.parametrize("nothing", ["None", "null", "", "-1", "N/A", "nan"])
def test_the_words_that_say_there_is_no_id_are_never_ids(nothing):
    record = Record(kind="log")
    record.add_id("engine_request_id", nothing, "worker:1")
    assert record.ids == []


def test_numbers_with_a_fraction_are_not_ids():
    """An epoch time (`entry_time=1787307302.520`) or a measure is a number, not an id."""
    assert tokens.tokens("entry_time=1787307302.520 took 0.12345678901 s, room 7418329021459911432") == [
        "7418329021459911432"]
