"""Dynamo JSONL read in bulk (collector/bulk.py with dynamo_jsonl.BULK) stores what reading every
line with dynamo_jsonl.LineParser stores, table for table: on DynamoSample's files, and on the
same files with random lines mutated into every kind of line the bulk SQL must leave to the
parser (odd types, numbers and times, duplicate keys, escapes, bad UTF-8, text lines, lines that
teach the parser who the worker is), cut into many pieces and stages."""

from __future__ import annotations

import random
import re
import sys

import duckdb
import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.sources import bulk_sql, dynamo_jsonl
from tracejoin.collector.store import open_store

from .bulk_alike import assert_same, by_position, ingest_both_ways, killed_and_read_whole, stored

UUID = "0b7e5a2c-3f41-4d2e-9c1a-7f00e2d4b6a1"

# Lines, or changes to a line, of each kind the bulk path must get right or leave to the parser.
LINES = [
    b"",
    b"   ",
    b"not json at all",
    b'{"time": "2026-08-21T10:15:02.5Z", "level": "INFO"',
    b"2026-08-21T10:15:02.770028Z  INFO main.init: readable mode, Decode Request ID: " + UUID.encode(),
    b"Traceback (most recent call last):",
    b'{"schema":"dynamo.request.trace.v1","event_type":"request_end"}',
    b"[1, 2, 3]",
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"log","message":"Prefill Request ID: '
    + UUID.upper().encode() + b'"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"log","message":"Submitted SGLang Request ID: '
    b'0cc54161255d460a88ea1458594b0c25, Context: ' + UUID.encode() + b'"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"log","message":"Submitted SGLang Request ID: '
    b'0cc54161255d460a88ea1458594b0c25, Context: ' + UUID.encode() + b'","request_id":"' + UUID.encode() + b'"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"log","message":"Engine ID map: request_id='
    + UUID.encode() + b' trtllm_client_id=42 disagg_request_id=None"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"log","message":"Engine ID map: request_id='
    + UUID.encode() + b' trtllm_client_id=43 disagg_request_id=9001"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"WARN","target":"x","message":"request ' + UUID.encode()
    + b' is already active","error":"also ' + UUID.upper().encode() + b'"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"x","message":"request ' + UUID.encode()
    + b' queued behind chatcmpl-77ab01c2d3e4f5a6","request_id":"' + UUID.encode() + b'","error":"slot 12345678"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"x","message":"","span_name":"handle_payload",'
    b'"instance_id":"77","component":"late"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"x","message":"FPM direct publisher started",'
    b'"worker_id":99}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"x","message":"Registered endpoint '
    b"'dynamo.other.generate' with shared TCP server\"}",
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"dynamo_llm::http::service","message":'
    b'"Starting HTTP(S) service","address":"10.0.0.1:8000"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"x","message":"\\u0046PM direct publisher '
    b'started","worker_id":5}',
    b'\xff\xfe{"time":"2026-08-21T10:15:02.100Z"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"x","message":"caf\xc3\xa9 \xe2\x82\xac"}',
    b'{"time":"2026-08-21T10:15:02.100Z","level":"INFO","target":"x","message":"bad \xc3 utf-8"}',
]

VALUES = [
    b"null", b"true", b"false", b"0", b"-1", b"1.5", b"1e3", b"1E-7", b"0.0000001", b"1.0", b"-0.0",
    b"12345678901234567890123", b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809",
    b"4611686018427387904", b"1027008042073392706", b"18446744073709551615", b"18446744073709551616", b"1e300", b"10000000000000000.0", b"NaN", b"Infinity", b"-Infinity",
    b'""', b'"x"', b'"180"', b'"1.5"', b'"abc"', b'" 12 "', b'"1e3"', b'"nan"', b'"1_0"',
    b"[]", b"[1,[2,[3]]]", b"{}", b'{"a":1,"a":2}', b'{"a":{"b":[1,2]}}',
    b'"\\u001f"', b'"\\u001F"', b'"\\u00e9"', b'"\\ud83d\\ude00"', b'"tab\\there"', b'"\\/"',
    b'"2026-08-21T10:15:02Z"', b'"2026-08-21T10:15:02.123456789123Z"', b'"2026-08-21T10:15:02.1+02:00"',
    b'"9999-12-31T23:59:59.9Z"', b'"1600-01-01T00:00:00.0Z"', b'"2262-04-12T00:00:00.0Z"',
    b'"2026-02-30T10:15:02.1Z"', b'"2026-08-21T25:15:02.1Z"', b'"2026-08-21 10:15:02.1Z"',
    b'"0000000000000000"', b'"0123456789ABCDEF"', b'"0123456789abcdef0123456789abcdef"',
]

KEYS = [
    "time", "level", "target", "message", "span_name", "trace_id", "span_id", "parent_id", "request_id",
    "x_dynamo_request_id", "x_request_id", "time.duration_us", "elapsed_ms", "status", "error",
    "error_detail", "schema", "instance_id", "worker_id", "component", "address", "other",
]


def mutate(line: bytes, rng: random.Random) -> bytes:
    """One random change to a line: a key given another value, added twice or removed, a comma
    left behind, the line cut short, or a line of another kind in its place."""
    choice = rng.randrange(8)
    if choice == 0 or not line.startswith(b"{"):
        return rng.choice(LINES)
    key = rng.choice(KEYS).encode()
    value = rng.choice(VALUES)
    pattern = re.compile(rb'"' + re.escape(key) + rb'":("(?:[^"\\]|\\.)*"|[^,}]*)')
    if choice <= 3:
        if pattern.search(line):
            return pattern.sub(lambda m: b'"' + key + b'":' + value, line, count=1)
        return line[:-1] + b',"' + key + b'":' + value + b"}"
    if choice == 4:
        return b'{"' + key + b'":' + value + b"," + line[1:]  # the key twice, when the line has it
    if choice == 5:
        return pattern.sub(b'"other":1', line, count=1)
    if choice == 6:
        return line[:-1] + b",}"
    return line[: rng.randrange(1, len(line))]


def sample_files(folder, requests: int = 6) -> list[str]:
    sample = DynamoSample()
    for i in range(requests):
        sample.add(offset_ms=i * 10, x_request_id=f"x-{i % 2}", status="success" if i % 3 else "error")
    files = sample.write(folder)
    return [str(files[name]) for name in ("frontend", "prefill", "decode")]


def mutated_files(folder, seed: int, share: float) -> list[str]:
    rng = random.Random(seed)
    files = sample_files(folder, requests=12)
    for path in files:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")[:-1]
        lines = [mutate(line, rng) if rng.random() < share else line for line in lines]
        with open(path, "wb") as f:
            f.write(b"\n".join(lines) + (b"\n" if rng.random() < 0.7 else b""))
    return files


@pytest.mark.parametrize("small", [False, True], ids=["one stage", "many pieces"])
def test_the_sample_is_stored_alike(tmp_path, monkeypatch, small):
    in_bulk, by_line = ingest_both_ways(tmp_path, sample_files(tmp_path / "logs"), monkeypatch, dynamo_jsonl, small=small)
    assert len(by_line["records"]) > 50
    assert_same(in_bulk, by_line)


@pytest.mark.parametrize("seed", range(12))
def test_mutated_lines_are_stored_alike(tmp_path, monkeypatch, seed):
    files = mutated_files(tmp_path / "logs", seed, share=0.3 if seed % 2 else 0.05)
    in_bulk, by_line = ingest_both_ways(tmp_path, files, monkeypatch, dynamo_jsonl, small=seed % 3 == 0)
    unread = [r for r in by_line["records"] if '"unread"' in str(r)]
    assert unread, "the mutations leave some lines the format cannot read, stored as plain lines with why"
    assert_same(in_bulk, by_line)


def test_every_kind_of_line_alone_is_stored_alike(tmp_path, monkeypatch):
    """Each line of LINES, and each value of VALUES in each key, after a good line of a worker."""
    good = open(sample_files(tmp_path / "logs")[1], "rb").read().split(b"\n")[:5]
    lines = list(LINES)
    for key in KEYS:
        for value in VALUES:
            lines.append(mutate_key(good[-1], key.encode(), value))
    path = tmp_path / "kinds.jsonl"
    path.write_bytes(b"\n".join(good + lines) + b"\n")
    in_bulk, by_line = ingest_both_ways(tmp_path, [str(path)], monkeypatch, dynamo_jsonl, small=False)
    assert_same(in_bulk, by_line)


def mutate_key(line: bytes, key: bytes, value: bytes) -> bytes:
    pattern = re.compile(rb'"' + re.escape(key) + rb'":("(?:[^"\\]|\\.)*"|[^,}]*)')
    if pattern.search(line):
        return pattern.sub(lambda m: b'"' + key + b'":' + value, line, count=1)
    return line[:-1] + b',"' + key + b'":' + value + b"}"


def test_a_file_that_grows_is_read_on_alike(tmp_path, monkeypatch):
    """Read in bulk up to an unfinished last line, then again once the file has grown past it."""
    path = tmp_path / "logs" / "decode.jsonl"
    full = open(sample_files(tmp_path / "logs")[2], "rb").read()
    cut = full.index(b"\n", len(full) // 2) + 20
    for way in ("bulk", "lines"):
        with monkeypatch.context() as m:
            if way == "lines":
                m.setattr(dynamo_jsonl, "BULK", None)
            with open_store(tmp_path / f"{way}.duckdb") as store:
                path.write_bytes(full[:cut])
                first = Ingester(store).ingest_paths([str(path)])
                assert first.held_back
                path.write_bytes(full)
                Ingester(store).ingest_paths([str(path)])
    assert_same(stored(tmp_path / "bulk.duckdb"), stored(tmp_path / "lines.duckdb"))


def test_python_classes_read_in_duckdb_as_in_python():
    r"""bulk_sql.re2 gives DuckDB's regular expressions Python's ASCII `\d` and `\s`, alone and
    inside a class, code point by code point, and refuses the Unicode ones, which DuckDB's Unicode tables may read otherwise."""
    with pytest.raises(ValueError):
        bulk_sql.re2(re.compile(r"\d+"))
    con = duckdb.connect()
    for cls in (r"\d", r"\s", r"[^/\s]", r"[x\d]"):
        python = re.compile(cls, re.ASCII)
        chars = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
        expected = [c for c in chars if python.fullmatch(c)]
        pattern = "^" + bulk_sql.re2(python) + "$"
        got = con.execute(f"SELECT list(c ORDER BY c) FROM (SELECT unnest(?) AS c) WHERE regexp_matches(c, '{pattern}')",
                          [chars]).fetchone()[0]
        assert got == expected, cls


def test_kill_9_at_any_moment_of_a_bulk_ingest_loses_and_repeats_nothing(tmp_path, monkeypatch):
    """Each stage is written in one transaction with the positions its files reach: killed at any
    moment and run again, the bulk ingest ends with the store reading every line once gives."""
    sample = DynamoSample()
    for i in range(400):
        sample.add(offset_ms=i * 5, x_request_id=f"x-{i}")
    files = sample.write(tmp_path / "logs")
    paths = [str(files[name]) for name in ("frontend", "prefill", "decode")]
    db, by_line_db, committed_at_kills = killed_and_read_whole(tmp_path, monkeypatch, dynamo_jsonl, paths,
                                                               seed=3, kills=10)
    by_line = stored(by_line_db)
    assert any(0 < n < len(by_line["records"]) for n in committed_at_kills), committed_at_kills
    # Record ids are numbered anew by each run: records are compared by where they were read.
    assert by_position(db) == by_position(by_line_db)
